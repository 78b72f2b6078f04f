"""The front end's reading of a core's pipe: the frames ``Connection`` writes, cut into messages however the socket
delivers them (``server/core/pipe.py``), and a busy core's reports held to leave together (``server/core/hold.py``)."""

from __future__ import annotations

import asyncio
import socket
from multiprocessing.connection import Connection

from server.core.events import Finished, Stats, Token
from server.core.hold import FROM, ReportHold
from server.core.messages import Report
from server.core.pipe import FrameReader


def test_reader_cuts_frames_split_across_reads_and_ends_on_eof():
    ours, theirs = socket.socketpair()
    core = Connection(
        theirs.detach()
    )  # the core's end writes with Connection, as server/core/process.py does
    reader = FrameReader(ours, size=64)  # a buffer smaller than a frame: frames arrive in pieces
    assert reader.read() == []  # nothing yet: never blocks
    big = ["x" * 500, list(range(100))]
    core.send({"a": 1})
    core.send(big)
    core.send(("last", 3))
    got = []
    while len(got) < 3:
        got += reader.read()
    assert got == [{"a": 1}, big, ("last", 3)]
    core.close()
    assert reader.read() is None
    ours.close()


def test_a_busy_cores_reports_are_held_then_dispatched_in_order_and_tokens_go_at_once():
    """Under load (``hold.FROM`` requests in flight) reports wait for the timer and then go in the order they came;
    a lone request's report, and a report carrying a streaming token, go at once (with what was held before)."""

    async def main():
        got = []
        hold = ReportHold(asyncio.get_running_loop(), got.append, hold_s=0.01)
        answer = Report([Finished(1, 0, [5], 0.0, 0.0)], Stats())
        hold.take(["alone"], inflight=1)
        assert got == ["alone"]
        hold.take([answer, "second"], inflight=FROM)
        assert got == ["alone"]  # held
        await asyncio.sleep(0.05)  # a timer due after the hold's
        assert got == ["alone", answer, "second"]
        hold.take(["held"], inflight=FROM)
        token = Report([Token(2, 0, 7)], Stats())
        hold.take([token], inflight=FROM)
        assert got[3:] == ["held", token]  # the stream's token did not wait, nor what was held before it
        await asyncio.sleep(0.05)
        assert len(got) == 5  # nothing dispatched twice

    asyncio.run(main())
