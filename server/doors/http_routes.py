"""Every HTTP door's routes, for the HTTP port (``server/transport/http_app.py``) to serve."""

from __future__ import annotations

from aiohttp import web

from server.doors import libretranslate, openapi, playground
from server.doors.http_door import HttpDoor
from server.kserve import repository_rest, rest_binding


def http_routes(door: HttpDoor) -> list[web.RouteDef]:
    return [
        *rest_binding.routes(door),
        *repository_rest.routes(door),
        *libretranslate.routes(door),
        *playground.routes(door),
        *openapi.routes(door),
    ]
