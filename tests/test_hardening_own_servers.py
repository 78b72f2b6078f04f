"""One client must not hurt the others, each test on a server of its own configuration: a full stream
window stops reading that stream, auth covers every call, a second SIGTERM ends the grace period at once, and the
metrics endpoint is bounded and can be kept private.

Most tests run the real `s2s serve` as a child process, so its threads and its log are the server's own and
nothing else's.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import grpc
import pytest
from conftest import Served, ServerThread, assert_no_traceback, server_config
from grpc_health.v1 import health_pb2, health_pb2_grpc
from raw_grpc import ADD, GENERATE, JA, _raw_call

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc


def test_a_full_stream_window_stops_reading_that_stream(model_repo):
    """With a window of 2 the server never holds more than 2 of a stream's requests at the engine cores, however
    fast the client writes (it keeps writing until its writes block or it has sent 200). Whether the writes block
    within the test depends on how fast this machine answers, so that is not asserted: a clean-clone run answered
    fast enough for all 200 to go out, and the window still held."""
    from tritonclient.grpc import service_pb2 as kpb
    from tritonclient.grpc import service_pb2_grpc as kpb_grpc

    from server.config import SchedulerConfig, StreamConfig

    srv = ServerThread(
        server_config(
            stream=StreamConfig(max_pending=2, max_pending_bytes=1 << 20),
            scheduler=SchedulerConfig(max_queue_size=100_000),
        )
    )
    model = srv.running.repo.get(JA)

    def request(i: int):
        r = kpb.ModelInferRequest(model_name=JA, id=str(i))
        t = r.inputs.add(name="text_input", datatype="BYTES", shape=[64])
        t.contents.bytes_contents.extend(
            [f"Save the changes to file {j} before closing the window".encode() for j in range(64)]
        )
        r.parameters["padding"].string_param = "x" * 200_000
        return r

    async def main() -> tuple[int, int]:
        # A small receive window on the client, so that unread answers really cannot be sent.
        opts = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 65536)]
        async with grpc.aio.insecure_channel(srv.address, options=opts) as ch:
            call = kpb_grpc.GRPCInferenceServiceStub(ch).ModelStreamInfer()
            sent, most = 0, 0
            for i in range(200):
                try:
                    await asyncio.wait_for(call.write(request(i)), 3)
                except asyncio.TimeoutError:
                    break
                sent += 1
                most = max(most, sum(len(core.inflight) for core in model.cores))
            call.cancel()
        return sent, most

    try:
        sent, most = asyncio.run(main())
        assert sent > 2 and most == 2, (sent, most)  # the client outran the window, and the window filled
        assert most <= 2, f"{most} requests of one stream were at the engine cores at once (window: 2)"
        assert wait_for_idle(model)
    finally:
        srv.stop()


def wait_for_idle(model, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(core.inflight for core in model.cores):
            return True
        time.sleep(0.05)
    return False


# ---- auth on every call ----------------------------------------------------------------------------------
def test_auth_covers_streaming_reflection_and_unknown_methods(tmp_path, model_repo):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    from tritonclient.grpc import service_pb2 as kpb
    from tritonclient.grpc import service_pb2_grpc as kpb_grpc

    srv = Served(tmp_path, "--auth-token", "s3cret")
    good = (("authorization", "Bearer s3cret"),)
    try:
        with grpc.insecure_channel(srv.address) as ch:
            r = kpb.ModelInferRequest(model_name=ADD)
            r.inputs.add(name="text_input", datatype="BYTES", shape=[1]).contents.bytes_contents.append(
                b"1+1"
            )
            kstub = kpb_grpc.GRPCInferenceServiceStub(ch)
            with pytest.raises(grpc.RpcError) as e:
                list(kstub.ModelStreamInfer(iter([r]), timeout=10))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as e:
                list(
                    pb_grpc.Seq2SeqStub(ch).GenerateStream(
                        pb.GenerateRequest(model=ADD, inputs=["1+1"]), timeout=10
                    )
                )
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as e:
                ProtoReflectionDescriptorDatabase(ch).get_services()
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            # Unknown methods do not tell a caller without a token what exists.
            assert _raw_call(srv.address, "/no.Such/Method", b"").code() == grpc.StatusCode.UNAUTHENTICATED
            assert (
                _raw_call(srv.address, "/no.Such/Method", b"", good).code() == grpc.StatusCode.UNIMPLEMENTED
            )
            # A wrong header and then the right one: refused (no "last one wins").
            stub = pb_grpc.Seq2SeqStub(ch)
            req = pb.GenerateRequest(model=ADD, inputs=["1+1"])
            with pytest.raises(grpc.RpcError) as e:
                stub.Generate(req, timeout=10, metadata=(("authorization", "Bearer wrong"), *good))
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            # With the token everything works, streams included; health needs none.
            assert stub.Generate(req, timeout=10, metadata=good).outputs[0].text == "2"
            answers = list(kstub.ModelStreamInfer(iter([r]), timeout=10, metadata=good))
            assert len(answers) == 1 and not answers[0].error_message
            assert (
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status == 1
            )
            # Garbage without a token: UNAUTHENTICATED (the body is never parsed); with one: INVALID_ARGUMENT.
            assert _raw_call(srv.address, GENERATE, b"\xff\xff\xff").code() == grpc.StatusCode.UNAUTHENTICATED
            assert (
                _raw_call(srv.address, GENERATE, b"\xff\xff\xff", good).code()
                == grpc.StatusCode.INVALID_ARGUMENT
            )
        log = srv.log()
        assert_no_traceback(log)
        assert (
            "WARNING s2s.server: refused (UNAUTHENTICATED)" in log
        )  # rate-limited: one line, not one per call
        assert log.count("refused (UNAUTHENTICATED)") <= 2
    finally:
        assert srv.stop() == 0


# ---- signals ------------------------------------------------------------------------------------------
def test_a_second_sigterm_ends_the_grace_period_at_once(tmp_path, model_repo):
    srv = Served(tmp_path, "--grace-s", "120", "--batching", "none", "--max-queue-size", "4096")
    try:
        with grpc.insecure_channel(srv.address) as ch:
            stub = pb_grpc.Seq2SeqStub(ch)
            # 64 x 16 inputs (1,024 queued sequences, x beam 4 rows), decoded one sequence at a time: far more work
            # than the second signal leaves time for on any machine (4 such requests were done within the second
            # on an AVX-512 one).
            texts = ["Open the file in a new window and save all the changes you have made"] * 16
            futures = [
                stub.Generate.future(
                    pb.GenerateRequest(model=JA, inputs=texts, options=pb.GenerateOptions(beam_size=4)),
                    timeout=120,
                )
                for _ in range(64)
            ]
            time.sleep(0.5)
            srv.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            assert srv.proc.poll() is None  # draining: the queue holds minutes of work
            t0 = time.monotonic()
            srv.proc.send_signal(signal.SIGTERM)
            code = srv.proc.wait(30)
            took = time.monotonic() - t0
            errors = []
            for f in futures:
                try:
                    f.result()
                except grpc.RpcError as e:
                    errors.append(e.code())
        assert code == 0 and took < 15, (code, took)  # a hang guard, not a timing claim
        # Requests still queued when the grace period was cut were answered UNAVAILABLE (retry elsewhere).
        assert errors and all(c == grpc.StatusCode.UNAVAILABLE for c in errors), errors
        assert "grace period cut short" in srv.log()
    finally:
        srv.stop()


# ---- the metrics endpoint -----------------------------------------------------------------------------
def test_metrics_endpoint_is_bounded_and_can_be_kept_private(tmp_path, model_repo):
    import socket
    import urllib.request

    srv = Served(tmp_path, "--metrics-host", "127.0.0.1")
    try:
        url = f"http://127.0.0.1:{srv.metrics_port}/metrics"
        idle = []
        for _ in range(100):  # connections that send nothing
            s = socket.create_connection(("127.0.0.1", srv.metrics_port), timeout=5)
            idle.append(s)
        threads_with_idle = len(list(Path(f"/proc/{srv.proc.pid}/task").iterdir()))
        for s in idle:
            s.close()
        assert wait_until(lambda: b"s2s_requests_total" in urllib.request.urlopen(url, timeout=5).read())
        # No thread per connection: 100 idle connections cost at most the pool's few workers.
        baseline = len(list(Path(f"/proc/{srv.proc.pid}/task").iterdir()))
        assert threads_with_idle <= baseline + 8, (threads_with_idle, baseline)
        assert "metrics on 127.0.0.1:" in srv.log()
    finally:
        srv.stop()


def wait_until(pred, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False
