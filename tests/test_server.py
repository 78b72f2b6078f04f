"""The gRPC server through real grpc.aio on loopback, with the committed default models."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import urllib.request

import grpc
import pytest
from conftest import (
    MODEL_REPO,
    ROOT,
    ServerThread,
    english,
    free_port,
    self_signed,
    serve_cmd,
    served_version,
    server_config,
    wait_for,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc
from local_serve import serving

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from s2s.seq2seq_client import Seq2SeqClient
from server.config import SchedulerConfig

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


def test_full_queue_gives_resource_exhausted_while_accepted_requests_complete(model_repo):
    srv = ServerThread(
        server_config(scheduler=SchedulerConfig(mode="none", max_batch_size=1, max_queue_size=3), instances=1)
    )
    try:

        async def main():
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = pb_grpc.Seq2SeqStub(ch)
                # Three inputs each: one request fills the queue (3 rows) for as long as its three sequences take at
                # batch 1, so the queue is full when others arrive however fast the machine answers one (a clean-clone
                # run answered all 40 one-input requests before any found the queue full).
                calls = [
                    stub.Generate(pb.GenerateRequest(model=ADD, inputs=[f"{i}+{i}"] * 3), timeout=60)
                    for i in range(40)
                ]
                return await asyncio.gather(*calls, return_exceptions=True)

        results = asyncio.run(main())
        ok = [(i, r) for i, r in enumerate(results) if not isinstance(r, Exception)]
        refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        assert refused and all(
            r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "queue full" in r.details() for r in refused
        )
        # How many get in depends on how fast the core frees the queue (2 of 40 seen on a fast machine): one at least
        assert len(ok) + len(refused) == 40 and len(ok) >= 1
        assert all([o.text for o in r.outputs] == [str(2 * i)] * 3 for i, r in ok)
    finally:
        srv.stop()


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


def test_bearer_token_is_required_and_accepted(model_repo):
    srv = ServerThread(server_config(auth_token="s3cret"))
    try:
        with Seq2SeqClient(srv.address) as c, pytest.raises(grpc.RpcError) as e:
            c.generate(ADD, ["1+2"])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and "Bearer" in e.value.details()
        with Seq2SeqClient(srv.address, token="wrong") as c, pytest.raises(grpc.RpcError) as e:
            c.generate(ADD, ["1+2"])
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with Seq2SeqClient(srv.address, token="s3cret") as c:
            assert c.generate(ADD, ["1+2"]) == ["3"]
        with grpc.insecure_channel(srv.address) as ch:  # probes need no token
            assert (
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1
            )
    finally:
        srv.stop()


def test_tls_serves_verified_clients_and_refuses_plaintext(model_repo, tmp_path):
    cert, key = self_signed(tmp_path)
    srv = ServerThread(server_config(tls_cert=cert, tls_key=key))
    try:
        with Seq2SeqClient(f"localhost:{srv.running.port}", tls_ca=cert) as c:
            assert c.generate(ADD, ["20+22"]) == ["42"]
        with Seq2SeqClient(srv.address, timeout=3) as c, pytest.raises(grpc.RpcError) as e:
            c.generate(ADD, ["20+22"])
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        srv.stop()


def _serve(*args: str) -> tuple[subprocess.Popen, int, int]:
    port, mport = free_port(), free_port()
    proc = subprocess.Popen(
        serve_cmd(MODEL_REPO, port, 0, mport, *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    return proc, port, mport


def _rows_in_flight(metrics_port: int, model: str) -> float:
    """Queued plus decoding rows of a model's cores, from the server's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    return sum(
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name in ("s2s_active_sequences", "s2s_queued_sequences") and s.labels.get("model") == model
    )


def test_sigterm_drains_in_flight_requests_and_exits_0():
    proc, port, mport = _serve("--grace-s", "20")
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.Seq2SeqStub(ch)
            assert wait_for(lambda: serving(f"127.0.0.1:{port}"), 60)  # every model loaded
            futures = [
                stub.Generate.future(
                    pb.GenerateRequest(model=JA, inputs=english(8), options=pb.GenerateOptions(beam_size=4)),
                    timeout=60,
                )
                for _ in range(4)
            ]
            assert wait_for(lambda: _rows_in_flight(mport, JA) > 0, 60)  # the cores have the requests
            proc.send_signal(signal.SIGTERM)
            unanswered = sum(not f.done() for f in futures)  # still in flight after the signal: drained below
            results = [f.result() for f in futures]  # every in-flight request is answered
        assert unanswered > 0, "every request was answered before the signal: nothing was left to drain"
        assert all(len(r.outputs) == 8 for r in results)
        assert proc.wait(timeout=30) == 0
        log = proc.stdout.read()
        assert "shutting down" in log and "stopped" in log
    finally:
        proc.kill()


def test_broken_model_repository_fails_fast_naming_the_file(tmp_path):
    import shutil

    shutil.copytree(MODEL_REPO / ADD, tmp_path / ADD)
    (tmp_path / ADD / "1" / "encoder.onnx").write_bytes(b"not onnx")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "s2s.cli",
            "serve",
            "--model-repo",
            str(tmp_path),
            "--port",
            str(free_port()),
            "--metrics-port",
            "0",
            "--http-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 2
    assert re.search(r"encoder\.onnx: sha256 .* does not match", out.stderr), out.stderr[-1000:]


def test_device_resident_cache_serves_concurrent_requests(model_repo):
    """--io-binding on (the CUDA default) through the real scheduler: rows join, leave and reuse slots
    while the cache lives in OrtValues; every answer is checked against arithmetic or the numpy path."""
    srv = ServerThread(server_config(io_binding="on", scheduler=SchedulerConfig(max_batch_size=8)))
    try:
        assert all(core.state.io_binding for core in srv.running.repo.get(ADD).cores)
        problems = [(a, b) for a, b in zip(range(3, 900, 23), range(870, 0, -31))][:30]
        texts = english(12)

        async def main():
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = pb_grpc.Seq2SeqStub(ch)
                calls = [
                    stub.Generate(pb.GenerateRequest(model=ADD, inputs=[f"{a}+{b}"]), timeout=60)
                    for a, b in problems
                ]
                # The model's own text, as the in-process engine writes it: no spans protected.
                calls += [
                    stub.Generate(pb.GenerateRequest(model=JA, inputs=[t], protect_spans=False), timeout=60)
                    for t in texts
                ]
                return await asyncio.gather(*calls)

        replies = asyncio.run(main())
    finally:
        srv.stop()
    wrong = [
        (a, b, r.outputs[0].text) for (a, b), r in zip(problems, replies) if r.outputs[0].text != str(a + b)
    ]
    assert len(wrong) <= 1, wrong
    import engine

    want = [
        r.text for r in engine.load(served_version(JA, model_repo), device="cpu").generate(texts)
    ]  # its default beam
    assert [r.outputs[0].text for r in replies[len(problems) :]] == want


def test_sigterm_to_the_whole_process_group_stops_without_restarting_cores():
    """timeout(1), systemd and a terminal signal every process of the group: the cores drain and exit by
    themselves while the front end shuts down, and nothing says a core died or restarts one."""
    cmd = serve_cmd(MODEL_REPO, free_port(), 0, 0, "--models", ADD, "--instances", "2", "--grace-s", "5")
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        port = cmd[cmd.index("--port") + 1]
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = pb_grpc.Seq2SeqStub(ch)
            assert wait_for(lambda: _listed(stub), 60)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        log = proc.stdout.read()
        assert "stopped" in log and "died" not in log and "restarting" not in log, log[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)


def _listed(stub) -> bool:
    try:
        return bool(stub.ListModels(pb.ListModelsRequest(), timeout=2).models)
    except grpc.RpcError:
        return False
