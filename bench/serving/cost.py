"""What one request costs, process by process: the CPU-per-request table of bench.serving.serve.

For each search (greedy; the served default, beam 4 with CTranslate2's length rule) and each concurrency C of
--cost-concurrency (default 1 and 64): one `s2s serve` (continuous batching, --cost-instances engine cores, its
other flags its defaults) is loaded by C closed-loop tritonclient ``grpc.aio`` workers over KServe v2 gRPC, one
held-out input per request (the same input order for every cell). The CPU time of the front-end process and of
its engine-core processes is read from /proc at the window's edges (their own counters: every thread, user and
system) and divided by the answers inside the window; the load client's own CPU is given for scale.

References, on the same inputs and the same search, with no server running:

* the engine in process: ``engine.load(bundle, threads=1).generate(texts, max_batch_size=64 rows)`` (its CPU per
  sequence is what the cores are compared with) and, at C=1, one input at a time (``generate([text])``, its median
  wall time: what C=1 p50 is compared with);
* CTranslate2 in process on the same weights (export/ctranslate2.py), intra_threads=1, the best of max_batch_size
  16/64 (inputs) x inter_threads 1/2 by throughput; its CPU per sequence is that best configuration's.

The served and the reference sides take turns (served, reference, reference, served: ABBA) over --cost-rounds
rounds; each figure is the median of its rounds. Outputs are compared text for text with the in-process engine's.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bench.common.abba import abba
from bench.common.proc_cpu import children, proc_cpu_s
from bench.serving.server_process import ServerProcess
from server.models.in_process import served_texts

WARMUP_MIN = 8  # answers before a window measures: max(2 x C, this)


@dataclass(frozen=True)
class Search:
    name: str
    beam: int
    params: dict  # KServe request parameters (empty: the served default)
    engine_kw: dict  # Translator.generate keywords for the same search
    ct2_kw: dict  # ctranslate2.Translator.translate_batch keywords for the same search


def searches(engine, log=print) -> list[Search]:
    """Greedy, and the served default (the bundle's beam and length rule) where CTranslate2 can run the same search
    (its own length rule: a model served with the gnmt rule gets the greedy rows alone)."""
    task = engine.config.task
    beam, rule = task.beam_size, task.length_penalty_type or "gnmt"
    from contract.decoding import DEFAULT_LENGTH_PENALTY

    out = [Search("greedy", 1, {"beam_size": 1}, dict(beam_size=1), dict(beam_size=1))]
    if beam > 1 and rule == "ctranslate2":
        out.append(
            Search(
                f"beam {beam} (served default)",
                beam,
                {},
                dict(beam_size=beam),
                dict(beam_size=beam, length_penalty=DEFAULT_LENGTH_PENALTY[rule]),
            )
        )
    elif beam > 1:
        log(
            f"  the served default (beam {beam}, length rule {rule}) has no CTranslate2 equivalent: greedy only"
        )
    return out


# ---- served --------------------------------------------------------------------------------------
@dataclass
class Served:
    answers: int = 0
    seconds: float = 0.0
    front_s: float = 0.0
    cores_s: float = 0.0
    client_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)  # input index -> served text
    by_index: dict[int, float] = field(
        default_factory=dict
    )  # input index -> its (first) latency in the window

    def per(self, cpu_s: float) -> float:
        return cpu_s / self.answers * 1e6  # µs per request


async def load_window(
    server: ServerProcess,
    model: str,
    inputs: list[str],
    conc: int,
    search: Search,
    seconds: float,
    min_answers: int,
    warmup: int,
) -> Served:
    """C closed-loop KServe gRPC workers; a warm-up of ``warmup`` answers, then a measured window."""
    import tritonclient.grpc.aio as triton_aio
    from tritonclient.grpc import InferInput

    client = triton_aio.InferenceServerClient(server.address)
    encoded = [np.array([t.encode()], dtype=object) for t in inputs]
    cursor, state = iter(range(1 << 30)), {"measuring": False, "stop": False, "done": 0}
    out = Served()
    front, cores = server.proc.pid, children(server.proc.pid)

    async def worker() -> None:
        while not state["stop"]:
            i = next(cursor) % len(inputs)
            inp = InferInput("text_input", [1], "BYTES")
            inp.set_data_from_numpy(encoded[i])
            measuring = state["measuring"]
            t = time.perf_counter()
            res = await client.infer(model, [inp], parameters=search.params or None, client_timeout=120)
            if measuring and state["measuring"]:
                out.latencies.append(time.perf_counter() - t)
                out.by_index.setdefault(i, out.latencies[-1])
                out.texts[i] = res.as_numpy("text_output")[0].decode()
                out.answers += 1
            state["done"] += 1

    tasks = [asyncio.create_task(worker()) for _ in range(conc)]
    try:
        while state["done"] < warmup:
            await asyncio.sleep(0.01)
        c0, f0, k0, p0 = (
            time.perf_counter(),
            proc_cpu_s(front),
            sum(map(proc_cpu_s, cores)),
            time.process_time(),
        )
        state["measuring"] = True
        while True:
            await asyncio.sleep(0.02)
            el = time.perf_counter() - c0
            if el >= seconds and out.answers >= min_answers or el >= 4 * seconds:
                break
        state["measuring"] = False
        out.seconds = time.perf_counter() - c0
        out.front_s, out.cores_s = proc_cpu_s(front) - f0, sum(map(proc_cpu_s, cores)) - k0
        out.client_s = time.process_time() - p0
        state["stop"] = True
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await client.close()
    return out


def _window_process(conn, address: str, pid: int, *args) -> None:
    conn.send(
        asyncio.run(load_window(SimpleNamespace(address=address, proc=SimpleNamespace(pid=pid)), *args))
    )


def served_window(server: ServerProcess, *args) -> Served:
    """``load_window`` in a process of its own: this one holds the references (ONNX Runtime, CTranslate2, torch for
    the conversion), and a load client sharing it answered the server's replies more slowly (fewer requests in
    the server at once, fewer answers/s, more CPU per request in every process) than a lean one."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(
        target=_window_process, args=(theirs, server.address, server.proc.pid, *args), daemon=True
    )
    proc.start()
    try:
        return ours.recv()
    finally:
        proc.join(30)


# ---- in process ----------------------------------------------------------------------------------
@dataclass
class InProcess:
    seconds: float
    cpu_s: float
    n: int

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.n * 1e6

    @property
    def sps(self) -> float:
        return self.n / self.seconds


def engine_batch(engine, texts: list[str], search: Search) -> tuple[InProcess, list[str]]:
    c, p = time.perf_counter(), time.process_time()
    res = engine.generate(texts, max_batch_size=64 * search.beam, **search.engine_kw)
    return InProcess(time.perf_counter() - c, time.process_time() - p, len(texts)), [r.text for r in res]


def engine_single(engine, texts: list[str], search: Search) -> list[float]:
    out = []
    for t in texts:
        c = time.perf_counter()
        engine.generate([t], max_batch_size=search.beam, **search.engine_kw)
        out.append(time.perf_counter() - c)
    return out


def ct2_batch(translator, tokens: list[list[str]], search: Search, bs: int, length: int) -> InProcess:
    c, p = time.perf_counter(), time.process_time()
    translator.translate_batch(
        tokens,
        max_batch_size=bs,
        batch_type="examples",
        max_decoding_length=length,
        return_scores=False,
        **search.ct2_kw,
    )
    return InProcess(time.perf_counter() - c, time.process_time() - p, len(tokens))


# ---- the run ---------------------------------------------------------------------------------------
@dataclass
class Cell:
    """One search at one concurrency: served windows and the references, a value per round."""

    search: Search
    conc: int
    served: list[Served] = field(default_factory=list)
    engine: list[InProcess] = field(default_factory=list)
    single_ms: list[float] = field(default_factory=list)  # engine, one input at a time: median per round
    single_idx: range = range(
        0
    )  # the inputs it times: the first ones a C=1 window measures (after its warm-up)
    ct2: list[dict[tuple[int, int], InProcess]] = field(default_factory=list)
    identical: tuple[int, int] = (0, 0)


def _ct2_translators(args: argparse.Namespace, engine, log) -> tuple[dict | None, list[str] | None]:
    """CTranslate2 translators on the same weights by inter_threads (1 and 2), and the vocabulary in id order;
    (None, None) where CTranslate2 cannot run (named in the log)."""
    from bench.common.ct2 import ct2_model

    got = ct2_model(args.checkpoint, args.model, engine, log)
    if isinstance(got, str):
        log(f"  CTranslate2 not measured: {got}")
        return None, None
    import ctranslate2

    model_dir, vocab, _ = got
    return {
        inter: ctranslate2.Translator(
            str(model_dir), device="cpu", compute_type="float32", inter_threads=inter, intra_threads=1
        )
        for inter in (1, 2)
    }, vocab


def run(args: argparse.Namespace, inputs: list[str], bundle: Path, log) -> tuple[list[Cell], dict]:
    """Every cell's rounds, the served and the reference sides taking turns (ABBA over two rounds)."""
    import engine as engine_pkg

    ref = engine_pkg.load(bundle, threads=1, device="cpu")
    translators, vocab = _ct2_translators(args, ref, log) if args.ct2 else (None, None)
    tokens = [[vocab[i] for i in ref.codec.source_ids(t)] for t in inputs] if vocab else []
    length = min(args.max_new_tokens or ref.config.task.max_new_tokens, ref.config.model.max_len - 1)
    cells = [Cell(s, c) for s in searches(ref, log) for c in args.cost_concurrency]
    # A window serves the inputs in order from the first; its measured ones start after the warm-up.
    single_idx = range(WARMUP_MIN, min(len(inputs), WARMUP_MIN + args.cost_single_inputs))
    for c in cells:
        c.single_idx = single_idx
    single_inputs = [inputs[i] for i in single_idx]
    meta = dict(instances=args.cost_instances, inputs=len(inputs), length=length, rounds=args.cost_rounds)
    with ServerProcess(args, "continuous", args.cost_instances, label="cost", defaults=True) as server:
        meta["cores"] = len(children(server.proc.pid))
        for r in range(args.cost_rounds):
            for search in {c.search.name: c.search for c in cells}.values():
                mine = [c for c in cells if c.search is search]
                sides = [
                    lambda mine=mine: _served(server, args, inputs, mine, log),
                    lambda mine=mine: _reference(
                        ref, translators, tokens, inputs, single_inputs, length, mine, log
                    ),
                ]
                for side in abba(sides, r):
                    side()
    expected: dict[str, list[str]] = {}
    for c in cells:  # outputs: the served texts against the in-process engine's through the same text plan
        if c.search.name not in expected:
            bs = 64 * c.search.beam
            expected[c.search.name] = served_texts(ref, inputs, bs, **c.search.engine_kw)
        texts = expected[c.search.name]
        got = {i: t for s in c.served for i, t in s.texts.items()}
        c.identical = (sum(texts[i] == t for i, t in got.items()), len(got))
    return cells, meta


def _served(server, args, inputs, cells: list[Cell], log) -> None:
    for c in cells:
        s = served_window(
            server,
            args.model,
            inputs,
            c.conc,
            c.search,
            args.cost_seconds,
            max(args.cost_min_requests, 3 * c.conc),
            max(2 * c.conc, WARMUP_MIN),
        )
        c.served.append(s)
        log(
            f"  served {c.search.name} C={c.conc}: {s.answers / s.seconds:.1f}/s, front end {s.per(s.front_s):.0f} µs, "
            f"cores {s.per(s.cores_s):.0f} µs, client {s.per(s.client_s):.0f} µs per request, "
            f"p50 {statistics.median(s.latencies) * 1e3:.1f} ms"
        )


def _reference(ref, translators, tokens, inputs, single_inputs, length, cells: list[Cell], log) -> None:
    search = cells[0].search
    e, _ = engine_batch(ref, inputs, search)
    single = statistics.median(engine_single(ref, single_inputs, search)) * 1e3
    ct2 = {}
    if translators:
        for inter, tr in translators.items():
            for bs in (16, 64):
                ct2_batch(tr, tokens[: 2 * bs * inter], search, bs, length)  # warm-up
                ct2[(bs, inter)] = ct2_batch(tr, tokens, search, bs, length)
    best = max(ct2.values(), key=lambda x: x.sps) if ct2 else None
    log(
        f"  in process {search.name}: engine {e.sps:.1f}/s, {e.cpu_us:.0f} µs CPU per sequence, one input {single:.2f} ms"
        + (f"; CTranslate2 best {best.sps:.1f}/s, {best.cpu_us:.0f} µs" if best else "")
    )
    for c in cells:
        c.engine.append(e)
        c.single_ms.append(single)
        c.ct2.append(ct2)
