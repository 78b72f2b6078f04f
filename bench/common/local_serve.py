"""`s2s serve` on loopback for the scripts and benches that drive a whole server: the command line and the wait."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_cmd(repo: Path, port: int, http_port: int | str, metrics_port: int | str, *extra: str) -> list[str]:
    """The `s2s serve` command on 127.0.0.1 with the given ports (``0``: that door off), this interpreter."""
    return [
        sys.executable,
        "-m",
        "s2s.cli",
        "serve",
        "--model-repo",
        str(repo),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        "--http-port",
        str(http_port),
        *extra,
    ]


def wait_ready(url: str, timeout_s: float, server: subprocess.Popen) -> None:
    """Until ``url`` answers 200; a server that exits first, or a timeout, ends the run with a message."""
    stop = time.monotonic() + timeout_s
    while time.monotonic() < stop:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise SystemExit(f"the server was not ready at {url} within {timeout_s:.0f} s")
