"""Cross-cutting gRPC concerns, applied to every call before a servicer sees it: request bodies that
do not parse, and bearer-token authentication.

Both are the client's fault, so both end in a status the client can act on (INVALID_ARGUMENT,
UNAUTHENTICATED), a counted request and at most a rate-limited WARNING: never a traceback, which
anyone could otherwise write to the log once per malformed call.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc

from server.metrics import Metrics

log = logging.getLogger("s2s.server")

# Probes (Kubernetes grpc probes, Docker HEALTHCHECK) cannot send credentials.
UNAUTHENTICATED_METHODS = ("/grpc.health.v1.Health/",)
AUTH_HELP = "missing or wrong bearer token: send one metadata entry 'authorization: Bearer <token>'"


class RefusalLog:
    """WARNING lines for refused calls, at most one per kind every ``every_s`` seconds (with a count of
    those not written), so a flood of bad calls costs the log a line every few seconds."""

    def __init__(self, every_s: float = 10.0):
        self.every_s = every_s
        self.last: dict[str, float] = {}
        self.skipped: dict[str, int] = {}

    def __call__(self, kind: str, message: str) -> None:
        now = time.monotonic()
        if now - self.last.get(kind, -self.every_s) < self.every_s:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
            return
        skipped = self.skipped.pop(kind, 0)
        self.last[kind] = now
        log.warning("refused (%s): %s%s", kind, message, f" [{skipped} more like it not logged]" if skipped else "")


class Undecodable:
    """Stands in for a request body protobuf could not parse (invalid UTF-8 in a string, garbage)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason

    def message(self, method: str) -> str:
        return f"the request body is not a valid message for {method} ({self.reason})"


def _safe(deserializer: Callable | None) -> Callable | None:
    if deserializer is None:
        return None

    def parse(raw: bytes):
        try:
            return deserializer(raw)
        except Exception as e:  # protobuf's DecodeError, or anything a parser raises on hostile bytes
            return Undecodable(type(e).__name__ if not str(e) else str(e)[:200])

    return parse


def _kind(handler: grpc.RpcMethodHandler) -> str:
    if handler.unary_unary:
        return "unary_unary"
    if handler.unary_stream:
        return "unary_stream"
    if handler.stream_unary:
        return "stream_unary"
    return "stream_stream"


_FACTORIES = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}


async def _responses(result) -> AsyncIterator:
    """A streaming behavior's answers, whether it is an async generator or a coroutine using context.write."""
    if hasattr(result, "__aiter__"):
        async for response in result:
            yield response
    elif inspect.isawaitable(result):
        await result
    else:
        for response in result:
            yield response


class GuardInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str | None, metrics: Metrics, refusals: RefusalLog):
        self._expected = f"Bearer {token}".encode() if token else None
        self.metrics, self.refusals = metrics, refusals
        self._guarded: dict[str, grpc.RpcMethodHandler] = {}  # per registered method, built once

    def _authorized(self, metadata) -> bool:
        given = [v for k, v in (metadata or ()) if k == "authorization"]
        if len(given) != 1:  # none, or several: which one counts would be a guess (and a bypass)
            return False
        got = given[0].encode() if isinstance(given[0], str) else given[0]
        return hmac.compare_digest(got, self._expected)

    def _refuse(self, method: str, code: grpc.StatusCode, message: str) -> None:
        self.metrics.requests.labels("", method.rsplit("/", 1)[-1], "grpc", code.name).inc()
        self.refusals(code.name, f"{method}: {message}")

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        method = details.method
        if self._expected is not None and not method.startswith(UNAUTHENTICATED_METHODS) \
                and not self._authorized(details.invocation_metadata):
            # Unknown methods too: without a token nobody learns which methods exist.
            return self._deny(method, handler)
        if handler is None:
            return None
        guarded = self._guarded.get(method)
        if guarded is None:
            guarded = self._guarded[method] = self._guard(method, handler)
        return guarded

    def _deny(self, method: str, handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
        async def abort(context) -> None:
            self._refuse(method, grpc.StatusCode.UNAUTHENTICATED, "no valid bearer token")
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, AUTH_HELP)

        async def unary(request, context):
            await abort(context)

        async def stream(request, context):
            await abort(context)
            if False:  # pragma: no cover  (an async generator, as grpc.aio requires of streaming handlers)
                yield

        kind = _kind(handler) if handler is not None else "stream_stream"  # unknown: fits any call shape
        behavior = unary if kind.endswith("unary") else stream
        # No deserializer: the body is never parsed for a caller without a token.
        return _FACTORIES[kind](behavior, None, handler.response_serializer if handler else None)

    def _guard(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        kind = _kind(handler)
        inner = getattr(handler, kind)

        async def refuse(bad: Undecodable, context) -> None:
            message = bad.message(method)
            self._refuse(method, grpc.StatusCode.INVALID_ARGUMENT, message)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, message)

        async def checked(requests, context) -> AsyncIterator:
            async for request in requests:
                if isinstance(request, Undecodable):
                    await refuse(request, context)
                yield request

        if kind == "unary_unary":
            async def behavior(request, context):
                if isinstance(request, Undecodable):
                    await refuse(request, context)
                result = inner(request, context)
                return await result if inspect.isawaitable(result) else result
        elif kind == "unary_stream":
            async def behavior(request, context):
                if isinstance(request, Undecodable):
                    await refuse(request, context)
                async for response in _responses(inner(request, context)):
                    yield response
        elif kind == "stream_unary":
            async def behavior(requests, context):
                result = inner(checked(requests, context), context)
                return await result if inspect.isawaitable(result) else result
        else:
            async def behavior(requests, context):
                async for response in _responses(inner(checked(requests, context), context)):
                    yield response

        return _FACTORIES[kind](behavior, _safe(handler.request_deserializer), handler.response_serializer)
