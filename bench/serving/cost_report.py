"""bench.serving.cost's tables: the CPU-per-request table, the serving-cost bounds against it, and how it was measured."""

from __future__ import annotations

import argparse
import statistics

from bench.common import machine
from bench.common.report import Report
from bench.serving.cost import Cell


# ---- the report ------------------------------------------------------------------------------------
def _med(xs) -> float:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def figures(c: Cell) -> dict:
    """The cell's figures, each the median over its rounds (ratios: the median of the per-round ratios)."""
    best = [max(d.values(), key=lambda x: x.sps) if d else None for d in c.ct2]
    lat = sorted(x for s in c.served for x in s.latencies)
    f = dict(
        rps=_med(s.answers / s.seconds for s in c.served),
        p50=lat[len(lat) // 2] * 1e3 if lat else float("nan"),
        p99=lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3 if lat else float("nan"),
        front=_med(s.per(s.front_s) for s in c.served),
        server=_med(s.per(s.front_s + s.cores_s) for s in c.served),
        cores=_med(s.per(s.cores_s) for s in c.served),
        client=_med(s.per(s.client_s) for s in c.served),
        engine=_med(e.cpu_us for e in c.engine),
        engine_sps=_med(e.sps for e in c.engine),
        single=_med(c.single_ms),
        ct2=_med(b.cpu_us for b in best if b),
        ct2_sps=_med(b.sps for b in best if b),
        cores_ratio=_med(s.per(s.cores_s) / e.cpu_us for s, e in zip(c.served, c.engine)),
        ct2_ratio=_med((s.answers / s.seconds) / b.sps for s, b in zip(c.served, best) if b),
        # Paired: the served latencies of the very inputs the engine timed one at a time (the window's first ones).
        p50_ratio=_med(
            statistics.median(lat) * 1e3 / m
            for s, m in zip(c.served, c.single_ms)
            if (lat := [s.by_index[i] for i in c.single_idx if i in s.by_index])
        ),
    )
    f["ct2_config"] = max(c.ct2[-1], key=lambda k: c.ct2[-1][k].sps) if c.ct2 and c.ct2[-1] else None
    return f


def table(report: Report, cells: list[Cell]) -> None:
    """The CPU-per-request table: one row per (search, concurrency)."""
    t = report.table(
        "cost", "search", ("C", "{}"), ("served answers/s", "{:.1f}"), ("p50 / p99 ms", "", "r"),
        ("front end µs/request", "{:.0f}"), ("engine cores µs/request", "{:.0f}"), ("server in all µs/request", "{:.0f}"),
        ("load client µs/request", "{:.0f}"), ("engine in process µs/sequence", "", "r"),
        ("CTranslate2 µs/sequence", "", "r"), ("cores / engine", "**{:.2f}×**"),
        ("served / CTranslate2 answers/s", "**{:.2f}×**"), ("p50 / engine's one input", "", "r"),
        ("outputs = engine's", "", "r"),
    )  # fmt: skip
    for c in cells:
        f = figures(c)
        cfg = f["ct2_config"]
        ct2 = f"{f['ct2']:.0f} ({f['ct2_sps']:.0f}/s, batch {cfg[0]}, {cfg[1]} thr)" if cfg else "n/a"
        p50 = f"{f['p50_ratio']:.2f}× of {f['single']:.2f} ms" if f["p50_ratio"] == f["p50_ratio"] else "—"
        t.row(c.search.name, c.conc, f["rps"], f"{f['p50']:.1f} / {f['p99']:.1f}", f["front"], f["cores"],
              f["server"], f["client"], f"{f['engine']:.0f} ({f['engine_sps']:.0f}/s)", ct2, f["cores_ratio"],
              f["ct2_ratio"], p50, f"{c.identical[0]} of {c.identical[1]}")  # fmt: skip


def acceptance(cells: list[Cell]) -> str:
    """The serving-cost bounds against this run's figures."""
    top = max(c.conc for c in cells)
    rows = ["| bound | figure | met |", "|---|---:|:-:|"]

    def row(what: str, value: float, bound: float, fmt: str, below: bool = True) -> None:
        ok = value <= bound if below else value >= bound
        rows.append(f"| {what} | {format(value, fmt)} | {'yes' if ok else '**no**'} |")

    for c in cells:
        f = figures(c)
        if c.conc == top and c.search.beam == 1:
            row(f"front end ≤ 350 µs per request, C={top} greedy", f["front"], 350, ".0f")
        if c.conc == top:
            row(
                f"engine cores ≤ 1.15× the engine in process, CPU per sequence, C={top} {c.search.name}",
                f["cores_ratio"],
                1.15,
                ".2f",
            )
            row(
                f"served ≥ 0.6× CTranslate2 in process, answers/s, C={top} {c.search.name}",
                f["ct2_ratio"],
                0.6,
                ".2f",
                below=False,
            )
        if c.conc == 1:
            row(f"C=1 p50 ≤ 1.2× the engine's one-input time, {c.search.name}", f["p50_ratio"], 1.2, ".2f")
    return "\n".join(rows)


def cpu_model() -> str:
    return f"{machine.cpu_model()} x {machine.nproc()}"


def notes(meta: dict, args: argparse.Namespace) -> str:
    inst = meta["instances"] or "its default"
    return (
        f"- server: `s2s serve` with its defaults (continuous batching, engine cores: {inst}, {meta['cores']} running), "
        f"{args.model}; load: C closed-loop `tritonclient.grpc.aio` workers over KServe v2 gRPC, one held-out input a "
        f"request ({meta['inputs']} inputs, cycled in order); windows of at least {args.cost_seconds:g} s and "
        f"max({args.cost_min_requests}, 3×C) answers after a warm-up of max(2×C, 8) answers.\n"
        "- CPU per request: each process's own user+system time from /proc over the window / answers in it; "
        "*engine cores* sums the core processes.\n"
        f"- engine in process: `engine.load(bundle, threads=1).generate(inputs, max_batch_size=64 × beam)`, CPU of "
        f"this process per sequence; one input: `generate([text])` on the first {args.cost_single_inputs} inputs a C=1 window measures, median wall "
        "time, against the served latencies of those same inputs (p50 / engine's one input).\n"
        f"- CTranslate2: the same weights (export/ctranslate2.py), `translate_batch` with intra_threads=1, "
        f"max_decoding_length={meta['length']}, the same search (greedy; beam with length_penalty as the served rule), "
        "the best of max_batch_size 16/64 × inter_threads 1/2 by answers/s; its CPU per sequence is that configuration's.\n"
        f"- {meta['rounds']} rounds: per search, the served windows and the in-process references take turns "
        "(served, references; references, served: ABBA); each figure is the median over the rounds, each ratio the "
        "median of the per-round ratios; p50/p99 pool every round's latencies.\n"
        "- outputs: the served answers against the engine in process reading what the server's text plan reads "
        "(spans and numbers protected, long inputs split: server/models/in_process.py), the same search."
    )
