"""An engine core: one model's scheduler and ONNX Runtime engine in a process of its own.

The front end (the gRPC event loop, tokenization, validation) and the decode loop no longer share a
GIL, and several cores of one model decode in parallel (Triton's ``instance_group.count``). They
talk over a pipe with small pickled messages: token ids in, token ids and stats out, one message
per decode step at most (as vLLM's ``EngineCore`` behind ``AsyncLLM``).

The messages both ways are ``server/core_wire/messages.py``'s; the events and stats a ``Report``
carries are ``server/core_wire/events.py``'s.

A core never outlives the front end: it asks the kernel for SIGKILL when its parent dies
(``PR_SET_PDEATHSIG``) and exits on EOF of its pipe, whichever comes first.

This module imports neither grpc nor asyncio nor prometheus_client: a core is the engine and its
scheduler, nothing else.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import threading
from multiprocessing.connection import Connection

from contract.decoding import DecodingOptions
from engine import Runner, Sequence
from server.core_process.scheduler import Scheduler
from server.core_wire.events import Failed, Stats
from server.core_wire.messages import Abort, Cancel, CoreSpec, Drain, LoadFailed, Ready, Report, Submit
from server.core_wire.pipe import dumps
from server.errors import ServingError

log = logging.getLogger("s2s.core")


def _die_with_parent() -> None:
    """SIGKILL this process when the front end dies, however it dies (Linux; elsewhere pipe EOF does it)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except OSError:
            pass


def main(conn: Connection, spec: CoreSpec, terminated_early=lambda: False) -> None:
    """The child process's entry point (``server/core_process/__main__.py``, which set the signals first);
    ``terminated_early()`` says whether a SIGTERM came while it loaded."""
    _die_with_parent()
    # The step loop, the encoder thread and the pipe reader share this process's GIL. Python hands it
    # over every 5 ms by default, longer than a decode step; at 0.5 ms a thread coming back from ONNX Runtime
    # waits less (docs/BENCHMARKS.md#design-choices).
    sys.setswitchinterval(0.0005)
    logging.basicConfig(
        level=spec.log_level.upper(),
        format=f"%(asctime)s %(levelname)s %(name)s[{spec.model}#{spec.index}]: %(message)s",
    )
    try:
        engine = Runner(spec.folder, spec.engine)
    except Exception as e:  # BundleError names the file; anything else is reported, not raised into the void
        conn.send(LoadFailed(str(e)))
        return
    lock = threading.Lock()  # the step loop, the encoder thread and this thread all write to the pipe

    def send(message) -> None:
        data = dumps(message)  # outside the lock
        with lock:
            conn.send_bytes(data)

    sched = Scheduler(spec.model, engine, spec.scheduler, lambda events, stats: send(Report(events, stats)))
    sched.start()
    screen = f"{'on' if engine.screen is not None else 'off'} ({engine.screen_why})"
    send(Ready(engine.provider, engine.io_binding, os.getpid(), screen))
    drainer: threading.Thread | None = None

    def start_drain(grace: float) -> None:
        nonlocal drainer
        if drainer is not None:
            return

        def drain() -> None:
            sched.drain(grace)
            with lock:
                conn.close()
            os._exit(0)

        drainer = threading.Thread(target=drain, name="drain", daemon=True)
        drainer.start()

    # A SIGTERM of its own (systemd's control-group kill, multiprocessing's terminate() at exit): finish the
    # queued work within the grace period, then exit, as the front end does.
    signal.signal(signal.SIGTERM, lambda *_: start_drain(spec.grace_s))
    if terminated_early():
        start_drain(spec.grace_s)

    def handle(msg) -> None:
        _handle(msg, sched, send, start_drain)

    while True:
        try:
            batch = conn.recv()  # the messages of one front-end event-loop iteration
        except (EOFError, OSError):  # the front end is gone: nobody to answer
            os._exit(0)
        for msg in batch if isinstance(batch, list) else [batch]:
            handle(msg)


def _handle(msg, sched: Scheduler, send, start_drain) -> None:
    """One front-end message."""
    if isinstance(msg, Submit):
        o = DecodingOptions.from_tuple(msg.options)
        forced = list(msg.forced)
        budget = max(1, o.max_new_tokens - len(forced)) if forced else o.max_new_tokens
        seqs = [
            Sequence(ids, budget, stream=msg.stream, options=o, prefix=forced + prefix)
            for ids, prefix in msg.sequences
        ]
        try:
            sched.submit(msg.request, seqs, msg.deadline, msg.arrival)
        except ServingError as e:
            send(Report([Failed(msg.request, e.code, str(e))], Stats()))
    elif isinstance(msg, Cancel):
        sched.cancel(msg.request)
    elif isinstance(msg, Drain):
        start_drain(msg.grace_s)
    elif isinstance(msg, Abort):
        sched.abort()
