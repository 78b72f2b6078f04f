"""Fair admission (server/core_process/fair_queue.py): a request's many rows (a long input's pieces, a request of many
inputs) never hold back the requests behind it. Driven in process with the real engine (the scheduler an engine
core runs), then on the real server with 4,096-character inputs. Orders of events only: no timing is asserted."""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from conftest import MODEL_REPO, ServerThread, server_config, wait_for

from engine import EngineOptions, Sequence, Translator
from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from server.config import SchedulerConfig
from server.core_process.scheduler import Scheduler
from server.core_wire.events import Admitted, Failed, Finished

JA = "translate-en-ja"
SMALL = "Save changes"


def sentences() -> list[str]:
    from conftest import CHECKPOINTS

    rows = (CHECKPOINTS / JA / "test.tsv").read_text(encoding="utf-8").splitlines()
    return [r.split("\t")[0] for r in rows]


def long_text(start: int, chars: int = 4096) -> str:
    lines, out, i = sentences(), "", start
    while len(out) < chars:
        out += lines[i % len(lines)] + " "
        i += 1
    return out[:chars].rsplit(" ", 1)[0]


class Events:
    """The scheduler's sink: every event in order, and when each request ended."""

    def __init__(self):
        self.cv = threading.Condition()
        self.events: list = []
        self.left: dict[int, int] = {}
        self.ended: list[int] = []  # request ids, in the order they ended

    def __call__(self, events, stats) -> None:
        with self.cv:
            for e in events:
                self.events.append(e)
                if isinstance(e, Finished | Failed):
                    self.left[e.request] -= 1 if isinstance(e, Finished) else self.left[e.request]
                    if self.left[e.request] == 0:
                        self.ended.append(e.request)
            self.cv.notify_all()

    def wait(self, pred, timeout: float = 120.0) -> bool:
        with self.cv:
            return self.cv.wait_for(pred, timeout)


@pytest.fixture(scope="module")
def engine():
    return Translator(MODEL_REPO / JA / "1", EngineOptions(device="cpu"))


def submit(sched: Scheduler, sink: Events, engine, rid: int, texts: list[str]) -> None:
    sink.left[rid] = len(texts)
    sched.submit(rid, [Sequence(engine.codec.source_ids(t), 40) for t in texts], None)


@pytest.mark.parametrize("arrives", ["with the others", "while they decode"])
def test_a_small_request_behind_long_ones_is_admitted_at_once_and_ends_first(engine, arrives):
    """Three requests of 24 inputs each (72 rows for a batch of 16), then one of a single input. Taken in arrival
    order it waited for the 56 rows ahead of it to start; fairly, it takes the next free row (at once, when it
    arrives with the others) and is answered before any of the long ones."""
    texts = [s for s in sentences() if len(s) > 60]
    sink = Events()
    sched = Scheduler("test", engine.runner, SchedulerConfig(max_batch_size=16), sink)
    try:
        for rid in (1, 2, 3):
            submit(sched, sink, engine, rid, texts[24 * rid : 24 * rid + 24])
        if arrives == "with the others":
            submit(sched, sink, engine, 4, [SMALL])
        sched.start()
        if arrives != "with the others":
            assert sink.wait(lambda: any(isinstance(e, Admitted) for e in sink.events))
            submit(sched, sink, engine, 4, [SMALL])
        assert sink.wait(lambda: len(sink.ended) == 4)
    finally:
        sched.drain(5)
    assert sink.ended[0] == 4, sink.ended  # the small request first
    if arrives == "with the others":  # admitted in the first step, beside the long requests' first rows
        first = [e.request for e in sink.events[:4]]
        assert sorted(first) == [1, 2, 3, 4] and all(isinstance(e, Admitted) for e in sink.events[:4])
    assert not any(isinstance(e, Failed) for e in sink.events)


def test_one_row_requests_keep_their_arrival_order(engine):
    """The usual load (one input a request): admitted in arrival order, as before fairness."""
    texts = sentences()[:40]
    sink = Events()
    sched = Scheduler("test", engine.runner, SchedulerConfig(max_batch_size=8), sink)
    try:
        for rid, t in enumerate(texts, 1):
            submit(sched, sink, engine, rid, [t])
        sched.start()
        assert sink.wait(lambda: len(sink.ended) == len(texts))
    finally:
        sched.drain(5)
    assert [e.request for e in sink.events if isinstance(e, Admitted)] == list(range(1, len(texts) + 1))


def test_on_the_server_a_small_request_is_not_held_behind_long_inputs(model_repo):
    """Four clients' 4,096-character inputs (their pieces one submission each: more rows than the batch holds) in
    flight on the one engine core, then a one-sentence request: it is answered before any of them (whose callers
    then give up)."""
    srv = ServerThread(server_config(models=(JA,), instances=1))
    core = srv.running.repo.get(JA).cores[0]
    try:

        async def main() -> list[str]:
            order: list[str] = []
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = pb_grpc.Seq2SeqStub(ch)

                async def ask(name: str, text: str) -> None:
                    await stub.Generate(pb.GenerateRequest(model=JA, inputs=[text]), timeout=300)
                    order.append(name)

                longs = [asyncio.ensure_future(ask(f"long{k}", long_text(997 * k))) for k in range(4)]
                while len(core.inflight) < 4:  # planned and sent to the core
                    await asyncio.sleep(0.01)
                await ask("small", SMALL)
                answered = list(order)
                for call in longs:  # their callers give up: the core drops their rows
                    call.cancel()
                await asyncio.gather(*longs, return_exceptions=True)
            return answered

        answered = asyncio.run(main())
        assert wait_for(lambda: not core.inflight, 30)  # the long ones cancelled on the core too
    finally:
        srv.stop()
    assert answered == ["small"], answered
