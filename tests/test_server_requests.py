"""The gRPC server through real grpc.aio on loopback, with the committed default models, on one server for
the module: concurrent and streaming requests, deadlines and cancellation, bad input and oversized messages, the
metrics, health, reflection and the model listing.
"""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request

import grpc
import pytest
from conftest import ServerThread, english, wait_for
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from s2s.seq2seq_client import Seq2SeqClient

ADD, JA = "addition", "translate-en-ja"


def scrape(srv: ServerThread) -> str:
    return (
        urllib.request.urlopen(f"http://127.0.0.1:{srv.config.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )


def sample(srv_text: str, name: str, **labels) -> float:
    """Sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in srv_text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def test_200_concurrent_mixed_requests_are_all_answered(server):
    async def main():
        async with grpc.aio.insecure_channel(server.address) as ch:
            stub = pb_grpc.Seq2SeqStub(ch)
            calls = []
            problems = [(a, b) for a, b in zip(range(0, 1000, 7), range(999, 0, -9))][:100]
            for a, b in problems:
                calls.append(stub.Generate(pb.GenerateRequest(model=ADD, inputs=[f"{a}+{b}"]), timeout=60))
            texts = english(100)
            for t in texts:
                calls.append(stub.Generate(pb.GenerateRequest(model=JA, inputs=[t]), timeout=60))
            replies = await asyncio.gather(*calls)
            return problems, texts, replies

    problems, texts, replies = asyncio.run(main())
    assert len(replies) == 200
    wrong = [
        (a, b, r.outputs[0].text)
        for (a, b), r in zip(problems, replies[:100])
        if r.outputs[0].text != str(a + b)
    ]
    assert len(wrong) <= 1, wrong  # the model is >= 99.5% exact; the arithmetic is checked, not trusted
    for r in replies[100:]:
        assert r.model == JA and len(r.outputs) == 1 and r.outputs[0].output_tokens > 0 and r.outputs[0].text
    model = server.running.repo.get(JA)
    if len(model.cores) > 1:  # the router spread the load: every engine core decoded
        text = scrape(server)
        assert all(
            sample(text, "s2s_decode_step_duration_seconds_count", model=JA, core=str(i)) > 0
            for i in range(len(model.cores))
        )
    elif model.cores[
        0
    ].spec.scheduler.encoder_thread:  # queued requests were encoded on it while the loop decoded
        assert model.encoded_ahead > 0
    else:  # one core, no encoder thread (one usable CPU): the step loop encoded every newcomer itself
        assert model.encoded_ahead == 0


def test_outputs_come_back_in_input_order_with_counts_and_timings(server):
    with Seq2SeqClient(server.address) as c:
        resp = c.generate_full(ADD, ["1+1", "999+999", "40+2"])
    assert [o.text for o in resp.outputs] == ["2", "1998", "42"]
    assert resp.outputs[1].input_tokens == 8 and resp.outputs[1].output_tokens == 4
    assert resp.timings.total_seconds >= resp.timings.time_to_first_token_seconds > 0


def test_streaming_yields_the_same_text_as_unary(server):
    texts = english(4)
    with Seq2SeqClient(server.address) as c:
        unary = c.generate(JA, texts)
        pieces = {i: "" for i in range(len(texts))}
        finals = {}
        for ev in c.stream(JA, texts):
            pieces[ev.index] += ev.text_delta
            if ev.finished:
                finals[ev.index] = ev.output.text
    assert [pieces[i] for i in range(len(texts))] == unary
    assert [finals[i] for i in range(len(texts))] == unary


def test_deadline_and_cancellation_free_the_slot(server):
    long_input = ["Open the file in a new window and save all changes"] * 8
    with Seq2SeqClient(server.address, timeout=0.002) as c:
        with pytest.raises(grpc.RpcError) as e:
            c.generate(JA, long_input, max_new_tokens=60, beam_size=4)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    with Seq2SeqClient(server.address) as c:
        stream = c.stream(JA, long_input, max_new_tokens=60)
        next(stream)  # decoding has started
        stream.cancel()
    assert wait_for(lambda: sample(scrape(server), "s2s_active_sequences", model=JA) == 0)
    assert wait_for(lambda: sample(scrape(server), "s2s_queued_sequences", model=JA) == 0)
    with Seq2SeqClient(server.address) as c:  # and the model still answers
        assert c.generate(ADD, ["2+2"]) == ["4"]


@pytest.mark.parametrize(
    "request_kw, code, message",
    [
        (dict(model="nope", inputs=["1+1"]), "NOT_FOUND", "not served here"),
        (dict(model=ADD, version="99", inputs=["1+1"]), "NOT_FOUND", "no version '99'"),
        (dict(model=ADD, inputs=[]), "INVALID_ARGUMENT", "no inputs"),
        (dict(model=ADD, inputs=["  "]), "INVALID_ARGUMENT", "input 0 is empty"),
        (dict(model=ADD, inputs=["1+1"] * 65), "INVALID_ARGUMENT", "the limit is 64"),
        (dict(model=ADD, inputs=["1" * 100 + "+1"]), "INVALID_ARGUMENT", "accepts at most"),
        (dict(model=ADD, inputs=["12 + x"]), "INVALID_ARGUMENT", "outside the model's vocabulary"),
        (
            dict(model=ADD, inputs=["1+1"], options=pb.GenerateOptions(beam_size=1000)),
            "INVALID_ARGUMENT",
            "beam_size=1000",
        ),
        (
            dict(model=ADD, inputs=["1+1"], options=pb.GenerateOptions(max_new_tokens=100000)),
            "INVALID_ARGUMENT",
            "max_new_tokens=100000",
        ),
    ],
)
def test_bad_input_gets_its_status_and_the_server_stays_healthy(server, request_kw, code, message):
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.Seq2SeqStub(ch).Generate(pb.GenerateRequest(**request_kw), timeout=10)
        assert e.value.code().name == code and message in e.value.details(), e.value.details()
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert (
            pb_grpc.Seq2SeqStub(ch)
            .Generate(pb.GenerateRequest(model=ADD, inputs=["3+4"]), timeout=10)
            .outputs[0]
            .text
            == "7"
        )


def test_oversized_message_is_refused(server):
    with grpc.insecure_channel(server.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.Seq2SeqStub(ch).Generate(
                pb.GenerateRequest(model=ADD, inputs=["1+1" * 2_000_000]), timeout=10
            )
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_metrics_move_and_pass_promtool(server):
    before = scrape(server)
    with Seq2SeqClient(server.address) as c:
        c.generate(ADD, ["10+20", "5+6"])
        with pytest.raises(grpc.RpcError):
            c.generate(ADD, ["oops"])
    after = scrape(server)
    d = lambda name, **kw: sample(after, name, **kw) - sample(before, name, **kw)  # noqa: E731
    assert d("s2s_requests_total", model=ADD, method="Generate", code="OK") == 1
    assert d("s2s_requests_total", model=ADD, method="Generate", code="INVALID_ARGUMENT") == 1
    assert d("s2s_request_duration_seconds_count", model=ADD, method="Generate") == 2
    assert d("s2s_input_tokens_total", model=ADD) == 6 + 4
    assert d("s2s_generated_tokens_total", model=ADD) == 2 + 2
    assert d("s2s_queue_duration_seconds_count", model=ADD) == 2
    assert d("s2s_time_to_first_token_seconds_count", model=ADD) == 2
    assert d("s2s_decode_step_duration_seconds_count", model=ADD) >= 3
    assert d("s2s_batch_size_sum", model=ADD) >= 2
    assert sample(after, "s2s_model_info", model=ADD, version="1") == 1
    assert 'provider="CPUExecutionProvider"' in after or 'provider="CUDAExecutionProvider"' in after
    promtool = subprocess.run(["promtool", "check", "metrics"], input=after, capture_output=True, text=True)
    assert promtool.returncode == 0, promtool.stdout + promtool.stderr


def test_health_reflection_and_model_listing(server):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

    with grpc.insecure_channel(server.address) as ch:
        hs = health_pb2_grpc.HealthStub(ch)
        for svc in ("", "seq2seq.v1.Seq2Seq"):
            assert (
                hs.Check(health_pb2.HealthCheckRequest(service=svc), timeout=5).status
                == health_pb2.HealthCheckResponse.SERVING
            )
        services = set(ProtoReflectionDescriptorDatabase(ch).get_services())
        assert {"seq2seq.v1.Seq2Seq", "grpc.health.v1.Health"} <= services
        models = {
            m.name: m for m in pb_grpc.Seq2SeqStub(ch).ListModels(pb.ListModelsRequest(), timeout=5).models
        }
    assert set(models) == {ADD, JA}
    assert (
        models[ADD].task == "addition" and models[ADD].max_input_tokens > 8 and models[ADD].versions == ["1"]
    )
