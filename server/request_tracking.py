"""The one place every call is counted and timed, whatever its door and transport.

Transport-neutral: a door wraps each call in ``track``; a domain error (``ServingError``) passes through
unchanged, counted under its code, to the transport's one mapping (gRPC: ``server/interceptors.py``;
HTTP: the aiohttp error middleware), which turns it into a status.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from server.errors import ServingError, clip_details
from server.metrics import Metrics
from server.refusals import RefusalLog
from server.repository import Repository

# The client's doing (or a retry-later): logged at WARNING at most, rate-limited.
CLIENT_CODES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED"})


class RequestTracker:
    """Counts a call by status code and times it; the one place request metrics are recorded for every API."""

    def __init__(self, metrics: Metrics, repo: Repository, refusals: RefusalLog):
        self.metrics, self.repo, self.refusals = metrics, repo, refusals

    def count(self, method: str, protocol: str, code: str) -> None:
        """A call that ended before a door read its model (a hang-up mid-body, say): counted without one."""
        self.metrics.requests.labels("", method, protocol, code).inc()

    def refused(self, method: str, protocol: str, code: str, message: str, kind: str = "") -> None:
        """A call refused before it reached a door (no token, a body or a connection that does not parse, a
        connection over the cap): counted without a model (none was read) and logged at WARNING at most,
        rate-limited, under ``kind`` (default: the code)."""
        self.count(method, protocol, code)
        self.refusals(kind or code, message)

    @contextlib.asynccontextmanager
    async def track(self, model: str, method: str, protocol: str = "grpc") -> AsyncIterator[None]:
        """Around a request: count and time it under the code it ends with (OK, the ServingError's code,
        CANCELLED when the client went away, INTERNAL for anything else); every exception goes on unchanged.
        It is recorded before the exception leaves: a client that scrapes right after its error finds it counted."""
        t0 = time.perf_counter()
        code = "OK"
        try:
            yield
        except ServingError as e:
            code = e.code
            if code in CLIENT_CODES:
                self.refusals(code, f"{method}: {clip_details(str(e))}")
            raise
        except (asyncio.CancelledError, ConnectionError):  # the client went away
            code = "CANCELLED"
            raise
        except Exception:
            code = "INTERNAL"
            raise
        finally:
            # Unknown names would explode label cardinality; a model unloaded meanwhile is no longer exported.
            label = model if model in self.repo.models else ""
            self.metrics.requests.labels(label, method, protocol, code).inc()
            self.metrics.request_duration.labels(label, method, protocol).observe(time.perf_counter() - t0)
