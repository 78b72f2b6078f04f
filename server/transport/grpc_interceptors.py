"""Cross-cutting gRPC concerns, applied to every call around the servicers: request bodies that do not
parse, bearer-token authentication, and the one mapping of domain errors to gRPC statuses.

Bodies and tokens are the client's fault, so both end in a status the client can act on
(INVALID_ARGUMENT, UNAUTHENTICATED), a counted request and at most a rate-limited WARNING: never a
traceback, which anyone could otherwise write to the log once per malformed call. A ``ServingError``
raised by a servicer (the request tracker has counted it already) leaves as the status its ``code``
names, with its message.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc

from server.errors import ServingError, clip_details
from server.telemetry.request_tracker import RequestTracker

log = logging.getLogger("s2s.server")

# Probes (Kubernetes grpc probes, Docker HEALTHCHECK) cannot send credentials.
UNAUTHENTICATED_METHODS = ("/grpc.health.v1.Health/",)
AUTH_HELP = "missing or wrong bearer token: send one metadata entry 'authorization: Bearer <token>'"


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    """The call's gRPC deadline as a time.monotonic() deadline (None: the client set none)."""
    left = context.time_remaining()
    return None if left is None else time.monotonic() + left


async def abort(context: grpc.aio.ServicerContext, err: ServingError) -> None:
    """The one mapping of a domain error to a gRPC status: its code, its message (clipped)."""
    await context.abort(grpc.StatusCode[err.code], clip_details(str(err)))


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
    def __init__(self, token: str | None, tracker: RequestTracker):
        self._expected = f"Bearer {token}".encode() if token else None
        self.tracker = tracker
        self._guarded: dict[str, grpc.RpcMethodHandler] = {}  # per registered method, built once

    def _authorized(self, metadata) -> bool:
        given = [v for k, v in (metadata or ()) if k == "authorization"]
        if len(given) != 1:  # none, or several: which one counts would be a guess (and a bypass)
            return False
        got = given[0].encode() if isinstance(given[0], str) else given[0]
        return hmac.compare_digest(got, self._expected)

    def _refuse(self, method: str, code: grpc.StatusCode, message: str) -> None:
        self.tracker.refused(method.rsplit("/", 1)[-1], "grpc", code.name, f"{method}: {message}")

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        handler = await continuation(details)
        method = details.method
        if (
            self._expected is not None
            and not method.startswith(UNAUTHENTICATED_METHODS)
            and not self._authorized(details.invocation_metadata)
        ):
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
                try:
                    result = inner(request, context)
                    return await result if inspect.isawaitable(result) else result
                except ServingError as e:
                    await abort(context, e)
        elif kind == "unary_stream":

            async def behavior(request, context):
                if isinstance(request, Undecodable):
                    await refuse(request, context)
                try:
                    async for response in _responses(inner(request, context)):
                        yield response
                except ServingError as e:
                    await abort(context, e)
        elif kind == "stream_unary":

            async def behavior(requests, context):
                try:
                    result = inner(checked(requests, context), context)
                    return await result if inspect.isawaitable(result) else result
                except ServingError as e:
                    await abort(context, e)
        else:

            async def behavior(requests, context):
                try:
                    async for response in _responses(inner(checked(requests, context), context)):
                        yield response
                except ServingError as e:
                    await abort(context, e)

        return _FACTORIES[kind](behavior, _safe(handler.request_deserializer), handler.response_serializer)
