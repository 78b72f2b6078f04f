"""The HTTP front doors on one aiohttp server, in the gRPC server's process and event loop.

aiohttp, not Starlette/uvicorn: its server runs as a plain coroutine on an event loop we already
own (``web.AppRunner`` + ``TCPSite``), so gRPC and HTTP share the loop, the model API, the limits
and the metrics with no second server process or thread, and one SIGTERM drains both.

Routes: KServe v2 REST (``server/http_kserve.py``), the LibreTranslate API
(``server/http_libretranslate.py``), the playground page at ``/`` (``server/playground/``) and the
OpenAPI document at ``/openapi.json`` (``server/openapi.py``). Each door is a thin map onto the model
API; this module adds what they share: errors as ``{"error": "..."}`` with the status that the
domain error's code maps to (``server.errors.HTTP_STATUS``), bearer-token auth, request-size
limits, deadlines (the ``X-Timeout-Seconds`` header), metrics (``protocol="http"``) and TLS.
"""

from __future__ import annotations

import hmac
import json
import logging
import ssl
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from server.config import ServerConfig
from server.errors import HTTP_STATUS, InvalidInput, ServingError, clip_details
from server.metrics import Metrics
from server.model_control import ModelControl
from server.refusals import RefusalLog
from server.repository import Repository
from server.request_tracking import RequestTracker

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


def deadline_of(request: web.Request) -> float | None:
    """The X-Timeout-Seconds header as a time.monotonic() deadline; HttpError (400) if it is malformed."""
    raw = request.headers.get(TIMEOUT_HEADER)
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise HttpError("INVALID_ARGUMENT", f"header {TIMEOUT_HEADER} must be a number of seconds, not {raw[:40]!r}") from None
    if not seconds > 0:
        raise HttpError("INVALID_ARGUMENT", f"header {TIMEOUT_HEADER} must be positive, not {raw[:40]!r}")
    return time.monotonic() + seconds


def json_response(data, status: int = 200, **kw) -> web.Response:
    """JSON as UTF-8 text (not \\u escapes): translations are read by people and by clients alike."""
    return web.json_response(data, status=status, dumps=_dumps, **kw)


def _dumps(data) -> str:
    return json.dumps(data, ensure_ascii=False)


def error_response(code: str, message: str) -> web.Response:
    return json_response({"error": clip_details(message)}, status=HTTP_STATUS.get(code, 500))


async def read_json(request: web.Request) -> dict:
    try:
        body = await request.json(loads=json.loads)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"the request body is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise InvalidInput(f"the request body is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    if not isinstance(body, dict):
        raise InvalidInput(f"the request body must be a JSON object, not {type(body).__name__}")
    return body


class Doors:
    """What every HTTP front door gets: the model API, the shared request tracker, the auth check."""

    def __init__(self, repo: Repository, tracker: RequestTracker, config: ServerConfig, metrics: Metrics,
                 refusals: RefusalLog, control: ModelControl | None = None):
        self.repo, self.tracker, self.config, self.metrics, self.refusals = repo, tracker, config, metrics, refusals
        self.control = control or ModelControl(repo)
        self.expected = f"Bearer {config.auth_token}".encode() if config.auth_token else None

    def track(self, request: web.Request, model: str, method: str):
        return self.tracker.track(model, method, protocol="http")

    def check_auth(self, request: web.Request, api_key: str | None = None) -> None:
        """Exactly one 'Authorization: Bearer <token>' header (or, for LibreTranslate, api_key = the token)."""
        if self.expected is None:
            return
        given = request.headers.getall("Authorization", [])
        if len(given) == 1 and hmac.compare_digest(given[0].encode(), self.expected):
            return
        if not given and api_key is not None and hmac.compare_digest(f"Bearer {api_key}".encode(), self.expected):
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


@web.middleware
async def _errors(request: web.Request, handler):
    """Every failure as {"error": ...} with its status: never an HTML page, never a traceback."""
    try:
        return await handler(request)
    except HttpError as e:
        return error_response(e.code, e.message)
    except ServingError as e:  # the one HTTP mapping of a domain error: its code's status, its message
        return error_response(e.code, str(e))
    except web.HTTPException as e:  # aiohttp's own: 404 route, 405 method, 413 body too large
        if e.status == 413:
            return json_response({"error": f"the request body is over the limit of {request.app[MAX_BYTES]} bytes "
                                               "(--max-message-bytes)"}, status=413)
        if e.status == 404:
            return json_response({"error": f"no such path: {request.path[:80]} (see /openapi.json)"}, status=404)
        if e.status == 405:
            return json_response({"error": f"{request.method} is not allowed on {request.path[:80]}"}, status=405)
        return json_response({"error": e.reason}, status=e.status)
    except Exception:
        log.exception("HTTP %s %s failed", request.method, request.path[:80])
        return error_response("INTERNAL", "internal error; see server log")


class HttpServer:
    def __init__(self, runner: web.AppRunner, site: web.TCPSite, port: int):
        self.runner, self.site, self.port = runner, site, port

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, let requests in flight finish within the grace period."""
        await self.runner.shutdown()
        await self.runner.cleanup()


async def start_http(config: ServerConfig, repo: Repository, tracker: RequestTracker, metrics: Metrics,
                     refusals: RefusalLog, control: ModelControl | None = None) -> HttpServer:
    from server import http_kserve, http_libretranslate, http_repository, openapi, playground

    doors = Doors(repo, tracker, config, metrics, refusals, control)
    app = web.Application(client_max_size=config.max_message_bytes, middlewares=[_errors, _auth_middleware(doors)])
    app[MAX_BYTES] = config.max_message_bytes
    app.add_routes(http_kserve.routes(doors))
    app.add_routes(http_repository.routes(doors))
    app.add_routes(http_libretranslate.routes(doors))
    app.add_routes(playground.routes(doors))
    app.add_routes(openapi.routes(doors))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=config.grace_s, handle_signals=False)
    await runner.setup()
    ssl_context = None
    if config.tls_cert:
        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_context.load_cert_chain(config.tls_cert, config.tls_key)
        if config.tls_client_ca:
            ssl_context.load_verify_locations(config.tls_client_ca)
            ssl_context.verify_mode = ssl.CERT_REQUIRED
    site = web.TCPSite(runner, config.host, config.http_port, ssl_context=ssl_context,
                       backlog=128, reuse_address=True)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return HttpServer(runner, site, port)
