"""A peer server as a process on loopback: bench/serving/peers.py (CTranslate2 behind grpc.aio, per request or
micro-batched) or bench/serving/peer_triton.py (PyTriton with CTranslate2, from its own virtual environment);
ready once KServe's ServerReady answers, always terminated."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import CACHE, ROOT
from bench.serving.server_process import die_with_parent, free_port

TRITON_VENV = CACHE / "pytriton-venv"
# What the PyTriton peer installs into TRITON_VENV: the bench extra's pins (pyproject.toml) of what it imports.
TRITON_PACKAGES = ("nvidia-pytriton==0.7.0", "ctranslate2==4.8.5", "tokenizers==0.23.3")


def triton_python(log=print) -> Path:
    """The PyTriton virtual environment's python, made on first use: PyTriton pins numpy < 2, the project
    needs newer."""
    py = TRITON_VENV / "bin" / "python"
    if not py.exists():
        log(f"  making {TRITON_VENV} for the PyTriton peer ({', '.join(TRITON_PACKAGES)})")
        subprocess.run(
            [str(Path(sys.base_prefix) / "bin" / "python3"), "-m", "venv", str(TRITON_VENV)], check=True
        )
        subprocess.run([str(py), "-m", "pip", "install", "-q", *TRITON_PACKAGES], check=True)
    return py


class PeerProcess:
    """``kind``: "per-request", "batcher" or "triton"; decodes with ``beam`` (fixed for the process)."""

    def __init__(self, kind: str, ct2: Path, bundle: Path, model: str, beam: int, log=print):
        self.kind, self.model = kind, model
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        common = [
            "--ct2",
            str(ct2),
            "--bundle",
            str(bundle),
            "--model",
            model,
            "--port",
            str(self.port),
            "--beam",
            str(beam),
        ]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        if kind == "triton":
            py = triton_python(log)
            # the bundled Triton's Python backend stub links against libpython: the venv's base one first
            libdir = Path(os.path.realpath(py)).parent.parent / "lib"
            self.env["LD_LIBRARY_PATH"] = f"{libdir}:{os.environ.get('LD_LIBRARY_PATH', '')}"
            self.cmd = [str(py), "-m", "bench.serving.peer_triton", *common]
        else:
            self.cmd = [sys.executable, "-m", "bench.serving.peers", *common]
            if kind == "batcher":
                self.cmd.append("--batcher")
        self.log = tempfile.NamedTemporaryFile(
            "w+", prefix=f"bench-peer-{kind}-", suffix=".log", delete=False
        )
        self.proc: subprocess.Popen | None = None
        self.ct2_threads: tuple[int, ...] = ()

    def __enter__(self) -> PeerProcess:
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        try:
            self._wait_ready(180.0)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        for line in Path(self.log.name).read_text(errors="replace").splitlines():
            if line.startswith("ct2-threads"):
                self.ct2_threads = tuple(int(x) for x in line.split()[1:])
        return self

    def _wait_ready(self, timeout: float) -> None:
        import tritonclient.grpc as triton

        deadline = time.monotonic() + timeout
        client = triton.InferenceServerClient(self.address)
        try:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.kind} peer exited with {self.proc.returncode}:\n{self.tail()}")
                try:
                    if client.is_server_ready(client_timeout=1.0) and client.is_model_ready(self.model):
                        return
                except Exception:  # not listening yet
                    pass
                time.sleep(0.3)
        finally:
            client.close()
        raise RuntimeError(f"{self.kind} peer not ready after {timeout:.0f}s:\n{self.tail()}")

    def tail(self, n: int = 30) -> str:
        self.log.flush()
        return "".join(Path(self.log.name).read_text(errors="replace").splitlines(True)[-n:])

    def __exit__(self, *exc) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)  # PyTriton stops its tritonserver on SIGTERM
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
