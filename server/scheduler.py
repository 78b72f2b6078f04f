"""Per-model scheduling: the queue, the batching policy, the step loop thread, and the metrics it records.

The asyncio side (``submit``) never runs ONNX Runtime: a dedicated worker thread per model owns
the ``Generator`` and loops ``admit -> step -> deliver``, handing results back to the event loop
with ``call_soon_threadsafe``. Three policies share that loop:

* ``continuous`` (iteration-level, as Orca/vLLM/TGI): newcomers are encoded and join the running
  batch before the next step; finished sequences leave and are answered at once.
* ``request`` (Triton's dynamic batcher): a batch is formed once (waiting up to
  max_queue_delay_ms for company) and decoded to completion before the next is formed.
* ``none``: one sequence at a time.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from server.config import SchedulerConfig
from server.engine import Engine, Generator, Sequence
from server.errors import Cancelled, DeadlineExceeded, EngineFailure, QueueFull, ShuttingDown
from server.metrics import Metrics

log = logging.getLogger("s2s.scheduler")


@dataclass(eq=False)
class Job:
    """One input's generation, as the scheduler tracks it."""

    seq: Sequence
    arrival: float
    deadline: float | None  # time.monotonic() after which it is dropped
    done: Callable[["Job"], None]  # called on the event loop when the job ends (result or error)
    on_token: Callable[["Job", int], None] | None = None
    admitted: float | None = None
    first_token: float | None = None
    n_tokens: int = 0
    error: Exception | None = None
    cancelled: bool = False

    @property
    def rows(self) -> int:
        return self.seq.n_rows


class Scheduler:
    def __init__(self, name: str, engine: Engine, config: SchedulerConfig, metrics: Metrics):
        self.name, self.engine, self.config, self.metrics = name, engine, config, metrics
        self.gen = Generator(engine)
        self.pending: collections.deque[Job] = collections.deque()
        self.active: dict[int, Job] = {}  # seq.id -> job
        self.cv = threading.Condition()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False
        self.aborting = False  # grace period over: fail whatever is left
        self.thread = threading.Thread(target=self._run, name=f"scheduler-{name}", daemon=True)
        # Labelled children resolved once: labels() costs a lookup under a lock on every call.
        self.m_queued, self.m_active = metrics.queued.labels(name), metrics.active.labels(name)
        self.m_queue_time, self.m_ttft = metrics.queue_duration.labels(name), metrics.ttft.labels(name)
        self.m_tpot, self.m_generated = metrics.tpot.labels(name), metrics.generated_tokens.labels(name)
        self.m_step, self.m_batch = metrics.step_duration.labels(name), metrics.batch_size.labels(name)

    # ---- event-loop side -------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread.start()

    def submit(self, jobs: list[Job]) -> None:
        """Queue all of a request's jobs or none: beyond max_queue_size the request is refused at once."""
        with self.cv:
            if self.stopping:
                raise ShuttingDown("server is shutting down; retry on another replica")
            queued = sum(j.rows for j in self.pending)
            need = sum(j.rows for j in jobs)
            if queued + need > self.config.max_queue_size:
                raise QueueFull(f"model {self.name!r}: queue full ({queued} of {self.config.max_queue_size} rows waiting); "
                                "retry with backoff")
            self.pending.extend(jobs)
            self.m_queued.set(queued + need)
            self.cv.notify()

    def cancel(self, jobs: list[Job]) -> None:
        """Client went away or its deadline passed: the worker drops these at the next step."""
        with self.cv:
            for j in jobs:
                j.cancelled = True
            self.cv.notify()

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify()

    def drain(self, timeout: float) -> None:
        """Refuse new work, let admitted and queued work finish for up to ``timeout``, then fail the rest."""
        with self.cv:
            self.stopping = True
            self.cv.notify()
        self.thread.join(timeout)
        if self.thread.is_alive():
            with self.cv:
                self.aborting = True
                self.cv.notify()
            self.thread.join()

    async def generate(self, seqs: list[Sequence], deadline: float | None,
                       on_token: Callable[[Job, int], None] | None = None) -> list[Job]:
        """Run a request's sequences; returns their jobs in order, or raises the first job's error
        (and cancels its siblings). Cancelling the awaiting task cancels the jobs."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        left = len(seqs)

        def done(job: Job) -> None:
            nonlocal left
            left -= 1
            if fut.done():
                return
            if job.error is not None:
                fut.set_exception(job.error)
                self.cancel(jobs)
            elif left == 0:
                fut.set_result(None)

        now = time.monotonic()
        jobs = [Job(seq, now, deadline, done, on_token) for seq in seqs]
        self.submit(jobs)
        try:
            await fut
        except asyncio.CancelledError:
            self.cancel(jobs)
            raise
        return jobs

    # ---- worker thread ---------------------------------------------------------------------
    def _deliver(self, job: Job) -> None:
        if self.loop is not None:
            self.loop.call_soon_threadsafe(job.done, job)

    def _fail(self, job: Job, err: Exception) -> None:
        job.error = err
        self._deliver(job)

    def _admit(self) -> list[Job]:
        """Pick queued jobs for the running batch, by the batching policy. Called under self.cv."""
        cfg = self.config
        rows_free = cfg.max_batch_size - self.gen.n_rows
        if cfg.mode == "none":
            rows_free = 0 if len(self.gen) else 1
        elif cfg.mode == "request":
            if len(self.gen):
                return []
            if cfg.max_queue_delay_ms > 0 and self.pending:
                # Give a batch a moment to fill up unless it is already full.
                wait_until = self.pending[0].arrival + cfg.max_queue_delay_ms / 1000
                while sum(j.rows for j in self.pending) < cfg.max_batch_size and not self.stopping:
                    left = wait_until - time.monotonic()
                    if left <= 0:
                        break
                    self.cv.wait(left)
        picked: list[Job] = []
        now = time.monotonic()
        while self.pending:
            job = self.pending[0]
            if job.cancelled or (job.deadline is not None and now > job.deadline):
                self.pending.popleft()
                self._fail(job, Cancelled("cancelled before it started") if job.cancelled else
                           DeadlineExceeded(f"deadline exceeded while queued ({now - job.arrival:.3f} s waiting)"))
                continue
            if job.rows > max(rows_free, 0) and (picked or len(self.gen)):
                break
            self.pending.popleft()
            picked.append(job)
            rows_free -= job.rows
            if rows_free <= 0:
                break
        return picked

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self.pending and not len(self.gen) and not self.stopping:
                    self.cv.wait()
                if self.stopping and not self.pending and not len(self.gen):
                    return
                if self.aborting:
                    for job in [*self.pending, *self.active.values()]:
                        self._fail(job, ShuttingDown("server shut down before this request finished; retry"))
                    self.pending.clear()
                    self.active.clear()
                    return
                newcomers = self._admit()
                self.m_queued.set(sum(j.rows for j in self.pending))
            try:
                self._expire()
                self._join(newcomers)
                if len(self.gen):
                    self._step()
            except Exception as e:  # an engine failure fails the affected requests, never the loop
                log.exception("model %s: decode step failed", self.name)
                for job in list(self.active.values()):
                    self._fail(job, EngineFailure(f"model {self.name!r}: inference failed ({type(e).__name__}); see server log"))
                self.active.clear()
                self.gen = Generator(self.engine)
            self.m_active.set(len(self.active))

    def _join(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        now = time.monotonic()
        for job in jobs:
            job.admitted = now
            self.m_queue_time.observe(now - job.arrival)
            job.seq.on_token = self._on_token
        try:
            self.gen.add([j.seq for j in jobs])
        except Exception as e:
            log.exception("model %s: encoder failed", self.name)
            for job in jobs:
                self._fail(job, EngineFailure(f"model {self.name!r}: encoder failed ({type(e).__name__}); see server log"))
            return
        for job in jobs:
            self.active[job.seq.id] = job

    def _on_token(self, seq: Sequence, token: int) -> None:
        job = self.active[seq.id]
        now = time.monotonic()
        if job.first_token is None:
            job.first_token = now
            self.m_ttft.observe(now - job.arrival)
        job.n_tokens += 1
        if job.on_token is not None and token != self.engine.special.eos:
            self.loop.call_soon_threadsafe(job.on_token, job, token)

    def _expire(self) -> None:
        now = time.monotonic()
        gone = [j for j in self.active.values() if j.cancelled or (j.deadline is not None and now > j.deadline)]
        if not gone:
            return
        self.gen.remove([j.seq for j in gone])
        for job in gone:
            del self.active[job.seq.id]
            err = Cancelled("cancelled by the client") if job.cancelled else DeadlineExceeded(
                f"deadline exceeded after {job.n_tokens} generated tokens")
            self._fail(job, err)

    def _step(self) -> None:
        rows = self.gen.n_rows
        t0 = time.perf_counter()
        finished = self.gen.step()
        dt = time.perf_counter() - t0
        self.m_step.observe(dt)
        self.m_batch.observe(rows)
        now = time.monotonic()
        for seq in finished:
            job = self.active.pop(seq.id)
            if job.first_token is None:  # beams report their tokens at the end
                job.first_token = now
                self.m_ttft.observe(now - job.arrival)
            n = len(seq.result or [])
            job.n_tokens = n
            self.m_generated.inc(n)
            if n > 1:
                self.m_tpot.observe((now - job.first_token) / (n - 1))
            self._deliver(job)
