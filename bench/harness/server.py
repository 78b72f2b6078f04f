"""One way to start a server: a process on loopback (`s2s serve` of this tree or of another commit's, a peer),
ready once KServe v2's ServerReady (and ModelReady) answers on its gRPC port, always stopped on the way out, and its
CPU time read from /proc by process role (front end, engine cores, Triton's processes, CTranslate2's threads)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import grpc

from bench import ROOT


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM if this process dies without stopping it (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    """``cmd`` serving KServe v2 gRPC on ``port``; a context manager. ``log``: where its output goes (default: a
    temporary file, removed on exit). A line ``ct2-threads <tid> ...`` in its output names CTranslate2's threads, so
    that their CPU is told apart from the rest of the process."""

    def __init__(self, cmd: list[str], port: int, model: str = "", label: str = "", cwd: Path = ROOT,
                 env: dict | None = None, log: Path | None = None, metrics_port: int = 0, timeout_s: float = 180):  # fmt: skip
        self.cmd, self.port, self.model, self.label, self.cwd = cmd, port, model, label, cwd
        self.address, self.metrics_port, self.timeout_s = f"127.0.0.1:{port}", metrics_port, timeout_s
        self.env = (
            env if env is not None else {k: v for k, v in os.environ.items() if not k.startswith("S2S_")}
        )
        self.log_path = Path(log) if log else Path(tempfile.mkstemp(prefix="bench-server-", suffix=".log")[1])
        self.keep_log, self.ct2_threads, self.proc = log is not None, (), None

    def __enter__(self) -> Server:
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, preexec_fn=die_with_parent)  # fmt: skip
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        for line in self.tail(10_000).splitlines():
            if line.startswith("ct2-threads"):
                self.ct2_threads = tuple(int(x) for x in line.split()[1:])
        return self

    def _wait_ready(self) -> None:
        from protos.inference import grpc_service_pb2 as kpb
        from protos.inference import grpc_service_pb2_grpc as kpb_grpc

        deadline = time.monotonic() + self.timeout_s
        with grpc.insecure_channel(self.address) as channel:
            stub = kpb_grpc.GRPCInferenceServiceStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"{self.label or self.cmd[:4]} exited with {self.proc.returncode}:\n{self.tail()}"
                    )
                try:
                    ready = stub.ServerReady(kpb.ServerReadyRequest(), timeout=1).ready
                    if ready and self.model:
                        ready = stub.ModelReady(kpb.ModelReadyRequest(name=self.model), timeout=1).ready
                    if ready:
                        return
                except grpc.RpcError:
                    pass
                time.sleep(0.2)  # a process starting up: nothing to wait on but polling
        raise RuntimeError(
            f"{self.label or self.cmd[:4]} not ready after {self.timeout_s:.0f} s:\n{self.tail()}"
        )

    def tail(self, n: int = 30) -> str:
        lines = self.log_path.read_text(errors="replace").splitlines(True) if self.log_path.is_file() else []
        return "".join(lines[-n:])

    def __exit__(self, *exc) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)  # `s2s serve` drains; PyTriton stops its tritonserver
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        if not self.keep_log:
            self.log_path.unlink(missing_ok=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def cpu_s(self) -> dict[str, float]:
        """CPU seconds (user + system, every thread) so far of each process role under this server."""
        return cpu_by_role(self.pid, self.ct2_threads)

    def scrape(self) -> dict[str, float]:
        """Sums and counts of `s2s serve`'s decode-step histograms on /metrics (empty without a metrics port)."""
        return scrape(self.metrics_port)


def s2s_serve(repo: Path, *flags: str, root: Path = ROOT, label: str = "s2s serve", model: str = "",
              http: bool = False, metrics: bool = False, log: Path | None = None, env: dict | None = None) -> Server:  # fmt: skip
    """`s2s serve` of the source tree ``root`` on 127.0.0.1 with free ports (the HTTP and metrics doors off unless
    asked for: ``.http_port``, ``.metrics_port``), its own defaults but for ``flags``; this interpreter."""
    port, http_port, metrics_port = free_port(), free_port() if http else 0, free_port() if metrics else 0
    cmd = [sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(repo), "--host", "127.0.0.1",
           "--port", str(port), "--http-port", str(http_port), "--metrics-port", str(metrics_port), *flags]  # fmt: skip
    server = Server(cmd, port, model, label, root, env, log, metrics_port, timeout_s=180)
    server.http_port = http_port
    return server


def source_tree(ref: str, into: Path) -> Path:
    """Git ``ref``'s source tree (tracked files) under ``into``, its gRPC stubs generated: another commit's server."""
    out = Path(into) / "tree"
    out.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    protos = [str(p.relative_to(out)) for p in out.glob("protos/**/*.proto")]
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", ".", "--python_out=.", "--grpc_python_out=.",
                    *protos], cwd=out, check=True)  # fmt: skip
    return out


# ---- /proc ---------------------------------------------------------------------------------------------------
def _stat(path: str) -> list[str]:
    return Path(path).read_text().rsplit(")", 1)[1].split()


def role(depth: int, comm: str) -> str:
    """The front end is the root; under it `s2s serve`'s engine cores, PyTriton's tritonserver and its stubs."""
    if depth == 0:
        return "front"
    if comm.startswith("tritonserver"):
        return "tritonserver"
    return "triton stub" if comm.startswith("triton_python") else "cores"  # comm: 15 characters at most


def cpu_by_role(pid: int, ct2_threads: tuple[int, ...] = ()) -> dict[str, float]:
    """CPU seconds of ``pid`` and every live process below it, summed by ``role``; CTranslate2's threads (ids
    the process printed) apart from the rest of the root process as "ct2"."""
    procs = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                f = _stat(f"/proc/{name}/stat")
                procs[int(name)] = (int(f[1]), int(f[11]) + int(f[12]))
    kids: dict[int, list[int]] = {}
    for p, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(p)
    tick, out, todo = os.sysconf("SC_CLK_TCK"), {}, [(pid, 0)]
    while todo:
        p, depth = todo.pop()
        if p in procs:
            comm = Path(f"/proc/{p}/comm").read_text().strip() if os.path.exists(f"/proc/{p}/comm") else "?"
            key = role(depth, comm)
            out[key] = out.get(key, 0.0) + procs[p][1] / tick
        todo += [(k, depth + 1) for k in kids.get(p, [])]
    if ct2_threads:
        ticks = 0
        for tid in ct2_threads:
            with contextlib.suppress(OSError, ValueError, IndexError):
                f = _stat(f"/proc/{pid}/task/{tid}/stat")
                ticks += int(f[11]) + int(f[12])
        out["ct2"] = ticks / tick
        out["front"] = out.get("front", 0.0) - out["ct2"]
    return out


METRICS = ("s2s_batch_size_sum", "s2s_batch_size_count", "s2s_decode_step_duration_seconds_sum")


def scrape(port: int) -> dict[str, float]:
    out = dict.fromkeys(METRICS, 0.0)
    if not port:
        return {}
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out
