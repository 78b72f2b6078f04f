"""Closed-loop load on the real gRPC server, per batching mode and concurrency, against the engine's ceiling.

For each batching mode (continuous, request, none) one `s2s serve` process is started up front (a
separate process, so client and server never share a GIL), and for each concurrency C, C client workers
(grpc.aio, one channel, in this process) each send one Generate request (one held-out sentence,
cycling through the test set) and send the next as soon as the answer arrives.

Per cell: --rounds windows, interleaved with the other modes' at the same C (round r runs the
modes in an order rotated by r) and pooled, so that the machine's drift over minutes does not
land on one mode. Each window: a warm-up (until max(C, 8) answers or --warmup-s, whichever comes
first), then measurement until max(3*C, --min-requests) answers (but at least --min-seconds) or
--seconds, whichever comes first. Throughput = answers received inside the window / window length (generated tokens from
each Output's output_tokens). Latency (client-side, send to answer) and time to first token
(server-side, Timings.time_to_first_token_seconds of the unary response) are taken over every
request *sent* inside the window; requests still in flight when it closes are drained (awaited)
and counted in the latency figures, never cancelled, so the slow tail is not dropped.

The ceiling is measured in this process after every server has exited, as the faster of
`server.engine.generate` on the same inputs with batch_size=--max-batch-size (one thread) and the
same inputs through the server's own Scheduler driven by 64 closed-loop coroutines (step loop plus
encoder thread, no gRPC); best of --ceiling-repeats each. The single-request decode time (batch 1,
median) is taken in this process after each concurrency-1 round, on the inputs that round sent.

Results are printed and written to docs/BENCHMARKS.md between the bench-serve markers (other
sections of the file are left as they are). Run it on an otherwise idle machine:

    .venv/bin/python bench/serve.py                 # full grid, < 10 minutes on 2 cores
    .venv/bin/python bench/serve.py --quick         # C in {1, 8}, few requests, < 1 minute, no file written
    .venv/bin/python bench/serve.py --model-repo /tmp/models --model addition --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import datetime as dt
import itertools
import os
import platform
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from protos.seq2seq.v1 import seq2seq_pb2 as pb  # noqa: E402
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc  # noqa: E402

from bench.markdown import write_section  # noqa: E402
MODES = ("continuous", "request", "none")


# ---------------------------------------------------------------------------------------------
# the server process
# ---------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: the server gets SIGTERM if this process dies without cleaning up (Linux only)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ServerProcess:
    """`python -m s2s.cli serve` on loopback, one model, one batching mode; always terminated on exit."""

    def __init__(self, args: argparse.Namespace, mode: str):
        self.port, self.metrics_port = free_port(), free_port()
        while self.metrics_port == self.port:
            self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(args.model_repo), "--models", args.model,
                    "--host", "127.0.0.1", "--port", str(self.port), "--metrics-port", str(self.metrics_port),
                    "--batching", mode, "--max-batch-size", str(args.max_batch_size),
                    "--max-queue-size", str(args.max_queue_size), "--intra-op-threads", str(args.intra_op_threads),
                    "--grace-s", "2", "--log-level", "WARNING"]
        if mode == "request":
            self.cmd += ["--max-queue-delay-ms", str(args.queue_delay_ms)]
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"bench-serve-{mode}-", suffix=".log", delete=False)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("S2S_")}  # flags only, no stray settings
        self.proc = subprocess.Popen(self.cmd, cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
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

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used so far; 0 where /proc is missing."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return 0.0

    def scrape(self) -> dict[str, float]:
        """Sums and counts of the step histograms on /metrics (mean rows per decode step, step time)."""
        want = ("s2s_batch_size_sum", "s2s_batch_size_count", "s2s_decode_step_duration_seconds_sum")
        out = dict.fromkeys(want, 0.0)
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return out
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
        return out


# ---------------------------------------------------------------------------------------------
# closed-loop load
# ---------------------------------------------------------------------------------------------
@dataclass
class Cell:
    mode: str
    conc: int
    window_s: float = 0.0
    answers: int = 0  # answered inside the window (throughput)
    tokens: int = 0  # their generated tokens
    latencies: list[float] = field(default_factory=list)  # requests sent inside the window (drained)
    ttfts: list[float] = field(default_factory=list)
    server_s: list[float] = field(default_factory=list)  # server-side Timings.total_seconds of the same requests
    rtt_s: list[float] = field(default_factory=list)  # bare round trips (ListModels) on this mode's server, C=1 cells only
    errors: dict[str, int] = field(default_factory=dict)
    indices: list[int] = field(default_factory=list)  # inputs sent inside the window
    steps: float = 0.0  # decode steps inside the window (server histograms)
    rows_sum: float = 0.0  # their rows, summed
    step_s: float = 0.0  # their duration, summed
    server_cpu_s: float = 0.0  # CPU seconds of the server process inside the window
    client_cpu_s: float = 0.0  # and of this (client) process

    @classmethod
    def pooled(cls, rounds: list[Cell]) -> Cell:
        """One cell from the windows of several rounds: counts and durations add up, samples are pooled."""
        out = cls(rounds[0].mode, rounds[0].conc)
        for c in rounds:
            for name in ("window_s", "answers", "tokens", "steps", "rows_sum", "step_s", "server_cpu_s", "client_cpu_s"):
                setattr(out, name, getattr(out, name) + getattr(c, name))
            for name in ("latencies", "ttfts", "server_s", "rtt_s", "indices"):
                getattr(out, name).extend(getattr(c, name))
            for k, v in c.errors.items():
                out.errors[k] = out.errors.get(k, 0) + v
        return out

    @property
    def rows_per_step(self) -> float | None:
        return self.rows_sum / self.steps if self.steps else None

    @property
    def step_ms(self) -> float | None:
        return 1000 * self.step_s / self.steps if self.steps else None

    @property
    def busy(self) -> float | None:  # share of the window the scheduler thread spent inside decode steps
        return self.step_s / self.window_s if self.steps and self.window_s else None

    @property
    def server_cpu(self) -> float:  # CPU seconds per second of window (1.0 = one core busy)
        return self.server_cpu_s / self.window_s if self.window_s else 0.0

    @property
    def client_cpu(self) -> float:
        return self.client_cpu_s / self.window_s if self.window_s else 0.0

    @property
    def rps(self) -> float:
        return self.answers / self.window_s if self.window_s else 0.0

    @property
    def tps(self) -> float:
        return self.tokens / self.window_s if self.window_s else 0.0

    def lat(self, q: float) -> float:
        return pct(self.latencies, q)


def pct(xs: list[float], q: float) -> float:
    """Percentile by linear interpolation (numpy's default), q in [0, 100]."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


async def run_cell(server: ServerProcess, args: argparse.Namespace, inputs: list[str], mode: str, conc: int,
                   start_index: int) -> Cell:
    cell = Cell(mode, conc)
    target = max(args.requests_per_worker * conc, args.min_requests)
    warm_target = max(conc, 8)
    counter = itertools.count(start_index)
    stop = asyncio.Event()
    window_open = asyncio.Event()
    t_open = t_close = 0.0
    warm_answers = 0
    before: dict[str, float] = {}

    def open_window() -> None:
        nonlocal t_open
        if not window_open.is_set():
            t_open = time.perf_counter()
            window_open.set()

    def close_window() -> None:
        nonlocal t_close
        if not stop.is_set():
            t_close = time.perf_counter()
            stop.set()

    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = pb_grpc.Seq2SeqStub(channel)

        async def worker() -> None:
            nonlocal warm_answers
            while not stop.is_set():
                i = next(counter) % len(inputs)
                measured = window_open.is_set()
                req = pb.GenerateRequest(model=args.model, inputs=[inputs[i]],
                                         options=pb.GenerateOptions(max_new_tokens=args.max_new_tokens))
                t0 = time.perf_counter()
                try:
                    resp = await stub.Generate(req, timeout=args.request_timeout_s)
                    err = None
                except grpc.aio.AioRpcError as e:
                    resp, err = None, e.code().name
                t1 = time.perf_counter()
                if measured:
                    cell.indices.append(i)
                    if err is None:
                        cell.latencies.append(t1 - t0)
                        cell.ttfts.append(resp.timings.time_to_first_token_seconds)
                        cell.server_s.append(resp.timings.total_seconds)
                    else:
                        cell.errors[err] = cell.errors.get(err, 0) + 1
                if window_open.is_set() and not stop.is_set():
                    if err is None:
                        cell.answers += 1
                        cell.tokens += sum(o.output_tokens for o in resp.outputs)
                    if cell.answers >= target and time.perf_counter() - t_open >= args.min_seconds:
                        close_window()
                elif not window_open.is_set():
                    warm_answers += 1
                    if warm_answers >= warm_target:
                        open_window()
                if err is not None and not window_open.is_set() and err != "RESOURCE_EXHAUSTED":
                    raise RuntimeError(f"{mode} C={conc}: request failed during warm-up: {err}\n{server.tail()}")

        tasks = [asyncio.create_task(worker()) for _ in range(conc)]
        try:
            # warm-up: max(C, 8) answers or --warmup-s, whichever first
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(window_open.wait(), args.warmup_s)
            open_window()
            before = await asyncio.to_thread(server.scrape)
            cpu0 = (server.cpu_s(), time.process_time())
            while not stop.is_set():
                left = args.seconds - (time.perf_counter() - t_open)
                if left <= 0:
                    break
                with contextlib.suppress(asyncio.TimeoutError):
                    # wake up at --min-seconds too, in case the answer target was reached before it
                    await asyncio.wait_for(stop.wait(), min(left, max(args.min_seconds - (time.perf_counter() - t_open), 0.05)))
                if cell.answers >= target and time.perf_counter() - t_open >= args.min_seconds:
                    break
            close_window()
            cpu1 = (server.cpu_s(), time.process_time())
            after = await asyncio.to_thread(server.scrape)
            # drain: every request already sent finishes (bounded by its deadline)
            done, pending = await asyncio.wait(tasks, timeout=args.request_timeout_s + 5)
            for t in done:
                if t.exception() is not None:
                    raise t.exception()
            if pending:
                raise RuntimeError(f"{mode} C={conc}: {len(pending)} workers did not finish")
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    cell.window_s = t_close - t_open
    cell.server_cpu_s, cell.client_cpu_s = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    cell.steps = after["s2s_batch_size_count"] - before["s2s_batch_size_count"]
    cell.rows_sum = after["s2s_batch_size_sum"] - before["s2s_batch_size_sum"]
    cell.step_s = after["s2s_decode_step_duration_seconds_sum"] - before["s2s_decode_step_duration_seconds_sum"]
    return cell


async def rtt(server: ServerProcess, args: argparse.Namespace) -> list[float]:
    """What gRPC alone costs: calls that do no inference (ListModels), same server, same kind of client."""
    out = []
    async with grpc.aio.insecure_channel(server.address) as ch:
        stub = pb_grpc.Seq2SeqStub(ch)
        for k in range(args.rtt_calls + 20):
            t0 = time.perf_counter()
            await stub.ListModels(pb.ListModelsRequest(), timeout=args.request_timeout_s)
            if k >= 20:
                out.append(time.perf_counter() - t0)
    return out


def single_request_times(engine, args: argparse.Namespace, inputs: list[str], idx: list[int]) -> list[float]:
    """In-process decode time of each input alone (batch 1): what a request costs without any server."""
    from server.engine import generate

    mnt = args.max_new_tokens or None
    for i in idx[:3]:
        generate(engine, [inputs[i]], max_new_tokens=mnt, batch_size=1)
    out = []
    for i in idx:
        t = time.perf_counter()
        generate(engine, [inputs[i]], max_new_tokens=mnt, batch_size=1)
        out.append(time.perf_counter() - t)
    return out


async def run_interleaved(args: argparse.Namespace, inputs: list[str], engine, log) -> tuple[list[Cell], list[float]]:
    """One server per batching mode, all started up front; for each concurrency, ``--rounds`` rounds of one
    window per mode (the order rotating), pooled per cell. Interleaving keeps the machine's drift (this VM
    varies by 15-25% over minutes) out of the ratios between modes. After each concurrency-1 round the
    engine's single-request times are taken in this process on the inputs that round sent, so that the
    C=1 latency ratio compares numbers of the same minutes too."""
    with contextlib.ExitStack() as stack:
        servers = {}
        for mode in args.modes:
            log(f"{mode}: starting the server")
            servers[mode] = stack.enter_context(ServerProcess(args, mode))
        for server in servers.values():  # one short burst each, so that ONNX Runtime's first runs are in no cell
            async with grpc.aio.insecure_channel(server.address) as ch:
                stub = pb_grpc.Seq2SeqStub(ch)
                await asyncio.gather(*(stub.Generate(pb.GenerateRequest(model=args.model, inputs=[inputs[i % len(inputs)]]),
                                                     timeout=args.request_timeout_s) for i in range(8)))
        cells, single = [], []
        for conc in args.concurrency:
            rounds: dict[str, list[Cell]] = {m: [] for m in args.modes}
            for r in range(args.rounds):
                for mode in args.modes[r % len(args.modes):] + args.modes[: r % len(args.modes)]:
                    t = time.perf_counter()
                    cell = await run_cell(servers[mode], args, inputs, mode, conc, start_index=0)
                    if conc == 1:
                        cell.rtt_s = await rtt(servers[mode], args)
                    rounds[mode].append(cell)
                    log(f"  {mode:10s} C={conc:<3d} round {r + 1}: {cell.answers:4d} answers in {cell.window_s:5.1f}s  "
                        f"{cell.rps:7.1f} req/s  p50 {1000 * cell.lat(50):7.1f} ms  p99 {1000 * cell.lat(99):7.1f} ms  "
                        f"({time.perf_counter() - t:.1f}s)")
                if conc == 1:
                    sent = sorted({i for m in args.modes for i in rounds[m][-1].indices})
                    single += await asyncio.to_thread(single_request_times, engine, args, inputs, sent)
            cells += [Cell.pooled(rounds[m]) for m in args.modes]
    order = {m: i for i, m in enumerate(args.modes)}
    return sorted(cells, key=lambda c: (order[c.mode], c.conc)), single


# ---------------------------------------------------------------------------------------------
# the engine's ceiling, in process
# ---------------------------------------------------------------------------------------------
@dataclass
class Ceiling:
    n: int
    seconds: float
    tokens: int
    single_ms: float
    single_n: int
    sched_seconds: float = float("inf")  # the same inputs through the scheduler in process (no gRPC)

    @property
    def best_seconds(self) -> float:
        return min(self.seconds, self.sched_seconds)

    @property
    def sps(self) -> float:
        return self.n / self.best_seconds

    @property
    def tps(self) -> float:
        return self.tokens / self.best_seconds


def output_tokens(engine, texts: list[str], max_new_tokens: int, batch_size: int) -> int:
    """Generated tokens for these inputs (greedy is deterministic)."""
    from server.engine import Sequence
    from server.engine.generator import run

    budget = max_new_tokens or engine.config.task.max_new_tokens
    seqs = run(engine, [Sequence(engine.codec.source_ids(t), budget) for t in texts], batch_size)
    return sum(len(s.result or []) for s in seqs)


def measure_ceiling(engine, args: argparse.Namespace, inputs: list[str], single: list[float], log) -> Ceiling:
    from server.engine import generate

    mnt = args.max_new_tokens or None
    tokens = output_tokens(engine, inputs, args.max_new_tokens, args.max_batch_size)  # also warms ORT up
    best = float("inf")
    for r in range(args.ceiling_repeats):
        t = time.perf_counter()
        generate(engine, inputs, max_new_tokens=mnt, batch_size=args.max_batch_size)
        best = min(best, time.perf_counter() - t)
        log(f"  engine ceiling run {r + 1}: {len(inputs)} sequences in {time.perf_counter() - t:.2f}s")
    single = single or single_request_times(engine, args, inputs, list(range(min(40, len(inputs)))))
    sched = min(scheduler_in_process(engine, args, inputs) for _ in range(args.ceiling_repeats))
    log(f"  scheduler in process: {len(inputs)} sequences in {sched:.2f}s")
    return Ceiling(len(inputs), best, tokens, 1000 * statistics.median(single), len(single), sched)


def scheduler_in_process(engine, args: argparse.Namespace, inputs: list[str], conc: int = 64) -> float:
    """Seconds for the inputs through the server's own Scheduler (step loop and encoder thread), called by
    ``conc`` closed-loop coroutines in this process: the serving machinery without gRPC, which can use a
    second core for encoding where ``generate`` cannot."""
    from server.config import SchedulerConfig
    from server.engine import Sequence
    from server.metrics import Metrics
    from server.scheduler import Scheduler

    budget = args.max_new_tokens or engine.config.task.max_new_tokens

    async def go() -> float:
        sched = Scheduler(args.model, engine, SchedulerConfig(max_batch_size=args.max_batch_size,
                                                              max_queue_size=args.max_queue_size), Metrics())
        sched.start(asyncio.get_running_loop())
        todo = iter(inputs)

        async def caller() -> None:
            for text in todo:
                await sched.generate([Sequence(engine.codec.source_ids(text), budget)], None)

        t = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(conc)))
        took = time.perf_counter() - t
        sched.drain(5.0)
        return took

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)  # as `s2s serve` sets it
    try:
        return asyncio.run(go())
    finally:
        sys.setswitchinterval(interval)


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError):
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        if m:
            cpu = m.group(1).strip()
    return f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {cpu}, Python {platform.python_version()}"


def versions() -> str:
    import onnxruntime

    return f"onnxruntime {onnxruntime.__version__}, grpcio {grpc.__version__}"


def ms(x: float) -> str:
    return "n/a" if x != x else f"{1000 * x:.1f}"


def table(cells: list[Cell]) -> list[str]:
    rows = ["| batching | C | answers | window s | req/s | tok/s | p50 ms | p95 ms | p99 ms | TTFT p50 ms | rows/step | step ms | in steps | CPU server / client | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        err = ", ".join(f"{k} {v}" for k, v in sorted(c.errors.items())) or "0"
        rows.append(f"| {c.mode} | {c.conc} | {c.answers} | {c.window_s:.1f} | {c.rps:.1f} | {c.tps:.0f} | {ms(c.lat(50))} | "
                    f"{ms(c.lat(95))} | {ms(c.lat(99))} | {ms(pct(c.ttfts, 50))} | "
                    f"{'n/a' if c.rows_per_step is None else f'{c.rows_per_step:.1f}'} | "
                    f"{'n/a' if c.step_ms is None else f'{c.step_ms:.2f}'} | "
                    f"{'n/a' if c.busy is None else f'{100 * c.busy:.0f}%'} | "
                    f"{100 * c.server_cpu:.0f}% / {100 * c.client_cpu:.0f}% | {err} |")
    return rows


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def acceptance(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    by = {(c.mode, c.conc): c for c in cells}
    top = max((c.conc for c in cells), default=0)
    rows = ["| figure | value | target | |", "|---|---|---|---|"]

    def ratio(a: float, b: float) -> float:
        return a / b if b else float("nan")

    cont, none_, req = by.get(("continuous", top)), by.get(("none", top)), by.get(("request", top))
    if cont and none_:
        r = ratio(cont.rps, none_.rps)
        rows.append(f"| throughput continuous / none at C={top} | {cont.rps:.1f} / {none_.rps:.1f} req/s = **{r:.2f}×** "
                    f"(tokens: {ratio(cont.tps, none_.tps):.2f}×) | ≥ 5× | {verdict(r >= 5)} |")
    if cont and req:
        r = ratio(cont.lat(99), req.lat(99))
        rows.append(f"| p99 latency continuous / request at C={top} | {ms(cont.lat(99))} / {ms(req.lat(99))} ms = **{r:.2f}×** "
                    f"(p50 {ratio(cont.lat(50), req.lat(50)):.2f}×) | none set (< 1×: continuous has the shorter tail) | "
                    f"{'continuous lower' if r < 1 else 'continuous higher'} |")
    conts = [c for c in cells if c.mode == "continuous"]
    if conts and ceiling:
        sat = max(conts, key=lambda c: c.tps)
        r_t, r_s = ratio(sat.tps, ceiling.tps), ratio(sat.rps, ceiling.sps)
        rows.append(f"| saturation / engine ceiling (continuous, best cell C={sat.conc}) | tokens {sat.tps:.0f} / {ceiling.tps:.0f} tok/s = "
                    f"**{100 * r_t:.0f}%**; sequences {sat.rps:.1f} / {ceiling.sps:.1f} /s = **{100 * r_s:.0f}%**"
                    + (f" (at C={top}: {100 * ratio(cont.tps, ceiling.tps):.0f}% / {100 * ratio(cont.rps, ceiling.sps):.0f}%)"
                       if cont and cont is not sat else "")
                    + f" | ≥ 70% | {verdict(r_t >= 0.7 and r_s >= 0.7)} |")
    c1 = by.get(("continuous", 1))
    if c1 and ceiling:
        r = ratio(1000 * c1.lat(50), ceiling.single_ms)
        rows.append(f"| C=1 p50 latency / engine single request (continuous) | {ms(c1.lat(50))} / {ceiling.single_ms:.1f} ms = **{r:.2f}×** | "
                    f"≤ 1.5× | {verdict(r <= 1.5)} |")
        for mode in ("request", "none"):
            c = by.get((mode, 1))
            if c:
                rows.append(f"| C=1 p50 latency / engine single request ({mode}) | {ms(c.lat(50))} / {ceiling.single_ms:.1f} ms = "
                            f"{ratio(1000 * c.lat(50), ceiling.single_ms):.2f}× | (reference) | |")
    return rows


def notes(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    """Computed facts that bound or explain the acceptance figures."""
    out = []
    by = {(c.mode, c.conc): c for c in cells}
    top = max((c.conc for c in cells), default=0)
    if ceiling:
        out.append(f"- Mean generated tokens per input: {ceiling.tokens / ceiling.n:.1f} ({ceiling.tokens} / {ceiling.n}).")
        none_ = by.get(("none", top))
        if none_ and none_.rps:
            out.append(f"- Upper bound of continuous / none at C={top} if the server reached the engine ceiling: "
                       f"{ceiling.sps:.1f} / {none_.rps:.1f} = {ceiling.sps / none_.rps:.2f}×.")
    per_row = [f"C={c.conc} {c.step_ms / c.rows_per_step:.3f}" for c in cells
               if c.mode == "continuous" and c.step_ms and c.rows_per_step]
    if per_row:
        out.append(f"- Decode-step time per row, continuous (ms): {', '.join(per_row)}.")
    c1 = by.get(("continuous", 1))
    if c1 and ceiling and c1.rtt_s and c1.server_s:
        lat, srv, rtt = 1000 * c1.lat(50), 1000 * pct(c1.server_s, 50), 1000 * pct(c1.rtt_s, 50)
        out.append(f"- Where the C=1 latency goes (continuous, medians): client p50 {lat:.2f} ms = engine single request "
                   f"{ceiling.single_ms:.2f} ms + {lat - ceiling.single_ms:.2f} ms. The server's own `total_seconds` "
                   f"(servicer entry to answer: validation, queue hand-off to the worker thread and back, decoding) is "
                   f"{srv:.2f} ms, {srv - ceiling.single_ms:.2f} ms above the engine; the other {lat - srv:.2f} ms is gRPC "
                   f"and protobuf in both processes. A bare round trip that does no inference (ListModels, "
                   f"{len(c1.rtt_s)} calls) takes {rtt:.2f} ms p50 on its own, i.e. {rtt / ceiling.single_ms:.2f}× of the "
                   f"engine's single-request time before any work is done.")
    busy = [f"C={c.conc} {100 * c.busy:.0f}%" for c in cells if c.mode == "continuous" and c.busy is not None]
    if busy:
        out.append(f"- Share of the window the continuous scheduler spent inside decode steps: {', '.join(busy)} "
                   "(the rest: admission, i.e. encoder and cache growth, plus waiting for work or for the GIL).")
    return out


def section(args, cells: list[Cell], ceiling: Ceiling | None, inputs: list[str], inputs_path: Path, bundle: Path,
            started: dt.datetime, load_before: str, elapsed: float) -> str:
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    lines = [
        "## Serving under load (`bench/serve.py`)",
        "",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC; run took {elapsed / 60:.1f} min",
        f"- Machine: {machine()}; {versions()}; load average before the run: {load_before}",
        f"- Command: `{cmd}`",
        f"- Model: `{args.model}` (`{os.path.relpath(bundle, ROOT) if bundle.is_relative_to(ROOT) else bundle}`), "
        f"inputs: {len(inputs)} held-out sentences from `{os.path.relpath(inputs_path, ROOT) if inputs_path.is_relative_to(ROOT) else inputs_path}`, "
        "one per Generate request, cycled in file order; greedy, model default max_new_tokens",
        f"- Server: a separate `s2s serve` process per batching mode, all three started up front, on 127.0.0.1, `--max-batch-size {args.max_batch_size} "
        f"--max-queue-size {args.max_queue_size} --intra-op-threads {args.intra_op_threads}`, request mode "
        f"`--max-queue-delay-ms {args.queue_delay_ms:g}`; client: grpc.aio in the bench process, one channel, "
        "C closed-loop workers",
        f"- Cell: {args.rounds} window(s) per mode and C, interleaved (round r runs the modes in an order rotated by r) "
        "and pooled, so that this VM's drift over minutes does not land on one mode. Window: warm-up of max(C, 8) "
        f"answers or {args.warmup_s:g} s, then max({args.requests_per_worker}·C, "
        f"{args.min_requests}) answers (but at least {args.min_seconds:g} s) or {args.seconds:g} s, whichever first. req/s and tok/s = answers (their "
        "`output_tokens`) inside the window / window length. Latency = client-side send→answer of every request sent "
        "inside the window (in-flight ones drained, not cancelled). TTFT = server-side "
        "`timings.time_to_first_token_seconds` of the unary Generate response (arrival at the servicer → first token). "
        "rows/step, step ms and in steps (share of the window spent inside decode steps): the server's `s2s_batch_size` and "
        "`s2s_decode_step_duration_seconds` histograms over the window. CPU: the server process's and this "
        "(client) process's CPU time over the window (100% = one core).",
        "",
        *table(cells),
        "",
    ]
    if ceiling:
        lines += [
            f"Engine ceiling, in process with no server running (same bundle, {args.intra_op_threads} intra-op thread): "
            f"`server.engine.generate(Engine(bundle), inputs, batch_size={args.max_batch_size})` on the {ceiling.n} inputs, "
            f"best of {args.ceiling_repeats}: {ceiling.seconds:.2f} s = **{ceiling.n / ceiling.seconds:.1f} sequences/s, "
            f"{ceiling.tokens / ceiling.seconds:.0f} tokens/s** ({ceiling.tokens} generated tokens). The same inputs through "
            f"the server's scheduler in process (step loop and encoder thread, 64 closed-loop callers, no gRPC; best of "
            f"{args.ceiling_repeats}): {ceiling.sched_seconds:.2f} s = **{ceiling.n / ceiling.sched_seconds:.1f} sequences/s, "
            f"{ceiling.tokens / ceiling.sched_seconds:.0f} tokens/s**. The ceiling below is the faster of the two. "
            "Single request (batch 1, in process, timed after each concurrency-1 round on the inputs that round sent), "
            f"median of {ceiling.single_n} timings: **{ceiling.single_ms:.1f} ms**.",
            "",
        ]
    acc = acceptance(cells, ceiling)
    if len(acc) == 2:
        acc.append("| (needs the continuous, request and none modes) | | | |")
    lines += ["Acceptance (issue #4 item 9):", "", *acc, ""]
    if nts := notes(cells, ceiling):
        lines += ["Notes:", "", *nts]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Closed-loop gRPC load on `s2s serve` (separate process) for each batching mode and concurrency, "
                    "with the in-process engine ceiling; prints a table and writes the bench-serve section of "
                    "docs/BENCHMARKS.md. Run it on an idle machine (the full grid takes < 10 minutes on 2 cores).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="translate-en-ja", help="model name in the repository")
    p.add_argument("--model-repo", type=Path, default=ROOT / "models", help="model repository (models/<name>/<version>/)")
    p.add_argument("--inputs", type=Path, default=None,
                   help="TSV source<TAB>reference; default checkpoints/<model>/test.tsv (else runs/<model>/data/test.tsv)")
    p.add_argument("--modes", default=",".join(MODES), help="batching modes, comma-separated")
    p.add_argument("--concurrency", default="1,8,32,64", help="closed-loop client workers per cell, comma-separated")
    p.add_argument("--min-requests", type=int, default=40, help="a cell's window closes after max(requests-per-worker*C, this) answers ...")
    p.add_argument("--requests-per-worker", type=int, default=3, help="... (see --min-requests)")
    p.add_argument("--rounds", type=int, default=2,
                   help="windows per cell, interleaved with the other modes' (pooled); each window as below")
    p.add_argument("--seconds", type=float, default=10.0, help="... or after this many seconds, whichever first")
    p.add_argument("--min-seconds", type=float, default=5.0,
                   help="... but never before this many seconds (so fast cells still give enough samples for p99)")
    p.add_argument("--warmup-s", type=float, default=3.0, help="per-cell warm-up: max(C, 8) answers or this long")
    p.add_argument("--max-batch-size", type=int, default=16, help="server --max-batch-size (its default) and the ceiling's batch_size")
    p.add_argument("--max-queue-size", type=int, default=4096, help="server --max-queue-size (never the limit here)")
    p.add_argument("--queue-delay-ms", type=float, default=5.0, help="request mode's --max-queue-delay-ms")
    p.add_argument("--intra-op-threads", type=int, default=1, help="ONNX Runtime threads, server and ceiling alike")
    p.add_argument("--max-new-tokens", type=int, default=0, help="0 = the model's default")
    p.add_argument("--request-timeout-s", type=float, default=120.0, help="deadline of every request")
    p.add_argument("--ceiling-repeats", type=int, default=2, help="timed runs of the in-process ceiling (best counts)")
    p.add_argument("--rtt-calls", type=int, default=300, help="bare ListModels round trips timed after each C=1 cell")
    p.add_argument("--limit-inputs", type=int, default=0, help="use only the first N inputs (0 = all)")
    p.add_argument("--quick", action="store_true",
                   help="development grid: C in {1, 8}, 16 answers or 3 s per cell, 64 inputs, < 1 minute; writes no file unless --write")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None,
                   help="write the section into --output (default: yes, except with --quick)")
    p.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md", help="markdown file to update")
    args = p.parse_args(argv)
    if args.quick:  # smaller defaults; flags given explicitly still win
        quick = dict(concurrency="1,8", min_requests=16, requests_per_worker=2, seconds=3.0, min_seconds=0.5, warmup_s=1.0, rounds=1,
                     ceiling_repeats=1, limit_inputs=64, rtt_calls=50)
        for k, v in quick.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    args.concurrency = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in args.modes if m not in MODES]:
        p.error(f"unknown batching mode(s) {bad}; choose from {MODES}")
    if args.write is None:
        args.write = not args.quick
    return args


def find_bundle(repo: Path, model: str) -> Path:
    versions = sorted((int(d.name) for d in (repo / model).glob("*") if d.is_dir() and d.name.isdigit()), reverse=True)
    if not versions:
        raise SystemExit(f"bench/serve.py: no bundle under {repo / model}/<version>/ (build the models first)")
    return repo / model / str(versions[0])


def load_inputs(args: argparse.Namespace, engine) -> tuple[list[str], Path]:
    from contract.text import UnknownCharactersError

    path = args.inputs
    if path is None:
        cands = [ROOT / "checkpoints" / args.model / "test.tsv", ROOT / "runs" / args.model / "data" / "test.tsv"]
        path = next((c for c in cands if c.exists()), cands[0])
    if not path.exists():
        raise SystemExit(f"bench/serve.py: no inputs at {path} (give --inputs FILE.tsv)")
    limit = engine.config.model.max_len
    texts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        src = line.split("\t", 1)[0]
        if not src.strip():
            continue
        try:
            if len(engine.codec.source_ids(src)) > limit:
                continue  # the server would refuse it (INVALID_ARGUMENT)
        except UnknownCharactersError:
            continue
        texts.append(src)
    if args.limit_inputs:
        texts = texts[: args.limit_inputs]
    if not texts:
        raise SystemExit(f"bench/serve.py: no usable inputs in {path}")
    return texts, path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from server.engine import Engine, EngineOptions

    def on_term(signum, frame):  # SIGTERM unwinds like Ctrl-C, so every server process is stopped on the way out
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)

    started, t_all = dt.datetime.now(dt.timezone.utc), time.perf_counter()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    bundle = find_bundle(args.model_repo, args.model)
    engine = Engine(bundle, EngineOptions(device="cpu", intra_op_threads=args.intra_op_threads))
    inputs, inputs_path = load_inputs(args, engine)
    log(f"bench/serve.py: {args.model} from {bundle}, {len(inputs)} inputs from {inputs_path}; load average {load_before}")
    if float(load_before.split()[0]) > 0.7 * len(os.sched_getaffinity(0)) if load_before != "n/a" else False:
        log("  warning: the machine is busy (load average above); the figures will be depressed")

    cells, single = asyncio.run(run_interleaved(args, inputs, engine, log))

    log("engine ceiling (in process, no server running)")
    ceiling = measure_ceiling(engine, args, inputs, single, log)
    elapsed = time.perf_counter() - t_all

    text = section(args, cells, ceiling, inputs, inputs_path, bundle, started, load_before, elapsed)
    print(text)
    if args.write:
        write_section(args.output, "bench-serve", text)
        log(f"wrote {args.output}")
    log(f"done in {elapsed:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
