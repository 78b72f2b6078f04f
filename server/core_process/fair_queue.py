"""An engine core's waiting jobs, taken fairly across requests: a request's many rows never hold back the requests
behind it.

A long input is split into pieces (``server/models/text_plan.py``), all of one request, and a request may carry up
to max_inputs_per_request inputs, each a beam wide: one request can queue more rows than a batch holds. Taken in
arrival order, those rows made every request behind them wait for all of them to start (four clients sending
4,096-character inputs back to back held a one-sentence request for a second), and then decode in steps as wide as
the batch. So each request may have at most ``request_cap`` rows in service (in the batch, or encoded for it), and
one job however wide where it has none: a request that arrives behind long ones takes the next free rows, and the
steps it decodes in stay short. Jobs are taken request by request in arrival order, each request's in its own
order; requests of one input each (the usual load) are taken in arrival order, one job each, as before.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from typing import Literal, NamedTuple

from server.config import SchedulerConfig
from server.core_process.jobs import Job, Request

# Continuous batching: requests that compete, few enough to each have many rows in the batch, share a quarter of it.
BATCH_SHARES = 4


class Cap(NamedTuple):
    rows: int  # in service, per request
    beyond: bool  # what no request under its cap takes goes past it, in arrival order


def request_cap(config: SchedulerConfig, held: int) -> Cap:
    """The rows one of the ``held`` requests of an engine core may have in service, and whether rows nobody else
    takes may go past that. Continuous batching: a lone request the whole batch; requests that compete a quarter of
    the batch over their number, strictly: a long request then fills a quarter of the batch at most, so that the
    steps of the requests that join it stay short, and the batch fills further only with rows of more requests (one
    job each at least: the usual load of one input a request fills it as before). The other modes decode a batch to
    its end: only the order is fair, a full share each first, then the rest."""
    if held <= 1:
        return Cap(config.max_batch_size, False)
    if config.mode == "continuous":
        return Cap(max(1, config.max_batch_size // (BATCH_SHARES * held)), False)
    return Cap(max(1, config.max_batch_size // held), True)


class FairQueue:
    def __init__(self):
        self._by_request: dict[int, collections.deque[Job]] = {}  # in arrival order
        self.rows = 0  # rows of every job held
        self.held_back = False  # the last ``take`` left a request's job for its cap: freed rows may let it in

    def __bool__(self) -> bool:
        return bool(self._by_request)

    def __iter__(self) -> Iterator[Job]:
        for jobs in self._by_request.values():
            yield from jobs

    def extend(self, jobs: list[Job]) -> None:
        for job in jobs:
            self._by_request.setdefault(job.request.id, collections.deque()).append(job)
            self.rows += job.rows

    def clear(self) -> None:
        self._by_request.clear()
        self.rows = 0

    def oldest_arrival(self) -> float | None:
        return min((jobs[0].request.arrival for jobs in self._by_request.values()), default=None)

    def rows_of(self) -> dict[int, int]:
        """Rows held, by request id."""
        return {rid: sum(j.rows for j in jobs) for rid, jobs in self._by_request.items()}

    def take(
        self,
        rows: int,
        cap: Cap,
        served: Callable[[Request], int],
        drop: Callable[[Job], bool],
        overfill: Literal["none", "first", "any"] = "none",
    ) -> tuple[list[Job], bool]:
        """Jobs for up to ``rows`` rows, request by request in arrival order, each request up to ``cap.rows`` rows in
        service (``served``: the rows it has in service already, to which what it takes here adds), or one job,
        however wide, where it has none; ``cap.beyond``: then what is left, again in arrival order, past the cap.
        ``drop(job)`` True: the job is removed and not taken (expired or cancelled). A job wider than the rows left
        ends the taking (nothing overtakes it), unless ``overfill`` lets it go over: the first job taken, or any.
        Returns the jobs and whether such a job ended the taking."""
        taken: list[Job] = []
        extra: dict[int, int] = {}  # rows taken in this call, by request
        self.held_back = False
        for capped in (True, False) if cap.beyond else (True,):
            for rid, jobs in list(self._by_request.items()):
                while jobs and rows > 0:
                    job = jobs[0]
                    has = served(job.request) + extra.get(rid, 0)
                    if capped and has and has + job.rows > cap.rows:
                        self.held_back = True
                        break
                    if drop(job):
                        self._pop(rid, jobs)
                        continue
                    if job.rows > rows and not (overfill == "any" or (overfill == "first" and not taken)):
                        return taken, True
                    self._pop(rid, jobs)
                    taken.append(job)
                    rows -= job.rows
                    extra[rid] = extra.get(rid, 0) + job.rows
                if rows <= 0:
                    return taken, False
        return taken, False

    def _pop(self, rid: int, jobs: collections.deque[Job]) -> None:
        self.rows -= jobs.popleft().rows
        if not jobs:
            del self._by_request[rid]
