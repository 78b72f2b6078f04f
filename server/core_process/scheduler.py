"""Per-engine-core scheduling: the queue, the batching policy, the step loop thread, and the stats it records.

It runs inside an engine core (``server/core_process/process.py``, a process of its own) and knows neither asyncio nor
gRPC nor Prometheus: requests come in through ``submit``/``cancel`` and everything that happens goes out through one
``sink(events, stats)`` call per loop iteration, as plain dataclasses (vLLM's schedule -> execute -> update: the
StepLoop's ``step`` returns a ``StepOutput`` and this loop turns it into events).

A worker thread owns the ``StepLoop`` and loops ``admit -> step -> emit``. While it decodes, a second thread runs the
encoder for queued requests (``ready``), so that admission under load costs the step loop no encoder time (the encoder
is compute-bound, and a large share of the step loop's time under load with short outputs). When the step loop is idle
it encodes newcomers itself, so a lone request never pays a thread hand-off.

The batching policy (``server/core_process/admission.py``) says how many rows each step may admit, the queues
(``fair_queue.py``) which: fairly across requests. A request's first admission into the batch is reported (``Admitted``,
in the next report): the front end tells the requests a core that died had started from the rest.
"""

from __future__ import annotations

import logging
import operator
import threading
import time
from collections.abc import Callable

from engine import Runner, Sequence, StepLoop
from server.config import SchedulerConfig
from server.core_process.admission import POLICIES, QueueView
from server.core_process.fair_queue import FairQueue, request_cap
from server.core_process.jobs import Job, Request
from server.core_wire.events import Admitted, Failed, Finished, Stats, Token
from server.errors import DeadlineExceeded, EngineFailure, QueueFull, ServingError, ShuttingDown

log = logging.getLogger("s2s.scheduler")


Sink = Callable[[list, Stats], None]
STATS_EVERY_S = 0.05  # the most a report of stats alone waits (Prometheus scrapes every 5 s)


class Scheduler:
    def __init__(self, name: str, engine: Runner, config: SchedulerConfig, sink: Sink):
        self.name, self.engine, self.config, self.sink = name, engine, config, sink
        self.policy = POLICIES[config.mode](config)
        self.gen = StepLoop(engine)
        self.pending = FairQueue()  # queued, not encoded yet
        self.ready = FairQueue()  # queued and encoded (by the encoder thread)
        self.encoding: list[Job] = []  # taken by the encoder thread, being encoded now
        self.decoding = False  # the step loop has a running batch (then queued requests are pre-encoded)
        self.active: dict[int, Job] = {}  # seq.id -> job
        self.requests: dict[int, list[Job]] = {}  # request id -> its jobs, until it is over
        self.stats = Stats()
        self.encoded_ahead = 0  # jobs the encoder thread encoded while the step loop decoded (all time)
        self.cv = threading.Condition()
        self.stopping = False
        self.aborting = False  # grace period over: fail whatever is left
        self.outbox: list = []  # events of this iteration, emitted together (one message per step)
        self.admitted: list[Admitted] = []  # go out first in the next report, but make none of their own
        self.reported = 0.0  # when the last report went out
        self.idle_reported = True  # the figures at the last idle moment went out
        self.thread = threading.Thread(target=self._run, name=f"scheduler-{name}", daemon=True)
        self.encoder_thread = (
            threading.Thread(target=self._encode_ahead, name=f"encoder-{name}", daemon=True)
            if config.encoder_thread
            else None
        )

    # ---- any thread ------------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()
        if self.encoder_thread is not None:
            self.encoder_thread.start()

    def submit(
        self, request_id: int, seqs: list[Sequence], deadline: float | None, arrival: float | None = None
    ) -> None:
        """Queue all of a request's sequences or none: beyond max_queue_size it is refused at once (raises)."""
        req = Request(request_id, arrival or time.monotonic(), deadline, left=len(seqs))
        jobs = [Job(seq, req, i) for i, seq in enumerate(seqs)]
        with self.cv:
            if self.stopping:
                raise ShuttingDown("server is shutting down; retry on another replica")
            queued = self.queued_rows()
            need = sum(j.rows for j in jobs)
            if queued + need > self.config.max_queue_size:
                raise QueueFull(
                    f"model {self.name!r}: queue full ({queued} of {self.config.max_queue_size} rows waiting); "
                    "retry with backoff"
                )
            self.requests[request_id] = jobs
            self.pending.extend(jobs)
            self.stats.queued = queued + need
            self.cv.notify_all()

    def cancel(self, request_id: int) -> None:
        """Client went away or its deadline passed: the worker drops its jobs at the next step, silently."""
        with self.cv:
            for job in self.requests.pop(request_id, ()):
                job.cancelled = True
                job.request.over = True
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
        self.stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.abort()
            self.thread.join()
        if self.encoder_thread is not None:
            self.encoder_thread.join(5)

    def _view(self) -> QueueView:
        """What the batching policy sees (under self.cv)."""
        waiting = [t for q in (self.ready, self.pending) if (t := q.oldest_arrival()) is not None]
        oldest = min(waiting) if waiting else None
        return QueueView(
            time.monotonic(), self.gen.n_rows, len(self.gen), self.queued_rows(), oldest, self.stopping
        )

    def queued_rows(self) -> int:
        return self.pending.rows + self.ready.rows + sum(j.rows for j in self.encoding)

    # ---- reporting -------------------------------------------------------------------------------
    def _fail(self, job: Job, err: ServingError) -> None:
        """Fail the job's whole request (once); its other jobs are dropped. Called under self.cv or by the worker."""
        req = job.request
        if req.over:
            return
        req.over = True
        for sibling in self.requests.pop(req.id, ()):
            sibling.cancelled = True
        self.outbox.append(Failed(req.id, err.code, str(err)))

    def _emit(self, force: bool = False) -> None:
        """Report this iteration's events with the stats gathered so far (the channel write happens outside
        the lock). An iteration with no events reports only every STATS_EVERY_S, or when ``force``d (the loop
        going idle): each report wakes the front end, which at ~300 steps/s was a report per step for nothing."""
        with self.cv:  # re-entrant: some callers hold it already
            now = time.monotonic()
            if not self.outbox and not force and now - self.reported < STATS_EVERY_S:
                return
            self.reported = now
            # Admitted first: before any token or answer of its request (whose report it rides in, or an earlier).
            events, self.outbox, self.admitted = self.admitted + self.outbox, [], []
            stats = self.stats.take()
        try:
            self.sink(events, stats)
        except Exception:  # the front end is gone or the channel broke: nothing to deliver to
            log.exception("model %s: reporting %d events failed", self.name, len(events))

    # ---- worker threads --------------------------------------------------------------------------
    def _drop_expired(self, job: Job, now: float) -> bool:
        if (err := job.expired(now)) is None:
            return False
        if not job.cancelled:
            self._fail(job, err)
        return True

    def _admit(self) -> list[Job]:
        """Pick queued jobs for the running batch, by the batching policy. Called under self.cv.

        Encoded jobs go first; unencoded ones only when the batch is idle (the step loop then encodes
        them itself rather than wait for the encoder thread)."""
        while True:
            admission = self.policy.admit(self._view())
            if admission.wait_until is None:
                break
            self.cv.wait(max(0.0, admission.wait_until - time.monotonic()))
        rows_free = admission.rows
        picked: list[Job] = []
        now = time.monotonic()
        cap, running = request_cap(self.config, len(self.requests)), len(self.gen)
        took_ready = False
        # With an encoder thread, a running batch takes only what it encoded ahead; without one, the step
        # loop encodes newcomers itself (in gen.add) between steps.
        ahead = self.encoder_thread is not None and running
        for queue in (self.ready,) if ahead else (self.ready, self.pending):
            got, blocked = queue.take(
                rows_free,
                cap,
                operator.attrgetter("rows_active"),
                lambda job: self._drop_expired(job, now),
                # a wide beam waits for room, nothing overtaking it, unless it is the first into an idle batch
                "none" if picked or running else "first",
            )
            picked += got
            rows_free -= sum(j.rows for j in got)
            took_ready |= bool(got) and queue is self.ready
            if blocked or rows_free <= 0:
                break
        if took_ready and self.pending:
            self.cv.notify_all()  # room in ``ready`` again for the encoder thread
        return picked

    def _take_ahead(self, room: int) -> list[Job]:
        """Queued jobs for the encoder thread, as admission takes them (rows encoded ahead are in service)."""
        ahead, now = self.ready.rows_of(), time.monotonic()
        cap = request_cap(self.config, len(self.requests))
        served = lambda req: req.rows_active + ahead.get(req.id, 0)  # noqa: E731
        return self.pending.take(room, cap, served, lambda job: self._drop_expired(job, now), "any")[0]

    def _encode_ahead(self) -> None:
        """Encoder thread: while the step loop decodes, encode queued jobs (up to a batch's rows) into ``ready``."""
        limit = self.config.max_batch_size
        while True:
            with self.cv:
                take: list[Job] = []
                while not take:
                    if self.aborting or (self.stopping and not self.pending):
                        return
                    if self.pending and self.decoding and self.ready.rows < limit:
                        take = self._take_ahead(limit - self.ready.rows)
                    if not take:
                        if self.outbox:  # jobs that expired while queued: the step loop reports them
                            self.cv.notify_all()
                        self.cv.wait()
                self.encoding = list(take)
            failed = None
            try:
                self.gen.encode([j.seq for j in take])
            except Exception as e:  # fails these requests, never the thread
                log.exception("model %s: encoder failed", self.name)
                failed = EngineFailure(
                    f"model {self.name!r}: encoder failed ({type(e).__name__}); see server log"
                )
            with self.cv:
                self.encoding.clear()
                if failed is not None or self.aborting:
                    err = failed or ShuttingDown("server shut down before this request finished; retry")
                    for job in take:
                        self._fail(job, err)
                    self.cv.notify_all()  # the step loop emits the failures
                    if self.aborting:
                        return
                    continue
                self.ready.extend(j for j in take if not j.cancelled)
                self.encoded_ahead += len(take)
                self.stats.encoded_ahead += len(take)
                self.cv.notify_all()

    def _run(self) -> None:
        while True:
            with self.cv:
                while not (
                    self.aborting
                    or self.ready
                    or self.pending
                    or len(self.gen)
                    or self.outbox
                    or (self.stopping and not self.encoding)
                ):
                    self.decoding = False
                    if not self.idle_reported:  # going idle: the last figures (active, queued: 0) go out now
                        self.idle_reported = True
                        self.stats.active, self.stats.queued = len(self.active), self.queued_rows()
                        self._emit(force=True)
                    self.cv.wait()
                if self.aborting:
                    err = ShuttingDown("server shut down before this request finished; retry")
                    for job in [*self.pending, *self.ready, *self.active.values()]:
                        self._fail(job, err)
                    self.pending.clear()
                    self.ready.clear()
                    self.active.clear()
                    self._emit(force=True)
                    self.cv.notify_all()
                    return
                if self.stopping and not (self.ready or self.pending or self.encoding or len(self.gen)):
                    self._emit(force=True)
                    self.cv.notify_all()
                    return
                self.idle_reported = False
                newcomers = self._admit()
                busy = bool(newcomers) or len(self.gen) > 0
                if busy and not self.decoding and self.pending:
                    self.cv.notify_all()  # the encoder thread may start on the queue
                self.decoding = busy
                self.stats.queued = self.queued_rows()
            try:
                self._expire()
                self._join(newcomers)
                if len(self.gen):
                    self._step()
            except Exception as e:  # an engine failure fails the affected requests, never the loop
                log.exception("model %s: decode step failed", self.name)
                err = EngineFailure(
                    f"model {self.name!r}: inference failed ({type(e).__name__}); see server log"
                )
                with self.cv:
                    for job in list(self.active.values()):
                        self._fail(job, err)
                self.active.clear()
                self.gen = StepLoop(self.engine)
            self.stats.active = len(self.active)
            self._emit()

    def _join(self, jobs: list[Job]) -> None:
        if not jobs:
            return
        now = time.monotonic()
        for job in jobs:
            job.admitted = now
            self.stats.queue_s.append(now - job.request.arrival)
        try:
            self.gen.add([j.seq for j in jobs])
        except Exception as e:
            log.exception("model %s: encoder failed", self.name)
            err = EngineFailure(f"model {self.name!r}: encoder failed ({type(e).__name__}); see server log")
            with self.cv:
                for job in jobs:
                    self._fail(job, err)
            return
        for job in jobs:
            self.active[job.seq.id] = job
            job.request.rows_active += job.rows
            if not job.request.admitted:
                job.request.admitted = True
                self.admitted.append(Admitted(job.request.id))

    def _expire(self) -> None:
        now = time.monotonic()
        gone = [
            j
            for j in self.active.values()
            if j.cancelled or (j.request.deadline is not None and now > j.request.deadline)
        ]
        if not gone:
            return
        self.gen.remove([j.seq for j in gone])
        with self.cv:
            for job in gone:
                del self.active[job.seq.id]
                job.request.rows_active -= job.rows
                if not job.cancelled:
                    self._fail(
                        job, DeadlineExceeded(f"deadline exceeded after {job.n_tokens} generated tokens")
                    )

    def _step(self) -> None:
        rows = self.gen.n_rows
        t0 = time.perf_counter()
        out = self.gen.step()
        self.stats.step_s.append(time.perf_counter() - t0)
        self.stats.batch_rows.append(rows)
        now = time.monotonic()
        eos = self.engine.special.eos
        for seq, token in out.tokens:  # streaming sequences: each greedy token as it is chosen
            job = self.active[seq.id]
            if job.first_token is None:
                job.first_token = now
                self.stats.ttft_s.append(now - job.request.arrival)
            job.n_tokens += 1
            if token != eos and not job.request.over:
                self.outbox.append(Token(job.request.id, job.index, token))
        for seq in out.finished:
            job = self.active.pop(seq.id)
            job.request.rows_active -= job.rows
            if job.first_token is None:  # not streamed (or a beam, which reports at the end)
                job.first_token = now
                self.stats.ttft_s.append(now - job.request.arrival)
            n = len(seq.result or [])
            job.n_tokens = n
            self.stats.generated += n
            if n > 1:
                self.stats.tpot_s.append((now - job.first_token) / (n - 1))
            req = job.request
            if req.over:
                continue
            # A lone unscored hypothesis is ``tokens`` itself: not sent twice through the pipe.
            o = seq.options
            nbest = (seq.hypotheses or []) if o.num_hypotheses > 1 or o.return_scores else []
            self.outbox.append(
                Finished(req.id, job.index, list(seq.result or []), job.admitted, job.first_token, nbest)
            )
            req.left -= 1
            if req.left == 0:
                req.over = True
                with self.cv:
                    self.requests.pop(req.id, None)
        if out.finished and self.encoder_thread is not None:
            # Freed rows may let in the jobs that caps held back; only then (a wake-up per finish shrinks encodes).
            with self.cv:
                if self.pending.held_back:
                    self.cv.notify_all()
