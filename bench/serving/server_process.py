"""The server under test: one `s2s serve` process on loopback (free ports, always terminated)."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc

from bench import ROOT
from bench.common.local_serve import free_port
from bench.common.proc_cpu import tree_cpu_s
from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc


def die_with_parent() -> None:
    """preexec_fn: the server gets SIGTERM if this process dies without cleaning up (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ServerProcess:
    """`python -m s2s.cli serve` on loopback, one model, one batching mode, ``instances`` engine cores;
    always terminated on exit."""

    def __init__(
        self,
        args: argparse.Namespace,
        mode: str,
        instances: int,
        root: Path = ROOT,
        label: str = "",
        defaults: bool = False,
    ):
        """``root``: the source tree the server runs from (another commit's, for an A/B: bench.serving.trees).
        ``defaults``: the server's own defaults for everything but the ports and ``instances`` (0: its own too)."""
        self.mode, self.instances, self.root, self._label = mode, instances, root, label
        self.port, self.metrics_port = free_port(), free_port()
        while self.metrics_port == self.port:
            self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cmd = [
            sys.executable,
            "-m",
            "s2s.cli",
            "serve",
            "--model-repo",
            str(args.model_repo),
            "--models",
            args.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--metrics-port",
            str(self.metrics_port),
            "--http-port",
            "0",
            "--batching",
            mode,
            "--instances",
            str(instances),
            "--max-batch-size",
            str(args.max_batch_size),
            "--max-queue-size",
            str(args.max_queue_size),
            "--intra-op-threads",
            str(args.intra_op_threads),
            "--grace-s",
            "2",
            "--log-level",
            "WARNING",
        ]
        if defaults:
            self.cmd = self.cmd[: self.cmd.index("--batching")] + ["--grace-s", "2", "--log-level", "WARNING"]
            if instances:
                self.cmd += ["--instances", str(instances)]
        if mode == "request":
            self.cmd += ["--max-queue-delay-ms", str(args.queue_delay_ms)]
        self.log = tempfile.NamedTemporaryFile(
            "w+", prefix=f"bench-serve-{mode}-x{instances}-", suffix=".log", delete=False
        )
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        env = {
            k: v for k, v in os.environ.items() if not k.startswith("S2S_")
        }  # flags only, no stray settings
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=self.root,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        try:
            self._wait_ready(120.0)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with grpc.insecure_channel(self.address) as ch:
            stub = pb_grpc.Seq2SeqStub(ch)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.tail()}")
                try:
                    stub.ListModels(pb.ListModelsRequest(), timeout=1.0)
                    return
                except grpc.RpcError:
                    time.sleep(0.2)
        raise RuntimeError(f"server not ready after {timeout:.0f}s:\n{self.tail()}")

    def tail(self, n: int = 30) -> str:
        self.log.flush()
        return "".join(Path(self.log.name).read_text(errors="replace").splitlines(True)[-n:])

    def __exit__(self, *exc) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.log.close()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)

    @property
    def label(self) -> str:
        return self._label or f"{self.mode} x{self.instances}"

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process and its live descendants (the engine cores) have
        used so far; 0 where /proc is missing."""
        return tree_cpu_s(self.proc.pid)

    def scrape(self) -> dict[str, float]:
        """Sums and counts of the step histograms on /metrics (mean rows per decode step, step time)."""
        want = ("s2s_batch_size_sum", "s2s_batch_size_count", "s2s_decode_step_duration_seconds_sum")
        out = dict.fromkeys(want, 0.0)
        try:
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5)
                .read()
                .decode()
            )
        except OSError:
            return out
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
        return out
