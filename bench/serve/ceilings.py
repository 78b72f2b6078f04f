"""The references `s2s serve` is held to, measured in process on the same bundle and inputs with no server
running: K engine cores (K spawned processes, each the server's own Scheduler on its own Runner, fed pre-tokenized
inputs by closed-loop callers: no gRPC, no pipe, no tokenization) over one wall window; ``engine.generate`` on one
core; each input alone (batch 1). (CTranslate2 in process on the same weights: the cost table, bench/serve/cost.py.)"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import queue
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness.inputs import log
from bench.harness.server import die_with_parent


@dataclass
class Cores:
    """K engine cores in process, one common wall window, callers split over them."""

    k: int
    callers: int
    seconds: float
    answers: int = 0
    tokens: int = 0
    errors: int = 0
    per_core: list[int] = field(default_factory=list)
    steps: float = 0.0
    rows: float = 0.0

    @property
    def sps(self) -> float:
        return self.answers / self.seconds

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds


@dataclass
class Ceiling:
    n: int  # inputs
    seconds: float  # engine.generate over them, best run
    tokens: int
    single_ms: float  # median of each input alone
    cores: dict[int, Cores] = field(default_factory=dict)

    @property
    def sps(self) -> float:  # one core: the faster of engine.generate and one in-process engine core
        one = self.cores.get(1)
        return max(self.n / self.seconds, one.sps if one else 0.0)


def single_ms(engine, texts: list[str], budget: int) -> list[float]:
    """In-process decode time of each input alone (batch 1): what a request costs without a server, in ms."""
    for t in texts[:3]:
        engine.generate([t], beam_size=1, max_new_tokens=budget, max_batch_size=1)
    out = []
    for t in texts:
        c = time.perf_counter()
        engine.generate([t], beam_size=1, max_new_tokens=budget, max_batch_size=1)
        out.append(1000 * (time.perf_counter() - c))
    return out


def measure(engine, args, inputs: list[str], single: list[float]) -> Ceiling:
    budget = min(args.max_new_tokens or engine.config.task.max_new_tokens, engine.config.model.max_len - 1)
    outputs = [
        list(r.tokens)
        for r in engine.generate(
            inputs, beam_size=1, max_new_tokens=budget, max_batch_size=args.max_batch_size
        )
    ]
    best = float("inf")
    for _ in range(args.ceiling_repeats):
        c = time.perf_counter()
        engine.generate(inputs, beam_size=1, max_new_tokens=budget, max_batch_size=args.max_batch_size)
        best = min(best, time.perf_counter() - c)
    single = single or single_ms(engine, inputs[:40], budget)
    ceiling = Ceiling(len(inputs), best, sum(map(len, outputs)), statistics.median(single))
    ids = [engine.codec.source_ids(t) for t in inputs]
    callers = args.ceiling_callers or max(args.concurrency)
    for k in sorted(set(args.instances)):
        ceiling.cores[k] = engine_cores(args, engine.folder, ids, budget, k, callers)
    return ceiling


def _core(
    conn, bundle: str, threads: int, sched: dict, shard: list[list[int]], budget: int, callers: int
) -> None:
    """One in-process engine core: a Runner and the server's Scheduler, ``callers`` closed-loop callers multiplexed
    on this thread by the scheduler's events (as the engine core's pipe reader is). Windows come as absolute
    ``time.monotonic()`` times, one clock for every process, so K processes are summed over one wall window."""
    die_with_parent()
    try:
        sys.setswitchinterval(0.0005)  # as the engine core sets it
        from engine import EngineOptions, Runner, Sequence
        from server.config import SchedulerConfig
        from server.core_process.scheduler import Scheduler
        from server.core_wire.events import Failed, Finished

        events: queue.SimpleQueue = queue.SimpleQueue()
        window, steps = [float("inf"), float("-inf")], [0, 0]

        def sink(evs, stats) -> None:
            if evs:
                events.put(evs)
            if stats.batch_rows and window[0] <= time.monotonic() <= window[1]:
                steps[0], steps[1] = steps[0] + len(stats.batch_rows), steps[1] + sum(stats.batch_rows)

        runner = Runner(Path(bundle), EngineOptions(device="cpu", intra_op_threads=threads))
        scheduler = Scheduler("ceiling", runner, SchedulerConfig(**sched), sink)
        scheduler.start()
        conn.send(("ready", os.getpid()))
        ids, position = itertools.count(1), itertools.count()

        def submit() -> None:
            scheduler.submit(next(ids), [Sequence(shard[next(position) % len(shard)], budget)], None)

        while (msg := conn.recv()) is not None:
            t_start, t_open, t_close = msg
            window[:], steps[:] = [t_open, t_close], [0, 0]
            time.sleep(max(0.0, t_start - time.monotonic()))
            for _ in range(callers):
                submit()
            flying, answers, tokens, errors = callers, 0, 0, 0
            while flying:
                evs, now = events.get(timeout=120), time.monotonic()
                for ev in evs:
                    if isinstance(ev, (Finished, Failed)):
                        flying -= 1
                        if t_open <= now <= t_close:
                            answers, tokens = (
                                answers + isinstance(ev, Finished),
                                tokens + len(getattr(ev, "tokens", ())),
                            )
                            errors += isinstance(ev, Failed)
                        if now < t_close:
                            submit()
                            flying += 1
            conn.send(("done", answers, tokens, errors, *steps))
        scheduler.drain(5.0)
    except Exception:
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))


def _recv(conn, timeout: float, what: str):
    if not conn.poll(timeout):
        raise RuntimeError(f"{what}: no answer in {timeout:.0f} s")
    msg = conn.recv()
    if msg[0] == "error":
        raise RuntimeError(f"{what} failed:\n{msg[1]}")
    return msg


def engine_cores(args, bundle: Path, ids: list[list[int]], budget: int, k: int, callers: int) -> Cores:
    """K in-process engine cores, each with its share of the callers and of the inputs (every K-th), over the same
    wall windows (--ceiling-warmup-s, then --ceiling-seconds); the best of --ceiling-repeats windows."""
    ctx, procs, conns, best = multiprocessing.get_context("spawn"), [], [], None
    sched = dict(
        mode="continuous",
        max_batch_size=args.max_batch_size,
        max_queue_size=max(args.max_queue_size, callers),
    )
    try:
        for j in range(k):
            parent, child = ctx.Pipe()
            split = callers // k + (j < callers % k)
            proc = ctx.Process(
                target=_core,
                args=(child, str(bundle), 1, sched, ids[j::k] or ids, budget, split),
                daemon=True,
            )
            proc.start()
            procs.append(proc)
            conns.append(parent)
        for j, conn in enumerate(conns):
            _recv(conn, 120, f"ceiling core {j} (loading)")
        for _ in range(args.ceiling_repeats):
            t_start = time.monotonic() + 0.2
            t_open = t_start + args.ceiling_warmup_s
            t_close = t_open + args.ceiling_seconds
            for conn in conns:
                conn.send((t_start, t_open, t_close))
            res = [_recv(c, args.ceiling_seconds + 300, f"ceiling core {j}") for j, c in enumerate(conns)]
            got = Cores(
                k,
                callers,
                t_close - t_open,
                *(sum(m[i] for m in res) for i in (1, 2, 3)),
                [m[1] for m in res],
            )
            got.steps, got.rows = sum(m[4] for m in res), sum(m[5] for m in res)
            log(
                f"  {k} engine core(s) in process, {callers} callers: {got.sps:.1f} sequences/s (per core {got.per_core})"
            )
            best = got if best is None or got.sps > best.sps else best
    finally:
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc in procs:
            proc.join(15)
            if proc.is_alive():
                proc.kill()
    return best
