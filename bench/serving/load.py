"""bench.serving.serve's closed-loop load: C gRPC workers per cell, windows interleaved across the server variants
(rotated order per round) and pooled; the single-request reference times; the inputs it sends."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench import ROOT
from bench.common.abba import rotated
from bench.serving.server_process import ServerProcess
from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc


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
    server_s: list[float] = field(
        default_factory=list
    )  # server-side Timings.total_seconds of the same requests
    rtt_s: list[float] = field(
        default_factory=list
    )  # bare round trips (ListModels) on this mode's server, C=1 cells only
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
            for name in (
                "window_s",
                "answers",
                "tokens",
                "steps",
                "rows_sum",
                "step_s",
                "server_cpu_s",
                "client_cpu_s",
            ):
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
    def busy(
        self,
    ) -> float | None:  # share of the window a core's step loop spent inside decode steps (mean of the cores)
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


async def run_cell(
    server: ServerProcess,
    args: argparse.Namespace,
    inputs: list[str],
    conc: int,
    start_index: int,
    options: dict | None = None,
) -> Cell:
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
                req = pb.GenerateRequest(
                    model=args.model,
                    inputs=[inputs[i]],
                    # greedy unless the cell says otherwise: a model's default may be a beam
                    options=pb.GenerateOptions(
                        max_new_tokens=args.max_new_tokens, **{"beam_size": 1, **(options or {})}
                    ),
                )
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
                    raise RuntimeError(
                        f"{label} C={conc}: request failed during warm-up: {err}\n{server.tail()}"
                    )

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
                    await asyncio.wait_for(
                        stop.wait(), min(left, max(args.min_seconds - (time.perf_counter() - t_open), 0.05))
                    )
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
    cell.step_s = (
        after["s2s_decode_step_duration_seconds_sum"] - before["s2s_decode_step_duration_seconds_sum"]
    )
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
    from bench.engine.baselines import generate

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


async def run_interleaved(
    args: argparse.Namespace, inputs: list[str], engine, log
) -> tuple[list[Cell], list[float]]:
    """One server per variant (batching mode, engine cores), all started up front; for each concurrency,
    ``--rounds`` rounds of one window per variant (the order rotating), pooled per cell. Interleaving keeps
    the machine's drift over minutes (docs/BENCHMARKS.md states how much) out of the ratios between variants. After
    each concurrency-1 round the engine's single-request times are taken in this process on the inputs that
    round sent, so that the C=1 latency ratio compares numbers of the same minutes too."""
    with contextlib.ExitStack() as stack:
        servers: dict[tuple[str, int], ServerProcess] = {}
        for mode, k in variants(args):
            log(f"{mode} x{k}: starting the server ({k} engine core{'s' if k > 1 else ''})")
            servers[(mode, k)] = stack.enter_context(ServerProcess(args, mode, k))
        for (
            server
        ) in servers.values():  # one short burst each, so that ONNX Runtime's first runs are in no cell
            async with grpc.aio.insecure_channel(server.address) as ch:
                stub = pb_grpc.Seq2SeqStub(ch)
                await asyncio.gather(
                    *(
                        stub.Generate(
                            pb.GenerateRequest(model=args.model, inputs=[inputs[i % len(inputs)]]),
                            timeout=args.request_timeout_s,
                        )
                        for i in range(8 * server.instances)
                    )
                )
        keys = list(servers)
        cells, single = [], []
        for conc in args.concurrency:
            rounds: dict[tuple[str, int], list[Cell]] = {key: [] for key in keys}
            for r in range(args.rounds):
                for key in rotated(keys, r):
                    t = time.perf_counter()
                    cell = await run_cell(servers[key], args, inputs, conc, start_index=0)
                    if conc == 1:
                        cell.rtt_s = await rtt(servers[key], args)
                    rounds[key].append(cell)
                    log(
                        f"  {servers[key].label:13s} C={conc:<3d} round {r + 1}: {cell.answers:4d} answers in {cell.window_s:5.1f}s  "
                        f"{cell.rps:7.1f} req/s  p50 {1000 * cell.lat(50):7.1f} ms  p99 {1000 * cell.lat(99):7.1f} ms  "
                        f"({time.perf_counter() - t:.1f}s)"
                    )
                if conc == 1:
                    sent = sorted({i for key in keys for i in rounds[key][-1].indices})
                    single += await asyncio.to_thread(single_request_times, engine, args, inputs, sent)
            cells += [Cell.pooled(rounds[key]) for key in keys]
    order = {m: i for i, m in enumerate(args.modes)}
    return sorted(cells, key=lambda c: (order[c.mode], c.instances, c.conc)), single


def load_inputs(args: argparse.Namespace, engine) -> tuple[list[str], Path]:
    from contract.text import UnknownCharactersError

    path = args.inputs
    if path is None:
        cands = [
            ROOT / "checkpoints" / args.model / "test.tsv",
            ROOT / "runs" / args.model / "data" / "test.tsv",
        ]
        path = next((c for c in cands if c.exists()), cands[0])
    if not path.exists():
        raise SystemExit(f"bench.serving.serve: no inputs at {path} (give --inputs FILE.tsv)")
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
        raise SystemExit(f"bench.serving.serve: no usable inputs in {path}")
    return texts, path
