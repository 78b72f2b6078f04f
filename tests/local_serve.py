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
