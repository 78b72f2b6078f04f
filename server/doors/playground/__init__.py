"""The playground: one static page at ``/`` that calls this server's own KServe v2 REST API.

Plain HTML, CSS and JavaScript from this folder (no build step, nothing fetched from elsewhere): a
model picker filled from ``POST /v2/repository/index``, option bounds from ``GET /v2/models/{m}/config``,
and ``POST /v2/models/{m}/infer`` with one ``text_input`` element per line. The three paths are open
with auth on (``OPEN_EXACT`` in ``server/transport/http_app.py``): the page asks for the token and sends it
as ``Authorization: Bearer`` on its API calls.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

# path -> (file in this package, content type)
ASSETS = {
    "/": ("index.html", "text/html"),
    "/playground.js": ("playground.js", "text/javascript"),
    "/playground.css": ("playground.css", "text/css"),
}

# Everything the page loads is its own; it talks only to this origin.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def routes(doors) -> list[web.RouteDef]:
    files = resources.files(__package__)
    bodies = {path: (files.joinpath(name).read_bytes(), ctype) for path, (name, ctype) in ASSETS.items()}

    def serve(path: str):
        body, ctype = bodies[path]

        async def handler(request: web.Request) -> web.Response:
            return web.Response(body=body, content_type=ctype, charset="utf-8", headers=HEADERS)

        return handler

    return [web.get(path, serve(path)) for path in bodies]
