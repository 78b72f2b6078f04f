"""CORS for the HTTP port, off unless ``--cors-allow-origin`` names the origins (or ``*``).

LibreTranslate serves browser clients (web pages and extensions calling ``/translate`` from another
origin), and so may KServe REST. A browser sends a preflight ``OPTIONS`` with
``Access-Control-Request-Method`` before a POST with JSON or an ``Authorization`` header; it is
answered here, before auth (a preflight never carries credentials), with the methods and headers
the routes take. Every answer to an allowed origin says so in ``Access-Control-Allow-Origin``.
"""

from __future__ import annotations

from aiohttp import web

ALLOW_METHODS = "GET, POST, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, X-Timeout-Seconds, Inference-Header-Content-Length"
EXPOSE_HEADERS = "Inference-Header-Content-Length"
MAX_AGE_S = "600"


def parse_origins(value: str | None) -> tuple[str, ...]:
    """``--cors-allow-origin``: a comma-separated list of origins, or ``*`` for any."""
    return tuple(o.strip().rstrip("/") for o in (value or "").split(",") if o.strip())


def cors_middleware(origins: tuple[str, ...]):
    any_origin = "*" in origins

    def allowed(origin: str | None) -> str | None:
        if not origin:
            return None
        if any_origin:
            return "*"
        return origin if origin in origins else None

    @web.middleware
    async def cors(request: web.Request, handler):
        origin = request.headers.get("Origin")
        allow = allowed(origin)
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            if allow is None:  # not an allowed origin: no CORS headers, so the browser blocks the call
                return web.Response(status=403, text="origin not allowed (--cors-allow-origin)")
            return web.Response(
                status=204,
                headers={
                    "Access-Control-Allow-Origin": allow,
                    "Access-Control-Allow-Methods": ALLOW_METHODS,
                    "Access-Control-Allow-Headers": ALLOW_HEADERS,
                    "Access-Control-Max-Age": MAX_AGE_S,
                    "Vary": "Origin",
                },
            )
        response = await handler(request)
        if allow is not None:
            response.headers["Access-Control-Allow-Origin"] = allow
            response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
            response.headers.add("Vary", "Origin")
        return response

    return cors
