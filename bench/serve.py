"""Closed-loop load on the real gRPC server, per batching mode, engine-core count and concurrency, against
the engine cores' in-process ceiling and CTranslate2.

Servers: one `s2s serve` process per (batching mode, --instances K) variant, all started up front (a
separate process, so client and server never share a GIL; each runs K engine-core processes of its own).
The continuous mode runs at every K of --instances (default 1,2); request and none only at the smallest
K, to keep the full run under ~10 minutes. For each concurrency C, C client workers (grpc.aio, one
channel, in this process) each send one Generate request (one held-out sentence, cycling through the
test set) and send the next as soon as the answer arrives.

Per cell: --rounds windows, interleaved with the other variants' at the same C (round r runs the
variants in an order rotated by r) and pooled, so that the machine's drift over minutes does not
land on one variant. Each window: a warm-up (until max(C, 8) answers or --warmup-s, whichever comes
first), then measurement until max(3*C, --min-requests) answers (but at least --min-seconds) or
--seconds, whichever comes first. Throughput = answers received inside the window / window length (generated tokens from
each Output's output_tokens). Latency (client-side, send to answer) and time to first token
(server-side, Timings.time_to_first_token_seconds of the unary response) are taken over every
request *sent* inside the window; requests still in flight when it closes are drained (awaited)
and counted in the latency figures, never cancelled, so the slow tail is not dropped. Server CPU
is the front end's and its engine cores' (its descendant processes') CPU time over the window.

Ceilings, measured after every server has exited, on the same inputs:

* engine cores in process (what "server / own cores' ceiling" divides by): for each K, K processes
  (multiprocessing spawn), each with the server's own Scheduler (continuous, --max-batch-size, step
  loop plus encoder thread) on one Runner, fed pre-tokenized inputs by closed-loop callers (max C of
  the grid, or --ceiling-callers, split over the K processes; one caller thread per process, fed by
  the scheduler's sink, submits a caller's next sequence as soon as its Finished event arrives; no
  gRPC, no pipe). All K run the same wall window (--ceiling-warmup-s, then --ceiling-seconds);
  answers finished inside it are summed. Best of --ceiling-repeats windows.
* `engine.generate` on the inputs with batch_size=--max-batch-size, one thread, in this process
  (best of --ceiling-repeats): the one-core reference of the earlier reports; the 1-instance
  saturation row uses the faster of it and the 1-core figure above.
* CTranslate2 in this process on the same weights (the checkpoint converted by bench/ct2_convert.py,
  cached in .cache/bench/) and the same inputs tokenized by the bundle's tokenizer (at least
  --ct2-min-inputs, cycled): greedy, EOS-stopped, max_decoding_length = the engine's budget,
  intra_threads=1; best of max_batch_size 16/64 (its own length sorting) x inter_threads 1/2.

The single-request decode time (batch 1, median) is taken in this process after each concurrency-1
round, on the inputs that round sent.

Results are printed and written to docs/BENCHMARKS.md between the bench-serve markers (other
sections of the file are left as they are), with the acceptance figures (K instances / 1 instance at
the top C, server / own cores' ceiling, C=1 p50 / single request, server / CTranslate2) in a table at
the top. Run it on an otherwise idle machine:

    .venv/bin/python bench/serve.py                 # full grid, < 10 minutes on 2 cores
    .venv/bin/python bench/serve.py --quick         # C in {1, 8}, few requests, ~1 minute, no file written
    .venv/bin/python bench/serve.py --model-repo /tmp/models --model addition --quick
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import datetime as dt
import itertools
import multiprocessing
import os
import platform
import queue
import re
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
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
CACHE = ROOT / ".cache" / "bench"  # CTranslate2 conversions, shared with bench/decode.py


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
    """`python -m s2s.cli serve` on loopback, one model, one batching mode, ``instances`` engine cores;
    always terminated on exit."""

    def __init__(self, args: argparse.Namespace, mode: str, instances: int, root: Path = ROOT, label: str = ""):
        """``root``: the source tree the server runs from (another commit's, for an A/B; see bench/option_cost.py)."""
        self.mode, self.instances, self.root, self._label = mode, instances, root, label
        self.port, self.metrics_port = free_port(), free_port()
        while self.metrics_port == self.port:
            self.metrics_port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(args.model_repo), "--models", args.model,
                    "--host", "127.0.0.1", "--port", str(self.port), "--metrics-port", str(self.metrics_port), "--http-port", "0",
                    "--batching", mode, "--instances", str(instances), "--max-batch-size", str(args.max_batch_size),
                    "--max-queue-size", str(args.max_queue_size), "--intra-op-threads", str(args.intra_op_threads),
                    "--grace-s", "2", "--log-level", "WARNING"]
        if mode == "request":
            self.cmd += ["--max-queue-delay-ms", str(args.queue_delay_ms)]
        self.log = tempfile.NamedTemporaryFile("w+", prefix=f"bench-serve-{mode}-x{instances}-", suffix=".log", delete=False)
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ServerProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("S2S_")}  # flags only, no stray settings
        self.proc = subprocess.Popen(self.cmd, cwd=self.root, env=env, stdout=self.log, stderr=subprocess.STDOUT,
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
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return out
        for line in text.splitlines():
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in out:
                out[name] += float(line.rsplit(" ", 1)[1])
        return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and of every live process below it (Linux /proc; 0 elsewhere)."""
    procs: dict[int, tuple[int, int]] = {}  # pid -> (ppid, clock ticks)
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0.0
    for name in names:
        if not name.isdigit():
            continue
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            procs[int(name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
        except (OSError, ValueError, IndexError):
            continue
    children: dict[int, list[int]] = {}
    for p, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(p)
    ticks, todo = 0, [pid]
    while todo:
        p = todo.pop()
        if p in procs:
            ticks += procs[p][1]
        todo += children.get(p, [])
    return ticks / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# closed-loop load
# ---------------------------------------------------------------------------------------------
@dataclass
class Cell:
    mode: str
    conc: int
    instances: int = 1  # engine cores of the server
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
        out = cls(rounds[0].mode, rounds[0].conc, rounds[0].instances)
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
    def busy(self) -> float | None:  # share of the window a core's step loop spent inside decode steps (mean of the cores)
        return self.step_s / (self.window_s * self.instances) if self.steps and self.window_s else None

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


async def run_cell(server: ServerProcess, args: argparse.Namespace, inputs: list[str], conc: int,
                   start_index: int, options: dict | None = None) -> Cell:
    """One window; ``options``: GenerateOptions fields every request sets (none: greedy, beam_size=1)."""
    cell = Cell(server.mode, conc, server.instances)
    label = server.label
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
                                         # greedy unless the cell says otherwise: a model's default may be a beam
                                         options=pb.GenerateOptions(max_new_tokens=args.max_new_tokens,
                                                                    **{"beam_size": 1, **(options or {})}))
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
                    raise RuntimeError(f"{label} C={conc}: request failed during warm-up: {err}\n{server.tail()}")

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
                raise RuntimeError(f"{label} C={conc}: {len(pending)} workers did not finish")
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
    from bench.baselines import generate

    mnt = args.max_new_tokens or None
    for i in idx[:3]:
        generate(engine, [inputs[i]], max_new_tokens=mnt, batch_size=1)
    out = []
    for i in idx:
        t = time.perf_counter()
        generate(engine, [inputs[i]], max_new_tokens=mnt, batch_size=1)
        out.append(time.perf_counter() - t)
    return out


def variants(args: argparse.Namespace) -> list[tuple[str, int]]:
    """(batching mode, engine cores) of the servers: continuous at every --instances, the others at the smallest."""
    out = []
    for mode in args.modes:
        out += [(mode, k) for k in args.instances] if mode == "continuous" else [(mode, min(args.instances))]
    return out


async def run_interleaved(args: argparse.Namespace, inputs: list[str], engine, log) -> tuple[list[Cell], list[float]]:
    """One server per variant (batching mode, engine cores), all started up front; for each concurrency,
    ``--rounds`` rounds of one window per variant (the order rotating), pooled per cell. Interleaving keeps
    the machine's drift (this VM varies by 15-25% over minutes) out of the ratios between variants. After
    each concurrency-1 round the engine's single-request times are taken in this process on the inputs that
    round sent, so that the C=1 latency ratio compares numbers of the same minutes too."""
    with contextlib.ExitStack() as stack:
        servers: dict[tuple[str, int], ServerProcess] = {}
        for mode, k in variants(args):
            log(f"{mode} x{k}: starting the server ({k} engine core{'s' if k > 1 else ''})")
            servers[(mode, k)] = stack.enter_context(ServerProcess(args, mode, k))
        for server in servers.values():  # one short burst each, so that ONNX Runtime's first runs are in no cell
            async with grpc.aio.insecure_channel(server.address) as ch:
                stub = pb_grpc.Seq2SeqStub(ch)
                await asyncio.gather(*(stub.Generate(pb.GenerateRequest(model=args.model, inputs=[inputs[i % len(inputs)]]),
                                                     timeout=args.request_timeout_s) for i in range(8 * server.instances)))
        keys = list(servers)
        cells, single = [], []
        for conc in args.concurrency:
            rounds: dict[tuple[str, int], list[Cell]] = {key: [] for key in keys}
            for r in range(args.rounds):
                for key in keys[r % len(keys):] + keys[: r % len(keys)]:
                    t = time.perf_counter()
                    cell = await run_cell(servers[key], args, inputs, conc, start_index=0)
                    if conc == 1:
                        cell.rtt_s = await rtt(servers[key], args)
                    rounds[key].append(cell)
                    log(f"  {servers[key].label:13s} C={conc:<3d} round {r + 1}: {cell.answers:4d} answers in {cell.window_s:5.1f}s  "
                        f"{cell.rps:7.1f} req/s  p50 {1000 * cell.lat(50):7.1f} ms  p99 {1000 * cell.lat(99):7.1f} ms  "
                        f"({time.perf_counter() - t:.1f}s)")
                if conc == 1:
                    sent = sorted({i for key in keys for i in rounds[key][-1].indices})
                    single += await asyncio.to_thread(single_request_times, engine, args, inputs, sent)
            cells += [Cell.pooled(rounds[key]) for key in keys]
    order = {m: i for i, m in enumerate(args.modes)}
    return sorted(cells, key=lambda c: (order[c.mode], c.instances, c.conc)), single


# ---------------------------------------------------------------------------------------------
# the engine's ceiling, in process
# ---------------------------------------------------------------------------------------------
@dataclass
class CoreCeiling:
    """K engine cores (processes) in process, closed loop, one common wall window."""

    instances: int
    callers: int
    window_s: float
    answers: int
    tokens: int
    errors: int
    per_core: list[int]  # answers of each process
    steps: float = 0.0  # decode steps inside the window, all cores
    rows_sum: float = 0.0

    @property
    def sps(self) -> float:
        return self.answers / self.window_s if self.window_s else 0.0

    @property
    def tps(self) -> float:
        return self.tokens / self.window_s if self.window_s else 0.0

    @property
    def rows_per_step(self) -> float | None:
        return self.rows_sum / self.steps if self.steps else None


@dataclass
class CT2Ref:
    """CTranslate2 in process on the same weights and inputs."""

    n: int  # sequences per timed run (the inputs, cycled)
    tokens: int  # generated by the best configuration
    max_decoding_length: int
    runs: dict[tuple[int, int], float]  # (max_batch_size, inter_threads) -> best seconds
    identical: int  # outputs equal to the engine's, of
    compared: int  # the distinct inputs
    model_dir: str
    note: str = ""

    @property
    def best(self) -> tuple[int, int]:
        return min(self.runs, key=self.runs.get)

    @property
    def sps(self) -> float:
        return self.n / self.runs[self.best]

    @property
    def tps(self) -> float:
        return self.tokens / self.runs[self.best]


@dataclass
class Ceiling:
    n: int
    seconds: float  # engine.generate over the inputs, best run
    tokens: int
    single_ms: float
    single_n: int
    cores: dict[int, CoreCeiling] = field(default_factory=dict)  # K -> best window of K engine cores
    callers: int = 0
    ct2: CT2Ref | None = None
    ct2_note: str = ""  # why there is no CTranslate2 row, or a caveat

    @property
    def gen_sps(self) -> float:
        return self.n / self.seconds

    @property
    def gen_tps(self) -> float:
        return self.tokens / self.seconds

    @property
    def sps(self) -> float:  # one core: the faster of engine.generate and the 1-core scheduler ceiling
        one = self.cores.get(1)
        return max(self.gen_sps, one.sps if one else 0.0)

    @property
    def tps(self) -> float:
        one = self.cores.get(1)
        return self.gen_tps if one is None or self.gen_sps >= one.sps else one.tps


def engine_outputs(engine, texts: list[str], max_new_tokens: int, batch_size: int) -> list[list[int]]:
    """Generated ids (EOS excluded) of each input (greedy is deterministic)."""
    from engine import Sequence
    from engine.generator import run

    budget = max_new_tokens or engine.config.task.max_new_tokens
    seqs = run(engine.runner, [Sequence(engine.codec.source_ids(t), budget) for t in texts], batch_size)
    return [list(s.result or []) for s in seqs]


def measure_ceiling(engine, bundle: Path, args: argparse.Namespace, inputs: list[str], single: list[float], log) -> Ceiling:
    from bench.baselines import generate

    mnt = args.max_new_tokens or None
    outputs = engine_outputs(engine, inputs, args.max_new_tokens, args.max_batch_size)  # also warms ORT up
    best = float("inf")
    for r in range(args.ceiling_repeats):
        t = time.perf_counter()
        generate(engine, inputs, max_new_tokens=mnt, batch_size=args.max_batch_size)
        best = min(best, time.perf_counter() - t)
        log(f"  engine.generate run {r + 1}: {len(inputs)} sequences in {time.perf_counter() - t:.2f}s")
    single = single or single_request_times(engine, args, inputs, list(range(min(40, len(inputs)))))
    ceiling = Ceiling(len(inputs), best, sum(len(o) for o in outputs), 1000 * statistics.median(single), len(single))
    ceiling.callers = args.ceiling_callers or max(args.concurrency)
    ids = [engine.codec.source_ids(t) for t in inputs]
    budget = args.max_new_tokens or engine.config.task.max_new_tokens  # as the server's requests get it
    for k in sorted({k for _, k in variants(args)}):
        ceiling.cores[k] = engine_cores_ceiling(args, bundle, ids, budget, k, ceiling.callers, log)
    ceiling.ct2, ceiling.ct2_note = measure_ct2(args, engine, inputs, outputs, log)
    return ceiling


# ---- K engine cores, in process ----------------------------------------------------------------
def _recv(conn, timeout: float, what: str):
    if not conn.poll(timeout):
        raise RuntimeError(f"{what}: no answer in {timeout:.0f} s")
    try:
        msg = conn.recv()
    except (EOFError, OSError):
        raise RuntimeError(f"{what}: the process died") from None
    if msg[0] == "error":
        raise RuntimeError(f"{what} failed:\n{msg[1]}")
    return msg


def _core_worker(conn, bundle: str, threads: int, sched: dict, shard: list[list[int]], budget: int, callers: int) -> None:
    """A ceiling process: one Runner and the server's Scheduler, driven by ``callers`` closed-loop callers.

    The scheduler's sink puts each iteration's events on a queue; this (main) thread takes them and, for
    every Finished/Failed, submits that caller's next sequence at once: the callers are multiplexed on one
    thread, as the engine core's pipe reader is. Windows are given as absolute ``time.monotonic()`` times
    (one clock for every process of the machine), so the parent sums K processes over one wall window."""
    _die_with_parent()
    try:
        sys.setswitchinterval(0.0005)  # as the engine core sets it
        from engine import EngineOptions, Runner, Sequence
        from server.config import SchedulerConfig
        from server.scheduler import Failed, Finished, Scheduler

        engine = Runner(Path(bundle), EngineOptions(device="cpu", intra_op_threads=threads))
        events: queue.SimpleQueue = queue.SimpleQueue()
        window = [float("inf"), float("-inf")]
        steps = [0, 0]  # decode steps, rows, inside the window

        def sink(evs, stats) -> None:
            if evs:
                events.put(evs)
            if stats.batch_rows and window[0] <= time.monotonic() <= window[1]:
                steps[0] += len(stats.batch_rows)
                steps[1] += sum(stats.batch_rows)

        scheduler = Scheduler("ceiling", engine, SchedulerConfig(**sched), sink)
        scheduler.start()
        conn.send(("ready", os.getpid()))
        request_ids, position = itertools.count(1), itertools.count()

        def submit() -> None:
            scheduler.submit(next(request_ids), [Sequence(shard[next(position) % len(shard)], budget)], None)

        while (msg := conn.recv()) is not None:
            t_start, t_open, t_close = msg
            window[:], steps[:] = [t_open, t_close], [0, 0]
            time.sleep(max(0.0, t_start - time.monotonic()))
            for _ in range(callers):
                submit()
            flying, answers, tokens, errors = callers, 0, 0, 0
            while flying:
                try:
                    evs = events.get(timeout=120)
                except queue.Empty:
                    raise RuntimeError(f"no event from the scheduler in 120 s ({flying} requests in flight)") from None
                now = time.monotonic()
                for ev in evs:
                    if not isinstance(ev, (Finished, Failed)):
                        continue
                    flying -= 1
                    if t_open <= now <= t_close:
                        if isinstance(ev, Finished):
                            answers, tokens = answers + 1, tokens + len(ev.tokens)
                        else:
                            errors += 1
                    if now < t_close:
                        submit()
                        flying += 1
            conn.send(("done", answers, tokens, errors, *steps))
        scheduler.drain(5.0)
    except Exception:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))


def engine_cores_ceiling(args: argparse.Namespace, bundle: Path, ids: list[list[int]], budget: int, k: int, callers: int,
                         log) -> CoreCeiling:
    """K engine cores' in-process ceiling: K spawned processes, each the server's Scheduler (continuous) on its
    own Runner with its share of the callers (callers // K, the remainder to the first) and of the inputs
    (every K-th), run over the same wall window; answers finished inside it are summed. Best of
    --ceiling-repeats windows."""
    ctx = multiprocessing.get_context("spawn")
    shards = [ids[j::k] or ids for j in range(k)]
    split = [callers // k + (j < callers % k) for j in range(k)]
    sched = dict(mode="continuous", max_batch_size=args.max_batch_size, max_queue_size=max(args.max_queue_size, callers))
    procs, conns = [], []
    best: CoreCeiling | None = None
    try:
        for j in range(k):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_core_worker, name=f"bench-core-{j}", daemon=True,
                               args=(child, str(bundle), args.intra_op_threads, sched, shards[j],
                                     budget, split[j]))
            proc.start()
            child.close()
            procs.append(proc)
            conns.append(parent)
        for j, conn in enumerate(conns):
            _recv(conn, 120, f"ceiling core {j} (loading)")
        for r in range(args.ceiling_repeats):
            t_start = time.monotonic() + 0.2
            t_open = t_start + args.ceiling_warmup_s
            t_close = t_open + args.ceiling_seconds
            for conn in conns:
                conn.send((t_start, t_open, t_close))
            res = [_recv(conn, args.ceiling_warmup_s + args.ceiling_seconds + 180, f"ceiling core {j}")
                   for j, conn in enumerate(conns)]
            cc = CoreCeiling(k, callers, t_close - t_open, sum(m[1] for m in res), sum(m[2] for m in res),
                             sum(m[3] for m in res), [m[1] for m in res], sum(m[4] for m in res), sum(m[5] for m in res))
            log(f"  {k} engine core{'s' if k > 1 else ''} in process ({callers} callers), window {r + 1}: "
                f"{cc.answers} sequences in {cc.window_s:.1f}s = {cc.sps:.1f}/s (per core {cc.per_core})"
                + (f", {cc.errors} failed" if cc.errors else ""))
            if best is None or cc.sps > best.sps:
                best = cc
    finally:
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in procs:
            proc.join(15)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        for conn in conns:
            conn.close()
    return best


# ---- CTranslate2 -------------------------------------------------------------------------------
def measure_ct2(args: argparse.Namespace, engine, inputs: list[str], outputs: list[list[int]], log) -> tuple[CT2Ref | None, str]:
    """CTranslate2 ``translate_batch`` on the same weights and inputs: greedy, EOS-stopped, max_decoding_length =
    the engine's budget, intra_threads=1; each of max_batch_size 16/64 x inter_threads 1/2, best of
    --ceiling-repeats. Tokenization (the bundle's tokenizer) is outside the timing."""
    if not args.ct2:
        return None, "not measured (--no-ct2)"
    ckpt = args.checkpoint or ROOT / "checkpoints" / args.model
    if not (ckpt / "config.json").is_file():
        return None, f"not measured: no checkpoint at {ckpt} to convert (give --checkpoint DIR)"
    try:
        import ctranslate2

        from bench.ct2_convert import convert, vocabulary
        from training import checkpoint as ckpt_io
    except ImportError as e:
        return None, f"not measured: {e} (the bench extra: pip install -e '.[bench]')"
    note = ""
    if engine.config.source_checkpoint_sha256 != ckpt_io.weights_sha256(ckpt):
        note = f"the bundle was NOT exported from {ckpt}'s weights"
        log(f"  warning: {note}")
    log(f"  CTranslate2: converting {ckpt} (cached in {CACHE})")
    model_dir = convert(ckpt, CACHE / f"ct2-{args.model}")
    vocab = vocabulary(engine.codec.tokenizer)
    index = {t: i for i, t in enumerate(vocab)}
    src = [[vocab[i] for i in engine.codec.source_ids(t)] for t in inputs]
    n = max(len(src), args.ct2_min_inputs)
    batch = [src[i % len(src)] for i in range(n)]
    length = min(args.max_new_tokens or engine.config.task.max_new_tokens, engine.config.model.max_len - 1)
    runs: dict[tuple[int, int], float] = {}
    tokens: dict[tuple[int, int], int] = {}
    identical = 0
    for inter in (1, 2):
        tr = ctranslate2.Translator(str(model_dir), device="cpu", compute_type="float32", inter_threads=inter, intra_threads=1)
        for bs in (16, 64):
            kw = dict(beam_size=1, max_batch_size=bs, batch_type="examples", max_decoding_length=length, return_scores=False)
            tr.translate_batch(batch[: 2 * bs * inter], **kw)  # warm-up
            best = float("inf")
            for _ in range(args.ceiling_repeats):
                t = time.perf_counter()
                res = tr.translate_batch(batch, **kw)
                best = min(best, time.perf_counter() - t)
            runs[(bs, inter)] = best
            hyps = [[index[tok] for tok in r.hypotheses[0]] for r in res]
            tokens[(bs, inter)] = sum(len(h) for h in hyps)
            identical = sum(h == o for h, o in zip(hyps, outputs))
            log(f"  CTranslate2 max_batch_size={bs} inter_threads={inter}: {n} sequences in {best:.2f}s = {n / best:.1f}/s")
        del tr
    ref = CT2Ref(n, 0, length, runs, identical, len(outputs), str(model_dir), note)
    ref.tokens = tokens[ref.best]
    return ref, note


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
    # ``instances`` sits after ``answers``: the columns before it are what tests/test_bench_smoke.py reads
    rows = ["| batching | C | answers | instances | window s | req/s | tok/s | p50 ms | p95 ms | p99 ms | TTFT p50 ms | rows/step | step ms | in steps | CPU server / client | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        err = ", ".join(f"{k} {v}" for k, v in sorted(c.errors.items())) or "0"
        rows.append(f"| {c.mode} | {c.conc} | {c.answers} | {c.instances} | {c.window_s:.1f} | {c.rps:.1f} | {c.tps:.0f} | {ms(c.lat(50))} | "
                    f"{ms(c.lat(95))} | {ms(c.lat(99))} | {ms(pct(c.ttfts, 50))} | "
                    f"{'n/a' if c.rows_per_step is None else f'{c.rows_per_step:.1f}'} | "
                    f"{'n/a' if c.step_ms is None else f'{c.step_ms:.2f}'} | "
                    f"{'n/a' if c.busy is None else f'{100 * c.busy:.0f}%'} | "
                    f"{100 * c.server_cpu:.0f}% / {100 * c.client_cpu:.0f}% | {err} |")
    return rows


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def inst(k: int) -> str:
    return f"{k} instance{'s' if k != 1 else ''}"


def headline(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    """The serving-core acceptance figures (continuous batching): instance scaling, server / own cores' ceiling,
    C=1 latency / single request, and the ratio to CTranslate2."""
    by = {(c.mode, c.instances, c.conc): c for c in cells}
    top = max((c.conc for c in cells), default=0)
    ks = sorted({c.instances for c in cells if c.mode == "continuous"})
    rows = ["| figure (continuous batching) | value | target | |", "|---|---|---|---|"]
    if not ks:
        return rows + ["| (needs the continuous mode) | | | |"]
    base = by.get(("continuous", ks[0], top))
    for k in ks[1:]:
        c = by.get(("continuous", k, top))
        if c and base:
            r, want = ratio(c.rps, base.rps), 0.85 * k / ks[0]
            rows.append(f"| throughput {inst(k)} / {inst(ks[0])} at C={top} | {c.rps:.1f} / {base.rps:.1f} req/s = **{r:.2f}×** "
                        f"(tokens {ratio(c.tps, base.tps):.2f}×) | ≥ {want:.2f}× | {verdict(r >= want)} |")
    for k in ks:
        c, cc = by.get(("continuous", k, top)), ceiling.cores.get(k) if ceiling else None
        if c and cc:
            r = ratio(c.rps, cc.sps)
            rows.append(f"| server at C={top} / own cores' ceiling ({inst(k)}; {k} in-process engine core{'s' if k > 1 else ''}, "
                        f"{cc.callers} callers) | {c.rps:.1f} / {cc.sps:.1f} sequences/s = **{100 * r:.0f}%** "
                        f"(tokens {100 * ratio(c.tps, cc.tps):.0f}%) | ≥ 90% | {verdict(r >= 0.9)} |")
    for k in ks:
        c1 = by.get(("continuous", k, 1))
        if c1 and ceiling:
            r = ratio(1000 * c1.lat(50), ceiling.single_ms)
            rows.append(f"| C=1 p50 latency / engine single request ({inst(k)}) | {ms(c1.lat(50))} / {ceiling.single_ms:.1f} ms = "
                        f"**{r:.2f}×** | ≤ 1.3× | {verdict(r <= 1.3)} |")
    ct2 = ceiling.ct2 if ceiling else None
    for k in ks:
        c = by.get(("continuous", k, top))
        if c and ct2:
            bs, it = ct2.best
            rows.append(f"| server at C={top} / CTranslate2 in process ({inst(k)}; CTranslate2 max_batch_size {bs}, "
                        f"inter_threads {it}) | {c.rps:.1f} / {ct2.sps:.1f} sequences/s = **{ratio(c.rps, ct2.sps):.2f}×** | "
                        "none (printed) | |")
    if ceiling and ct2 is None:
        rows.append(f"| server / CTranslate2 in process | {ceiling.ct2_note} | none (printed) | |")
    return rows


def acceptance(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    """The batching-mode figures (issue #4 item 9), at the smallest instance count."""
    k0 = min((c.instances for c in cells), default=1)
    by = {(c.mode, c.conc): c for c in cells if c.instances == k0}
    top = max((c.conc for c in cells), default=0)
    rows = ["| figure | value | target | |", "|---|---|---|---|"]
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
    conts = [c for (m, _), c in by.items() if m == "continuous"]
    if conts and ceiling and k0 == 1:
        sat = max(conts, key=lambda c: c.tps)
        r_t, r_s = ratio(sat.tps, ceiling.tps), ratio(sat.rps, ceiling.sps)
        rows.append(f"| saturation / one-core engine ceiling (continuous, 1 instance, best cell C={sat.conc}) | tokens "
                    f"{sat.tps:.0f} / {ceiling.tps:.0f} tok/s = **{100 * r_t:.0f}%**; sequences {sat.rps:.1f} / {ceiling.sps:.1f} /s = "
                    f"**{100 * r_s:.0f}%**"
                    + (f" (at C={top}: {100 * ratio(cont.tps, ceiling.tps):.0f}% / {100 * ratio(cont.rps, ceiling.sps):.0f}%)"
                       if cont and cont is not sat else "")
                    + f" | ≥ 70% | {verdict(r_t >= 0.7 and r_s >= 0.7)} |")
    if ceiling:
        for mode in ("request", "none"):
            c = by.get((mode, 1))
            if c:
                rows.append(f"| C=1 p50 latency / engine single request ({mode}) | {ms(c.lat(50))} / {ceiling.single_ms:.1f} ms = "
                            f"{ratio(1000 * c.lat(50), ceiling.single_ms):.2f}× | (reference) | |")
    return rows


def notes(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    """Computed facts that bound or explain the acceptance figures."""
    out = []
    k0 = min((c.instances for c in cells), default=1)
    by = {(c.mode, c.instances, c.conc): c for c in cells}
    top = max((c.conc for c in cells), default=0)
    if ceiling:
        out.append(f"- Mean generated tokens per input: {ceiling.tokens / ceiling.n:.1f} ({ceiling.tokens} / {ceiling.n}).")
        none_ = by.get(("none", k0, top))
        if none_ and none_.rps and k0 == 1:
            out.append(f"- Upper bound of continuous / none at C={top} (1 instance) if the server reached the one-core "
                       f"engine ceiling: {ceiling.sps:.1f} / {none_.rps:.1f} = {ceiling.sps / none_.rps:.2f}×.")
        for k, cc in sorted(ceiling.cores.items()):
            c = by.get(("continuous", k, top))
            if c and c.rows_per_step and cc.rows_per_step:
                out.append(f"- Rows per decode step at C={top}, {inst(k)}: server {c.rows_per_step:.1f}, in-process cores "
                           f"{cc.rows_per_step:.1f}; CPU of the server's processes (front end and cores) "
                           f"{100 * c.server_cpu:.0f}% and of the client {100 * c.client_cpu:.0f}% (100% = one CPU core; "
                           f"{len(os.sched_getaffinity(0))} usable).")
    per_row = [f"{inst(c.instances)} C={c.conc} {c.step_ms / c.rows_per_step:.3f}" for c in cells
               if c.mode == "continuous" and c.step_ms and c.rows_per_step]
    if per_row:
        out.append(f"- Decode-step time per row, continuous (ms): {', '.join(per_row)}.")
    c1 = by.get(("continuous", k0, 1))
    if c1 and ceiling and c1.rtt_s and c1.server_s:
        lat, srv, rtt = 1000 * c1.lat(50), 1000 * pct(c1.server_s, 50), 1000 * pct(c1.rtt_s, 50)
        out.append(f"- Where the C=1 latency goes (continuous, {inst(k0)}, medians): client p50 {lat:.2f} ms = engine single "
                   f"request {ceiling.single_ms:.2f} ms + {lat - ceiling.single_ms:.2f} ms. The server's own `total_seconds` "
                   f"(servicer entry to answer: validation and tokenization, the pipe to the engine core and back, "
                   f"decoding) is {srv:.2f} ms, {srv - ceiling.single_ms:.2f} ms above the engine; the other {lat - srv:.2f} ms "
                   f"is gRPC and protobuf in both processes. A bare round trip that does no inference (ListModels, "
                   f"{len(c1.rtt_s)} calls) takes {rtt:.2f} ms p50 on its own, i.e. {rtt / ceiling.single_ms:.2f}× of the "
                   f"engine's single-request time before any work is done.")
    busy = [f"{inst(c.instances)} C={c.conc} {100 * c.busy:.0f}%" for c in cells if c.mode == "continuous" and c.busy is not None]
    if busy:
        out.append(f"- Share of the window an engine core's step loop spent inside decode steps (mean of the cores), "
                   f"continuous: {', '.join(busy)} (the rest: admission, i.e. encoder and cache growth, reporting over "
                   "the pipe, plus waiting for work or for the GIL).")
    return out


def ceiling_text(args, ceiling: Ceiling) -> list[str]:
    lines = [
        f"Ceilings, in process with no server running (same bundle and inputs, {args.intra_op_threads} intra-op thread per "
        f"engine). **Own cores' ceiling** (what \"server / own cores' ceiling\" divides by): the server's scheduler in "
        f"process, i.e. its `Scheduler` (continuous, max_batch_size {args.max_batch_size}, step loop and encoder thread) on "
        f"one `Runner` per process, K processes (multiprocessing spawn) for K instances, fed pre-tokenized inputs by "
        f"{ceiling.callers} closed-loop callers split over the K processes (one caller thread per process, fed by the "
        f"scheduler's sink: no gRPC, no pipe, no tokenization); all K over the same wall window ({args.ceiling_warmup_s:g} s "
        f"warm-up, then {args.ceiling_seconds:g} s), answers finished inside it summed, best of {args.ceiling_repeats}:",
        "",
        "| engine cores | callers | sequences/s | tokens/s | per core (answers) | rows/step |",
        "|---:|---:|---:|---:|---|---:|",
    ]
    for k, cc in sorted(ceiling.cores.items()):
        lines.append(f"| {k} | {cc.callers} | {cc.sps:.1f} | {cc.tps:.0f} | {', '.join(map(str, cc.per_core))} | "
                     f"{'n/a' if cc.rows_per_step is None else f'{cc.rows_per_step:.1f}'} |"
                     + (f" ({cc.errors} failed)" if cc.errors else ""))
    lines += [
        "",
        f"One core, `bench.baselines.generate(Translator(bundle), inputs, batch_size={args.max_batch_size})` on the {ceiling.n} inputs, "
        f"best of {args.ceiling_repeats}: {ceiling.seconds:.2f} s = **{ceiling.gen_sps:.1f} sequences/s, {ceiling.gen_tps:.0f} "
        f"tokens/s** ({ceiling.tokens} generated tokens); the 1-instance saturation row below uses the faster of this and the "
        f"1-core figure above ({ceiling.sps:.1f} sequences/s). Single request (batch 1, in process, timed after each "
        f"concurrency-1 round on the inputs that round sent), median of {ceiling.single_n} timings: "
        f"**{ceiling.single_ms:.1f} ms**.",
        "",
    ]
    ct2 = ceiling.ct2
    if ct2:
        bs, it = ct2.best
        lines += [
            f"CTranslate2 in process (reference): the checkpoint converted by `bench/ct2_convert.py` "
            f"(`{os.path.relpath(ct2.model_dir, ROOT) if Path(ct2.model_dir).is_relative_to(ROOT) else ct2.model_dir}`, "
            f"float32), `translate_batch` of {ct2.n} inputs (the {ceiling.n} above, cycled; tokenized by the bundle's "
            f"tokenizer outside the timing), greedy, stopped at EOS, max_decoding_length {ct2.max_decoding_length} (the "
            f"engine's budget), intra_threads 1, batch_type examples (its own length sorting); best of "
            f"{args.ceiling_repeats} each. Outputs identical to the engine's on {ct2.identical} of {ct2.compared} inputs"
            + (f"; note: {ct2.note}" if ct2.note else "") + ".",
            "",
            "| max_batch_size | inter_threads | sequences/s |",
            "|---:|---:|---:|",
            *[f"| {b} | {i} | {'**' if (b, i) == ct2.best else ''}{ct2.n / s:.1f}{'**' if (b, i) == ct2.best else ''} |"
              for (b, i), s in sorted(ct2.runs.items())],
            "",
            f"Best: max_batch_size {bs}, inter_threads {it}: **{ct2.sps:.1f} sequences/s, {ct2.tps:.0f} tokens/s**.",
            "",
        ]
    else:
        lines += [f"CTranslate2 in process: {ceiling.ct2_note}.", ""]
    return lines


def section(args, cells: list[Cell], ceiling: Ceiling | None, inputs: list[str], inputs_path: Path, bundle: Path,
            started: dt.datetime, load_before: str, elapsed: float) -> str:
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, ROOT), *sys.argv[1:]])
    k0 = min(args.instances)
    lines = [
        "## Serving under load (`bench/serve.py`)",
        "",
        "Acceptance (serving core, engine cores as processes):",
        "",
        *headline(cells, ceiling),
        "",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC; run took {elapsed / 60:.1f} min",
        f"- Machine: {machine()}; {versions()}; load average before the run: {load_before}",
        f"- Command: `{cmd}`",
        f"- Model: `{args.model}` (`{os.path.relpath(bundle, ROOT) if bundle.is_relative_to(ROOT) else bundle}`), "
        f"inputs: {len(inputs)} held-out sentences from `{os.path.relpath(inputs_path, ROOT) if inputs_path.is_relative_to(ROOT) else inputs_path}`, "
        "one per Generate request, cycled in file order; greedy, model default max_new_tokens",
        f"- Servers: a separate `s2s serve` process per variant, all started up front, on 127.0.0.1: continuous batching "
        f"with `--instances` {', '.join(map(str, args.instances))} (engine-core processes), "
        f"{' and '.join(m for m in args.modes if m != 'continuous') or 'no other mode'} with `--instances {k0}`; "
        f"`--max-batch-size {args.max_batch_size} --max-queue-size {args.max_queue_size} --intra-op-threads "
        f"{args.intra_op_threads}`, request mode `--max-queue-delay-ms {args.queue_delay_ms:g}`; client: grpc.aio in the "
        "bench process, one channel, C closed-loop workers",
        f"- Cell: {args.rounds} window(s) per variant and C, interleaved (round r runs the variants in an order rotated by r) "
        "and pooled, so that this VM's drift over minutes does not land on one variant. Window: warm-up of max(C, 8) "
        f"answers or {args.warmup_s:g} s, then max({args.requests_per_worker}·C, "
        f"{args.min_requests}) answers (but at least {args.min_seconds:g} s) or {args.seconds:g} s, whichever first. req/s and tok/s = answers (their "
        "`output_tokens`) inside the window / window length. Latency = client-side send→answer of every request sent "
        "inside the window (in-flight ones drained, not cancelled). TTFT = server-side "
        "`timings.time_to_first_token_seconds` of the unary Generate response (arrival at the servicer → first token). "
        "rows/step, step ms and in steps (share of the window a core spent inside decode steps, mean of the cores): the "
        "server's `s2s_batch_size` and `s2s_decode_step_duration_seconds` histograms (all cores) over the window. CPU: the "
        "server's processes' (front end and engine cores) and this (client) process's CPU time over the window (100% = one "
        "core).",
        "",
        *table(cells),
        "",
    ]
    if ceiling:
        lines += ceiling_text(args, ceiling)
    acc = acceptance(cells, ceiling)
    if len(acc) == 2:
        acc.append("| (needs the continuous, request and none modes) | | | |")
    lines += [f"Batching modes ({inst(k0)}; acceptance of issue #4 item 9):", "", *acc, ""]
    if nts := notes(cells, ceiling):
        lines += ["Notes:", "", *nts]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Closed-loop gRPC load on `s2s serve` (separate process) for each batching mode, engine-core count "
                    "and concurrency, with the engine cores' in-process ceiling and CTranslate2 as references; prints "
                    "a table and writes the bench-serve section of "
                    "docs/BENCHMARKS.md. Run it on an idle machine (the full grid takes < 10 minutes on 2 cores).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="translate-en-ja", help="model name in the repository")
    p.add_argument("--model-repo", type=Path, default=ROOT / "models", help="model repository (models/<name>/<version>/)")
    p.add_argument("--inputs", type=Path, default=None,
                   help="TSV source<TAB>reference; default checkpoints/<model>/test.tsv (else runs/<model>/data/test.tsv)")
    p.add_argument("--modes", default=",".join(MODES), help="batching modes, comma-separated")
    p.add_argument("--instances", default="1,2",
                   help="engine cores per server (`s2s serve --instances K`), comma-separated: the continuous mode runs at "
                        "each, request and none at the smallest; 0 = one per usable CPU core")
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
    p.add_argument("--ceiling-repeats", type=int, default=2,
                   help="timed runs (windows) of each in-process ceiling and CTranslate2 configuration (best counts)")
    p.add_argument("--ceiling-seconds", type=float, default=6.0, help="window of the engine cores' in-process ceiling")
    p.add_argument("--ceiling-warmup-s", type=float, default=2.0, help="closed-loop warm-up before each such window")
    p.add_argument("--ceiling-callers", type=int, default=0,
                   help="closed-loop callers of the engine cores' ceiling, split over the cores (0 = the largest --concurrency)")
    p.add_argument("--ct2", action=argparse.BooleanOptionalAction, default=True,
                   help="time CTranslate2 in process on the same weights (needs the bench extra and the checkpoint)")
    p.add_argument("--checkpoint", type=Path, default=None,
                   help="checkpoint folder CTranslate2 converts (default checkpoints/<model>)")
    p.add_argument("--ct2-min-inputs", type=int, default=2048, help="CTranslate2 decodes at least this many inputs per run (cycled)")
    p.add_argument("--rtt-calls", type=int, default=300, help="bare ListModels round trips timed after each C=1 cell")
    p.add_argument("--limit-inputs", type=int, default=0, help="use only the first N inputs (0 = all)")
    p.add_argument("--options", action=argparse.BooleanOptionalAction, default=True,
                   help="after the grid, the decoding-option table (bench/option_cost.py), in its own section")
    p.add_argument("--options-only", action="store_true", help="only the decoding-option table")
    p.add_argument("--option-concurrency", type=int, default=16, help="closed-loop workers of the option table")
    p.add_argument("--option-families", default="",
                   help="only these rows of the option table (comma-separated name prefixes; 'no option' always runs; "
                        "'none': only it, e.g. for a longer A/B against --baseline)")
    p.add_argument("--baseline", default="",
                   help="git commit whose server the option table's no-option row is compared with (A/B, interleaved)")
    p.add_argument("--quick", action="store_true",
                   help="development grid: C in {1, 8}, 16 answers or 3 s per cell, 64 inputs, short ceilings, ~1 minute; "
                        "writes no file unless --write")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=None,
                   help="write the section into --output (default: yes, except with --quick)")
    p.add_argument("--output", type=Path, default=ROOT / "docs" / "BENCHMARKS.md", help="markdown file to update")
    args = p.parse_args(argv)
    if args.quick:  # smaller defaults; flags given explicitly still win
        quick = dict(options=False, concurrency="1,8", min_requests=16, requests_per_worker=2, seconds=3.0, min_seconds=0.5, warmup_s=1.0, rounds=1,
                     ceiling_repeats=1, ceiling_seconds=1.5, ceiling_warmup_s=0.5, ct2_min_inputs=256, limit_inputs=64,
                     rtt_calls=50)
        for k, v in quick.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    args.concurrency = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    try:
        ks = [int(k) for k in str(args.instances).split(",") if k.strip()]
    except ValueError:
        p.error(f"--instances {args.instances!r}: comma-separated integers")
    if not ks or min(ks) < 0:
        p.error("--instances: one or more counts >= 0")
    auto = max(1, len(os.sched_getaffinity(0)) // max(1, args.intra_op_threads))  # as `s2s serve --instances 0` on a CPU
    args.instances = sorted({k or auto for k in ks})
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in args.modes if m not in MODES]:
        p.error(f"unknown batching mode(s) {bad}; choose from {MODES}")
    if args.ceiling_repeats < 1 or args.rounds < 1:
        p.error("--ceiling-repeats and --rounds must be at least 1")
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
    from engine import EngineOptions, Translator

    def on_term(signum, frame):  # SIGTERM unwinds like Ctrl-C, so every server process is stopped on the way out
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)

    started, t_all = dt.datetime.now(dt.timezone.utc), time.perf_counter()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "n/a"

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    bundle = find_bundle(args.model_repo, args.model)
    engine = Translator(bundle, EngineOptions(device="cpu", intra_op_threads=args.intra_op_threads))
    inputs, inputs_path = load_inputs(args, engine)
    log(f"bench/serve.py: {args.model} from {bundle}, {len(inputs)} inputs from {inputs_path}; load average {load_before}")
    if float(load_before.split()[0]) > 0.7 * len(os.sched_getaffinity(0)) if load_before != "n/a" else False:
        log("  warning: the machine is busy (load average above); the figures will be depressed")

    if args.options_only:
        return options_section(args, inputs, started, load_before, t_all, log)
    cells, single = asyncio.run(run_interleaved(args, inputs, engine, log))

    log("ceilings (in process, no server running)")
    ceiling = measure_ceiling(engine, bundle, args, inputs, single, log)
    elapsed = time.perf_counter() - t_all

    text = section(args, cells, ceiling, inputs, inputs_path, bundle, started, load_before, elapsed)
    print(text)
    if args.write:
        write_section(args.output, "bench-serve", text)
        log(f"wrote {args.output}")
    log(f"done in {elapsed:.0f}s")
    if args.options:
        return options_section(args, inputs, started, load_before, t_all, log)
    return 0


def options_section(args: argparse.Namespace, inputs: list[str], started, load_before: str, t_all: float, log) -> int:
    """The option-cost table (bench/option_cost.py), in its own marked section of the report."""
    from bench import option_cost

    log(f"decoding options: C={args.option_concurrency}, baseline {args.baseline or '(none)'}")
    cells = asyncio.run(option_cost.run(sys.modules[__name__], args, inputs, log))
    cmd = "python bench/serve.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    # `--option-families none` (only the no-option windows, on both servers: the focused A/B against --baseline)
    # keeps its own section, next to the full table's.
    focused = args.option_families.strip() == "none"
    section = "bench-serve-options-ab" if focused else "bench-serve-options"
    text = (("Focused A/B (`--option-families none`): only the no-option windows, on both servers, so that neither serves anything else between them (in the "
             "full table above only this tree's server also runs the other families' windows).\n\n" if focused else "")
            + option_cost.table(cells, args) + "\n\n"
            f"- date: {started:%Y-%m-%d %H:%M} UTC; load average at start {load_before}; command: `{cmd}`; "
            f"{time.perf_counter() - t_all:.0f} s\n")
    print(text)
    if args.write:
        write_section(args.output, section, text)
        log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
