"""Triton's model repository extension over REST, as tritonclient.http calls it:

* ``POST /v2/repository/index`` (body ``{"ready": true}`` optional): every model of the repository, a JSON
  array of ``{"name", "version", "state", "reason"}``;
* ``POST /v2/repository/models/NAME/load`` and ``.../unload`` (body optional, ``{"parameters": {...}}``):
  200 with an empty body once done, or ``{"error": ...}`` with the status of the domain error.

A thin map onto ``server/models/control.py``, behind the same bearer-token auth as every other path.
"""

from __future__ import annotations

from dataclasses import asdict

from aiohttp import web

from server.errors import InvalidInput
from server.transport.http_body import read_json, json_response
from server.doors.http_door import HttpDoor


async def _parameters(request: web.Request) -> dict:
    if not request.can_read_body:
        return {}
    body = await read_json(request)
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    return params


def routes(doors: HttpDoor) -> list[web.RouteDef]:
    control = doors.control

    async def index(request: web.Request) -> web.Response:
        ready_only = False
        if request.can_read_body:
            ready_only = bool((await read_json(request)).get("ready", False))
        return json_response([{k: v for k, v in asdict(e).items() if v != "" or k in ("name", "state")}
                              for e in control.index(ready_only)])

    async def load(request: web.Request) -> web.Response:
        name = request.match_info["model"]
        async with doors.track(name, "RepositoryModelLoad"):
            await control.load(name, await _parameters(request))
        return web.Response(status=200)

    async def unload(request: web.Request) -> web.Response:
        name = request.match_info["model"]
        async with doors.track(name, "RepositoryModelUnload"):
            await control.unload(name, await _parameters(request))
        return web.Response(status=200)

    return [
        web.post("/v2/repository/index", index),
        web.post("/v2/repository/models/{model}/load", load),
        web.post("/v2/repository/models/{model}/unload", unload),
    ]
