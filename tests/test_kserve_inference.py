"""The KServe v2 / Triton gRPC protocol (server/kserve/) serving, with the real tritonclient against a real
server: health, metadata and the repository index, inference in both tensor encodings and with options, the aio
and streaming clients, one set of metrics with the Seq2Seq API, and the deployed configuration.

test_generated_module_in_a_fresh_process covers the server exactly as deployed, with our generated stubs and
without tritonclient in the process.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import textwrap
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.grpc.aio as triton_aio
from conftest import MODEL_REPO, ROOT
from kserve_grpc import MODELS, SAMPLES, TIMEOUT, contents_request, outputs_of, seq2seq, text_input
from tritonclient.utils import InferenceServerException

from protos.inference import grpc_service_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def client(server):
    c = triton.InferenceServerClient(server.address)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.address)
    yield pb_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def test_health_and_metadata(client, server):
    assert client.is_server_live()
    assert client.is_server_ready()
    for model in MODELS:
        assert client.is_model_ready(model)
        for version in client.get_model_metadata(model).versions:
            assert client.is_model_ready(model, version)
    assert client.is_model_ready("no-such-model") is False
    assert client.is_model_ready(MODELS[0], "999") is False

    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "s2s" and meta["version"]
    assert "model_configuration" in meta["extensions"]

    for model in MODELS:
        m = client.get_model_metadata(model, as_json=True)
        assert m["name"] == model and m["versions"] and m["platform"]
        inputs = {t["name"]: (t["datatype"], t["shape"]) for t in m["inputs"]}
        assert inputs["text_input"] == ("BYTES", ["-1"])  # MessageToJson writes int64 as strings
        assert {t["name"]: (t["datatype"], t["shape"]) for t in m["outputs"]} == {
            "text_output": ("BYTES", ["-1"]),
            "input_tokens": ("INT64", ["-1"]),
            "output_tokens": ("INT64", ["-1"]),
            "hypotheses": ("BYTES", ["-1", "-1"]),
            "scores": ("FP32", ["-1", "-1"]),
            "protected_spans": ("BYTES", ["-1"]),
            "pieces": ("INT64", ["-1"]),
        }
        assert set(inputs) == {"text_input", "target_prefix", "max_tokens", "beam_width"}

        cfg = client.get_model_config(model).config
        assert cfg.name == model and cfg.max_batch_size == 0
        assert [(i.name, i.optional) for i in cfg.input] == [
            ("text_input", False),
            ("target_prefix", True),
            ("max_tokens", True),
            ("beam_width", True),
        ]
        assert [o.name for o in cfg.output] == [
            "text_output",
            "input_tokens",
            "output_tokens",
            "hypotheses",
            "scores",
            "protected_spans",
            "pieces",
        ]
        assert cfg.parameters["num_hypotheses_range"].string_value.startswith("1..")

    index = client.get_model_repository_index(as_json=True)
    assert {m["name"] for m in index["models"]} >= set(MODELS)
    assert all(m["state"] == "READY" for m in index["models"])

    with pytest.raises(InferenceServerException) as e:
        client.get_model_metadata("no-such-model")
    assert e.value.status() == "StatusCode.NOT_FOUND" and "no-such-model" in e.value.message()
    with pytest.raises(InferenceServerException) as e:
        client.get_system_shared_memory_status()  # not implemented: Triton's own answer for a missing extension
    assert e.value.status() == "StatusCode.UNIMPLEMENTED"


def test_reflection_lists_the_service(server):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with grpc.insecure_channel(server.address) as channel:
        assert "inference.GRPCInferenceService" in ProtoReflectionDescriptorDatabase(channel).get_services()


# ---- inference ---------------------------------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
def test_infer_both_encodings_match_seq2seq(client, stub, server, model):
    texts = SAMPLES[model]
    expected = seq2seq(server, model, texts)

    # tritonclient: raw_input_contents in, raw_output_contents out (as Triton).
    result = client.infer(model, [text_input(texts)], request_id="r1", client_timeout=TIMEOUT)
    resp = result.get_response()
    assert (resp.model_name, resp.id) == (model, "r1") and resp.model_version
    assert len(resp.raw_output_contents) == 1
    out = resp.outputs[0]
    assert (out.name, out.datatype, list(out.shape)) == ("text_output", "BYTES", [len(texts)])
    assert outputs_of(result) == expected

    # [N, 1] works too and keeps its shape.
    result = client.infer(
        model, [text_input(texts, [len(texts), 1])], outputs=[triton.InferRequestedOutput("text_output")]
    )
    assert result.as_numpy("text_output").shape == (len(texts), 1)
    assert outputs_of(result) == expected

    # The generated stub with contents.bytes_contents: answered in contents.bytes_contents.
    resp = stub.ModelInfer(contents_request(model, [t.encode() for t in texts], id="r2"), timeout=TIMEOUT)
    assert resp.id == "r2" and not resp.raw_output_contents
    assert [b.decode() for b in resp.outputs[0].contents.bytes_contents] == expected
    assert list(resp.outputs[0].shape) == [len(texts)]


@pytest.mark.parametrize("model", MODELS)
def test_generation_options(client, stub, server, model):
    texts = SAMPLES[model][:2]
    for kw, params in [(dict(max_new_tokens=3), dict(max_tokens=3)), (dict(beam_size=2), dict(beam_width=2))]:
        expected = seq2seq(server, model, texts, **kw)
        assert outputs_of(client.infer(model, [text_input(texts)], parameters=params)) == expected
        # The same option as an optional input of shape [1], INT64 (raw) and INT32 (contents).
        ((key, value),) = params.items()
        opt = triton.InferInput(key, [1], "INT64")
        opt.set_data_from_numpy(np.array([value], dtype=np.int64))
        assert outputs_of(client.infer(model, [text_input(texts), opt])) == expected
        req = contents_request(model, [t.encode() for t in texts])
        t = req.inputs.add(name=key, datatype="INT32", shape=[1])
        t.contents.int_contents.append(value)
        assert [
            b.decode() for b in stub.ModelInfer(req, timeout=TIMEOUT).outputs[0].contents.bytes_contents
        ] == expected
    if model == "addition":
        # max_tokens bounds the output: no answer longer than 3 tokens (characters, for addition's tokenizer).
        assert all(
            len(o) <= 3
            for o in outputs_of(client.infer(model, [text_input(texts)], parameters={"max_tokens": 3}))
        )


@pytest.mark.skipif(
    MODEL_REPO.resolve() != (ROOT / "models").resolve() or not (MODEL_REPO / "addition").is_dir(),
    reason="correctness needs the committed, trained models/ (S2S_TEST_MODEL_REPO points elsewhere)",
)
def test_addition_is_correct(client):
    assert outputs_of(client.infer("addition", [text_input(["12+30"])])) == ["42"]


def test_aio_client_64_concurrent(server):
    model = MODELS[0]
    pool = SAMPLES[model]
    expected = dict(zip(pool, seq2seq(server, model, pool)))

    async def main():
        async with triton_aio.InferenceServerClient(server.address) as c:
            assert await c.is_server_ready() and await c.is_model_ready(model)
            jobs = []
            for i in range(64):
                texts = [pool[i % len(pool)], pool[(i + 1) % len(pool)]]
                jobs.append(
                    (texts, c.infer(model, [text_input(texts)], request_id=str(i), client_timeout=TIMEOUT))
                )
            results = await asyncio.gather(*(j for _, j in jobs))
            return [(texts, r) for (texts, _), r in zip(jobs, results)]

    answered = asyncio.run(main())
    assert len(answered) == 64
    for i, (texts, result) in enumerate(answered):
        assert result.get_response().id == str(i)
        assert outputs_of(result) == [expected[t] for t in texts]


def test_streaming_clients(server):
    model = MODELS[0]
    texts = SAMPLES[model]
    expected = seq2seq(server, model, texts)

    # Sync: start_stream / async_stream_infer; a bad request in the middle fails alone.
    answers: queue.Queue = queue.Queue()
    with triton.InferenceServerClient(server.address) as c:
        c.start_stream(callback=lambda result, error: answers.put((result, error)))
        for i, t in enumerate(texts):
            c.async_stream_infer(model, [text_input([t])], request_id=f"good-{i}")
        bad = triton.InferInput("text_input", [1], "FP32")
        bad.set_data_from_numpy(np.array([1.0], dtype=np.float32))
        c.async_stream_infer(model, [bad], request_id="bad")
        c.async_stream_infer(
            model, [text_input(texts)], request_id="after-bad", enable_empty_final_response=True
        )
        got = [answers.get(timeout=TIMEOUT) for _ in range(len(texts) + 2)]
        c.stop_stream()
    errors = [e for r, e in got if e is not None]
    assert len(errors) == 1 and "[request id: bad]" in str(errors[0]) and "datatype" in str(errors[0])
    results = {r.get_response().id: r for r, e in got if e is None}
    assert {k: outputs_of(r) for k, r in results.items() if k.startswith("good")} == {
        f"good-{i}": [expected[i]] for i in range(len(texts))
    }
    assert outputs_of(results["after-bad"]) == expected
    assert results["after-bad"].get_response().parameters["triton_final_response"].bool_param

    # aio: stream_infer over an async iterator of request dicts.
    async def main():
        async def requests():
            for i, t in enumerate(texts):
                yield {"model_name": model, "inputs": [text_input([t])], "request_id": str(i)}

        async with triton_aio.InferenceServerClient(server.address) as c:
            return [
                (r.get_response().id, outputs_of(r)) async for r, e in c.stream_infer(requests()) if e is None
            ]

    assert sorted(asyncio.run(main())) == sorted((str(i), [expected[i]]) for i in range(len(texts)))


# ---- one service, one set of metrics -----------------------------------------------------------
def _requests_total(server, model: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{server.config.metrics_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "s2s_requests_total" and s.labels["model"] == model and s.labels["code"] == "OK":
                out[s.labels["method"]] = s.value
    return out


def test_both_apis_share_outputs_and_metrics(client, stub, server):
    model = MODELS[0]
    texts = SAMPLES[model]
    before = _requests_total(server, model)
    via_seq2seq = seq2seq(server, model, texts)
    via_kserve = outputs_of(client.infer(model, [text_input(texts)]))
    list(stub.ModelStreamInfer(iter([contents_request(model, [texts[0].encode()])]), timeout=TIMEOUT))
    assert via_kserve == via_seq2seq
    after = _requests_total(server, model)
    for method in ("Generate", "ModelInfer", "ModelStreamInfer"):
        assert after.get(method, 0) == before.get(method, 0) + 1, method

    with pytest.raises(grpc.RpcError):
        stub.ModelInfer(contents_request(model, [b"\xff"]), timeout=TIMEOUT)
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{server.config.metrics_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    assert (
        f's2s_requests_total{{code="INVALID_ARGUMENT",method="ModelInfer",model="{model}",protocol="grpc"}}'
        in text
    )


# ---- the deployed configuration: our generated module, no tritonclient in the process ---------------
def test_generated_module_in_a_fresh_process(client):
    model = MODELS[0]
    texts = SAMPLES[model]
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, "tests")
        import grpc
        from conftest import ServerThread, server_config
        srv = ServerThread(server_config(models=({model!r},)))
        import server.kserve.grpc_binding as kserve
        from protos.inference import grpc_service_pb2 as pb, grpc_service_pb2_grpc as pb_grpc
        assert kserve.pb is pb and pb.DESCRIPTOR.name == "protos/inference/grpc_service.proto", pb.DESCRIPTOR.name
        assert "tritonclient" not in sys.modules
        with grpc.insecure_channel(srv.address) as ch:
            stub = pb_grpc.GRPCInferenceServiceStub(ch)
            t = pb.ModelInferRequest.InferInputTensor(name="text_input", datatype="BYTES", shape=[{len(texts)}])
            t.contents.bytes_contents.extend({[t.encode() for t in texts]!r})
            resp = stub.ModelInfer(pb.ModelInferRequest(model_name={model!r}, inputs=[t]), timeout=60)
            from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
            assert "inference.GRPCInferenceService" in ProtoReflectionDescriptorDatabase(ch).get_services()
        srv.stop()
        print(json.dumps([b.decode() for b in resp.outputs[0].contents.bytes_contents]))
    """)
    env = {**os.environ, "S2S_TEST_MODEL_REPO": str(MODEL_REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == outputs_of(
        client.infer(model, [text_input(texts)])
    )
