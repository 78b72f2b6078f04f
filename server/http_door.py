"""What every HTTP door shares, and nothing of the app around them (``server/http_server.py`` assembles it):
the context a door's routes are built with (``HttpDoor``: the model repository, model control, the one
request tracker, the auth check), the ``X-Timeout-Seconds`` deadline and JSON answers.

Doors raise domain errors (``ServingError`` and its kinds); the app's error middleware maps them to a
status and ``{"error": "..."}`` in one place, as the gRPC interceptor does for gRPC.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import time

from aiohttp import web

from server.config import ServerConfig
from server.errors import InvalidInput, Unauthenticated
from server.model_control import ModelControl
from server.repository import Repository
from server.request_tracking import RequestTracker

TIMEOUT_HEADER = "X-Timeout-Seconds"
AUTH_HELP = ("missing or wrong bearer token: send one header 'Authorization: Bearer <token>' (LibreTranslate "
             "clients: api_key)")


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


class HttpDoor:
    """What every HTTP door's routes are built with."""

    def __init__(self, repo: Repository, tracker: RequestTracker, config: ServerConfig,
                 control: ModelControl | None = None):
        self.repo, self.tracker, self.config = repo, tracker, config
        self.control = control or ModelControl(repo)
        self.expected = f"Bearer {config.auth_token}".encode() if config.auth_token else None

    def track(self, model: str, method: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self.tracker.track(model, method, protocol="http")

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
        self.tracker.refused(path.rsplit("/", 1)[-1] or path, "http", "UNAUTHENTICATED",
                             f"HTTP {request.method} {path[:80]}: no valid bearer token")
        raise Unauthenticated(AUTH_HELP)
