"""Cross-cutting gRPC concerns: bearer-token authentication."""

from __future__ import annotations

import hmac

import grpc

# Probes (Kubernetes grpc probes, Docker HEALTHCHECK) cannot send credentials.
UNAUTHENTICATED_METHODS = ("/grpc.health.v1.Health/",)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str):
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(self, continuation, details: grpc.HandlerCallDetails):
        if details.method.startswith(UNAUTHENTICATED_METHODS):
            return await continuation(details)
        got = dict(details.invocation_metadata or ()).get("authorization", "")
        if hmac.compare_digest(got.encode() if isinstance(got, str) else got, self._expected):
            return await continuation(details)
        return self._deny(await continuation(details))

    @staticmethod
    def _deny(handler: grpc.RpcMethodHandler | None):
        async def abort(request, context):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token: send metadata 'authorization: Bearer <token>'")

        async def abort_stream(request, context):
            await abort(request, context)
            yield  # pragma: no cover  (makes this an async generator for streaming handlers)

        if handler is None:
            return None
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(abort, handler.request_deserializer, handler.response_serializer)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(abort_stream, handler.request_deserializer, handler.response_serializer)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(lambda it, ctx: abort(None, ctx), handler.request_deserializer, handler.response_serializer)
        return grpc.stream_stream_rpc_method_handler(lambda it, ctx: abort_stream(None, ctx), handler.request_deserializer, handler.response_serializer)
