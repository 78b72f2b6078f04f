"""Engine cores in their own processes: fault isolation, restarts, health, no orphans, and the
in-process API decoding exactly as the server does."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from conftest import (
    MODEL_REPO,
    ROOT,
    ServerThread,
    alive,
    english,
    free_port,
    serve_cmd,
    served_version,
    server_config,
    wait_for,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from s2s.seq2seq_client import Seq2SeqClient

ADD, JA = "addition", "translate-en-ja"


def test_a_killed_core_fails_only_the_requests_it_had_started_and_is_restarted(model_repo):
    """Two cores; one is killed with requests in flight. Those it had started fail at once (503, "retry"); those
    still queued in it go to the other core and are answered; the dead core is restarted."""
    srv = ServerThread(server_config(instances=2, models=(JA,)))
    model = srv.running.repo.get(JA)
    try:
        texts = english(40)

        async def main():
            async with grpc.aio.insecure_channel(srv.address) as ch:
                stub = pb_grpc.Seq2SeqStub(ch)
                opts = pb.GenerateOptions(max_new_tokens=60, beam_size=4)
                calls = [
                    asyncio.ensure_future(
                        stub.Generate(
                            pb.GenerateRequest(model=JA, inputs=texts[i : i + 4], options=opts), timeout=120
                        )
                    )
                    for i in range(0, 40, 4)
                ]
                while sum(len(core.inflight) for core in model.cores) < len(calls) or not all(
                    c.inflight for c in model.cores
                ):
                    await asyncio.sleep(0.01)
                victim = model.cores[0]
                on_victim = len(victim.inflight)
                t0 = time.monotonic()
                victim.kill()
                results = await asyncio.gather(*calls, return_exceptions=True)
                return on_victim, results, time.monotonic() - t0

        on_victim, results, took = asyncio.run(main())
        failed = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
        ok = [r for r in results if not isinstance(r, Exception)]
        assert len(failed) <= on_victim and len(ok) == len(results) - len(failed), (on_victim, results)
        assert all(
            e.code() == grpc.StatusCode.UNAVAILABLE and "stopped while decoding" in e.details()
            for e in failed
        )
        assert all(len(r.outputs) == 4 and all(o.text for o in r.outputs) for r in ok)
        # The model serves again once the core is back.
        assert wait_for(lambda: all(c.state.up for c in model.cores))
        assert model.cores[0].state.restarts == 1
        with Seq2SeqClient(srv.address) as c:
            assert c.generate(JA, ["Save changes"])[0]
        assert (
            took < 60
        )  # a hang guard: the dead core's started requests fail at once, the others are answered
    finally:
        srv.stop()


def test_health_is_not_serving_while_a_model_has_no_core(model_repo):
    srv = ServerThread(server_config(instances=1))
    model = srv.running.repo.get(ADD)
    try:
        with grpc.insecure_channel(srv.address) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            status = lambda svc: health.Check(health_pb2.HealthCheckRequest(service=svc), timeout=5).status  # noqa: E731
            assert status(ADD) == status("") == health_pb2.HealthCheckResponse.SERVING
            pid = model.cores[0].state.pid
            os.kill(pid, signal.SIGKILL)
            assert wait_for(lambda: status(ADD) == health_pb2.HealthCheckResponse.NOT_SERVING, 5)
            assert status("") == health_pb2.HealthCheckResponse.NOT_SERVING  # the server is not all there
            assert status(JA) == health_pb2.HealthCheckResponse.SERVING  # the other model is unaffected
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.Seq2SeqStub(ch).Generate(pb.GenerateRequest(model=ADD, inputs=["1+1"]), timeout=5)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE
            assert wait_for(lambda: status(ADD) == health_pb2.HealthCheckResponse.SERVING, 20)
            assert status("") == health_pb2.HealthCheckResponse.SERVING
            assert (
                pb_grpc.Seq2SeqStub(ch)
                .Generate(pb.GenerateRequest(model=ADD, inputs=["1+1"]), timeout=10)
                .outputs[0]
                .text
                == "2"
            )
            assert model.cores[0].state.pid != pid
    finally:
        srv.stop()


def _children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        out |= {int(c) for c in (task / "children").read_text().split()}
    return out


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_no_core_outlives_the_server_however_it_stops(how):
    port = free_port()
    proc = subprocess.Popen(
        serve_cmd(MODEL_REPO, port, 0, 0, "--instances", "2"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            stub = health_pb2_grpc.HealthStub(ch)
            assert wait_for(lambda: _serving(stub), 60)
        cores = {
            p for p in _children(proc.pid) if "server.core_process" in Path(f"/proc/{p}/cmdline").read_text()
        }
        assert len(cores) == 4  # 2 models x 2 cores
        proc.send_signal(getattr(signal, how))
        proc.wait(30)
        assert wait_for(lambda: not any(alive(p) for p in cores), 15), [p for p in cores if alive(p)]
        if how == "SIGTERM":
            assert proc.returncode == 0
    finally:
        proc.kill()


def _serving(stub) -> bool:
    try:
        return (
            stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status
            == health_pb2.HealthCheckResponse.SERVING
        )
    except grpc.RpcError:
        return False


def test_the_in_process_api_decodes_like_the_server(server, model_repo):
    import engine

    texts = english(24)
    local = engine.load(served_version(JA, model_repo), device="cpu")
    with Seq2SeqClient(server.address) as c:
        for beam in (1, 4):
            served = c.generate(JA, texts, beam_size=beam, protect_spans=False)  # the model's own text
            assert [r.text for r in local.generate(texts, beam_size=beam)] == served
    results = local.generate(["Save changes"])
    assert results[0].tokens and results[0].input_tokens == len(local.codec.source_ids("Save changes"))


def test_a_core_signalled_while_it_loads_finishes_loading_then_exits_cleanly():
    """A SIGTERM to the whole process group (timeout(1), systemd, a terminal) can reach a core while it still
    imports ONNX Runtime or loads its bundle: it is kept, not fatal. The core still loads, says it is ready, then
    drains (nothing to finish) and exits 0, which the front end reads as a drain, not as a core that died."""
    from multiprocessing.connection import Connection

    from engine import EngineOptions
    from server.config import SchedulerConfig
    from server.core_wire.messages import CoreSpec, Ready, Report

    ours, theirs = socket.socketpair()
    core = subprocess.Popen(
        [sys.executable, "-m", "server.core_process", str(theirs.fileno()), "test#0"],
        pass_fds=[theirs.fileno()],
        cwd=ROOT,
    )
    theirs.close()
    try:
        time.sleep(0.3)  # past the interpreter's start (the signals are set first), before the spec is sent
        core.send_signal(signal.SIGTERM)
        conn = Connection(ours.detach())
        spec = CoreSpec(ADD, "1", served_version(ADD), 0, EngineOptions(device="cpu"), SchedulerConfig())
        conn.send(spec)
        assert conn.poll(60)
        assert isinstance(conn.recv(), Ready)
        assert core.wait(30) == 0
        said = []
        with pytest.raises(EOFError):  # then it closed its pipe
            while True:
                said.append(conn.recv())
        assert all(isinstance(m, Report) and not m.events for m in said), said  # its last stats, no answers
    finally:
        core.kill()
        core.wait()


def test_cores_start_where_the_server_package_is_importable():
    """A core is started with this folder as its working directory and on its PYTHONPATH: the one that holds the
    ``server`` package (a relative --model-repo such as `make serve`'s `models` is read from there too)."""
    from server.core_client import client

    assert (client._ROOT / "server" / "__init__.py").is_file() and (client._ROOT / "models").is_dir(), (
        client._ROOT
    )
