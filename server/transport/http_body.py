"""Reading an HTTP request body safely, for every HTTP door: within a time limit, and as JSON only when
the JSON is something the rest of the server can hold.

``json.loads`` accepts things no later step should meet: nesting deep enough to raise RecursionError,
lone surrogates (``"\\ud800"``: a ``str`` that cannot be encoded as UTF-8, so it breaks the tokenizer
and any answer that echoes it) and integers of any size. The first two are refused here, naming where
they are; integer ranges are the business of the door that knows its fields.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

from aiohttp import web

from server.errors import InvalidInput
from server.transport.offload import off_loop

# Seconds a client gets to send a whole request body (--http-read-timeout-s), set by server.transport.http_app.
READ_TIMEOUT_S = web.AppKey("read_timeout_s", float)
MAX_DEPTH = 64  # JSON nesting: KServe tensors need 3 or 4 levels, LibreTranslate 2
THREAD_ABOVE_BYTES = 256 * 1024  # smaller bodies parse in well under a millisecond: a thread would cost more

_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # how a surrogate gets into JSON text at all
_SURROGATE = re.compile("[\ud800-\udfff]")


class RequestTimeout(InvalidInput):
    """The body did not arrive within --http-read-timeout-s."""


async def read_body(request: web.Request) -> bytes:
    """The whole body, or RequestTimeout when the client sends it slower than the read timeout allows."""
    limit = request.app.get(READ_TIMEOUT_S)
    try:
        async with asyncio.timeout(limit):
            return await request.read()
    except TimeoutError:
        raise RequestTimeout(
            f"the request body did not arrive within {limit:g} s (--http-read-timeout-s)"
        ) from None


def parse_json(raw: bytes | str, what: str = "the request body") -> Any:
    """JSON text as Python values; InvalidInput naming what is wrong and where."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidInput(
            f"{what} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    except UnicodeDecodeError as e:
        raise InvalidInput(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise InvalidInput(
            f"{what} nests JSON arrays or objects too deeply (at most {MAX_DEPTH} levels)"
        ) from None
    if type(value) in (dict, list):
        _check(value, what, raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
    elif type(value) is str and _SURROGATE.search(value):
        raise InvalidInput(
            f"{what} is a string with a lone UTF-16 surrogate (\\ud800-\\udfff without its pair)"
        )
    return value


def _check(value: Any, what: str, raw: bytes) -> None:
    """Depth and lone surrogates, in one walk without recursion that visits containers only (and strings when
    the text has a surrogate escape at all: JSON text itself is UTF-8, so most bodies skip the string checks).
    Paths are built only for the error message: a 4 MB array of numbers costs one type check per element."""
    strings = bool(_SURROGATE_ESCAPE.search(raw))
    stack: list[tuple[Any, Any, int]] = [
        (value, None, 0)
    ]  # (item, where: None | (parent's where, key), depth)
    while stack:
        item, where, depth = stack.pop()
        if type(item) is str:
            if _SURROGATE.search(item):
                raise InvalidInput(
                    f"{what}: {_path(where) or 'the value'} holds a lone UTF-16 surrogate "
                    "(\\ud800-\\udfff without its pair), which is not text"
                )
            continue
        if depth >= MAX_DEPTH:
            raise InvalidInput(
                f"{what} nests JSON arrays or objects too deeply (at most {MAX_DEPTH} levels, at "
                f"{_path(where) or 'the top'})"
            )
        for key, v in item.items() if type(item) is dict else enumerate(item):
            t = type(v)
            if t is dict or t is list or (strings and t is str):
                stack.append((v, (where, key), depth + 1))
            if strings and type(key) is str and _SURROGATE.search(key):
                raise InvalidInput(
                    f"{what}: a key at {_path(where) or 'the top'} holds a lone UTF-16 surrogate "
                    "(\\ud800-\\udfff without its pair), which is not text"
                )


def _path(where) -> str:
    """(parent, key) links as q[0].data[3]."""
    parts = []
    while where is not None:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")[:200]


async def parse_json_off_loop(raw: bytes | str, what: str = "the request body") -> Any:
    """``parse_json``; in a worker thread when the text is big. The checks walk every element in Python (~0.1 s
    for 4 MB of small elements), which a thread interleaves with the event loop instead of stalling it."""
    if len(raw) < THREAD_ABOVE_BYTES:
        return parse_json(raw, what)
    return await off_loop(parse_json, raw, what)


async def read_json(request: web.Request) -> dict:
    """The body as a JSON object."""
    body = await parse_json_off_loop(await read_body(request))
    if not isinstance(body, dict):
        raise InvalidInput(f"the request body must be a JSON object, not {type(body).__name__}")
    return body


TIMEOUT_HEADER = "X-Timeout-Seconds"


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
