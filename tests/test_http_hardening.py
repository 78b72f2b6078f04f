"""Hostile HTTP input on both HTTP doors (KServe REST, LibreTranslate), each shown handled, against the
real `s2s serve` in a child process whose log is read for tracebacks.

1. client input that gave 500 and a traceback gets 400/401 naming the field;
2. protocol errors and hang-ups: rate-limited WARNING lines, hang-ups counted as CANCELLED;
3. a client that hangs up frees its rows at once (acceptance: within 1 s);
5. format=html: cheap limits first, parsing off the event loop (acceptance: a 4 MB body stalls a
   concurrent health check by less than 250 ms);
7. header read timeout, connection cap, CORS, and the drain answering 503.
(4, the hung core, is tests/test_hung_core.py; 6 is the GenerateStream test at the end.)
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import signal
import socket
import threading
import time
import urllib.request

import grpc
import pytest
from conftest import Served, english, wait_for

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

ADD, JA = "addition", "translate-en-ja"
TOKEN = "tok"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
INFER = f"/v2/models/{ADD}/infer"


@pytest.fixture(scope="module")
def srv(tmp_path_factory, model_repo):
    s = Served(
        tmp_path_factory.mktemp("http_hardening"),
        "--auth-token",
        TOKEN,
        "--cors-allow-origin",
        "https://app.example",
        "--http-read-timeout-s",
        "1",
        "--http-max-connections",
        "40",
    )
    yield s
    s.stop()
    log = s.log_path.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]  # whatever the module's tests sent it


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


BIG = 1180591620717411303424  # 2**70
JSON = {"Content-Type": "application/json"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
CASES = [  # (id, path, body, headers, status, what the message names)
    ("deep JSON, infer", INFER, "[" * 100_000 + "]" * 100_000, JSON, 400, "too deeply"),
    (
        "deep JSON, translate",
        "/translate",
        '{"q": ' + "[" * 100_000 + "]" * 100_000 + "}",
        JSON,
        400,
        "too deeply",
    ),
    ("deep JSON, index", "/v2/repository/index", "[" * 100_000, JSON, 400, "too deeply"),
    ("deep JSON, detect", "/detect", "{" + '"a":{' * 50_000, None, 400, "JSON"),
    (
        "int64 parameter",
        INFER,
        json.dumps({"inputs": [tensor(["1+1"])], "parameters": {"max_tokens": BIG}}),
        JSON,
        400,
        "'max_tokens' is out of the int64 range",
    ),
    (
        "int64 shape",
        INFER,
        json.dumps({"inputs": [{**tensor(["1+1"]), "shape": [BIG]}]}),
        JSON,
        400,
        "'shape'",
    ),
    (
        "INT32 data",
        INFER,
        json.dumps(
            {
                "inputs": [
                    tensor(["1+1"]),
                    {"name": "max_tokens", "datatype": "INT32", "shape": [1], "data": [2**40]},
                ]
            }
        ),
        JSON,
        400,
        "INT32 range",
    ),
    (
        "INT64 data",
        INFER,
        json.dumps(
            {
                "inputs": [
                    tensor(["1+1"]),
                    {"name": "max_tokens", "datatype": "INT64", "shape": [1], "data": [-BIG]},
                ]
            }
        ),
        JSON,
        400,
        "INT64 range",
    ),
    (
        "input parameters a list",
        INFER,
        json.dumps({"inputs": [tensor(["1+1"], parameters=[1])]}),
        JSON,
        400,
        "'parameters' must be a JSON object",
    ),
    (
        "output parameters a list",
        INFER,
        json.dumps({"inputs": [tensor(["1+1"])], "outputs": [{"name": "text_output", "parameters": [1]}]}),
        JSON,
        400,
        "outputs[0]: 'parameters' must be a JSON object",
    ),
    (
        "NaN parameter",
        INFER,
        '{"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["1+1"]}], '
        '"parameters": {"sampling_temperature": NaN}}',
        JSON,
        400,
        "finite",
    ),
    (
        "lone surrogate, infer",
        INFER,
        json.dumps({"inputs": [tensor(["\ud800"])]}),
        JSON,
        400,
        "inputs[0].data[0]",
    ),
    (
        "lone surrogate, translate",
        "/translate",
        json.dumps({"q": "\ud800", "source": "en", "target": "ja"}),
        JSON,
        400,
        "q holds a lone UTF-16 surrogate",
    ),
    (
        "lone surrogate in a key",
        "/translate",
        '{"\\udfff": 1, "q": "hi", "source": "en", "target": "ja"}',
        JSON,
        400,
        "surrogate",
    ),
    (
        "alternatives=²",
        "/translate",
        "q=hi&source=en&target=ja&alternatives=%C2%B2",
        FORM,
        400,
        "alternatives",
    ),
    (
        "multipart without boundary",
        "/translate",
        "q=hi",
        {"Content-Type": "multipart/form-data"},
        400,
        "boundary",
    ),
    (
        "header length ²",
        INFER,
        "{}",
        {"Inference-Header-Content-Length": "²"},
        400,
        "Inference-Header-Content-Length",
    ),
    (
        "header length huge",
        INFER,
        "{}",
        {"Inference-Header-Content-Length": "9" * 5000},
        400,
        "Inference-Header-Content-Length",
    ),
    (
        "timeout inf",
        INFER,
        json.dumps({"inputs": [tensor(["1+1"])]}),
        {"X-Timeout-Seconds": "1e999"},
        400,
        "X-Timeout-Seconds",
    ),
    (
        "html tags",
        "/translate",
        json.dumps({"q": "<b>" * 20_000, "source": "en", "target": "ja", "format": "html"}),
        JSON,
        400,
        "(tags)",
    ),
    (
        "html entities",
        "/translate",
        json.dumps({"q": "&#x41;" * 690_000, "source": "en", "target": "ja", "format": "html"}),
        JSON,
        400,
        "characters",
    ),
    (
        "html entities in budget",
        "/translate",
        json.dumps({"q": "<p>" + "&" * 70_000, "source": "en", "target": "ja", "format": "html"}),
        JSON,
        400,
        "(character references)",
    ),
]


@pytest.mark.parametrize(
    "path,body,headers,status,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_input_is_4xx_naming_the_field(srv, path, body, headers, status, message):
    got, raw, _ = request(srv, "POST", path, body, headers)
    assert got == status, raw[:300]
    assert message in json.loads(raw)["error"], raw[:300]


def test_multipart_without_boundary_is_401_without_the_token(srv):
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=30)
    conn.request("POST", "/translate", body=b"q=hi", headers={"Content-Type": "multipart/form-data"})
    r = conn.getresponse()
    assert r.status == 401 and "bearer token" in json.loads(r.read())["error"]
    conn.close()


def test_a_token_that_is_not_utf8_is_401(srv):
    for method, path in (
        ("POST", INFER),
        ("POST", "/translate"),
        ("GET", "/languages"),
        ("GET", f"/v2/models/{ADD}"),
    ):
        answer = _raw(
            srv,
            b"%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\nContent-Length: 0\r\n"
            b"Connection: close\r\n\r\n" % (method.encode(), path.encode()),
        )
        assert answer.startswith(b"HTTP/1.1 401"), answer[:300]


def _raw(srv, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) as s:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_protocol_errors_and_hangups_are_rate_limited_warnings_and_hangups_are_cancelled(srv):
    before = metrics(srv)
    lines_before = srv.log().count("\n")
    t0 = time.monotonic()
    bad = [
        b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n",
    ]
    for i in range(300):
        answer = _raw(srv, bad[i % 3])
        assert answer.startswith(b"HTTP/1.") and b" 400 " in answer[:20], answer[:200]
    # Hang-ups mid-body, each after the server has started its handler (it answers "100 Continue" first).
    body = json.dumps({"inputs": [tensor(["1+1"])]}).encode()
    for path, head in ((INFER, b""), ("/translate", b"Content-Type: application/json\r\n")):
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) as s:
                s.sendall(
                    b"POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n%sContent-Length: %d\r\n"
                    b"Expect: 100-continue\r\n\r\n" % (path.encode(), head, len(body) + 100)
                )
                assert s.recv(100).startswith(b"HTTP/1.1 100")
                s.sendall(body[:10])
    cancelled = lambda: sample(metrics(srv), "s2s_requests_total", protocol="http", code="CANCELLED")  # noqa: E731
    assert wait_for(
        lambda: cancelled() - sample(before, "s2s_requests_total", protocol="http", code="CANCELLED") >= 40
    )
    after = metrics(srv)
    assert (
        sample(after, "s2s_requests_total", method="ModelInfer", code="CANCELLED")
        - sample(before, "s2s_requests_total", method="ModelInfer", code="CANCELLED")
        == 20
    )
    assert (
        sample(after, "s2s_requests_total", method="Translate", code="CANCELLED")
        - sample(before, "s2s_requests_total", method="Translate", code="CANCELLED")
        == 20
    )
    assert sample(after, "s2s_requests_total", protocol="http", code="INTERNAL") == 0
    assert (
        sample(after, "s2s_requests_total", method="HTTP", code="INVALID_ARGUMENT")
        - sample(before, "s2s_requests_total", method="HTTP", code="INVALID_ARGUMENT")
        == 300
    )
    new = srv.log().split("\n")[lines_before:]
    assert not any("Traceback" in line or " ERROR " in line for line in new), "\n".join(new[-50:])
    # 340 refusals of two or three kinds, a line per kind every 10 s at most: a handful of lines, each a WARNING.
    warned = [line for line in new if "refused (" in line]
    bound = 3 * (int((time.monotonic() - t0) / 10) + 1)
    assert 1 <= len(warned) <= bound and all(" WARNING " in line for line in warned), "\n".join(new)


def _rows(srv) -> float:
    text = metrics(srv)
    return sample(text, "s2s_queued_sequences", model=JA) + sample(text, "s2s_active_sequences", model=JA)


@pytest.mark.parametrize("door", ["kserve", "libretranslate"])
def test_a_client_that_hangs_up_frees_its_rows_at_once(srv, door):
    texts = english(32)  # 32 inputs x beam 8: 256 rows, seconds of decoding on this machine
    if door == "kserve":
        path = f"/v2/models/{JA}/infer"
        body = json.dumps(
            {"inputs": [tensor(texts)], "parameters": {"beam_width": 8, "max_tokens": 60}}
        ).encode()
    else:
        path, body = (
            "/translate",
            json.dumps({"q": texts, "source": "en", "target": "ja", "alternatives": 7}).encode(),
        )
    before = sample(metrics(srv), "s2s_requests_total", code="CANCELLED")
    ok_before = sample(metrics(srv), "s2s_requests_total", code="OK")
    s = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    s.sendall(
        b"POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)
    )
    assert wait_for(lambda: _rows(srv) >= 100, timeout=30), _rows(srv)  # queued or decoding (64 rows a step)
    s.close()
    t0 = time.monotonic()
    assert wait_for(lambda: _rows(srv) == 0, timeout=30)
    print(f"{door}: rows freed {time.monotonic() - t0:.3f} s after the hang-up")
    # Cancelled, not decoded to the end for nobody: counted CANCELLED, and no answer was made for it.
    assert wait_for(lambda: sample(metrics(srv), "s2s_requests_total", code="CANCELLED") == before + 1)
    assert sample(metrics(srv), "s2s_requests_total", code="OK") == ok_before


def _worst_health_check_while(srv, body: str) -> tuple[float, int, bytes]:
    """Health checks one after another while ``body`` is sent to /translate and answered: the slowest, and the
    answer."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=30)
    done = threading.Event()
    worst = 0.0

    def send():
        try:
            return request(srv, "POST", "/translate", body, JSON)
        finally:
            done.set()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(send)
        while not done.is_set():
            t0 = time.monotonic()
            conn.request("GET", "/v2/health/live")
            assert conn.getresponse().read() == b'{"live": true}'
            worst = max(worst, time.monotonic() - t0)
        status, raw, _ = answer.result()
    conn.close()
    return worst, status, raw


def test_health_checks_go_on_while_html_is_refused_and_parsed(srv):
    """Health checks are answered while a 4 MB html body is sent and refused, and while an html body within the
    limits is parsed (which thread parses is tests/test_off_loop.py's; the worst check is printed)."""
    huge = json.dumps({"q": "<b>" * 1_300_000, "source": "en", "target": "ja", "format": "html"})  # ~4 MB
    within = json.dumps(
        {
            "q": "<i></i>" * 8000 + '<p title="' + "&amp;" * 30_000 + '">Hello.</p>',
            "source": "en",
            "target": "ja",
            "format": "html",
        }
    )
    for body, status in ((huge, 400), (within, 200)):
        worst, got, raw = _worst_health_check_while(srv, body)
        assert got == status, raw[:200]
        print(f"html {len(body)} characters -> {status}: worst concurrent health check {worst * 1000:.1f} ms")


def test_health_checks_go_on_while_a_4mb_json_body_is_checked(srv):
    """Its elements are walked (nesting, surrogates) in a worker thread: the health checks go on meanwhile."""
    many = json.dumps(
        {"q": ["Hi"] * 650_000 + ["\ud800"], "source": "en", "target": "ja"}
    )  # ~4 MB, checked to the end
    worst, status, raw = _worst_health_check_while(srv, many)
    assert status == 400 and "q[650000] holds a lone UTF-16 surrogate" in json.loads(raw)["error"], raw[:300]
    print(f"JSON {len(many)} characters -> {status}: worst concurrent health check {worst * 1000:.1f} ms")


def test_slow_and_idle_connections_are_closed_and_connections_are_capped(srv):
    fds = lambda: len(os.listdir(f"/proc/{srv.proc.pid}/fd"))  # noqa: E731
    base = fds()
    slow = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    slow.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
    answer = slow.recv(1000)
    assert answer.startswith(b"HTTP/1.1 408") and b"--http-read-timeout-s" in answer and slow.recv(100) == b""
    # Accepted in order, well within the 1 s an idle connection is kept.
    held = [socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) for _ in range(40)]
    refused = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    answer = refused.recv(1000)
    assert answer.startswith(b"HTTP/1.1 503") and b"--http-max-connections" in answer
    assert all(s.recv(100) == b"" for s in held)  # idle: closed after --http-read-timeout-s
    for s in [*held, slow, refused]:
        s.close()
    assert wait_for(lambda: fds() <= base + 2)
    assert request(srv, "GET", "/v2/health/ready")[0] == 200


def test_cors_preflight_and_allowed_origin(srv):
    pre = {
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    status, _, headers = request(srv, "OPTIONS", "/translate", headers=pre)
    assert status == 204 and headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert (
        "POST" in headers["Access-Control-Allow-Methods"]
        and "Authorization" in headers["Access-Control-Allow-Headers"]
    )
    status, _, headers = request(srv, "OPTIONS", INFER, headers={**pre, "Origin": "https://evil.example"})
    assert status == 403 and "Access-Control-Allow-Origin" not in headers
    status, raw, headers = request(
        srv,
        "POST",
        "/translate",
        json.dumps({"q": "Hello.", "source": "en", "target": "ja"}),
        {**JSON, "Origin": "https://app.example"},
    )
    assert status == 200 and headers["Access-Control-Allow-Origin"] == "https://app.example"
    status, raw, headers = request(srv, "GET", "/languages", headers={"Origin": "https://evil.example"})
    assert status == 200 and "Access-Control-Allow-Origin" not in headers


def test_cors_is_off_by_default(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.config.http_port, timeout=30)
    conn.request(
        "OPTIONS",
        "/translate",
        headers={"Origin": "https://app.example", "Access-Control-Request-Method": "POST"},
    )
    r = conn.getresponse()
    assert r.status == 405 and r.getheader("Access-Control-Allow-Origin") is None
    conn.close()


def test_drain_answers_new_connections_503_while_requests_finish(tmp_path, model_repo):
    s = Served(tmp_path, "--grace-s", "60")
    try:
        texts = english(16)
        long = json.dumps({"inputs": [tensor(texts)], "parameters": {"beam_width": 8, "max_tokens": 60}})
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(request, s, "POST", f"/v2/models/{JA}/infer", long, JSON)
            assert wait_for(lambda: _rows(s) > 0, timeout=30)
            s.proc.send_signal(signal.SIGTERM)
            assert wait_for(lambda: request(s, "GET", "/v2/health/ready")[0] == 503, timeout=30)
            status, raw, _ = request(s, "POST", INFER, json.dumps({"inputs": [tensor(["1+1"])]}), JSON)
            assert status == 503 and "shutting down" in json.loads(raw)["error"], raw
            assert first.result()[0] == 200  # the request in flight finished within the grace period
        assert s.proc.wait(60) == 0
        assert "Traceback" not in s.log()
    finally:
        s.stop()


def test_a_generate_stream_refused_by_the_engine_logs_no_traceback(tmp_path, model_repo):
    s = Served(
        tmp_path, "--batching", "none", "--max-batch-size", "1", "--max-queue-size", "3", "--instances", "1"
    )
    try:

        def stream(i):
            with grpc.insecure_channel(s.address) as ch:
                try:
                    return list(
                        pb_grpc.Seq2SeqStub(ch).GenerateStream(
                            pb.GenerateRequest(model=ADD, inputs=[f"{i}+{i}"] * 3), timeout=60
                        )
                    )
                except grpc.RpcError as e:
                    return e

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            results = list(pool.map(stream, range(40)))
        refused = [r for r in results if isinstance(r, grpc.RpcError)]
        assert refused and all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in refused)
        assert len(refused) < 40
    finally:
        s.stop()
    log = s.log_path.read_text()
    assert "never retrieved" not in log and "Traceback" not in log, log[-3000:]
