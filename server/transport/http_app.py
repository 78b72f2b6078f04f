"""The HTTP port: one aiohttp server in the gRPC server's process and event loop, with the doors' routes.

aiohttp, not Starlette/uvicorn: its server runs as a plain coroutine on an event loop we already
own (``web.AppRunner`` + ``TCPSite``), so gRPC and HTTP share the loop, the model API, the limits
and the metrics with no second server process or thread, and one SIGTERM drains both.

The routes come from the doors (``server/app.py`` gathers them: KServe v2 REST, the repository API,
LibreTranslate, the playground, the OpenAPI document); this module knows none of them. It owns what
every route shares: the one mapping of domain errors to statuses and ``{"error": "..."}``
(``server.errors.HTTP_STATUS``), auth (``http_auth.py``), request-size limits, TLS, bodies read within a
time limit and parsed safely (``http_body.py``), the connection cap and header timeout
(``http_connections.py``) and CORS (``http_cors.py``). A client that hangs up cancels its handler
(aiohttp's ``handler_cancellation``), and so its request.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable

from aiohttp import web

from server.config import ServerConfig
from server.errors import HTTP_STATUS, ServingError, clip_details
from server.telemetry.request_tracker import RequestTracker
from server.transport.http_auth import BearerAuth
from server.transport.http_body import READ_TIMEOUT_S, json_response
from server.transport.http_connections import Connections, ProtocolLog
from server.transport.http_cors import cors_middleware, parse_origins

log = logging.getLogger("s2s.http")

MAX_BYTES = web.AppKey("max_bytes", int)
# Paths anyone may call with auth on: probes, the page itself (it asks for the token) and the API description.
OPEN_PATHS = ("/v2/health/", "/openapi.json")
OPEN_EXACT = ("/", "/playground.js", "/playground.css")


def error_response(code: str, message: str) -> web.Response:
    return json_response({"error": clip_details(message)}, status=HTTP_STATUS.get(code, 500))


# LibreTranslate clients send the key as the ``api_key`` field: that door checks it or the header itself.
SELF_AUTH_PATHS = ("/translate", "/detect", "/languages")


def _auth_middleware(bearer: BearerAuth):
    @web.middleware
    async def auth(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        path = request.path
        if (
            bearer.expected is None
            or path in OPEN_EXACT
            or path in SELF_AUTH_PATHS
            or path.startswith(OPEN_PATHS)
        ):
            return await handler(request)
        bearer.check(request)
        return await handler(request)

    return auth


def _guard_middleware(connections: Connections):
    """Marks a connection busy while its request is in a handler (its header timer stops) and counts the
    requests in flight, which the drain waits for."""

    @web.middleware
    async def guard(request: web.Request, handler):
        connections.started(request.protocol)
        try:
            return await handler(request)
        finally:
            connections.finished(request.protocol)

    return guard


def _errors_middleware(tracker: RequestTracker):
    @web.middleware
    async def errors(request: web.Request, handler):
        """Every failure as {"error": ...} with its status: never an HTML page, never a traceback."""
        try:
            return await handler(request)
        except ServingError as e:  # the one HTTP mapping of a domain error: its code's status, its message
            return error_response(e.code, str(e))
        except web.HTTPException as e:  # aiohttp's own: 404 route, 405 method, 413 body too large
            if e.status == 413:
                return json_response(
                    {
                        "error": f"the request body is over the limit of {request.app[MAX_BYTES]} "
                        "bytes (--max-message-bytes)"
                    },
                    status=413,
                )
            if e.status == 404:
                return json_response(
                    {"error": f"no such path: {request.path[:80]} (see /openapi.json)"}, status=404
                )
            if e.status == 405:
                return json_response(
                    {"error": f"{request.method} is not allowed on {request.path[:80]}"}, status=405
                )
            return json_response({"error": e.reason}, status=e.status)
        except (
            ConnectionError
        ) as e:  # the client hung up mid-body: nobody to answer, a line in the log at most
            tracker.refusals(
                "HANGUP",
                f"HTTP {request.method} {request.path[:80]}: the client hung up ({type(e).__name__})",
            )
            return web.Response(status=499)
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path[:80])
            return error_response("INTERNAL", "internal error; see server log")

    return errors


class HttpServer:
    def __init__(self, runner: web.AppRunner, listener: asyncio.Server, connections: Connections, port: int):
        self.runner, self.listener, self.connections, self.port = runner, listener, connections, port

    async def stop(self, grace_s: float, others: asyncio.Future | None = None) -> None:
        """The drain: keep accepting (new requests get 503 "shutting down" from the model API, as gRPC
        answers UNAVAILABLE) until the requests in flight, here and in ``others`` (gRPC's and the engine
        cores' drain), are answered or the grace period ends; then close the port and every connection."""

        async def quiet() -> None:
            if others is not None:
                await asyncio.wait([others])  # waits without cancelling it
            await self.connections.idle.wait()

        try:
            await asyncio.wait_for(quiet(), grace_s)
        except asyncio.TimeoutError:
            pass
        self.listener.close()
        await self.runner.cleanup()
        await self.listener.wait_closed()


async def start_http(
    config: ServerConfig, tracker: RequestTracker, auth: BearerAuth, routes: list[web.RouteDef]
) -> HttpServer:
    """The HTTP port with the doors' ``routes`` behind the app's middlewares (connection guard, CORS, the
    one error mapping, auth)."""
    ssl_context = None
    if config.tls_cert:
        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_context.load_cert_chain(config.tls_cert, config.tls_key)
        if config.tls_client_ca:
            ssl_context.load_verify_locations(config.tls_client_ca)
            ssl_context.verify_mode = ssl.CERT_REQUIRED
    # With TLS the guard counts a connection once its handshake is done (server/transport/http_connections.py).
    connections = Connections(
        config.http_max_connections,
        config.http_read_timeout_s,
        tracker,
        config.http_max_connections_per_peer,
        ssl_context,
        config.tls_handshake_timeout_s,
    )
    middlewares = [_guard_middleware(connections)]
    origins = parse_origins(config.cors_allow_origin)
    if origins:
        middlewares.append(cors_middleware(origins))
    middlewares += [_errors_middleware(tracker), _auth_middleware(auth)]
    app = web.Application(client_max_size=config.max_message_bytes, middlewares=middlewares)
    app[MAX_BYTES] = config.max_message_bytes
    app[READ_TIMEOUT_S] = config.http_read_timeout_s or None
    app.add_routes(routes)
    # handler_cancellation: a client that hangs up cancels its handler, so its rows leave the batch at once
    # (as a cancelled gRPC call's do) instead of decoding to the end for nobody.
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=1.0,
        handle_signals=False,
        handler_cancellation=True,
        logger=ProtocolLog(tracker),
    )
    await runner.setup()
    connections.handlers = runner.server  # aiohttp's factory of connection handlers, which the guards wrap
    try:
        tls = (
            {"ssl": ssl_context, "ssl_handshake_timeout": config.tls_handshake_timeout_s}
            if ssl_context
            else {}
        )
        listener = await asyncio.get_running_loop().create_server(
            connections, config.host, config.http_port, backlog=128, reuse_address=True, **tls
        )
    except BaseException:
        await runner.cleanup()
        raise
    port = listener.sockets[0].getsockname()[1]
    return HttpServer(runner, listener, connections, port)
