"""The front end's side of one engine core: start it, send it requests, restart it when it dies.

``CoreHandle`` owns one child process (``server/core_process/process.py``) and its pipe. The pipe is read on the
event loop (``loop.add_reader``); each message is one decode step's report: its typed events go to
the queue of their request's in-flight handle (``InFlight``, which the model API awaits), its stats
to the model version's telemetry (``server/telemetry/model_telemetry.py``); a busy core's reports wait a
few ms first, so that answers leave together (``server/core_client/hold.py``). A core that dies (SIGKILL,
segfault, OOM) is noticed by EOF on its pipe and started again, with a growing delay if it keeps dying.
The requests in flight it had started (``Admitted``) fail at once with UNAVAILABLE (retryable); the others,
still in its queue or in the pipe, go back to the model's router (``server/core_client/router.py``).

A core that hangs (SIGSTOP, a deadlock, a stuck driver) shows no EOF. A working core reports at least
every 50 ms while it has work (``server.core_process.scheduler.STATS_EVERY_S``), so a watchdog timer treats a
core with requests in flight that has said nothing for ``--core-stall-s`` as dead: it is SIGKILLed
and handled as above (marked down, its started requests failed, the others sent on, restarted). Writes
to the pipe never block (a hung core stops reading it): what it does not take waits in a buffer.

Silence is the core's only if the front end was listening. When the front end itself stops (a SIGSTOP,
a long GC pause, a stalled VM), the core's reports pile up unread in the pipe, and on waking the
watchdog's timer can run before the reader: it killed healthy cores. So before it kills, the watchdog
looks at the pipe (unread reports: the core spoke) and at its own timer (one that runs late by more than
its period: the front end was not running, and cannot tell what the core did meanwhile); either starts
the count again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

from contract.decoding import DecodingOptions
from server.core_client.core_state import CoreLoadError, CoreState, CoreUnavailable
from server.core_client.hold import SUBMIT_HOLD_S, ReportHold
from server.core_client.inflight import InFlight
from server.core_wire.events import Admitted, Failed, Finished
from server.core_wire.messages import Abort, Cancel, CoreSpec, Drain, LoadFailed, Ready, Report, Submit
from server.core_wire.pipe import FrameWriter
from server.telemetry.model_telemetry import ModelTelemetry

log = logging.getLogger("s2s.cores")

_request_ids = itertools.count(1)
_ROOT = Path(__file__).resolve().parents[2]  # where ``server`` is importable from, installed or not
RESTART_DELAYS_S = (0.5, 1.0, 2.0, 5.0, 10.0)  # after the 1st, 2nd, ... death in a row


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


class CoreHandle:
    def __init__(self, spec: CoreSpec, telemetry: ModelTelemetry, stall_s: float = 10.0):
        self.spec, self.telemetry, self.stall_s = spec, telemetry, stall_s
        self.heard_at = 0.0  # when the core last said something, or work arrived for an idle core
        # When the watchdog's timer is due (a timer that runs late: the front end paused).
        self._watch_due = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self.state = CoreState()
        self.inflight: dict[int, InFlight] = {}
        self.rows = 0  # rows of the requests in flight: the load the router balances
        self.proc: subprocess.Popen | None = None
        self.conn = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = False
        # Its model stops (shutdown, unload, replace): a core that exits now, drained by a SIGTERM sent to the
        # whole process group (timeout(1), systemd, a terminal), is not restarted.
        self.closing = False
        self._ready: asyncio.Future | None = None
        self._exited: asyncio.Event = asyncio.Event()
        self._restart: asyncio.TimerHandle | None = None
        self._outbox: list = []  # messages of this event-loop iteration, written to the pipe together
        self._wsock: socket.socket | None = None
        self._hold: ReportHold | None = (
            None  # the core's reports on their way to _dispatch (server/core_client/hold.py)
        )
        self._writer: FrameWriter | None = None  # to _wsock, never blocking
        # Set by the model's router: where the requests this core had not started go when it dies, and who
        # hears that it is up (again) or that a restart failed. Alone, a core fails them.
        self.on_unstarted: Callable[[list[InFlight]], None] = lambda reqs: self._fail(
            reqs, "its engine core stopped before this request started"
        )
        self.on_up: Callable[[], None] = lambda: None
        self.on_restart_failed: Callable[[BaseException], None] = lambda exc: None

    @property
    def label(self) -> str:
        return f"{self.spec.model}#{self.spec.index}"

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future:
        """Start the process; the returned future resolves once the engine is loaded (or fails naming why).

        ``python -m server.core_process FD`` over one end of a socket pair, rather than multiprocessing's spawn:
        a fresh interpreter that never re-imports the embedding program's ``__main__``. Called on the
        event loop thread: the kernel's parent-death signal is tied to the thread that starts the child,
        and the event loop thread lives as long as the server."""
        self.loop = loop
        ours, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                # The label (model#index) only names the process for ps and top: the core reads its spec from the pipe.
                [sys.executable, "-m", "server.core_process", str(theirs.fileno()), self.label],
                pass_fds=[theirs.fileno()],
                cwd=_ROOT,
                env=_child_env(),
            )
        finally:
            theirs.close()  # ours alone would keep the channel open: EOF is how a death shows
        self._wsock = ours.dup()  # writes go through this one, never blocking
        self._writer = FrameWriter(loop, self._wsock)
        self._hold = ReportHold(loop, self._dispatch)
        self.conn = Connection(ours.detach())
        self.conn.send(self.spec)
        self._exited = asyncio.Event()
        self._ready = loop.create_future()
        loop.add_reader(self.conn.fileno(), self._readable)
        if self._watchdog is None and self.stall_s > 0:
            self._watch_due = time.monotonic() + self.stall_s / 4
            self._watchdog = loop.call_later(self.stall_s / 4, self._watch)
        return self._ready

    def _watch(self) -> None:
        """Every stall_s / 4: a core with work that has said nothing for stall_s is SIGKILLed. EOF on its pipe then
        does the rest, as for any core that dies (``_died``). The pipe is never written with a blocking write
        (``FrameWriter``), so a hung core cannot stop the event loop, and this timer, from running."""
        self._watchdog = None
        if self.stopping:
            return
        now = time.monotonic()
        period = self.stall_s / 4
        late = now - self._watch_due > period  # the front end did not run for a while: nothing to judge by
        self._watch_due = now + period
        if late or (self.conn is not None and self.conn.poll(0)):  # reports waiting unread: the core spoke
            self.heard_at = max(self.heard_at, now)
        silent = now - self.heard_at
        proc = self.proc
        if (
            self.inflight
            and self.state.up
            and silent > self.stall_s
            and proc is not None
            and proc.poll() is None
        ):
            log.warning(
                "engine core %s (pid %s) has said nothing for %.1f s with %d requests in flight "
                "(--core-stall-s %g): killing it",
                self.label,
                self.state.pid,
                silent,
                len(self.inflight),
                self.stall_s,
            )
            proc.kill()
            self.heard_at = time.monotonic() + self.stall_s  # once: EOF takes it from here
        self._watchdog = self.loop.call_later(self.stall_s / 4, self._watch)

    def _readable(self) -> None:
        self.heard_at = time.monotonic()
        conn, messages, dead = self.conn, [], False
        try:
            while conn is not None and conn.poll():
                messages.append(conn.recv())
        except (EOFError, OSError):
            dead = True
        self._hold.take(messages, len(self.inflight))
        if dead:
            self._died()  # after what it said before it died

    def _dispatch(self, msg) -> None:
        if isinstance(msg, Report):
            for ev in msg.events:
                req = self.inflight.get(ev.request)
                if req is None:
                    continue  # cancelled on this side already
                if isinstance(ev, Admitted):
                    req.started = True
                    continue
                req.events.put_nowait(ev)
                if isinstance(ev, Finished):
                    req.left -= 1
                    if req.left == 0:
                        self._forget(req)
                elif isinstance(ev, Failed):
                    self._forget(req)
            self.telemetry.stats(self.spec.index, msg.stats)
        elif isinstance(msg, Ready):
            st = self.state
            st.up, st.provider, st.io_binding, st.pid, st.ready_at = (
                True,
                msg.provider,
                msg.io_binding,
                msg.pid,
                time.monotonic(),
            )
            st.greedy_screen = msg.greedy_screen
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(self)
            log.info(
                "engine core %s up (pid %d, %s, greedy screen %s)",
                self.label,
                msg.pid,
                msg.provider,
                msg.greedy_screen,
            )
            self.telemetry.core_state(self.spec.index, True, self.state.restarts)
            self.on_up()
        elif isinstance(msg, LoadFailed):
            if self._ready is not None and not self._ready.done():
                self._ready.set_exception(CoreLoadError(msg.message))

    def _died(self) -> None:
        self._hold.release()  # what it said before it died counts
        loop = self.loop
        if self.conn is not None:
            loop.remove_reader(self.conn.fileno())
            self.conn.close()
            self.conn = None
        if self._wsock is not None:
            self._writer.close()
            self._wsock.close()
            self._wsock = None
        was_up = self.state.up
        self.state.up = False
        code = None
        if self.proc is not None:
            try:
                code = self.proc.wait(2)  # reaped: no zombie left behind
            except subprocess.TimeoutExpired:  # closed its end but lives on: make sure
                self.proc.kill()
                code = self.proc.wait()
        lost = list(self.inflight.values())
        self.inflight.clear()
        self.rows = 0
        started = [req for req in lost if req.started]
        self._fail(started, "its engine core stopped while decoding this request")
        self._exited.set()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(
                CoreLoadError(f"engine core {self.label} exited while loading (exit code {code})")
            )
        self.telemetry.core_state(self.spec.index, False, self.state.restarts)
        self.on_unstarted([req for req in lost if not req.started])  # this core is down: they go elsewhere
        if self.stopping:
            return
        # Dying again soon after a start counts as "in a row": back off instead of spinning.
        quick = time.monotonic() - self.state.ready_at < 30
        self.state.deaths_in_a_row = self.state.deaths_in_a_row + 1 if quick else 1
        delay = RESTART_DELAYS_S[min(self.state.deaths_in_a_row, len(RESTART_DELAYS_S)) - 1]
        if code == 0 or self.closing:  # drained by a SIGTERM: if the whole process group got one, the front
            # end's own signal handler stops the model within milliseconds; decide when the restart is due
            self._restart = loop.call_later(delay, self._respawn_after_exit, code)
            return
        log.warning(
            "engine core %s (pid %s) died (exit code %s) with %d requests in flight (%d started)%s; "
            "restarting in %.1f s",
            self.label,
            self.state.pid,
            code,
            len(lost),
            len(started),
            "" if was_up else " while loading",
            delay,
        )
        self._restart = loop.call_later(delay, self._respawn)

    def _respawn_after_exit(self, code: int | None) -> None:
        what = f"engine core {self.label} (pid {self.state.pid}) exited (exit code {code})"
        if self.stopping or self.closing:
            log.info("%s while its model stops: not restarted", what)
            return
        log.warning("%s on a SIGTERM of its own; restarting it", what)
        self._respawn()

    def _respawn(self) -> None:
        if self.stopping:
            return
        self.state.restarts += 1
        self.start(self.loop).add_done_callback(self._restarted)

    def _restarted(self, fut: asyncio.Future) -> None:
        if (exc := fut.exception()) is not None:
            log.error("engine core %s failed to restart: %s", self.label, exc)
            self.on_restart_failed(exc)

    # ---- requests --------------------------------------------------------------------------------
    def submit(
        self,
        sequences: list[tuple[list[int], list[int]]],
        options: DecodingOptions,
        stream: bool,
        deadline: float | None,
        arrival: float,
        forced: tuple[int, ...] = (),
        resubmits: int = 1,
    ) -> InFlight:
        """Send a request; its events come on the returned handle's queue (``cancel`` it if its caller goes).
        ``forced``: a target language's token(s), forced before every input's prefix. ``resubmits``: how often
        it may go to another core when the one it is on dies before starting it."""
        rid = next(_request_ids)
        submit = Submit(rid, sequences, options.to_tuple(), stream, deadline, arrival, forced)
        req = InFlight(rid, len(sequences) * options.beam_size, len(sequences), submit, resubmits)
        self.take(req)
        return req

    def take(self, req: InFlight) -> None:
        """Send a request to this core: a new one, or one whose core died before starting it (the same message)."""
        if not self.state.up or self.conn is None:
            raise CoreUnavailable(
                f"model {self.spec.model!r}: engine core {self.spec.index} is not running; retry"
            )
        if not self.inflight:  # the silence the watchdog measures starts now, not when the core went idle
            self.heard_at = time.monotonic()
        self.inflight[req.id] = req
        self.rows += req.rows
        self._post(req.submit)

    def _fail(self, reqs: list[InFlight], why: str) -> None:
        message = f"model {self.spec.model!r}: {why}; retry"
        for req in reqs:
            req.events.put_nowait(Failed(req.id, CoreUnavailable.code, message))

    def _post(self, message) -> None:
        """Queue a message; those of this event-loop iteration (and of SUBMIT_HOLD_S, to a core decoding) go out in
        one pipe write: each write wakes the core's reader, and a wake-up per request costs more than batching."""
        if not self._outbox:
            if len(self.inflight) > 1:  # busy with another request: it reads this after its step anyway
                self.loop.call_later(SUBMIT_HOLD_S, self._flush)
            else:
                self.loop.call_soon(self._flush)
        self._outbox.append(message)

    def _flush(self) -> None:
        batch, self._outbox = self._outbox, []
        if self._wsock is None or not batch:
            return  # died meanwhile: _died failed the requests in flight
        self._writer.send(batch)

    def cancel(self, req: InFlight) -> bool:
        """False: the request is not (or no longer) on this core."""
        if not self._forget(req):
            return False
        if self.conn is not None:
            self._post(Cancel(req.id))
        return True

    def _forget(self, req: InFlight) -> bool:
        if self.inflight.pop(req.id, None) is None:
            return False
        self.rows -= req.rows
        return True

    # ---- shutdown --------------------------------------------------------------------------------
    def drain(self, grace_s: float) -> None:
        self.stopping = True
        if self._restart is not None:
            self._restart.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self.conn is not None:
            self._outbox.append(Drain(grace_s))  # after what was submitted before
            self._flush()

    def abort(self) -> None:
        if self.conn is not None:
            self._outbox.append(Abort())
            self._flush()

    async def wait_exited(self, timeout: float) -> None:
        if self.conn is None:
            return
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("engine core %s did not exit in %.0f s; killing it", self.label, timeout)
            if self.proc is not None:
                self.proc.kill()
            await asyncio.wait_for(self._exited.wait(), 10)

    def kill(self) -> None:
        """Tests and emergencies: SIGKILL the process (it is restarted unless stopping)."""
        if self.proc is not None:
            self.proc.kill()
