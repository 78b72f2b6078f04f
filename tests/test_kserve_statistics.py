"""Triton's statistics extension (server/kserve/statistics.py, server/telemetry/model_statistics.py) read by the real
tritonclient, over gRPC and REST, on a real server: the figures agree with the requests sent, of every door.

(Triton's perf_analyzer reads these too; it is not run here: PyPI's perf-analyzer 0.1.0 is an empty placeholder
and the tritonclient wheel carries no perf_analyzer program; it ships in Triton's SDK container.)"""

from __future__ import annotations

import json
import queue
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from conftest import MODEL_REPO, ServerThread, server_config
from google.protobuf import json_format
from libretranslatepy import LibreTranslateAPI
from tritonclient.utils import InferenceServerException

from s2s.seq2seq_client import Seq2SeqClient

pytestmark = pytest.mark.skipif(
    not (MODEL_REPO / "translate-en-ja" / "2").is_dir(), reason="no translate-en-ja version 2"
)
TIMEOUT = 60
SUMS = ["12+30", "7+5"]


@pytest.fixture(scope="module")
def srv(model_repo):
    s = ServerThread(server_config(instances=1))
    yield s
    s.stop()


def bytes_input(texts: list[str]) -> triton_grpc.InferInput:
    inp = triton_grpc.InferInput("text_input", [len(texts)], "BYTES")
    inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
    return inp


def grpc_stats(client, name: str = "", version: str = "") -> dict:
    """tritonclient's gRPC answer as Triton's JSON with numbers (its as_json gives uint64 as strings)."""
    message = client.get_inference_statistics(name, version)
    return json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


UINT64 = {"last_inference", "inference_count", "execution_count", "batch_size", "count", "ns"}


def numbers(d):
    """protobuf's JSON (uint64 as strings) in the form of Triton's REST JSON."""
    if isinstance(d, dict):
        return {k: int(v) if k in UINT64 else numbers(v) for k, v in d.items()}
    if isinstance(d, list):
        return [numbers(v) for v in d]
    return d


def test_figures_agree_with_the_requests_sent(srv):
    """3 successful ModelInfer of 2 inputs each and 2 refused ones (a wrong datatype, a beam out of range) to
    addition; tritonclient's get_inference_statistics over gRPC and HTTP both say so."""
    before_ms = time.time_ns() // 1_000_000
    client = triton_grpc.InferenceServerClient(srv.address)
    http = triton_http.InferenceServerClient(f"127.0.0.1:{srv.running.web.port}")
    try:
        for _ in range(3):
            result = client.infer("addition", [bytes_input(SUMS)])
            assert [b.decode() for b in result.as_numpy("text_output")] == ["42", "12"]
        wrong = triton_grpc.InferInput("text_input", [1], "INT64")
        wrong.set_data_from_numpy(np.array([1], dtype=np.int64))
        with pytest.raises(InferenceServerException, match="BYTES"):
            client.infer("addition", [wrong])
        with pytest.raises(InferenceServerException, match="beam_width=99"):
            client.infer("addition", [bytes_input(SUMS)], parameters={"beam_width": 99})
        with pytest.raises(InferenceServerException):  # no such model: in no model's figures
            client.infer("no-such-model", [bytes_input(SUMS)])

        over_grpc = grpc_stats(client, "addition")
        over_http = http.get_inference_statistics("addition")
    finally:
        client.close()
        http.close()
    assert numbers(over_grpc) == over_http  # both bindings, one answer
    [stat] = over_http["model_stats"]
    assert (stat["name"], stat["version"]) == ("addition", "1")
    assert before_ms <= stat["last_inference"] <= time.time_ns() // 1_000_000
    assert (stat["inference_count"], stat["execution_count"]) == (6, 3)  # 2 inputs a request
    s = stat["inference_stats"]
    assert s["success"]["count"] == 3 and s["fail"]["count"] == 2
    assert all(s[p]["count"] == 3 for p in ("queue", "compute_input", "compute_infer", "compute_output"))
    assert s["success"]["ns"] > 0 and s["fail"]["ns"] > 0 and s["compute_infer"]["ns"] > 0
    # The phases of a request lie within its time in the server.
    assert (
        sum(s[p]["ns"] for p in ("queue", "compute_input", "compute_infer", "compute_output"))
        <= s["success"]["ns"]
    )
    assert s["cache_hit"] == s["cache_miss"] == {"count": 0, "ns": 0}
    [batch] = stat["batch_stats"]
    assert batch["batch_size"] == 2 and batch["compute_infer"]["count"] == 3
    assert batch["compute_infer"]["ns"] == s["compute_infer"]["ns"]


def get(srv, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{srv.running.web.port}/{path}", timeout=TIMEOUT) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_every_door_counts_for_the_version_that_served(srv):
    """seq2seq.v1 Generate and GenerateStream, LibreTranslate /translate, KServe REST infer and ModelStreamInfer count for
    translate-en-ja version 2 (the served one); version 1 is not served, so it has no figures to show."""
    texts = ["Save", "Open File"]

    def en_ja() -> dict:
        status, body = get(srv, "v2/models/translate-en-ja/versions/2/stats")
        assert status == 200, body
        [stat] = body["model_stats"]
        return stat

    before = en_ja()
    with Seq2SeqClient(srv.address) as c:
        c.generate("translate-en-ja", texts)
        list(c.stream("translate-en-ja", texts))
    LibreTranslateAPI(f"http://127.0.0.1:{srv.running.web.port}/").translate(
        "Save", "en", "ja", timeout=TIMEOUT
    )
    http = triton_http.InferenceServerClient(f"127.0.0.1:{srv.running.web.port}")
    try:
        inp = triton_http.InferInput("text_input", [2], "BYTES")
        inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
        http.infer("translate-en-ja", [inp])
    finally:
        http.close()
    stream, answers = triton_grpc.InferenceServerClient(srv.address), queue.Queue()
    try:
        stream.start_stream(callback=lambda result, error: answers.put(error))
        for i, text in enumerate(texts):
            stream.async_stream_infer("translate-en-ja", [bytes_input([text])], request_id=str(i))
        assert [answers.get(timeout=TIMEOUT) for _ in texts] == [None, None]
        stream.stop_stream()
    finally:
        stream.close()
    after = en_ja()
    # Generate, GenerateStream, /translate, REST infer, two ModelStreamInfer requests
    assert after["execution_count"] - before["execution_count"] == 6
    assert after["inference_count"] - before["inference_count"] == 2 + 2 + 1 + 2 + 1 + 1
    assert after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"] == 6
    assert after["inference_stats"]["fail"] == before["inference_stats"]["fail"]

    status, body = get(srv, "v2/models/stats")
    assert status == 200
    assert [(m["name"], m["version"]) for m in body["model_stats"]] == [
        ("addition", "1"),
        ("translate-en-ja", "2"),
    ]
    assert get(srv, "v2/models/translate-en-ja/stats")[1]["model_stats"] == [after]
    status, body = get(srv, "v2/models/translate-en-ja/versions/1/stats")
    assert status == 404 and "has no version '1' loaded" in body["error"], body
    status, body = get(srv, "v2/models/no-such-model/stats")
    assert status == 404 and "no-such-model" in body["error"], body


def test_grpc_errors_and_server_metadata(srv):
    client = triton_grpc.InferenceServerClient(srv.address)
    try:
        assert "statistics" in client.get_server_metadata().extensions
        with pytest.raises(InferenceServerException) as e:
            client.get_inference_statistics("no-such-model")
        assert e.value.status() == "StatusCode.NOT_FOUND" and "no-such-model" in e.value.message()
        with pytest.raises(InferenceServerException) as e:
            client.get_inference_statistics("", "1")
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "name the model" in e.value.message()
        every = grpc_stats(client)["model_stats"]
        assert [(m["name"], m["version"]) for m in every] == [("addition", "1"), ("translate-en-ja", "2")]
    finally:
        client.close()
