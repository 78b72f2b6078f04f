"""What the LibreTranslate API tests share: a request to a server's HTTP port, its answer decoded, and what
Japanese text looks like.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request

TIMEOUT = 60
JAPANESE = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")  # hiragana, katakana, CJK ideographs


def url(srv, path: str = "") -> str:
    return f"http://127.0.0.1:{srv.running.web.port}/{path}"


def call(
    srv,
    path: str,
    body=None,
    *,
    form: bool = False,
    method: str = "POST",
    headers=None,
    raw: bytes | None = None,
) -> tuple[int, object]:
    """(status, decoded JSON) of one request; JSON body unless form."""
    h = dict(headers or {})
    data = raw
    if data is None and body is not None:
        if form:
            data = urllib.parse.urlencode(body).encode()
            h.setdefault("Content-Type", "application/x-www-form-urlencoded")
        else:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url(srv, path), data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
