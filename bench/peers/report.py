"""The peers' figures: the bounds `s2s serve` is held to against them, a table per search and concurrency, and
where the slowest answers come from."""

from __future__ import annotations

import statistics

from bench.harness.load import pct
from bench.harness.results import Report, bound, provenance

NAMES = {  # process roles (bench.harness.server.role) as each kind of side has them
    "ours": {"front": "front end", "cores": "engine cores"},
    "triton": {"front": "PyTriton Python", "ct2": "CT2", "tritonserver": "tritonserver", "triton stub": "Python backend stubs", "cores": "other child processes"},
    "peer": {"front": "Python", "ct2": "CT2"},
}  # fmt: skip


def med(xs) -> float:
    return statistics.median(xs) if xs else float("nan")


def figures(side, key: tuple, base) -> dict:
    ws, lat = side.windows[key], [x for w in side.windows[key] for x in w.latencies]
    names = NAMES.get(side.kind, NAMES["peer"])
    roles = sorted({k for w in ws for k in w.cpu_s})
    return dict(
        rps=med([w.rps for w in ws]),
        ratio=med([w.rps / b.rps for w, b in zip(ws, base.windows[key])]),
        p50=pct(lat, 50) * 1e3,
        p99=pct(lat, 99) * 1e3,
        cpu=med([w.per(sum(w.cpu_s.values())) for w in ws]),
        parts={names.get(k, k): med([w.per(w.cpu_s.get(k, 0.0)) for w in ws]) for k in roles},
        client=med([w.per(w.client_s) for w in ws]),
        bytes=ws[0].answer_bytes,
        decode=med([w.decode_us for w in ws]),
    )


def report(args, sides: list, found: list, n_inputs: int, started: float) -> Report:
    r = Report("serve-peers")
    r.heading("Against the servers users would build instead")
    top = max(args.concurrency)
    checks = [c for s in found for c in search_checks(s, sides, top)]
    r.text(f"Acceptance (C={top}, the sides taking turns):")
    r.acceptance(checks)
    r.figures.update({what: round(value, 4) for what, value, _, _ in checks})
    for s in found:
        for c in args.concurrency:
            r.text(f"**{s.name}, C={c}**")
            side_table(r, s, c, sides)
    r.text(
        f"Where the slowest answers come from (C={top}, every round pooled): output tokens per answer (the engine's in process on the same input and search), the 99th percentile of short answers (at most the median tokens) and of the longest 10% apart:"
    )
    tails_table(r, found, sides, top)
    r.text(
        provenance(started)
        + f"""
- sides: `s2s serve` with its defaults; CTranslate2 on the same weights (export/ctranslate2.py, float32, intra_threads 1, 2
  replicas), tokenizing with the bundle's tokenizer.json and detokenizing in the server: per request (a thread pool),
  micro-batched (<= 64 inputs or 5 ms, <= 2 calls in flight), PyTriton 0.7.0 (dynamic batcher max_batch_size 64, 5 ms,
  2 model instances). All KServe v2 gRPC ModelInfer on 127.0.0.1, text_input BYTES ([1], Triton [1, 1]).
- search: greedy (`beam_size=1` to `s2s serve`) and the served default (no parameter: the bundle's beam with
  CTranslate2's length rule; the peers the same beam, length_penalty 1), at most the engine's budget of tokens.
- load: tritonclient aio in a process of its own, C closed-loop workers, one held-out input a request ({n_inputs} inputs);
  a warm-up of max(2C, 8) answers, then at least {args.seconds:g} s and max({args.min_answers}, 3C) answers; {args.rounds} rounds
  (ABBA); answers/s, CPU and *x s2s serve* (paired per round) are medians over the rounds, p50/p99 pool them.
- CPU: each server process's user + system time from /proc over the window / answers; a peer's CTranslate2 threads
  apart from the rest of its process. *client decode*: tritonclient turning one answer into numpy, per answer.
- outputs: the answers against the engine in process, the same search; `s2s serve`'s through its text plan
  (server/models/in_process.py), the peers' on the inputs as sent."""
    )
    return r


def search_checks(s, sides: list, top: int) -> list[tuple]:
    """The bounds of one search at concurrency ``top``: `s2s serve` (the first side) against the best peer's
    throughput and p99, its front end's CPU, and with a beam its engine cores' CPU against the micro-batched peer's
    CTranslate2."""
    key, ours = (s.name, top), sides[0]
    peers = [x for x in sides if x.kind != "ours"]
    if not peers:
        return []
    best = max(peers, key=lambda x: med([w.rps for w in x.windows[key]]))
    mine, theirs = figures(ours, key, ours), figures(best, key, ours)
    checks = [
        bound(
            f"{s.name}: answers/s / the best peer's ({best.label})",
            1 / theirs["ratio"],
            ">=",
            1.1 if s.beam == 1 else 1.0,
        ),
        bound(f"{s.name}: p99 ms against the best peer's", mine["p99"], "<=", round(theirs["p99"], 1)),
        bound(f"{s.name}: front end CPU ms/request", mine["parts"].get("front end", 0.0), "<=", 0.4),
    ]
    if s.beam > 1 and (batcher := next((x for x in peers if x.kind == "batcher"), None)):
        ct2 = figures(batcher, key, ours)["parts"].get("CT2", float("nan"))
        checks.append(
            bound(
                f"{s.name}: engine cores / CTranslate2's CPU per request (micro-batched peer)",
                mine["parts"].get("engine cores", 0.0) / ct2,
                "<=",
                1.1,
            )
        )
    return checks


def side_table(r: Report, s, c: int, sides: list) -> None:
    """The table of search ``s`` at concurrency ``c``: a row per side."""
    ours = sides[0]
    t = r.table(f"{s.name.split(' ')[0]}-c{c}", "server", ("answers/s", "{:.1f}"), ("x s2s serve", "{:.2f}"), ("p50 ms", "{:.1f}"),
                ("p99 ms", "{:.1f}"), ("server CPU ms/request", "{:.2f}"), "by process (ms/request)", ("load client ms/request", "{:.2f}"),
                ("answer bytes", "{:d}"), ("client decode µs/answer", "{:.1f}"), "outputs = engine's")  # fmt: skip
    for side in sides:
        f = figures(side, (s.name, c), ours)
        parts = ", ".join(f"{k} {v:.2f}" for k, v in f["parts"].items())
        t.row(
            side.label,
            f["rps"],
            f["ratio"],
            f["p50"],
            f["p99"],
            f["cpu"],
            parts,
            f["client"],
            f["bytes"],
            f["decode"],
            side.identical[(s.name, c)],
        )


def tails_table(r: Report, found: list, sides: list, top: int) -> None:
    """Where the slowest answers come from at concurrency ``top``: a row per search and side."""
    t = r.table(f"tails-c{top}", "server", "search", ("p50 ms", "{:.1f}"), ("p99 ms", "{:.1f}"), ("tokens, all answers", "{:.1f}"), ("tokens, slowest 1%", "{:.1f}"),
                ("p99 ms, answers of <= median tokens", "{:.1f}"), ("p99 ms, the longest 10%", "{:.1f}"))  # fmt: skip
    for s in found:
        for side in sides:
            got = side.answered.get((s.name, top))
            if got:
                lat, lengths = [x for x, _ in got], sorted(n for _, n in got)
                p99, mid, long = pct(lat, 99), lengths[len(lengths) // 2], lengths[int(len(lengths) * 0.9)]
                t.row(side.label, s.name.split(" (")[0], pct(lat, 50) * 1e3, p99 * 1e3, statistics.fmean(lengths), statistics.fmean([n for x, n in got if x >= p99]),
                      pct([x for x, n in got if n <= mid], 99) * 1e3, pct([x for x, n in got if n >= long], 99) * 1e3)  # fmt: skip
