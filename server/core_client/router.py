"""A model version's engine cores, as one: where each request goes, and where it goes when its core dies.

Each request goes to the live core with the fewest rows in flight. A core that dies fails the requests it
had started (it said ``Admitted`` for them): their tokens are lost with it, and any of them may be what
killed it. The others, still queued in the core or in its pipe, had not started, and their callers have
seen nothing of them: they go to another live core of the version or, with none up, wait here in arrival
order until one is (the core that died is being restarted; a restart that fails answers them, naming why).
Their callers see none of it: the same handle (``InFlight``), the same deadline, kept by the caller's own
timer, and cancelling works while they wait.

Once only: a request whose second core also dies before starting it fails. ``Admitted`` rides in the core's
next report, so a request that joined the batch just before the death counts as not started, and an input
that kills a core at once may take down a second one, never every core in turn. A version that drains
(unloaded, replaced, the server stopping) restarts no core: what waits is answered then, naming why.
"""

from __future__ import annotations

import logging

from contract.decoding import DecodingOptions
from server.core_client.client import CoreHandle
from server.core_client.core_state import CoreUnavailable
from server.core_client.inflight import InFlight
from server.core_wire.events import Failed

log = logging.getLogger("s2s.cores")


class Router:
    def __init__(self, cores: list[CoreHandle]):
        self.cores = cores
        # By id, in arrival order: not started, no core up to take them.
        self.waiting: dict[int, InFlight] = {}
        self.closed: str | None = None  # why the version drains: nothing waits for a restart any more
        for core in cores:
            core.on_unstarted = self._resubmit
            core.on_up = self._release
            core.on_restart_failed = self._restart_failed

    @property
    def model(self) -> str:
        return self.cores[0].spec.model if self.cores else "?"

    @property
    def any_up(self) -> bool:
        return any(c.state.up for c in self.cores)

    def pick(self) -> CoreHandle:
        live = [c for c in self.cores if c.state.up]
        if not live:
            raise CoreUnavailable(f"model {self.model!r}: no engine core is running (restarting); retry")
        return min(live, key=lambda c: c.rows)

    def submit(
        self,
        sequences: list[tuple[list[int], list[int]]],
        options: DecodingOptions,
        stream: bool,
        deadline: float | None,
        arrival: float,
        forced: tuple[int, ...] = (),
        core: CoreHandle | None = None,
    ) -> InFlight:
        """To the least loaded live core, or to ``core`` (a warm-up of that core: never sent elsewhere)."""
        if core is not None:
            return core.submit(sequences, options, stream, deadline, arrival, forced, resubmits=0)
        return self.pick().submit(sequences, options, stream, deadline, arrival, forced)

    def cancel(self, req: InFlight) -> None:
        """The caller went away or its deadline passed, wherever the request is now."""
        if self.waiting.pop(req.id, None) is not None:
            return
        for core in self.cores:
            if core.cancel(req):
                return

    def close(self, reason: str) -> None:
        """The version drains: its cores are not restarted, so what waits for one is answered now."""
        self.closed = reason
        waiting, self.waiting = list(self.waiting.values()), {}
        for req in waiting:
            self._fail(req, f"its engine core stopped before this request started, and {reason}")

    # ---- from the cores --------------------------------------------------------------------------
    def _resubmit(self, reqs: list[InFlight]) -> None:
        """A core died: the requests it had not started go to another core, or wait for one."""
        moved = held = 0
        for req in reqs:
            if self.closed is not None:
                self._fail(req, f"its engine core stopped before this request started, and {self.closed}")
            elif req.resubmits <= 0:
                self._fail(
                    req,
                    "its engine core stopped before this request started (a request moves to another core "
                    "once at most); retry",
                )
            else:
                req.resubmits -= 1
                if self.any_up:
                    self.pick().take(req)
                    moved += 1
                else:
                    self.waiting[req.id] = req
                    held += 1
        if moved or held:
            log.warning(
                "model %s: %d requests its engine core had not started went to another core, %d wait for one",
                self.model,
                moved,
                held,
            )

    def _release(self) -> None:
        """A core is up: what waits goes to the live cores, the least loaded first."""
        waiting, self.waiting = list(self.waiting.values()), {}
        for req in waiting:
            self.pick().take(req)
        if waiting:
            log.info(
                "model %s: %d requests that waited for an engine core were sent to one",
                self.model,
                len(waiting),
            )

    def _restart_failed(self, exc: BaseException) -> None:
        """A restart could not load the model (a broken bundle, say): with no core up, what waits would wait
        for a restart that may never come, so it is answered now, naming why."""
        if self.any_up:
            return
        waiting, self.waiting = list(self.waiting.values()), {}
        for req in waiting:
            self._fail(
                req,
                f"its engine core stopped before this request started and failed to restart ({exc}); retry",
            )

    def _fail(self, req: InFlight, why: str) -> None:
        req.events.put_nowait(Failed(req.id, CoreUnavailable.code, f"model {self.model!r}: {why}"))
