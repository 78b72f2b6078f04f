"""Bearer-token authentication for the HTTP port, as the gRPC interceptor does it for gRPC.

One ``Authorization: Bearer <token>`` header, compared in constant time. LibreTranslate clients send the
token as the ``api_key`` field instead; that door reads the field and asks ``check`` with it.
"""

from __future__ import annotations

import hmac

from aiohttp import web

from server.errors import Unauthenticated
from server.telemetry.request_tracker import RequestTracker

AUTH_HELP = (
    "missing or wrong bearer token: send one header 'Authorization: Bearer <token>' (LibreTranslate "
    "clients: api_key)"
)


class BearerAuth:
    """``--auth-token`` for HTTP; ``expected`` is None when the server has no token (every call passes)."""

    def __init__(self, token: str | None, tracker: RequestTracker):
        self.expected = f"Bearer {token}".encode() if token else None
        self.tracker = tracker

    def check(self, request: web.Request, api_key: str | None = None) -> None:
        """Exactly one 'Authorization: Bearer <token>' header (or, for LibreTranslate, api_key = the token)."""
        if self.expected is None:
            return
        given = request.headers.getall("Authorization", [])
        # surrogatepass: header bytes that are not UTF-8 arrive as surrogates (aiohttp decodes with
        # surrogateescape); they are a wrong token, not an encoding error.
        if len(given) == 1 and hmac.compare_digest(given[0].encode("utf-8", "surrogatepass"), self.expected):
            return
        if (
            not given
            and api_key is not None
            and hmac.compare_digest(f"Bearer {api_key}".encode("utf-8", "surrogatepass"), self.expected)
        ):
            return
        path = request.path
        self.tracker.refused(
            path.rsplit("/", 1)[-1] or path,
            "http",
            "UNAUTHENTICATED",
            f"HTTP {request.method} {path[:80]}: no valid bearer token",
        )
        raise Unauthenticated(AUTH_HELP)
