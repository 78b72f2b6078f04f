"""What every HTTP door's routes are built with (``HttpDoor``): the served models, model control, the one
request tracker and the auth check. The app around the doors is the transport's (``server/transport/http_app.py``).

Doors raise domain errors (``ServingError`` and its kinds); the app's error middleware maps them to a
status and ``{"error": "..."}`` in one place, as the gRPC interceptor does for gRPC.
"""

from __future__ import annotations

import contextlib

from aiohttp import web

from server.config import ServerConfig
from server.models.control import ModelControl
from server.models.registry import ServedModels
from server.telemetry.request_tracker import RequestTracker
from server.transport.http_auth import BearerAuth


class HttpDoor:
    """What every HTTP door's routes are built with."""

    def __init__(
        self,
        repo: ServedModels,
        tracker: RequestTracker,
        config: ServerConfig,
        control: ModelControl | None = None,
    ):
        self.repo, self.tracker, self.config = repo, tracker, config
        self.control = control or ModelControl(repo)
        self.auth = BearerAuth(config.auth_token, tracker)

    def track(self, model: str, method: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self.tracker.track(model, method, protocol="http")

    def check_auth(self, request: web.Request, api_key: str | None = None) -> None:
        self.auth.check(request, api_key)
