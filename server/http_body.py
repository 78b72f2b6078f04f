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
from typing import Any

from aiohttp import web

from server.errors import InvalidInput

# Seconds a client gets to send a whole request body (--http-read-timeout-s), set by server.http_server.
READ_TIMEOUT_S = web.AppKey("read_timeout_s", float)
MAX_DEPTH = 64  # JSON nesting: KServe tensors need 3 or 4 levels, LibreTranslate 2

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
        raise RequestTimeout(f"the request body did not arrive within {limit:g} s (--http-read-timeout-s)") from None


def parse_json(raw: bytes | str, what: str = "the request body") -> Any:
    """JSON text as Python values; InvalidInput naming what is wrong and where."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InvalidInput(f"{what} is not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise InvalidInput(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise InvalidInput(f"{what} nests JSON arrays or objects too deeply (at most {MAX_DEPTH} levels)") from None
    _check(value, what, raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogatepass"))
    return value


def _check(value: Any, what: str, raw: bytes) -> None:
    """Depth and lone surrogates, in one walk without recursion. A string that has no surrogate escape
    in it cannot hold a surrogate (JSON text itself is UTF-8), so most bodies skip the string checks."""
    strings = bool(_SURROGATE_ESCAPE.search(raw))
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise InvalidInput(f"{what} nests JSON arrays or objects too deeply (at most {MAX_DEPTH} levels, "
                                   f"at {path or 'the top'})")
            for k, v in item.items():
                where = f"{path}.{k}" if path else k
                if strings and _SURROGATE.search(k):
                    raise InvalidInput(f"{what}: a key at {path or 'the top'} holds a lone UTF-16 surrogate "
                                       "(\\ud800-\\udfff without its pair), which is not text")
                stack.append((v, where[:80], depth + 1))
        elif isinstance(item, list):
            if depth >= MAX_DEPTH:
                raise InvalidInput(f"{what} nests JSON arrays or objects too deeply (at most {MAX_DEPTH} levels, "
                                   f"at {path or 'the top'})")
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(item))
        elif strings and isinstance(item, str) and _SURROGATE.search(item):
            raise InvalidInput(f"{what}: {path or 'the value'} holds a lone UTF-16 surrogate (\\ud800-\\udfff without "
                               "its pair), which is not text")


async def read_json(request: web.Request) -> dict:
    """The body as a JSON object."""
    body = parse_json(await read_body(request))
    if not isinstance(body, dict):
        raise InvalidInput(f"the request body must be a JSON object, not {type(body).__name__}")
    return body
