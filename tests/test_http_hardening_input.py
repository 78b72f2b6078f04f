"""Hostile HTTP input on both HTTP doors (KServe REST, LibreTranslate), each shown handled, against the
real `s2s serve` in a child process whose log is read for tracebacks: client input that gave 500 and a traceback
gets 400/401 naming the field, and CORS answers only the allowed origin.
"""

from __future__ import annotations

import http.client
import json

import pytest
from conftest import Served
from http_hardening_calls import ADD, INFER, JSON, TOKEN, _raw, request, tensor


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


BIG = 1180591620717411303424  # 2**70
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
