"""What the hostile-HTTP tests share against a `s2s serve` child process (conftest.Served) with a bearer
token: requests with the token, raw bytes on a socket, and the server's metrics read back.
"""

from __future__ import annotations

import http.client
import socket
import urllib.request

ADD, JA = "addition", "translate-en-ja"
TOKEN = "tok"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
INFER = f"/v2/models/{ADD}/infer"


def request(srv, method: str, path: str, body: bytes | str | None = None, headers=None, timeout: float = 60):
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=timeout)
    try:
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogatepass")
        conn.request(method, path, body=body, headers={**AUTH, **(headers or {})})
        r = conn.getresponse()
        return r.status, r.read(), dict(r.getheaders())
    finally:
        conn.close()


def metrics(srv) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{srv.metrics_port}/metrics", timeout=10).read().decode()


def sample(text: str, name: str, **labels) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def tensor(texts, **kw) -> dict:
    return {"name": "text_input", "datatype": "BYTES", "shape": [len(texts)], "data": texts, **kw}


JSON = {"Content-Type": "application/json"}


def _raw(srv, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) as s:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out
