"""Per-model scheduling: the queue, the batching policy, the step loop thread, and the metrics it records.

The asyncio side (``submit``) never runs ONNX Runtime: a dedicated worker thread per model owns
the ``Generator`` and loops ``admit -> step -> deliver``, handing results back to the event loop
with ``call_soon_threadsafe``. While it decodes, a second thread per model runs the encoder for
queued requests (``ready``), so that admission under load costs the step loop no encoder time: the
encoder is compute-bound and was about 40% of the step loop's time at concurrency 64 on en->ja
(short outputs), time a second core can take. When the step loop is idle it encodes newcomers
itself, so a lone request never pays a thread hand-off. Three policies share that loop:

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


def _call_each_done(jobs: list[Job]) -> None:
    for job in jobs:
        try:
            job.done(job)
        except Exception:  # one broken callback must not keep the others' answers from going out
            log.exception("delivering a finished request failed")


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
        self.pending: collections.deque[Job] = collections.deque()  # queued, not encoded yet
        self.ready: collections.deque[Job] = collections.deque()  # queued and encoded (by the encoder thread)
        self.encoding: list[Job] = []  # taken by the encoder thread, being encoded now
        self.decoding = False  # the step loop has a running batch (then queued requests are pre-encoded)
        self.encoded_ahead = 0  # jobs the encoder thread encoded while the step loop decoded
        self.active: dict[int, Job] = {}  # seq.id -> job
        self.cv = threading.Condition()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False
        self.aborting = False  # grace period over: fail whatever is left
        self.thread = threading.Thread(target=self._run, name=f"scheduler-{name}", daemon=True)
        self.encoder_thread = threading.Thread(target=self._encode_ahead, name=f"encoder-{name}", daemon=True)
        # Labelled children resolved once: labels() costs a lookup under a lock on every call.
        self.m_queued, self.m_active = metrics.queued.labels(name), metrics.active.labels(name)
        self.m_queue_time, self.m_ttft = metrics.queue_duration.labels(name), metrics.ttft.labels(name)
        self.m_tpot, self.m_generated = metrics.tpot.labels(name), metrics.generated_tokens.labels(name)
        self.m_step, self.m_batch = metrics.step_duration.labels(name), metrics.batch_size.labels(name)

    # ---- event-loop side -------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread.start()
        self.encoder_thread.start()

    def submit(self, jobs: list[Job]) -> None:
        """Queue all of a request's jobs or none: beyond max_queue_size the request is refused at once."""
        with self.cv:
            if self.stopping:
                raise ShuttingDown("server is shutting down; retry on another replica")
            queued = self._queued_rows()
            need = sum(j.rows for j in jobs)
            if queued + need > self.config.max_queue_size:
                raise QueueFull(f"model {self.name!r}: queue full ({queued} of {self.config.max_queue_size} rows waiting); "
                                "retry with backoff")
            self.pending.extend(jobs)
            self.m_queued.set(queued + need)
            self.cv.notify_all()

    def cancel(self, jobs: list[Job]) -> None:
        """Client went away or its deadline passed: the worker drops these at the next step."""
        with self.cv:
            for j in jobs:
                j.cancelled = True
            self.cv.notify_all()

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify_all()

    def abort(self) -> None:
        """Grace period over: the worker fails everything left (UNAVAILABLE) and exits."""
        with self.cv:
            self.stopping = self.aborting = True
            self.cv.notify_all()

    def drain(self, timeout: float) -> None:
        """Refuse new work, let admitted and queued work finish for up to ``timeout``, then fail the rest."""
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        self.thread.join(timeout)
        if self.thread.is_alive():
            with self.cv:
                self.aborting = True
                self.cv.notify_all()
            self.thread.join()
        self.encoder_thread.join(5)

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

    def _deliver_all(self, jobs: list[Job]) -> None:
        """One wake-up of the event loop for every job a step finished (each wake-up writes its self-pipe)."""
        if jobs and self.loop is not None:
            self.loop.call_soon_threadsafe(_call_each_done, jobs)

    def _fail(self, job: Job, err: Exception) -> None:
        job.error = err
        self._deliver(job)

    def _queued_rows(self) -> int:
        return sum(j.rows for q in (self.pending, self.ready, self.encoding) for j in q)

    @staticmethod
    def _expired(job: Job, now: float) -> Exception | None:
        if job.cancelled:
            return Cancelled("cancelled before it started")
        if job.deadline is not None and now > job.deadline:
            return DeadlineExceeded(f"deadline exceeded while queued ({now - job.arrival:.3f} s waiting)")
        return None

    def _admit(self) -> list[Job]:
        """Pick queued jobs for the running batch, by the batching policy. Called under self.cv.

        Encoded jobs go first; unencoded ones only when the batch is idle (the step loop then encodes
        them itself rather than wait for the encoder thread)."""
        cfg = self.config
        rows_free = cfg.max_batch_size - self.gen.n_rows
        if cfg.mode == "none":
            rows_free = 0 if len(self.gen) else 1
        elif cfg.mode == "request":
            if len(self.gen):
                return []
            if cfg.max_queue_delay_ms > 0 and (self.ready or self.pending):
                # Give a batch a moment to fill up unless it is already full.
                oldest = min(q[0].arrival for q in (self.ready, self.pending) if q)
                wait_until = oldest + cfg.max_queue_delay_ms / 1000
                while self._queued_rows() < cfg.max_batch_size and not self.stopping:
                    left = wait_until - time.monotonic()
                    if left <= 0:
                        break
                    self.cv.wait(left)
        picked: list[Job] = []
        now = time.monotonic()
        took_ready = False
        for queue in (self.ready, self.pending) if not len(self.gen) else (self.ready,):
            while queue and rows_free > 0:
                job = queue[0]
                if (err := self._expired(job, now)) is not None:
                    queue.popleft()
                    self._fail(job, err)
                    continue
                if job.rows > rows_free and (picked or len(self.gen)):
                    rows_free = 0  # a wide beam waits for room; nothing overtakes it
                    break
                queue.popleft()
                picked.append(job)
                rows_free -= job.rows
                took_ready |= queue is self.ready
        if took_ready and self.pending:
            self.cv.notify_all()  # room in ``ready`` again for the encoder thread
        return picked

    def _encode_ahead(self) -> None:
        """Encoder thread: while the step loop decodes, encode queued jobs (up to a batch's rows) into ``ready``."""
        limit = self.config.max_batch_size
        while True:
            with self.cv:
                while not (self.aborting or (self.stopping and not self.pending) or
                           (self.pending and self.decoding and sum(j.rows for j in self.ready) < limit)):
                    self.cv.wait()
                if self.aborting or (self.stopping and not self.pending):
                    return
                room, now = limit - sum(j.rows for j in self.ready), time.monotonic()
                while self.pending and room > 0:
                    job = self.pending.popleft()
                    if (err := self._expired(job, now)) is not None:
                        self._fail(job, err)
                        continue
                    self.encoding.append(job)
                    room -= job.rows
                take = list(self.encoding)
            try:
                self.gen.encode([j.seq for j in take])
            except Exception as e:  # fails these requests, never the thread
                log.exception("model %s: encoder failed", self.name)
                for job in take:
                    self._fail(job, EngineFailure(f"model {self.name!r}: encoder failed ({type(e).__name__}); see server log"))
                take = []
            with self.cv:
                self.encoding.clear()
                if self.aborting:
                    for job in take:
                        self._fail(job, ShuttingDown("server shut down before this request finished; retry"))
                    return
                self.ready.extend(take)
                self.encoded_ahead += len(take)
                self.cv.notify_all()

    def _run(self) -> None:
        while True:
            with self.cv:
                while not (self.aborting or self.ready or self.pending or len(self.gen) or
                           (self.stopping and not self.encoding)):
                    self.decoding = False
                    self.cv.wait()
                if self.aborting:
                    for job in [*self.pending, *self.ready, *self.active.values()]:
                        self._fail(job, ShuttingDown("server shut down before this request finished; retry"))
                    self.pending.clear()
                    self.ready.clear()
                    self.active.clear()
                    self.cv.notify_all()
                    return
                if self.stopping and not (self.ready or self.pending or self.encoding or len(self.gen)):
                    self.cv.notify_all()
                    return
                newcomers = self._admit()
                busy = bool(newcomers) or len(self.gen) > 0
                if busy and not self.decoding and self.pending:
                    self.cv.notify_all()  # the encoder thread may start on the queue
                self.decoding = busy
                self.m_queued.set(self._queued_rows())
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
        done = []
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
            done.append(job)
        self._deliver_all(done)
