"""A request in flight to an engine core, as the front end holds it: its handle, the queue its core's
typed events arrive on, and what was sent, to send again if its core dies before starting it. Lives on the
event loop (``server/core_client/client.py`` and ``server/core_client/router.py`` are its only writers)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from server.core_wire.events import Event
from server.core_wire.messages import Submit


class EventQueue:
    """One request's events, in order, for its one reader: a deque and at most one waiting future (an
    ``asyncio.Queue`` also builds an Event and two waiter deques for every request)."""

    __slots__ = ("_items", "_waiter")

    def __init__(self) -> None:
        self._items: collections.deque[Event] = collections.deque()
        self._waiter: asyncio.Future | None = None

    def put_nowait(self, event: Event) -> None:
        self._items.append(event)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def get(self) -> Event:
        while not self._items:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()


@dataclass(eq=False)
class InFlight:
    """A request sent to a core, as its caller holds it: the core's typed events for it arrive on ``events``
    in order (``Token`` while streaming, one ``Finished`` per input, or one ``Failed`` that ends it). On whichever
    core it is, the caller holds one handle: a request resubmitted to another core keeps its id and queue."""

    id: int
    rows: int
    left: int  # inputs not finished yet
    submit: Submit  # as sent to its core, to send again (the same id, sequences, options and deadline)
    resubmits: int = 1  # times it may still go to another core if its core dies before starting it
    started: bool = False  # its core admitted it into the running batch (``Admitted``)
    events: EventQueue = field(default_factory=EventQueue)
