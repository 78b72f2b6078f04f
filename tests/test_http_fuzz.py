"""Generated hostile requests on every route of the OpenAPI document: never a 5xx, never a traceback.

Hypothesis draws, for each operation that ``/openapi.json`` lists (so a route added later is driven
too), bodies of three kinds: JSON shaped like the route's own body with hostile leaves (integers far
past int64, NaN, lone surrogates, wrong types, deep nesting), any JSON value at all, and raw bytes
under every content type the doors read (including multipart without a boundary); with hostile
``Authorization``, ``X-Timeout-Seconds`` and ``Inference-Header-Content-Length`` headers and path
parameters (the server requires a token; most requests send the right one, so they reach the parsers). Every
answer must be below 500 (504 only where the request set a deadline), and at the end the server's
log must hold no traceback and no ERROR line. The examples are derandomized: a failure reproduces.
"""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import quote

import pytest
from conftest import Served
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# Routes that change what is served are driven with names that are not served: the other routes need the models.
MUTATING = ("/load", "/unload")
TOKEN = "t0k"  # the server requires it: most requests send it, others send none or garbage
SERVED = ("addition", "translate-en-ja")

huge_ints = st.sampled_from([2**63, -(2**63) - 1, 2**64, 2**70 + 1, 10**30, -(10**40), 2**31, -(2**31) - 1])
floats = st.floats(allow_nan=True, allow_infinity=True)
texts = st.text(st.characters(codec=None), max_size=40)  # surrogates included
words = st.sampled_from(
    [
        "text_input",
        "target_prefix",
        "max_tokens",
        "beam_width",
        "text_output",
        "hypotheses",
        "scores",
        "BYTES",
        "INT64",
        "INT32",
        "FP32",
        "en",
        "ja",
        "auto",
        "html",
        "text",
        "1+1",
        "<b>hi</b>",
        "&#x41;",
        "\ud800",
        "²",
        "-1",
        "",
        "0",
    ]
)
leaves = st.one_of(st.none(), st.booleans(), st.integers(-3, 70), huge_ints, floats, texts, words)


def nested(depth: int):
    return st.just(json.loads("[" * depth + "]" * depth))


values = (
    st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.one_of(texts, words), inner, max_size=4)
        ),
        max_leaves=12,
    )
    | nested(100)
    | nested(70)
)
tensor = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(words, values),
        "datatype": st.one_of(words, values),
        "shape": st.one_of(st.lists(st.one_of(st.integers(-2, 70), huge_ints), max_size=3), values),
        "data": st.one_of(st.lists(st.one_of(words, leaves), max_size=4), values),
        "parameters": st.one_of(
            st.fixed_dictionaries(
                {},
                optional={"binary_data_size": st.one_of(leaves, st.integers(-1, 9)), "binary_data": leaves},
            ),
            values,
        ),
    },
)
infer_body = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(texts, values),
        "inputs": st.one_of(st.lists(tensor, max_size=3), values),
        "outputs": st.one_of(
            st.lists(
                st.fixed_dictionaries({"name": st.one_of(words, values)}, optional={"parameters": values}),
                max_size=2,
            ),
            values,
        ),
        "parameters": st.one_of(
            st.dictionaries(
                st.sampled_from(
                    [
                        "max_tokens",
                        "beam_width",
                        "beam_size",
                        "num_hypotheses",
                        "sampling_temperature",
                        "timeout",
                        "binary_data_output",
                        "return_scores",
                        "length_penalty_type",
                    ]
                ),
                leaves,
            ),
            values,
        ),
    },
)
translate_body = st.fixed_dictionaries(
    {},
    optional={
        "q": st.one_of(words, texts, st.lists(st.one_of(words, texts, leaves), max_size=3), values),
        "source": st.one_of(words, values),
        "target": st.one_of(words, values),
        "format": st.one_of(words, values),
        "alternatives": st.one_of(leaves, st.sampled_from(["²", "1", "-1", "99", "1e3", " 2 "])),
        "api_key": leaves,
    },
)
content_types = st.sampled_from(
    [
        "application/json",
        "application/x-www-form-urlencoded",
        "multipart/form-data",
        "multipart/form-data; boundary=xyz",
        "application/octet-stream",
        "text/plain",
        None,
    ]
)
raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.sampled_from(
        [
            b'--xyz\r\nContent-Disposition: form-data; name="q"\r\n\r\nhi\r\n--xyz--\r\n',
            b"q=hi&source=en&target=ja&alternatives=%C2%B2",
            b"q=%ED%A0%80&source=en&target=ja",
            b'{"q": "\\ud800", "source": "en", "target": "ja"}',
            b"\xff\xfe{",
            b"[" * 100_000,
        ]
    ),
)
# Valid requests, under hostile headers: the fuzzer also reaches decoding and the answers.
valid = st.sampled_from(
    [
        ("application/x-www-form-urlencoded", b"q=Hello.&source=en&target=ja"),
        (None, b"q=<p>Hi <b>there</b> &amp; bye</p>&source=auto&target=ja&format=html&alternatives=1"),
        ("application/json", b'{"q": ["Good morning."], "source": "en", "target": "ja"}'),
        (
            "application/json",
            b'{"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["12+7"]}]}',
        ),
    ]
)
timeouts = st.one_of(
    st.none(), st.sampled_from(["0", "-1", "nan", "inf", "1e999", "0.0001", "soon", "²", "5"])
)
header_lengths = st.one_of(
    st.none(),
    st.sampled_from(["-1", "0", "5", "99999999999999999999", "²", " 3", "+1"]),
    st.integers(0, 300).map(str),
)


@st.composite
def requests(draw, operations):
    method, path, op = draw(st.sampled_from(operations))
    mutating = path.endswith(MUTATING)
    for name in ("{model}", "{version}"):
        if name in path:
            value = draw(
                st.one_of(
                    st.sampled_from(["1", "2", "0", "-1", "x" * 300])
                    if name == "{version}"
                    else (
                        st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
                        if mutating
                        else st.sampled_from(SERVED)
                    ),
                    st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20),
                )
            )
            path = path.replace(name, quote(value, safe="") or "x")
    headers = {}
    auth = draw(
        st.one_of(
            st.just(b"Bearer " + TOKEN.encode()),
            st.just(b"Bearer " + TOKEN.encode()),
            st.none(),
            st.binary(max_size=30).filter(lambda b: not set(b) & {0, 10, 13}).map(lambda b: b.strip()),
        )
    )
    if auth is not None:
        headers["Authorization"] = auth
    if (t := draw(timeouts)) is not None:
        headers["X-Timeout-Seconds"] = t
    kind = draw(
        st.sampled_from(["shaped", "any", "raw", "valid"])
        if method == "post"
        else st.sampled_from(["none", "raw"])
    )
    if kind == "none":
        return method.upper(), path, headers, None
    if kind == "valid":
        ctype, body = draw(valid)
    elif kind == "raw":
        body, ctype = draw(raw_bodies), draw(content_types)
    else:
        shape = (
            infer_body
            if path.endswith("/infer")
            else translate_body
            if path in ("/translate", "/detect")
            else values
        )
        body = json.dumps(draw(shape if kind == "shaped" else values), ensure_ascii=True).encode()
        ctype = draw(st.sampled_from(["application/json", "application/json", None, "text/plain"]))
        if path.endswith("/infer") and (n := draw(header_lengths)) is not None:
            headers["Inference-Header-Content-Length"] = n
            body += draw(st.binary(max_size=20))
    if ctype:
        headers["Content-Type"] = ctype
    return method.upper(), path, headers, body


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, model_repo):
    srv = Served(tmp_path_factory.mktemp("fuzz"), "--auth-token", TOKEN)
    yield srv
    srv.stop()


def _operations(srv) -> list[tuple[str, str, dict]]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=30)
    conn.request("GET", "/openapi.json")  # open with auth on
    doc = json.loads(conn.getresponse().read())
    conn.close()
    ops = [
        (m, p, op)
        for p, item in doc["paths"].items()
        for m, op in item.items()
        if m in ("get", "post", "put", "delete")
    ]
    assert len(ops) >= 15, ops
    return ops


def test_hostile_requests_on_every_route_get_4xx_and_no_traceback(fuzzed):
    operations = _operations(fuzzed)
    seen: dict[str, set[int]] = {}

    @settings(
        max_examples=1500,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(requests(operations))
    def check(req):
        method, path, headers, body = req
        conn = http.client.HTTPConnection("127.0.0.1", fuzzed.http_port, timeout=60)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for k, v in headers.items():
                conn.putheader(k, v if isinstance(v, bytes) else v.encode("utf-8"))
            conn.putheader("Content-Length", str(len(body or b"")))
            conn.endheaders(body)
            response = conn.getresponse()
            status, text = response.status, response.read()
        except (ConnectionError, socket.timeout, http.client.RemoteDisconnected) as e:
            raise AssertionError(f"{method} {path} {headers}: no answer ({e!r})") from None
        finally:
            conn.close()
        seen.setdefault(path.split("/")[1], set()).add(status)
        deadline_set = "X-Timeout-Seconds" in headers
        assert status < 500 or (status == 504 and deadline_set), (
            method,
            path,
            headers,
            body[:300] if body else body,
            status,
            text[:300],
        )

    check()
    log = fuzzed.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-4000:]
    assert any(s == 400 for statuses in seen.values() for s in statuses), (
        seen
    )  # the fuzzer reached the parsers
    assert 200 in seen.get("translate", ()) and 200 in seen.get("v2", ()), (
        seen
    )  # and valid requests were served
