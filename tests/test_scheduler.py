"""The scheduler an engine core runs, driven in process with the real engine: what it reports
(Admitted / Token / Finished / Failed events), and fault injection that needs the engine in this process."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import MODEL_REPO, english

from engine import EngineOptions, Sequence, Translator
from engine.drive import run
from server.config import SchedulerConfig
from server.core_process.scheduler import Scheduler
from server.core_wire.events import Admitted, Failed, Finished, Token

ADD, JA = "addition", "translate-en-ja"


class Collector:
    """The sink: every event of every report, by request."""

    def __init__(self):
        self.cv = threading.Condition()
        self.events: list = []
        self.reports: list[tuple[list, object]] = []  # (events, stats) of each sink call, in order

    def __call__(self, events, stats) -> None:
        with self.cv:
            self.events += events
            self.reports.append((list(events), stats))
            self.cv.notify_all()

    def wait(self, pred, timeout: float = 30.0) -> bool:
        with self.cv:
            return self.cv.wait_for(lambda: pred(self.events), timeout)

    def of(self, request: int) -> list:
        return [e for e in self.events if e.request == request]


def ended(request: int, n: int):
    return (
        lambda evs: any(isinstance(e, Failed) and e.request == request for e in evs)
        or sum(isinstance(e, Finished) and e.request == request for e in evs) == n
    )


@pytest.fixture(scope="module")
def engines():
    return {m: Translator(MODEL_REPO / m / "1", EngineOptions(device="cpu")) for m in (ADD, JA)}


def scheduler(engine: Translator, **cfg) -> tuple[Scheduler, Collector]:
    sink = Collector()
    sched = Scheduler("test", engine.runner, SchedulerConfig(**cfg), sink)
    sched.start()
    return sched, sink


def test_a_request_reports_tokens_then_its_outputs_and_matches_the_engine(engines):
    engine = engines[JA]
    texts = english(6)
    sched, sink = scheduler(engine)
    try:
        seqs = [Sequence(engine.codec.source_ids(t), 40, stream=True) for t in texts]
        sched.submit(1, seqs, None)
        assert sink.wait(ended(1, len(texts)))
    finally:
        sched.drain(5)
    finished = {e.index: e.tokens for e in sink.of(1) if isinstance(e, Finished)}
    streamed = {
        i: [e.token for e in sink.of(1) if isinstance(e, Token) and e.index == i] for i in range(len(texts))
    }
    alone = [s.result for s in run(engine.runner, [Sequence(engine.codec.source_ids(t), 40) for t in texts])]
    assert [finished[i] for i in range(len(texts))] == alone
    assert [streamed[i] for i in range(len(texts))] == alone  # every token streamed, EOS not


def test_full_queue_is_refused_whole_and_cancel_is_silent(engines):
    from server.errors import QueueFull

    engine = engines[ADD]
    sched, sink = scheduler(engine, mode="none", max_batch_size=1, max_queue_size=4)
    try:
        sched.submit(1, [Sequence(engine.codec.source_ids("12+30"), 6) for _ in range(3)], None)
        with pytest.raises(QueueFull):
            sched.submit(2, [Sequence(engine.codec.source_ids("1+1"), 6) for _ in range(3)], None)
        sched.submit(3, [Sequence(engine.codec.source_ids("2+2"), 6)], None)
        sched.cancel(3)
        assert sink.wait(ended(1, 3))
    finally:
        sched.drain(5)  # the loop has gone idle and reported everything it will ever report
    assert [e.tokens for e in sink.of(1) if isinstance(e, Finished)] == [engine.codec.target_ids("42")] * 3
    assert sink.of(3) == []  # a cancelled request gets nothing back (the front end already answered it)


def test_an_engine_failure_fails_its_requests_and_the_loop_keeps_serving(engines):
    """Fault injection: the real engine's decode step raises once (as ONNX Runtime would on a device
    error); the request in that batch fails INTERNAL, the loop survives, the next request works."""
    engine = Translator(MODEL_REPO / ADD / "1", EngineOptions(device="cpu"))
    real = engine.runner.decode
    calls = {"n": 0}

    def failing_once(*args, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected ONNX Runtime failure")
        return real(*args, **kw)

    engine.runner.decode = failing_once
    sched, sink = scheduler(engine)
    try:
        sched.submit(1, [Sequence(engine.codec.source_ids("12+30"), 6)], None)
        assert sink.wait(ended(1, 1))
        sched.submit(2, [Sequence(engine.codec.source_ids("12+30"), 6)], None)
        assert sink.wait(ended(2, 1))
    finally:
        sched.drain(5)
    admitted, fail = sink.of(1)  # it had joined the batch when the step failed
    assert isinstance(admitted, Admitted)
    assert isinstance(fail, Failed) and fail.code == "INTERNAL" and "inference failed" in fail.message
    assert [e.tokens for e in sink.of(2) if isinstance(e, Finished)] == [engine.codec.target_ids("42")]
    assert not sched.active


def test_an_encoder_failure_while_others_decode_fails_only_that_request(engines):
    """Fault injection on the encoder thread's path: while a batch decodes, a newcomer's encoder run raises;
    that request fails INTERNAL, the decoding ones finish, and the next request works."""
    engine = Translator(MODEL_REPO / JA / "1", EngineOptions(device="cpu"))
    real = engine.runner.encode
    marker = engine.codec.source_ids("Open file")
    failed_on: list[str] = []

    def failing_for_marker(ids, mask):
        if any(list(row[: len(marker)]) == marker for row in ids.tolist()):
            failed_on.append(threading.current_thread().name)
            raise RuntimeError("injected encoder failure")
        return real(ids, mask)

    # Inputs with the longest outputs (greedy is deterministic): they decode together for many steps.
    pool = english(300)
    lengths = [
        len(s.result) for s in run(engine.runner, [Sequence(engine.codec.source_ids(t), 60) for t in pool])
    ]
    long_inputs = [t for _, t in sorted(zip(lengths, pool), key=lambda x: -x[0])[:6]]
    engine.runner.encode = failing_for_marker
    sched, sink = scheduler(engine)
    try:
        for i, t in enumerate(long_inputs):
            sched.submit(10 + i, [Sequence(engine.codec.source_ids(t), 60)], None)
        deadline = time.monotonic() + 10
        while len(sched.active) < len(long_inputs) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(sched.active) == len(long_inputs)
        sched.submit(
            1, [Sequence(marker, 60)], None
        )  # joins while the six decode: the encoder thread takes it
        assert sink.wait(ended(1, 1))
        assert sink.wait(lambda evs: all(ended(10 + i, 1)(evs) for i in range(len(long_inputs))))
        engine.runner.encode = real
        sched.submit(2, [Sequence(marker, 60)], None)
        assert sink.wait(ended(2, 1))
    finally:
        engine.runner.encode = real
        sched.drain(5)
    (fail,) = sink.of(1)  # encoded ahead, never admitted: no Admitted
    assert isinstance(fail, Failed) and fail.code == "INTERNAL" and "encoder failed" in fail.message
    assert failed_on == ["encoder-test"]
    for i in range(len(long_inputs)):
        admitted, finished = sink.of(10 + i)
        assert isinstance(admitted, Admitted) and isinstance(finished, Finished) and finished.tokens
    assert isinstance(sink.of(2)[-1], Finished)


def test_one_report_per_step_carries_every_event_of_that_step(engines):
    """Streaming rows make an event at every step (a Token, or Finished at EOS), so every step is reported:
    each report then covers at most one step, and that step's events for all of its rows are in it."""
    engine = engines[ADD]
    sched, sink = scheduler(engine)
    try:
        sched.submit(
            1, [Sequence(engine.codec.source_ids(f"{i}+{i}"), 6, stream=True) for i in range(16)], None
        )
        assert sink.wait(ended(1, 16))
    finally:
        sched.drain(5)
    stepped = [(events, stats) for events, stats in sink.reports if stats.step_s]
    assert stepped, "no decode step was reported"
    assert all(len(stats.step_s) == 1 for _, stats in stepped)  # never two steps in one report
    assert sum(len(stats.step_s) for _, stats in sink.reports) == len(
        stepped
    )  # no step reported late or twice
    for events, stats in stepped:  # every row of the step has its event in the step's own report
        rows = {e.index for e in events if isinstance(e, (Token, Finished))}
        assert len(rows) == stats.batch_rows[0], (len(rows), stats.batch_rows)
    assert sum(isinstance(e, Finished) for e in sink.events) == 16


def test_a_request_is_reported_admitted_once_in_the_report_of_the_step_it_joined(engines):
    """``Admitted`` tells the front end a request has started (a core that dies then fails it rather than send it
    to another core): once per request, however many steps later its other inputs join, before any of its
    tokens, in the report of the step its first input joined (no pipe write of its own)."""
    engine = engines[ADD]
    sched, sink = scheduler(engine, mode="none", max_batch_size=1)  # one input at a time: three admissions
    try:
        sched.submit(1, [Sequence(engine.codec.source_ids(f"{i}+1"), 6, stream=True) for i in range(3)], None)
        assert sink.wait(ended(1, 3))
    finally:
        sched.drain(5)
    events = sink.of(1)
    assert isinstance(events[0], Admitted) and sum(isinstance(e, Admitted) for e in events) == 1
    (joined,) = [(evs, stats) for evs, stats in sink.reports if any(isinstance(e, Admitted) for e in evs)]
    assert joined[1].step_s and any(isinstance(e, Token) for e in joined[0])
