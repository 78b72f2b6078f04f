"""One client must not hurt the others, on one shared server: bounded memory for a stream that is never read,
cheap checks before any work, limits that can be met, no tracebacks for bad input, client strings clipped.

The tests run the real `s2s serve` as a child process, so its memory (VmRSS) and its log are the
server's own and nothing else's.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time

import grpc
import pytest
from conftest import Served, assert_no_traceback
from grpc_health.v1 import health_pb2, health_pb2_grpc
from raw_grpc import ADD, GENERATE, JA, _raw_call

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def served(tmp_path_factory, model_repo):
    # A row limit below 64 inputs x the widest beam (the default queue makes it 512, no lower than that product),
    # so that the row limit itself is seen to bind.
    srv = Served(tmp_path_factory.mktemp("served"), "--max-queue-size", "256")
    yield srv
    srv.stop()
    assert_no_traceback(srv.log_path.read_text())  # whatever the module's tests sent it


# ---- startup ---------------------------------------------------------------------------------------
def test_cpu_only_start_prints_no_error_and_names_the_provider(served):
    log = served.log()
    assert_no_traceback(log)
    assert "[E:onnxruntime" not in log  # ONNX Runtime's own red lines about missing CUDA libraries
    assert re.search(
        r"INFO s2s.repository: ONNX Runtime runs \w+ExecutionProvider \(--device auto: .+\)", log
    ), log


# ---- memory held for a client that never reads -----------------------------------------------------
def test_unread_stream_holds_bounded_memory_and_others_are_served(served):
    """1,200 requests of 0.5 MB each on one ModelStreamInfer stream whose answers are never read."""
    from tritonclient.grpc import service_pb2 as kpb
    from tritonclient.grpc import service_pb2_grpc as kpb_grpc

    junk = "x" * 500_000  # an ignored request parameter: big requests, small answers

    def request(i: int):
        r = kpb.ModelInferRequest(model_name=ADD if i % 2 else "no-such-model", id=str(i))
        t = r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
        t.contents.bytes_contents.append(f"{i % 500}+1".encode())
        r.parameters["padding"].string_param = junk
        return r

    async def main() -> tuple[int, float]:
        before = served.rss_mb()
        peak = before
        async with grpc.aio.insecure_channel(served.address) as ch:
            call = kpb_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer()
            sent = 0
            for i in range(1200):
                try:
                    await asyncio.wait_for(call.write(request(i)), 10)
                except asyncio.TimeoutError:
                    break  # the server stopped reading: backpressure reached this client
                sent += 1
                if i % 100 == 0:
                    peak = max(peak, served.rss_mb())
            await asyncio.sleep(1)
            peak = max(peak, served.rss_mb())
            # Meanwhile another client is served.
            async with grpc.aio.insecure_channel(served.address) as ch2:
                reply = await pb_grpc.Seq2SeqStub(ch2).Generate(
                    pb.GenerateRequest(model=ADD, inputs=["20+22"]), timeout=10
                )
            assert reply.outputs[0].text == "42"
            call.cancel()
        return sent, peak - before

    sent, grown = asyncio.run(main())
    assert sent > 0  # (all 1,200 may go out, or the server may push back: the bound below holds either way)
    # The stated bound (docs/DEPLOYMENT.md): the stream window (16 MiB) + one message (4 MiB) + gRPC's
    # buffers; 600 MB went over this stream.
    assert grown < 150, f"server RSS grew {grown:.0f} MB"
    assert_no_traceback(served.log())


# ---- cheap checks before any work -------------------------------------------------------------------
def test_health_answers_while_4mb_inputs_are_refused(served):
    """The length check refuses a 4 MB input before any tokenizing (its message names characters,
    not tokens), so the health checks in between keep answering SERVING within their deadline.
    No timed bound beyond that deadline: how fast is the machine's business, not the test's."""
    big = "1" * (4 * 1024 * 1024 - 200)  # just under gRPC's 4 MiB message limit
    stop = threading.Event()
    refused: list[str] = []

    def flood(model: str) -> None:
        with grpc.insecure_channel(served.address) as ch:
            stub = pb_grpc.Seq2SeqStub(ch)
            while not stop.is_set():
                try:
                    stub.Generate(pb.GenerateRequest(model=model, inputs=[big]), timeout=30)
                except grpc.RpcError as e:
                    refused.append(f"{e.code().name}: {e.details()}")

    floods = [threading.Thread(target=flood, args=(m,)) for m in (ADD, JA)]
    for t in floods:
        t.start()
    try:
        with grpc.insecure_channel(served.address) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            health.Check(health_pb2.HealthCheckRequest(), timeout=5)
            time.sleep(0.5)
            for _ in range(20):
                assert (
                    health.Check(health_pb2.HealthCheckRequest(), timeout=5).status
                    == health_pb2.HealthCheckResponse.SERVING
                )
                time.sleep(0.05)
    finally:
        stop.set()
        for t in floods:
            t.join(30)
    assert len(refused) >= 4
    assert all(r.startswith("INVALID_ARGUMENT") and "characters" in r for r in refused), refused[:3]
    assert_no_traceback(served.log())


def test_kserve_counts_and_sizes_are_checked_before_decoding(served):
    from tritonclient.grpc import service_pb2 as kpb
    from tritonclient.grpc import service_pb2_grpc as kpb_grpc

    with grpc.insecure_channel(served.address) as ch:
        stub = kpb_grpc.GRPCInferenceServiceStub(ch)
        # 1,000,000 empty elements declared: refused on the shape, nothing split.
        r = kpb.ModelInferRequest(model_name=ADD)
        r.inputs.add(name="text_input", datatype="BYTES", shape=[1_000_000])
        r.raw_input_contents.append(b"\0\0\0\0" * 1_000_000)
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(r, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "1000000 inputs" in e.value.details()
        r = kpb.ModelInferRequest(model_name=JA)
        r.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
            b"a" * 3_000_000
        )
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(r, timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "3000000 bytes" in e.value.details()


# ---- limits that hold together --------------------------------------------------------------------
def test_advertised_limits_are_accepted_on_an_idle_server_and_more_is_invalid(served):
    with grpc.insecure_channel(served.address) as ch:
        stub = pb_grpc.Seq2SeqStub(ch)
        info = {m.name: m for m in stub.ListModels(pb.ListModelsRequest(), timeout=5).models}[ADD]
        assert info.max_rows_per_request > 0 and info.max_input_chars > 0
        assert info.max_rows_per_request <= info.max_inputs_per_request * info.max_beam_size
        # 64 inputs x beam 8 (each within its own advertised limit): INVALID_ARGUMENT naming the row limit, every time.
        for _ in range(2):
            with pytest.raises(grpc.RpcError) as e:
                stub.Generate(
                    pb.GenerateRequest(
                        model=ADD,
                        inputs=["1+1"] * info.max_inputs_per_request,
                        options=pb.GenerateOptions(beam_size=info.max_beam_size),
                    ),
                    timeout=30,
                )
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
            assert (
                "max_rows_per_request" in e.value.details()
                and str(info.max_rows_per_request) in e.value.details()
            )
        # The most rows a request may have at the widest beam is served.
        n = info.max_rows_per_request // info.max_beam_size
        reply = stub.Generate(
            pb.GenerateRequest(
                model=ADD,
                inputs=[f"{i}+1" for i in range(n)],
                options=pb.GenerateOptions(beam_size=info.max_beam_size),
            ),
            timeout=120,
        )
        wrong = [(i, o.text) for i, o in enumerate(reply.outputs) if o.text != str(i + 1)]
        assert len(reply.outputs) == n and len(wrong) <= 2, wrong  # (beam 8 answers 9+1 with "8", alone too)
        # The longest text accepted by characters is checked by tokens next, and one longer is refused cheaply.
        with pytest.raises(grpc.RpcError) as e:
            stub.Generate(
                pb.GenerateRequest(model=ADD, inputs=["1" * (info.max_input_chars + 1)]), timeout=10
            )
        assert (
            e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            and f"at most {info.max_input_chars}" in e.value.details()
        )


# ---- bad bodies and echoed strings -------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"\x0a\x02\xff\xfe",  # field 1 (model, a string) holding invalid UTF-8
        b"\x1a\x03\xc3\x28\x41",  # field 3 (inputs) with an invalid 2-byte sequence
        b"\xff\xff\xff\xff\xff\xff",  # garbage
        b"\x0a\x80\x80\x80",  # a truncated length
    ],
)
def test_undecodable_bodies_are_invalid_argument_without_a_traceback(served, body):
    err = _raw_call(served.address, GENERATE, body)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "not a valid message" in err.details()
    err = _raw_call(served.address, "/inference.GRPCInferenceService/ModelInfer", body)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert_no_traceback(served.log())


def test_echoed_client_strings_are_clipped(served):
    from tritonclient.grpc import service_pb2 as kpb
    from tritonclient.grpc import service_pb2_grpc as kpb_grpc

    name = "m" * 1_500_000
    with grpc.insecure_channel(served.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.Seq2SeqStub(ch).Generate(pb.GenerateRequest(model=name, inputs=["1+1"]), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # over 128 bytes: not a model name at all
        assert len(e.value.details()) < 1100 and "1500000 characters" in e.value.details()
        # An oversized id on a stream: refused, not echoed (twice) in the answer.
        r = kpb.ModelInferRequest(model_name="nope", id="i" * 500_000)
        r.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(b"1+1")
        answers = list(kpb_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer(iter([r]), timeout=10))
    assert len(answers) == 1 and answers[0].ByteSize() < 2000
    assert "request id has 500000 characters; the limit is 256" in answers[0].error_message
    assert_no_traceback(served.log())
