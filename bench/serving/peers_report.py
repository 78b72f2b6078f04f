"""bench.serving.peers_bench's figures: a table per search and concurrency, the acceptance table, the notes."""

from __future__ import annotations

import statistics

from bench.common.machine import cpu_model
from bench.common.report import Report, publish
from bench.serving.load import pct

ROLES = {
    "ours": {"front": "front end", "cores": "engine cores"},
    "triton": {
        "front": "PyTriton Python",
        "ct2": "CT2",
        "tritonserver": "tritonserver",
        "triton stub": "Python backend stubs",
        "cores": "other child processes",
    },
}
PEER_ROLES = {"front": "Python", "ct2": "CT2"}


def med(xs) -> float:
    return statistics.median(xs) if xs else float("nan")


def split(side, ws) -> dict[str, float]:
    """Median ms per request of each process role over the rounds."""
    names = ROLES.get(side.kind, PEER_ROLES)
    keys = {k for w in ws for k in w.cpu_s}
    return {names.get(k, k): med([w.per(w.cpu_s.get(k, 0.0)) for w in ws]) for k in sorted(keys)}


def figures(sides, search, conc) -> list[dict]:
    key = (search.name, conc)
    base = sides[0].windows[key]
    rows = []
    for s in sides:
        ws = s.windows[key]
        lat = [x for w in ws for x in w.latencies]
        parts = split(s, ws)
        rows.append(
            dict(
                side=s,
                rps=med([w.answers / w.seconds for w in ws]),
                ratio=med([(w.answers / w.seconds) / (b.answers / b.seconds) for w, b in zip(ws, base)]),
                p50=pct(lat, 50) * 1e3,
                p99=pct(lat, 99) * 1e3,
                cpu=med([w.per(sum(w.cpu_s.values())) for w in ws]),
                parts=parts,
                client=med([w.per(w.client_s) for w in ws]),
                bytes=ws[0].answer_bytes,
                decode=med([w.decode_us for w in ws]),
                identical=s.identical.get(key, (0, 0)),
            )
        )
    return rows


def acceptance(report: Report, sides, search_list, conc: int) -> dict:
    t = report.table("acceptance", "figure", ("measured", "{:.2f}"), "target", ("met", "", "c"))
    out = {}
    for search in search_list:
        rows = figures(sides, search, conc)
        ours, peers = rows[0], [r for r in rows if r["side"].kind != "ours"]
        if not peers:
            continue
        best = max(peers, key=lambda r: r["rps"])
        want = 1.1 if search.beam == 1 else 1.0
        ratio = med(
            [
                (o.answers / o.seconds) / (b.answers / b.seconds)
                for o, b in zip(
                    ours["side"].windows[(search.name, conc)], best["side"].windows[(search.name, conc)]
                )
            ]
        )
        checks = [
            (
                f"{search.name}: answers/s / the best peer's ({best['side'].label})",
                ratio,
                f">= {want}",
                ratio >= want,
            ),
            (
                f"{search.name}: p99 ms (the best peer's {best['p99']:.1f})",
                ours["p99"],
                f"<= {best['p99']:.1f}",
                ours["p99"] <= best["p99"],
            ),
            (
                f"{search.name}: front end CPU ms/request",
                ours["parts"].get("front end", 0),
                "<= 0.4",
                ours["parts"].get("front end", 0) <= 0.4,
            ),
        ]
        batcher = next((r for r in peers if r["side"].kind == "batcher"), None)
        if search.beam > 1 and batcher and "CT2" in batcher["parts"]:
            q = ours["parts"].get("engine cores", 0) / batcher["parts"]["CT2"]
            checks.append(
                (
                    f"{search.name}: engine cores / CTranslate2's CPU per request (micro-batched peer)",
                    q,
                    "<= 1.1",
                    q <= 1.1,
                )
            )
        for name, value, target, met in checks:
            t.row(name, value, target, "**met**" if met else "**not met**")
            out[name] = value
    return out


def tails(report: Report, sides, search_list, conc: int) -> None:
    """Where the slowest answers come from: their output lengths, and the tail of short and of long answers apart
    (output tokens: the engine's in process on the same input and search)."""
    t = report.table(
        f"tails-c{conc}",
        "server",
        "search",
        ("p50 ms", "{:.1f}"),
        ("p99 ms", "{:.1f}"),
        ("tokens, all answers", "{:.1f}"),
        ("tokens, slowest 1%", "{:.1f}"),
        ("p99 ms, answers of <= median tokens", "{:.1f}"),
        ("p99 ms, the longest 10%", "{:.1f}"),
    )
    for search in search_list:
        for s in sides:
            got = s.answered.get((search.name, conc))
            if not got:
                continue
            lat = [x for x, _ in got]
            lengths = sorted(n for _, n in got)
            p99, mid, long = pct(lat, 99), lengths[len(lengths) // 2], lengths[int(len(lengths) * 0.9)]
            slow = [n for x, n in got if x >= p99]
            t.row(
                s.label,
                search.name.split(" (")[0],
                pct(lat, 50) * 1e3,
                p99 * 1e3,
                statistics.fmean(lengths),
                statistics.fmean(slow),
                pct([x for x, n in got if n <= mid], 99) * 1e3,
                pct([x for x, n in got if n >= long], 99) * 1e3,
            )


def publish_report(sides, search_list, args, meta) -> None:
    report = Report("serve-peers")
    report.heading("Against the servers users would build instead (`bench/serving/peers_bench.py`)")
    conc = max(args.concurrency)
    report.text(f"Acceptance (C={conc}, one run, the sides taking turns):")
    figs = acceptance(report, sides, search_list, conc)
    for search in search_list:
        for c in args.concurrency:
            report.text(f"**{search.name}, C={c}**")
            t = report.table(
                f"{search.name.split(' ')[0]}-c{c}",
                "server",
                ("answers/s", "{:.1f}"),
                ("x s2s serve", "{:.2f}"),
                ("p50 ms", "{:.1f}"),
                ("p99 ms", "{:.1f}"),
                ("server CPU ms/request", "{:.2f}"),
                "by process (ms/request)",
                ("load client ms/request", "{:.2f}"),
                ("answer bytes", "{:d}"),
                ("client decode µs/answer", "{:.1f}"),
                "outputs = engine's",
            )
            for r in figures(sides, search, c):
                t.row(
                    r["side"].label,
                    r["rps"],
                    r["ratio"],
                    r["p50"],
                    r["p99"],
                    r["cpu"],
                    ", ".join(f"{k} {v:.2f}" for k, v in r["parts"].items()),
                    r["client"],
                    r["bytes"],
                    r["decode"],
                    "{} of {}".format(*r["identical"]),
                )
    report.text(
        f"Where the slowest answers come from (C={conc}, every round pooled): output tokens per answer (the "
        "engine's in process on the same input and search), and the 99th percentile of short answers (at most the "
        "median tokens) and of the longest 10% apart:"
    )
    tails(report, sides, search_list, conc)
    timed = [
        (w.timed_bytes, w.timed_decode_us, w.answer_bytes, w.decode_us)
        for ws in sides[0].windows.values()
        for w in ws
        if w.timed_bytes
    ]
    if timed:
        tb, td, ab, ad = (med([x[k] for x in timed]) for k in range(4))
        report.text(
            f"`s2s serve`'s answer with its timings asked for (request parameter `timings`): {tb:.0f} bytes, "
            f"{td:.1f} µs for tritonclient to decode, against {ab:.0f} bytes and {ad:.1f} µs without "
            "(medians over the windows)."
        )
    bare = [s.bare_identical[k] for s in sides if s.kind == "ours" for k in s.bare_identical]
    bare_note = (
        " `s2s serve`'s answers equal the bare engine's (inputs as sent) on {} of {} (all sides and cells): the "
        "difference is what the text plan changes.".format(sum(b[0] for b in bare), sum(b[1] for b in bare))
        if bare
        else ""
    )
    serve_flags = "; ".join(f"`{lab}`: `s2s serve {f}`" for lab, f in args.serve)
    report.text(f"""
- sides: `s2s serve` with its defaults{" (and " + serve_flags + ")" if serve_flags else ""}; CTranslate2 on the same
  weights (export/ctranslate2.py, float32, intra_threads 1, 2 replicas: inter_threads 2), tokenizing with the bundle's
  tokenizer.json (HF `tokenizers`) and detokenizing in the server: per request (`translate_batch` of each request's
  input in a thread pool), with an asyncio micro-batcher (one call of <= 64 inputs or 5 ms after the first, <= 2
  calls in flight; bench/serving/peers.py), and PyTriton 0.7.0 (its bundled Triton, dynamic batcher max_batch_size
  64, 5 ms queue delay, 2 model instances over one 2-replica translator; bench/serving/peer_triton.py). All on
  127.0.0.1, KServe v2 gRPC ModelInfer, text_input BYTES ([1], Triton [1, 1]).
- search: greedy (`beam_size=1` as a request parameter to `s2s serve`), and the served default (no parameter:
  the bundle's beam 4 with CTranslate2's length rule, length_penalty 1; the peers `beam_size=4,
  length_penalty=1`), max_decoding_length the engine's budget (the bundle's max_new_tokens, within its positions).
- load: one `tritonclient.grpc.aio` client in a process of its own, C closed-loop workers, one held-out input a
  request ({meta["inputs"]} inputs from `{meta["path"].relative_to(meta["path"].parents[2])}`, in order; round r
  of every side starts at input 4096·r); a warm-up of max(2C, 8) answers, then at least {args.seconds:g} s and
  max({args.min_answers}, 3C) answers. {args.rounds} rounds, the sides taking turns (ABBA); answers/s, CPU and
  *x s2s serve* (paired per round) are medians over the rounds, p50/p99 pool the rounds.
- CPU: each server process's user + system time from /proc over the window / answers; a peer's CTranslate2
  threads (the ids it started) apart from the rest of its process (Python: grpc.aio, asyncio, tokenizers).
  *client decode*: tritonclient turning one answer into numpy and reading its parameters, per answer (2,000
  repeats of one answer); *answer bytes*: that ModelInferResponse serialized.
- outputs: every side's answers against the engine in process (`generate`, the same search) on the inputs each
  answered; for `s2s serve`, the engine reading what the server's text plan reads (its default text options for
  a translation model: spans and numbers protected, long inputs split; server/models/in_process.py), the
  peers reading the inputs as sent.{bare_note}
- date: {meta["started"]:%Y-%m-%d %H:%M} UTC; CPU: {cpu_model()}; command: `python -m bench.serving.peers_bench
  {" ".join(meta["argv"])}`; {meta["seconds"]:.0f} s
""")
    publish(report, args.results, figures={k: round(v, 4) for k, v in figs.items()})
