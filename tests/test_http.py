"""KServe v2 over HTTP/REST through the real `tritonclient.http` (sync and aio, binary and JSON tensors)
and plain HTTP, against the server's aiohttp front door on loopback."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.http as th
import tritonclient.http.aio as th_aio
from conftest import ServerThread, english, served_version, server_config
from tritonclient.utils import InferenceServerException

from s2s.seq2seq_client import Seq2SeqClient
from server.config import SchedulerConfig

ADD, JA = "addition", "translate-en-ja"
SAMPLES = {ADD: ["12+30", "999+1", "7+8"], JA: None}


SAMPLES[JA] = english(3)


def url(srv: ServerThread) -> str:
    return f"127.0.0.1:{srv.running.web.port}"


def text_input(texts: list[str], binary: bool) -> th.InferInput:
    t = th.InferInput("text_input", [len(texts)], "BYTES")
    t.set_data_from_numpy(np.array([s.encode() for s in texts], dtype=object), binary_data=binary)
    return t


def call(srv: ServerThread, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    req = urllib.request.Request(f"http://{url(srv)}{path}", data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def infer_body(texts: list[str], **params) -> bytes:
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [len(texts)], "data": texts}]}
    if params:
        body["parameters"] = params
    return json.dumps(body).encode()


@pytest.fixture(scope="module")
def client(server):
    c = th.InferenceServerClient(url(server))
    yield c
    c.close()


def test_health_and_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    ja_version = served_version(JA).name
    assert client.is_model_ready(ADD) and client.is_model_ready(JA, ja_version)
    assert not client.is_model_ready("no-such-model")
    meta = client.get_server_metadata()
    assert meta["name"] == "s2s" and "model_configuration" in meta["extensions"]
    m = client.get_model_metadata(JA)
    assert m["name"] == JA and m["versions"] == [ja_version]
    assert {"name": "text_input", "datatype": "BYTES", "shape": [-1]} in m["inputs"]
    cfg = client.get_model_config(ADD)
    assert cfg["name"] == ADD and cfg["input"][0]["dims"] == [-1]
    assert int(cfg["parameters"]["max_inputs_per_request"]["string_value"]) == 64
    index = client.get_model_repository_index()
    assert {(m["name"], m["state"]) for m in index} == {(ADD, "READY"), (JA, "READY")}


@pytest.mark.parametrize("model", [ADD, JA])
@pytest.mark.parametrize("binary", [True, False])
def test_infer_matches_grpc(client, server, model, binary):
    texts = SAMPLES[model]
    outputs = [th.InferRequestedOutput("text_output", binary_data=binary)]
    result = client.infer(model, [text_input(texts, binary)], outputs=outputs)
    got = [v.decode() if isinstance(v, bytes) else v for v in result.as_numpy("text_output").tolist()]
    with Seq2SeqClient(server.address) as c:
        assert got == c.generate(model, texts)
    if model == ADD:
        assert got == ["42", "1000", "15"]


def test_default_outputs_are_binary_and_options_apply(client, server):
    """tritonclient.http without `outputs` asks for binary_data_output; beam and token options as parameters."""
    result = client.infer(JA, [text_input(SAMPLES[JA], True)], parameters={"beam_width": 4, "max_tokens": 5})
    got = [v.decode() for v in result.as_numpy("text_output").tolist()]
    with Seq2SeqClient(server.address) as c:
        assert got == c.generate(JA, SAMPLES[JA], beam_size=4, max_new_tokens=5)


def test_aio_client_concurrent(server):
    async def main():
        c = th_aio.InferenceServerClient(url(server))
        try:
            assert await c.is_server_ready()
            problems = [(a, 1000 - a) for a in range(0, 1000, 31)]
            calls = [
                c.infer(ADD, [text_input([f"{a}+{b}"], i % 2 == 0)]) for i, (a, b) in enumerate(problems)
            ]
            results = await asyncio.gather(*calls)
            return problems, [r.as_numpy("text_output")[0] for r in results]
        finally:
            await c.close()

    problems, got = asyncio.run(main())
    wrong = [
        (a, b, g)
        for (a, b), g in zip(problems, got)
        if (g.decode() if isinstance(g, bytes) else g) != str(a + b)
    ]
    assert len(wrong) <= 1, wrong


@pytest.mark.parametrize(
    "path, body, status, message",
    [
        ("/v2/models/addition/infer", b"{not json", 400, "not valid JSON"),
        ("/v2/models/addition/infer", b"[1, 2]", 400, "must be a JSON object"),
        ("/v2/models/addition/infer", b'{"inputs": []}', 400, "non-empty JSON array"),
        (
            "/v2/models/addition/infer",
            b'{"inputs":[{"name":"text_input","datatype":"FP32","shape":[1],"data":[1.5]}]}',
            400,
            "expects 'BYTES'",
        ),
        (
            "/v2/models/addition/infer",
            b'{"inputs":[{"name":"text_input","datatype":"BYTES","shape":[2],"data":["1+1"]}]}',
            400,
            "needs 2",
        ),
        (
            "/v2/models/addition/infer",
            b'{"inputs":[{"name":"text_input","datatype":"BYTES","shape":"x","data":["1+1"]}]}',
            400,
            "array of integers",
        ),
        (
            "/v2/models/addition/infer",
            b'{"inputs":[{"name":"nope","datatype":"BYTES","shape":[1],"data":["1+1"]}]}',
            400,
            "unexpected inference input",
        ),
        ("/v2/models/addition/infer", infer_body(["1+1"], beam_width=1000), 400, "beam_width=1000"),
        ("/v2/models/addition/infer", infer_body(["1" * 100]), 400, "characters"),
        ("/v2/models/nope/infer", infer_body(["1+1"]), 404, "not served here"),
        ("/v2/models/addition/versions/7/infer", infer_body(["1+1"]), 404, "no version '7'"),
        ("/v2/nowhere", None, 404, "no such path"),
    ],
)
def test_bad_requests_get_their_status_and_a_json_error(server, path, body, status, message):
    code, raw = call(
        server, "POST" if body is not None else "GET", path, body, {"Content-Type": "application/json"}
    )
    assert code == status, raw
    assert message in json.loads(raw)["error"], raw


def test_binary_extension_is_checked(server):
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "text_input",
                    "datatype": "BYTES",
                    "shape": [1],
                    "parameters": {"binary_data_size": 100},
                }
            ]
        }
    ).encode()
    code, raw = call(
        server,
        "POST",
        "/v2/models/addition/infer",
        header + b"\x03\x00\x00\x001+1",
        {"Inference-Header-Content-Length": str(len(header))},
    )
    assert code == 400 and "binary_data_size 100" in json.loads(raw)["error"]
    code, raw = call(
        server, "POST", "/v2/models/addition/infer", header, {"Inference-Header-Content-Length": "99999"}
    )
    assert code == 400 and "Inference-Header-Content-Length" in json.loads(raw)["error"]


def test_oversized_body_is_413(model_repo):
    srv = ServerThread(server_config(max_message_bytes=64 * 1024))
    try:
        code, raw = call(srv, "POST", "/v2/models/addition/infer", infer_body(["1" * 100_000]))
        assert code == 413 and "over the limit" in json.loads(raw)["error"]
    finally:
        srv.stop()


def test_queue_full_is_429_deadline_504_and_draining_503(model_repo):
    srv = ServerThread(
        server_config(instances=1, scheduler=SchedulerConfig(mode="none", max_batch_size=1, max_queue_size=4))
    )
    try:
        texts = english(4)

        async def flood():
            c = th_aio.InferenceServerClient(url(srv))
            try:
                calls = [
                    c.infer(JA, [text_input(texts, False)], parameters={"beam_width": 1}) for _ in range(6)
                ]
                return await asyncio.gather(*calls, return_exceptions=True)
            finally:
                await c.close()

        results = asyncio.run(flood())
        refused = [r for r in results if isinstance(r, InferenceServerException)]
        assert refused and all(r.status() == "429" and "queue full" in r.message() for r in refused)
        code, raw = call(
            srv,
            "POST",
            f"/v2/models/{JA}/infer",
            infer_body(texts, max_tokens=60),
            {"X-Timeout-Seconds": "0.001"},
        )
        assert code == 504 and "deadline" in json.loads(raw)["error"]
        code, raw = call(
            srv, "POST", f"/v2/models/{JA}/infer", infer_body(texts), {"X-Timeout-Seconds": "soon"}
        )
        assert code == 400 and "X-Timeout-Seconds" in json.loads(raw)["error"]
        for model in srv.running.repo.all():
            model.stop()  # what shutdown does first
        code, raw = call(srv, "POST", f"/v2/models/{ADD}/infer", infer_body(["1+1"]))
        assert code == 503 and "not ready" in json.loads(raw)["error"]
        code, _ = call(srv, "GET", "/v2/health/ready")
        assert code == 503
    finally:
        srv.stop()


def test_bearer_token_on_http(model_repo):
    srv = ServerThread(server_config(auth_token="s3cret"))
    try:
        good = {"Authorization": "Bearer s3cret"}
        code, raw = call(srv, "POST", f"/v2/models/{ADD}/infer", infer_body(["1+1"]))
        assert code == 401 and "Bearer" in json.loads(raw)["error"]
        code, _ = call(srv, "GET", f"/v2/models/{ADD}/config")
        assert code == 401
        code, raw = call(
            srv, "POST", f"/v2/models/{ADD}/infer", infer_body(["1+1"]), {"Authorization": "Bearer wrong"}
        )
        assert code == 401
        code, raw = call(srv, "POST", f"/v2/models/{ADD}/infer", infer_body(["1+1"]), good)
        assert code == 200 and json.loads(raw)["outputs"][0]["data"] == ["2"]
        assert call(srv, "GET", "/v2/health/ready")[0] == 200  # probes need no token
        c = th.InferenceServerClient(url(srv))
        try:
            result = c.infer(ADD, [text_input(["2+2"], True)], headers=good)
            assert result.as_numpy("text_output")[0] == b"4"
            with pytest.raises(InferenceServerException) as e:
                c.infer(ADD, [text_input(["2+2"], True)])
            assert e.value.status() == "401"
        finally:
            c.close()
    finally:
        srv.stop()


def _requests_total(srv: ServerThread) -> dict[tuple[str, str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{srv.config.metrics_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    return {
        (s.labels["method"], s.labels["protocol"], s.labels["code"]): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "s2s_requests_total" and s.labels["model"] == ADD
    }


def test_grpc_and_http_give_the_same_outputs_and_move_the_same_metrics(server, client):
    import tritonclient.grpc as tg

    texts = SAMPLES[ADD]
    before = _requests_total(server)
    g = tg.InferenceServerClient(server.address)
    try:
        t = tg.InferInput("text_input", [len(texts)], "BYTES")
        t.set_data_from_numpy(np.array([s.encode() for s in texts], dtype=object))
        via_grpc = g.infer(ADD, [t]).as_numpy("text_output").tolist()
        with pytest.raises(InferenceServerException):
            bad = tg.InferInput("text_input", [1], "BYTES")
            bad.set_data_from_numpy(np.array([b"12+ab"], dtype=object))
            g.infer(ADD, [bad])
    finally:
        g.close()
    via_http = client.infer(ADD, [text_input(texts, True)]).as_numpy("text_output").tolist()
    with pytest.raises(InferenceServerException):
        client.infer(ADD, [text_input(["12+ab"], True)])
    after = _requests_total(server)
    assert via_grpc == via_http
    for protocol in ("grpc", "http"):
        for code in ("OK", "INVALID_ARGUMENT"):
            key = ("ModelInfer", protocol, code)
            assert after.get(key, 0) - before.get(key, 0) == 1, (key, before, after)


def test_tls_serves_https_on_the_http_port(model_repo, tmp_path):
    import ssl

    from conftest import self_signed

    cert, key = self_signed(tmp_path)
    srv = ServerThread(server_config(tls_cert=cert, tls_key=key))
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        req = urllib.request.Request(
            f"https://localhost:{srv.running.web.port}/v2/models/{ADD}/infer",
            data=infer_body(["20+22"]),
            method="POST",
        )
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            assert json.loads(r.read())["outputs"][0]["data"] == ["42"]
        import http.client

        with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
            # plain HTTP to the TLS port: the handshake fails and nothing is served in clear
            urllib.request.urlopen(
                f"http://127.0.0.1:{srv.running.web.port}/v2/health/ready", timeout=5
            ).read()
    finally:
        srv.stop()


@pytest.mark.parametrize("binary", [True, False])
def test_token_counts_and_timings_on_request(client, server, binary):
    """input_tokens / output_tokens (INT64) come only when asked for; so do the timings (response parameters)."""
    import tritonclient.grpc as tg

    texts = SAMPLES[JA]
    outputs = [
        th.InferRequestedOutput(n, binary_data=binary)
        for n in ("text_output", "input_tokens", "output_tokens")
    ]
    result = client.infer(JA, [text_input(texts, binary)], outputs=outputs, parameters={"timings": True})
    with Seq2SeqClient(server.address) as c:
        want = c.generate_full(JA, texts)
    assert result.as_numpy("input_tokens").tolist() == [o.input_tokens for o in want.outputs]
    assert result.as_numpy("output_tokens").tolist() == [o.output_tokens for o in want.outputs]
    params = result.get_response()["parameters"]
    assert params["total_seconds"] >= params["time_to_first_token_seconds"] > 0
    assert "parameters" not in client.infer(JA, [text_input(texts, binary)], outputs=outputs).get_response()
    assert (
        client.infer(JA, [text_input(texts, binary)]).as_numpy("input_tokens") is None
    )  # not asked: not sent
    g = tg.InferenceServerClient(server.address)
    try:
        t = tg.InferInput("text_input", [len(texts)], "BYTES")
        t.set_data_from_numpy(np.array([s.encode() for s in texts], dtype=object))
        r = g.infer(JA, [t], outputs=[tg.InferRequestedOutput(n) for n in ("text_output", "output_tokens")])
        assert r.as_numpy("output_tokens").tolist() == [o.output_tokens for o in want.outputs]
        assert not r.get_response().parameters  # timings not asked for
        timed = g.infer(JA, [t], parameters={"timings": True}).get_response().parameters
        assert timed["total_seconds"].double_param >= timed["queue_seconds"].double_param >= 0
    finally:
        g.close()
