"""What every front door shares around a call: the deadline, the one place request metrics are
recorded, and the one mapping of domain errors (``ServingError.code``) to statuses."""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc

from server.errors import ServingError, clip_details
from server.interceptors import RefusalLog
from server.metrics import Metrics
from server.repository import Repository


# The client's doing (or a retry-later): logged at WARNING at most, rate-limited.
CLIENT_CODES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED"})


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    left = context.time_remaining()
    return None if left is None else time.monotonic() + left


class RequestTracker:
    """Counts a call by status code and times it; the one place request metrics are recorded for every API."""

    def __init__(self, metrics: Metrics, repo: Repository, refusals: RefusalLog):
        self.metrics, self.repo, self.refusals = metrics, repo, refusals

    @contextlib.asynccontextmanager
    async def track(self, context: grpc.aio.ServicerContext, model: str, method: str, protocol: str = "grpc"):
        """Around a request: count and time it; a ServingError becomes ``context.abort(status, message)`` (the HTTP
        front door passes a context whose abort raises its HTTP error)."""
        t0 = time.perf_counter()
        code = "OK"
        recorded = False

        def record() -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                # Unknown names would explode label cardinality; a model unloaded meanwhile is no longer exported.
                label = model if model in self.repo.models else ""
                self.metrics.requests.labels(label, method, protocol, code).inc()
                self.metrics.request_duration.labels(label, method, protocol).observe(time.perf_counter() - t0)

        try:
            yield
        except ServingError as e:
            code = e.code
            record()  # before the status goes out: a client that scrapes right after its error finds it counted
            details = clip_details(str(e))
            if code in CLIENT_CODES:
                self.refusals(code, f"{method}: {details}")
            await context.abort(grpc.StatusCode[e.code], details)
        except (asyncio.CancelledError, ConnectionError):  # the client went away (an HTTP hang-up mid-body)
            code = "CANCELLED"
            raise
        except grpc.aio.AbortError:
            code = context.code().name if context.code() else "UNKNOWN"
            raise
        except Exception:
            code = "INTERNAL"
            raise
        finally:
            record()
