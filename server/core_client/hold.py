"""Wake-ups grouped under load: a core's reports wait a little before they are dispatched, so that the answers of
several decode steps leave the front end together, and what is sent to a busy core waits to share a write.

A continuous-batching core finishes a few requests a step; answered as they come, each step's answers cost the
front end an event-loop wake-up, gRPC's writes and, through the client's closed loop, the next requests' reads
one at a time, where a batching server answers tens of requests in one burst. Holding the reports of a busy
core for ``HOLD_S`` turns a trickle of a few answers a step into a burst every few steps: latency traded for
CPU, only where there is a queue to trade it against (``FROM`` requests in flight on the core; a lone request
is never held). Streaming requests are not made to wait: a report carrying tokens goes at once, with what
was held before it, so events keep their order. The figures: docs/bench/serve-peers-notes.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from server.core_wire.events import Token
from server.core_wire.messages import Report

HOLD_S = 0.015  # a decode step or two under load: the answers of consecutive steps leave together
FROM = 8  # requests in flight on a core from which its reports are held
# A core already decoding takes newcomers only between steps (several ms apart under load), so what is sent to
# it then waits this long to share one pipe write, and one wake-up of the core's reader, with what follows.
SUBMIT_HOLD_S = 0.002


def _streams(messages: list) -> bool:
    return any(isinstance(ev, Token) for m in messages if isinstance(m, Report) for ev in m.events)


class ReportHold:
    """A core's messages on their way to ``dispatch``: at once, or after ``hold_s`` when the core is busy."""

    def __init__(self, loop: asyncio.AbstractEventLoop, dispatch: Callable, hold_s: float = HOLD_S):
        self.loop, self.dispatch, self.hold_s = loop, dispatch, hold_s
        self._held: list = []
        self._timer: asyncio.TimerHandle | None = None

    def take(self, messages: list, inflight: int) -> None:
        """Messages just read from a core that has ``inflight`` requests in flight."""
        if self._held or (inflight >= FROM and not _streams(messages)):
            self._held += messages
            if _streams(messages):
                self.release()
            elif self._timer is None:
                self._timer = self.loop.call_later(self.hold_s, self.release)
            return
        for msg in messages:
            self.dispatch(msg)

    def release(self) -> None:
        """Everything held, now (the timer, a streaming report, or the core's death: what it said counts)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, []
        for msg in held:
            self.dispatch(msg)
