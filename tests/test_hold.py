"""A busy core's reports, held so that answers leave the front end together (``server/core_client/hold.py``)."""

from __future__ import annotations

import asyncio

from server.core_client.hold import FROM, ReportHold
from server.core_wire.events import Finished, Stats, Token
from server.core_wire.messages import Report


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
