"""`s2s serve` on loopback for the tests that start a whole server: a free port and the command line."""

from __future__ import annotations

import socket
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_cmd(repo: Path, port: int, http_port: int | str, metrics_port: int | str, *extra: str) -> list[str]:
    """The `s2s serve` command on 127.0.0.1 with the given ports (``0``: that door off), this interpreter."""
    return [sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(repo), "--host", "127.0.0.1",
            "--port", str(port), "--metrics-port", str(metrics_port), "--http-port", str(http_port), *extra]  # fmt: skip


def serving(address: str, timeout_s: float = 1.0) -> bool:
    """Whether the server at ``address`` says SERVING for the whole server (gRPC health, service ""): every model
    loaded. Its ports open before that, and a model still loading answers UNAVAILABLE."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(address) as ch:
            reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
    except grpc.RpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING
