"""A second `s2s serve` on a port the first one holds: refused at once (rc 2, one line naming the port and its flag,
before any model loads), whichever of its three ports clashes, and the first server still the only one on its
gRPC port. gRPC turns SO_REUSEPORT on by default, which let the second bind the first's gRPC port beside it."""

from __future__ import annotations

import subprocess

import grpc
import pytest
from conftest import MODEL_REPO, ROOT, Served, assert_no_traceback, free_port, serve_cmd

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

ADD = "addition"


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    srv = Served(tmp_path_factory.mktemp("first"), "--models", ADD, "--instances", "1")
    yield srv
    srv.stop()


def second(*ports: int) -> subprocess.CompletedProcess:
    """`s2s serve` with (gRPC, HTTP, metrics) ports; it has 60 s to give up (a clash must not wait for a model)."""
    return subprocess.run(
        serve_cmd(MODEL_REPO, *ports, "--models", ADD, "--instances", "1"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


@pytest.mark.parametrize(
    "shared, flag",
    [("port", "--port"), ("http_port", "--http-port"), ("metrics_port", "--metrics-port")],
)
def test_a_port_in_use_is_one_line_and_rc_2_before_any_model_loads(first, shared, flag):
    ports = {"port": free_port(), "http_port": free_port(), "metrics_port": free_port()}
    ports[shared] = getattr(first, shared)
    done = second(ports["port"], ports["http_port"], ports["metrics_port"])
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines == [f"s2s serve: {lines[0].split(': ', 1)[1]}"], done.stderr[
        -2000:
    ]  # one line, nothing else
    assert f"127.0.0.1:{ports[shared]} is in use" in lines[0] and flag in lines[0]
    assert "engine core" not in done.stdout + done.stderr  # refused before any model loaded
    assert_no_traceback(done.stdout + done.stderr)
    with grpc.insecure_channel(first.address) as ch:  # the first server goes on, alone on its ports
        out = pb_grpc.Seq2SeqStub(ch).Generate(pb.GenerateRequest(model=ADD, inputs=["1+2"]), timeout=30)
    assert out.outputs[0].text == "3" and first.proc.poll() is None


def test_two_of_one_servers_ports_the_same_are_refused_at_once():
    port = free_port()
    done = second(port, port, free_port())
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"s2s serve: the HTTP port and the gRPC port are both {port}; give them different ones (--port, --http-port)"
    ]
