"""Form bodies (``application/x-www-form-urlencoded`` and ``multipart/form-data``) as fields, for the
LibreTranslate door, without stalling the event loop and with limits that name themselves.

A 4 MB urlencoded body took ``parse_qsl`` 1.5 s on the event loop, and aiohttp's ``request.post()``
parses multipart on it too (and refused a 2.27 MB body of 40,000 fields with 413, naming the 4 MiB
limit it did not pass). Here the body is read whole first (within ``--max-message-bytes`` and the read
timeout), its fields are counted with ``bytes.count`` (microseconds), and a big body is parsed in the
front end's parse lane (``server/transport/offload.py``). The API has a handful of fields: ``MAX_FIELDS`` is far
above any real client's form.
"""

from __future__ import annotations

from email import policy
from email.parser import BytesParser
from urllib.parse import parse_qsl

from aiohttp.helpers import parse_mimetype

from server.errors import InvalidInput
from server.transport.http_body import THREAD_ABOVE_BYTES
from server.transport.offload import off_loop

MAX_FIELDS = 256


def _too_many(n: int) -> InvalidInput:
    return InvalidInput(
        f"the form has {n} fields; at most {MAX_FIELDS} are read (this API has a handful: q, source, "
        "target, format, alternatives, api_key)"
    )


def _urlencoded(text: str) -> list[tuple[str, str]]:
    return parse_qsl(text, keep_blank_values=True)


async def urlencoded(text: str) -> list[tuple[str, str]]:
    """A urlencoded body's fields, in order."""
    if (n := text.count("&") + 1) > MAX_FIELDS:
        raise _too_many(n)
    return _urlencoded(text) if len(text) < THREAD_ABOVE_BYTES else await off_loop(_urlencoded, text)


def _multipart(content_type: str, body: bytes) -> dict[str, str]:
    msg = BytesParser(policy=policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not msg.is_multipart() or msg.defects:
        raise InvalidInput("the multipart/form-data body is malformed (its parts do not match the boundary)")
    fields: dict[str, str] = {}
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name or part.get_filename() is not None:  # files are not fields of this API
            continue
        raw = part.get_payload(decode=True) or b""
        try:
            value = raw.decode(part.get_content_charset() or "utf-8")
        except (UnicodeDecodeError, LookupError):
            raise InvalidInput(
                f"multipart field {str(name)[:40]!r} is not valid text in its charset"
            ) from None
        fields.setdefault(str(name), value)  # the first of a repeated field, as Flask's
    return fields


async def multipart(content_type: str, body: bytes) -> dict[str, str]:
    """A multipart form's text fields."""
    boundary = parse_mimetype(content_type).parameters.get("boundary")
    if not boundary:
        raise InvalidInput(
            "Content-Type multipart/form-data needs a boundary parameter (multipart/form-data; boundary=...)"
        )
    if (n := body.count(b"--" + boundary.encode("latin-1", "replace")) - 1) > MAX_FIELDS:
        raise _too_many(n)
    if len(body) < THREAD_ABOVE_BYTES:
        return _multipart(content_type, body)
    return await off_loop(_multipart, content_type, body)
