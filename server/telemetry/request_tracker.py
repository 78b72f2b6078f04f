"""The one place every call is counted and timed, whatever its door and transport.

Transport-neutral: a door wraps each call in ``track``; a domain error (``ServingError``) passes through
unchanged, counted under its code, to the transport's one mapping (gRPC: ``server/transport/grpc_interceptors.py``;
HTTP: the aiohttp error middleware), which turns it into a status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Container

from server.errors import ServingError, clip_details
from server.telemetry.metrics import Metrics
from server.telemetry.model_statistics import CALL, INFERENCE_METHODS, Call, ModelStatistics
from server.telemetry.refusal_log import RefusalLog

# The client's doing (or a retry-later): logged at WARNING at most, rate-limited.
CLIENT_CODES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED"})


class RequestTracker:
    """Counts a call by status code and times it; the one place request metrics are recorded for every API."""

    def __init__(self, metrics: Metrics, served: Callable[[], Container[str]], refusals: RefusalLog):
        # served(): the names of the models served now (a name outside it is recorded without its label)
        self.metrics, self.served, self.refusals = metrics, served, refusals
        self.statistics = ModelStatistics()  # per model version, for the KServe statistics extension

    def count(self, method: str, protocol: str, code: str) -> None:
        """A call that ended before a door read its model (a hang-up mid-body, say): counted without one."""
        self.metrics.requests.labels("", method, protocol, code).inc()

    def refused(self, method: str, protocol: str, code: str, message: str, kind: str = "") -> None:
        """A call refused before it reached a door (no token, a body or a connection that does not parse, a
        connection over the cap): counted without a model (none was read) and logged at WARNING at most,
        rate-limited, under ``kind`` (default: the code)."""
        self.count(method, protocol, code)
        self.refusals(kind or code, message)

    def track(self, model: str, method: str, protocol: str = "grpc") -> _Tracked:
        """Around a request (``async with``): count and time it under the code it ends with (OK, the ServingError's
        code, CANCELLED when the client went away, INTERNAL for anything else); every exception goes on unchanged.
        It is recorded before the exception leaves: a client that scrapes right after its error finds it counted."""
        return _Tracked(self, model, method, protocol)

    def record(self, model: str, method: str, protocol: str, code: str, seconds: float) -> None:
        # Unknown names would explode label cardinality; a model unloaded meanwhile is no longer exported.
        label = model if model in self.served() else ""
        count, duration = self.metrics.request_series(label, method, protocol, code)
        count.inc()
        duration.observe(seconds)


class _Tracked:
    """``RequestTracker.track``'s context: a class, not a generator-based context manager, as it wraps every call."""

    __slots__ = ("tracker", "model", "method", "protocol", "t0", "call", "token")

    def __init__(self, tracker: RequestTracker, model: str, method: str, protocol: str):
        self.tracker, self.model, self.method, self.protocol = tracker, model, method, protocol
        self.call = self.token = None

    async def __aenter__(self) -> None:
        self.t0 = time.perf_counter()
        if self.method in INFERENCE_METHODS:  # the model API notes its version and phases on it
            self.call = Call(time.perf_counter_ns())
            self.token = CALL.set(self.call)

    async def __aexit__(self, kind, exc, tb) -> bool:
        if kind is None:
            code = "OK"
        elif issubclass(kind, ServingError):
            code = exc.code
            if code in CLIENT_CODES:
                self.tracker.refusals(code, f"{self.method}: {clip_details(str(exc))}")
        elif issubclass(kind, (asyncio.CancelledError, ConnectionError)):  # the client went away
            code = "CANCELLED"
        else:
            code = "INTERNAL"
        self.tracker.record(self.model, self.method, self.protocol, code, time.perf_counter() - self.t0)
        if self.call is not None:
            self.tracker.statistics.record(self.call, code == "OK")
            try:
                CALL.reset(self.token)
            except ValueError:  # a stream's generator closed from another context: that one ends with it
                pass
        return False  # the exception, if any, goes on unchanged
