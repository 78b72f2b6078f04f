"""The HTTP front doors on one aiohttp server, in the gRPC server's process and event loop.

aiohttp, not Starlette/uvicorn: its server runs as a plain coroutine on an event loop we already
own (``web.AppRunner`` + ``TCPSite``), so gRPC and HTTP share the loop, the model API, the limits
and the metrics with no second server process or thread, and one SIGTERM drains both.

Routes: KServe v2 REST (``server/http_kserve.py``), the LibreTranslate API
(``server/http_libretranslate.py``), the playground page at ``/`` (``server/playground/``) and the
OpenAPI document at ``/openapi.json`` (``server/openapi.py``). Each door is a thin map onto the model
API; this module adds what they share: errors as ``{"error": "..."}`` with the status that the
domain error's code maps to (``server.errors.HTTP_STATUS``), bearer-token auth, request-size
limits, deadlines (the ``X-Timeout-Seconds`` header), metrics (``protocol="http"``) and TLS; and,
from modules of their own, bodies read within a time limit and parsed safely (``server/http_body.py``),
the connection cap and header timeout (``server/http_guard.py``) and CORS (``server/http_cors.py``).
A client that hangs up cancels its handler (aiohttp's ``handler_cancellation``), and so its request.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable

import grpc
from aiohttp import web

from server.calls import RequestTracker
from server.config import ServerConfig
from server.errors import HTTP_STATUS, InvalidInput, ServingError, clip_details
from server.http_body import READ_TIMEOUT_S
from server.http_cors import cors_middleware, parse_origins
from server.http_guard import Connections, ProtocolLog
from server.interceptors import RefusalLog
from server.metrics import Metrics
from server.model_control import ModelControl
from server.repository import Repository

log = logging.getLogger("s2s.http")

TIMEOUT_HEADER = "X-Timeout-Seconds"
MAX_BYTES = web.AppKey("max_bytes", int)
# Paths anyone may call with auth on: probes, the page itself (it asks for the token) and the API description.
OPEN_PATHS = ("/v2/health/", "/openapi.json")
OPEN_EXACT = ("/", "/playground.js", "/playground.css")


class HttpError(Exception):
    """Ends a request with ``{"error": message}`` and the HTTP status of a gRPC status name."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message

    @property
    def status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)


class CallContext:
    """What ``RequestTracker.track`` needs of a call, for an HTTP request: an abort that raises the HTTP
    error (as gRPC's context.abort raises its own). Doors read the deadline with ``deadline_of`` inside
    the tracked block, so a malformed header is counted like any other refusal."""

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()) -> None:
        raise HttpError(code.name, details)

    def code(self):
        return None


def deadline_of(request: web.Request) -> float | None:
    """The X-Timeout-Seconds header as a time.monotonic() deadline; InvalidInput if it is malformed (a domain
    error, so the tracker counts it as INVALID_ARGUMENT)."""
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise InvalidInput(f"header {TIMEOUT_HEADER} must be a number of seconds, not {raw[:40]!r}") from None
    if not 0 < seconds < 1e9:  # NaN, inf and 1e999 too: a deadline is a time a timer can be set for
        raise InvalidInput(f"header {TIMEOUT_HEADER} must be a positive number of seconds, not {raw[:40]!r}")
    return time.monotonic() + seconds


def json_response(data, status: int = 200, **kw) -> web.Response:
    """JSON as UTF-8 text (not \\u escapes): translations are read by people and by clients alike."""
    return web.json_response(data, status=status, dumps=_dumps, **kw)


def _dumps(data) -> str:
    return json.dumps(data, ensure_ascii=False)


def error_response(code: str, message: str) -> web.Response:
    return json_response({"error": clip_details(message)}, status=HTTP_STATUS.get(code, 500))


class Doors:
    """What every HTTP front door gets: the model API, the shared request tracker, the auth check."""

    def __init__(self, repo: Repository, tracker: RequestTracker, config: ServerConfig, metrics: Metrics,
                 refusals: RefusalLog, control: ModelControl | None = None):
        self.repo, self.tracker, self.config, self.metrics, self.refusals = repo, tracker, config, metrics, refusals
        self.control = control or ModelControl(repo)
        self.expected = f"Bearer {config.auth_token}".encode() if config.auth_token else None

    def track(self, request: web.Request, model: str, method: str):
        return self.tracker.track(CallContext(), model, method, protocol="http")

    def check_auth(self, request: web.Request, api_key: str | None = None) -> None:
        """Exactly one 'Authorization: Bearer <token>' header (or, for LibreTranslate, api_key = the token)."""
        if self.expected is None:
            return
        given = request.headers.getall("Authorization", [])
        # surrogatepass: header bytes that are not UTF-8 arrive as surrogates (aiohttp decodes with
        # surrogateescape); they are a wrong token, not an encoding error.
        if len(given) == 1 and hmac.compare_digest(given[0].encode("utf-8", "surrogatepass"), self.expected):
            return
        if not given and api_key is not None and hmac.compare_digest(f"Bearer {api_key}".encode("utf-8", "surrogatepass"),
                                                                     self.expected):
            return
        path = request.path
        self.metrics.requests.labels("", path.rsplit("/", 1)[-1] or path, "http", "UNAUTHENTICATED").inc()
        self.refusals("UNAUTHENTICATED", f"HTTP {request.method} {path[:80]}: no valid bearer token")
        raise HttpError("UNAUTHENTICATED", "missing or wrong bearer token: send one header 'Authorization: Bearer "
                                           "<token>' (LibreTranslate clients: api_key)")


# LibreTranslate clients send the key as the ``api_key`` field: that door checks it or the header itself.
SELF_AUTH_PATHS = ("/translate", "/detect", "/languages")


def _auth_middleware(doors: Doors):
    @web.middleware
    async def auth(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
        path = request.path
        if doors.expected is None or path in OPEN_EXACT or path in SELF_AUTH_PATHS or path.startswith(OPEN_PATHS):
            return await handler(request)
        doors.check_auth(request)
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


def _errors_middleware(refusals: RefusalLog):
    @web.middleware
    async def errors(request: web.Request, handler):
        """Every failure as {"error": ...} with its status: never an HTML page, never a traceback."""
        try:
            return await handler(request)
        except HttpError as e:
            return error_response(e.code, e.message)
        except ServingError as e:  # raised before a request is tracked (a body that does not parse, say)
            return error_response(e.code, str(e))
        except web.HTTPException as e:  # aiohttp's own: 404 route, 405 method, 413 body too large
            if e.status == 413:
                return json_response({"error": f"the request body is over the limit of {request.app[MAX_BYTES]} "
                                               "bytes (--max-message-bytes)"}, status=413)
            if e.status == 404:
                return json_response({"error": f"no such path: {request.path[:80]} (see /openapi.json)"}, status=404)
            if e.status == 405:
                return json_response({"error": f"{request.method} is not allowed on {request.path[:80]}"}, status=405)
            return json_response({"error": e.reason}, status=e.status)
        except ConnectionError as e:  # the client hung up mid-body: nobody to answer, a line in the log at most
            refusals("HANGUP", f"HTTP {request.method} {request.path[:80]}: the client hung up ({type(e).__name__})")
            return web.Response(status=499)
        except Exception:
            log.exception("HTTP %s %s failed", request.method, request.path[:80])
            return error_response("INTERNAL", "internal error; see server log")
    return errors


class HttpServer:
    def __init__(self, runner: web.AppRunner, listener: asyncio.Server, connections: Connections, port: int):
        self.runner, self.listener, self.connections, self.port = runner, listener, connections, port

    async def stop(self, grace_s: float) -> None:
        """The drain: keep accepting (new requests get 503 "shutting down" from the model API, as gRPC
        answers UNAVAILABLE) until the requests in flight are answered or the grace period ends; then
        close the port and every connection."""
        try:
            await asyncio.wait_for(self.connections.idle.wait(), grace_s)
        except asyncio.TimeoutError:
            pass
        self.listener.close()
        await self.runner.cleanup()
        await self.listener.wait_closed()


async def start_http(config: ServerConfig, repo: Repository, tracker: RequestTracker, metrics: Metrics,
                     refusals: RefusalLog, control: ModelControl | None = None) -> HttpServer:
    from server import http_kserve, http_libretranslate, http_repository, openapi, playground

    doors = Doors(repo, tracker, config, metrics, refusals, control)
    connections = Connections(config.http_max_connections, config.http_read_timeout_s, refusals, metrics)
    middlewares = [_guard_middleware(connections)]
    origins = parse_origins(config.cors_allow_origin)
    if origins:
        middlewares.append(cors_middleware(origins))
    middlewares += [_errors_middleware(refusals), _auth_middleware(doors)]
    app = web.Application(client_max_size=config.max_message_bytes, middlewares=middlewares)
    app[MAX_BYTES] = config.max_message_bytes
    app[READ_TIMEOUT_S] = config.http_read_timeout_s or None
    app.add_routes(http_kserve.routes(doors))
    app.add_routes(http_repository.routes(doors))
    app.add_routes(http_libretranslate.routes(doors))
    app.add_routes(playground.routes(doors))
    app.add_routes(openapi.routes(doors))
    # handler_cancellation: a client that hangs up cancels its handler, so its rows leave the batch at once
    # (as a cancelled gRPC call's do) instead of decoding to the end for nobody.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, handle_signals=False,
                           handler_cancellation=True, logger=ProtocolLog(refusals, metrics))
    await runner.setup()
    connections.handlers = runner.server  # aiohttp's factory of connection handlers, which the guards wrap
    ssl_context = None
    if config.tls_cert:
        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_context.load_cert_chain(config.tls_cert, config.tls_key)
        if config.tls_client_ca:
            ssl_context.load_verify_locations(config.tls_client_ca)
            ssl_context.verify_mode = ssl.CERT_REQUIRED
    try:
        listener = await asyncio.get_running_loop().create_server(
            connections, config.host, config.http_port, ssl=ssl_context, backlog=128, reuse_address=True)
    except BaseException:
        await runner.cleanup()
        raise
    port = listener.sockets[0].getsockname()[1]
    return HttpServer(runner, listener, connections, port)

