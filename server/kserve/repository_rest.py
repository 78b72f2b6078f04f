"""Triton's model repository extension over REST, as tritonclient.http calls it:

* ``POST /v2/repository/index`` (body ``{"ready": true}`` optional): every model of the repository, a JSON
  array of ``{"name", "version", "state", "reason"}``;
* ``POST /v2/repository/models/NAME/load`` and ``.../unload`` (body optional, ``{"parameters": {...}}``):
  200 with an empty body once done, or ``{"error": ...}`` with the status of the domain error.

A thin map onto ``server/models/control.py``, behind the same bearer-token auth as every other path.

Load and unload change what the server runs, so a browser must not be able to call them from another site.
With a token, the auth middleware sees to that (a page cannot add an Authorization header without a CORS
preflight), and the token suffices. Without one, a cross-site form or ``no-cors`` fetch would reach them, so
they must be JSON: ``Content-Type: application/json``, which no page can send cross-site without a preflight
that only ``--cors-allow-origin`` origins pass (a form can send only ``text/plain``, ``multipart/form-data``
and ``application/x-www-form-urlencoded``). Anything else is refused: 403 when a browser says it came from
another site (its ``Origin`` is not this server's, or ``Sec-Fetch-Site`` says cross-site), 415 otherwise,
naming the header to send. Headers alone decide, before the body is read or the model name looked at (a
server not in explicit mode asks for no header: it refuses every load and unload, naming its mode).
"""

from __future__ import annotations

from dataclasses import asdict

from aiohttp import web

from server.doors.http_door import HttpDoor
from server.errors import InvalidInput, PermissionDenied, clip
from server.transport.http_body import json_response, read_json


async def _parameters(request: web.Request) -> dict:
    if not request.can_read_body:
        return {}
    body = await read_json(request)
    params = body.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    return params


def _cross_site(request: web.Request) -> bool:
    """Sent by a browser on a page of another origin."""
    if request.headers.get("Sec-Fetch-Site", "") in ("cross-site", "same-site"):
        return True
    origin = request.headers.get("Origin")
    return origin is not None and origin != f"{request.scheme}://{request.host}"


def check_state_change(doors: HttpDoor, request: web.Request) -> web.Response | None:
    """None: this load or unload may go on. Else the 415 to answer; 403 (PermissionDenied) is raised for a
    browser's request from another site (see the module's docstring). A server whose mode takes no load or
    unload lets it through to be refused naming the mode: no header would help."""
    if (
        doors.auth.expected is not None
        or request.content_type == "application/json"
        or doors.control.mode != "explicit"
    ):
        return None
    action = request.path.rsplit("/", 1)[-1]
    if _cross_site(request):
        doors.tracker.refused(
            action,
            "http",
            "PERMISSION_DENIED",
            f"HTTP POST {request.path[:80]}: a cross-site browser request without JSON",
        )
        raise PermissionDenied(
            "a load or unload from a page of another site is refused: send Content-Type: "
            "application/json (or run the server with --auth-token and send the token)"
        )
    sent = request.headers.get("Content-Type")
    shown = clip(sent, 40) if sent else "none"
    came = f"this one came as {shown}" if sent else "this one came with none"
    doors.tracker.refused(
        action,
        "http",
        "INVALID_ARGUMENT",
        f"HTTP POST {request.path[:80]}: a model {action} without JSON (Content-Type: {shown})",
        kind="UNSUPPORTED_MEDIA_TYPE",
    )
    return json_response(
        {
            "error": f"a model {action} changes what the server runs: send it with the header Content-Type: "
            f"application/json (the body may be empty; {came}), or run the server with --auth-token and send "
            "the token"
        },
        status=415,
    )


def routes(doors: HttpDoor) -> list[web.RouteDef]:
    control = doors.control

    async def index(request: web.Request) -> web.Response:
        ready_only = False
        if request.can_read_body:
            ready_only = bool((await read_json(request)).get("ready", False))
        return json_response(
            [
                {k: v for k, v in asdict(e).items() if v != "" or k in ("name", "state")}
                for e in control.index(ready_only)
            ]
        )

    async def load(request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if (refused := check_state_change(doors, request)) is not None:
            return refused
        async with doors.track(name, "RepositoryModelLoad"):
            await control.load(name, await _parameters(request))
        return web.Response(status=200)

    async def unload(request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if (refused := check_state_change(doors, request)) is not None:
            return refused
        async with doors.track(name, "RepositoryModelUnload"):
            await control.unload(name, await _parameters(request))
        return web.Response(status=200)

    return [
        web.post("/v2/repository/index", index),
        web.post("/v2/repository/models/{model}/load", load),
        web.post("/v2/repository/models/{model}/unload", unload),
    ]
