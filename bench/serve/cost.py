"""What a request costs, process by process, and what each decoding-option family costs under load.

CPU per request: one `s2s serve` with its defaults, per search (greedy; the served default where CTranslate2 runs
the same search) and concurrency C, loaded over KServe v2 gRPC by tritonclient; the front end's and the engine
cores' CPU time from /proc over the window / answers. References on the same inputs and search, taking turns with
the served windows (ABBA): the engine in process (``generate``, max_batch_size 64 rows x beam: its CPU per sequence;
one input at a time: its median wall time), CTranslate2 (best of max_batch_size 16/64 x inter_threads 1/2). Each
figure is the median over the rounds; served answers are compared with the engine reading what the server's text
plan reads (server/models/in_process.py).

Option families: one continuous-batching server (one engine core), every request of a window with one family's
options over seq2seq.v1, the families' windows in rotated order per round, pooled; with --baseline REF a second
server of that commit's code gives the no-option path's A/B (paired per round).
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.harness.inputs import ct2_model, log
from bench.harness.load import Target, Window, abba, pct, window
from bench.harness.results import Report, bound
from bench.harness.server import s2s_serve, source_tree

WARMUP = 8  # answers before a window measures: max(2 x C, this)
FAMILIES = [
    ("no option", {}),
    ("greedy + scores", {"return_scores": True}),
    ("sampling, top-p 0.9, T 0.8", {"sampling_topk": 0, "sampling_topp": 0.9, "sampling_temperature": 0.8}),
    ("sampling, top-k 40", {"sampling_topk": 40}),
    ("penalties: repetition 1.2, no-repeat 3-gram", {"repetition_penalty": 1.2, "no_repeat_ngram_size": 3}),
    ("beam 4 (the paper's)", {"beam_size": 4}),
    ("beam 4, n-best 4 + scores", {"beam_size": 4, "num_hypotheses": 4, "return_scores": True}),
    ("beam 4, CTranslate2 scoring", {"beam_size": 4, "length_penalty_type": "ctranslate2"}),
]
BASELINE = "no option, baseline"


@dataclass(frozen=True)
class Search:
    name: str
    beam: int
    params: dict  # KServe request parameters (empty: the served default)
    ct2_kw: dict  # translate_batch's for the same search


def searches(engine) -> list[Search]:
    """Greedy, and the served default (the bundle's beam and length rule) where CTranslate2 can run it (its own
    length rule)."""
    from contract.decoding import DEFAULT_LENGTH_PENALTY

    task, out = engine.config.task, [Search("greedy", 1, {"beam_size": 1}, {"beam_size": 1})]
    if task.beam_size > 1 and task.length_penalty_type == "ctranslate2":
        kw = {"beam_size": task.beam_size, "length_penalty": DEFAULT_LENGTH_PENALTY["ctranslate2"]}
        out.append(Search(f"beam {task.beam_size} (served default)", task.beam_size, {}, kw))
    return out


def _med(xs) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def cost(args, inputs: list[str], engine, checkpoint) -> Report:
    """The CPU-per-request table and its bounds."""
    from server.models.in_process import served_texts

    single_idx = range(WARMUP, min(len(inputs), WARMUP + args.cost_single_inputs))  # a C=1 window's first
    found = searches(engine)
    rounds = cost_rounds(args, inputs, engine, checkpoint, found, single_idx)
    report = Report("serve-cost")
    report.heading("Serving cost per request")
    rows, checks, top = [], [], max(args.cost_concurrency)
    for s in found:
        expected = served_texts(engine, inputs, 64 * s.beam, beam_size=s.beam)
        for c in args.cost_concurrency:
            f = figures(rounds[(s.name, c)], single_idx, expected)
            rows.append((s, c, f))
            checks += cost_checks(s, c, f, top)
    report.acceptance(checks)
    cost_table(report, rows)
    report.text(
        f"- `s2s serve` with its defaults ({args.model}), C closed-loop tritonclient aio workers over KServe v2 gRPC, one "
        f"held-out input a request ({len(inputs)}, cycled in order); windows of at least {args.cost_seconds:g} s and "
        f"max({args.cost_min_requests}, 3×C) answers after max(2×C, 8); {args.cost_rounds} rounds, served and in-process "
        "sides taking turns (ABBA), medians; CPU per request: each process's user + system time from /proc over the "
        f"window / answers. The engine's one input: the first {len(single_idx)} inputs a C=1 window measures."
    )
    return report


def cost_rounds(args, inputs: list[str], engine, checkpoint, found: list[Search], single_idx: range) -> dict:
    """(search name, C) -> per round (served window, engine in process, single input ms, CTranslate2's best): one
    server with its defaults and the in-process references taking turns (ABBA)."""
    translators, vocab = ct2_translators(args, engine, checkpoint)
    tokens = [[vocab[i] for i in engine.codec.source_ids(t)] for t in inputs] if vocab else []
    length = min(engine.config.task.max_new_tokens, engine.config.model.max_len - 1)
    rounds = {(s.name, c): [] for s in found for c in args.cost_concurrency}
    flags = ["--models", args.model, "--grace-s", "2", "--log-level", "WARNING"]
    flags += ["--instances", str(args.cost_instances)] if args.cost_instances else []
    with s2s_serve(args.model_repo, *flags, model=args.model) as server:
        for r in range(args.cost_rounds):
            for s in found:
                got = {}

                def served(s=s, got=got):
                    for c in args.cost_concurrency:
                        t = Target(server.address, server.pid, args.model, params=s.params)
                        least = max(args.cost_min_requests, 3 * c)
                        got[c] = window(t, inputs, c, args.cost_seconds, least, max(2 * c, WARMUP))
                        log(f"  served {s.name} C={c}: {got[c].rps:.1f}/s")

                def reference(s=s, got=got):
                    got["ref"] = references(
                        engine, translators, tokens, inputs, [inputs[i] for i in single_idx], s, length
                    )

                for side in abba([served, reference], r):
                    side()
                for c in args.cost_concurrency:
                    rounds[(s.name, c)].append((got[c], *got["ref"]))
    return rounds


def cost_checks(s: Search, c: int, f: dict, top: int) -> list[tuple]:
    """One cell's bounds: at the top concurrency the front end's CPU (greedy), the engine cores' CPU against the
    engine in process and throughput against CTranslate2; at C=1 the latency against the engine's one input."""
    checks = []
    if c == top:
        checks += (
            [bound(f"front end µs per request, C={c} greedy", f["front"], "<=", 350)] if s.beam == 1 else []
        )
        checks.append(
            bound(
                f"engine cores / the engine in process, CPU per sequence, C={c} {s.name}",
                f["cores_ratio"],
                "<=",
                1.15,
            )
        )
        checks.append(
            bound(
                f"served / CTranslate2 in process, answers/s, C={c} {s.name}",
                f["ct2_ratio"],
                ">=",
                0.6,
            )
        )
    if c == 1:
        checks.append(bound(f"C=1 p50 / the engine's one-input time, {s.name}", f["p50_ratio"], "<=", 1.2))
    return checks


def cost_table(report: Report, rows: list[tuple]) -> None:
    """The cost table: a row per (search, C) and its figures."""
    t = report.table("cost", "search", ("C", "{}"), ("served answers/s", "{:.1f}"), ("p50 / p99 ms", "", "r"),
                     ("front end µs/request", "{:.0f}"), ("engine cores µs/request", "{:.0f}"), ("server in all µs/request", "{:.0f}"),
                     ("load client µs/request", "{:.0f}"), ("engine in process µs/sequence", "", "r"), ("CTranslate2 µs/sequence", "", "r"),
                     ("cores / engine", "**{:.2f}×**"), ("served / CTranslate2 answers/s", "**{:.2f}×**"),
                     ("p50 / engine's one input", "", "r"), ("outputs = engine's", "", "r"))  # fmt: skip
    for s, c, f in rows:
        cfg = f["ct2_cfg"]
        ct2 = f"{f['ct2']:.0f} ({f['ct2_sps']:.0f}/s, batch {cfg[0]}, {cfg[1]} thr)" if cfg else "n/a"
        p50 = f"{f['p50_ratio']:.2f}× of {f['single']:.2f} ms" if f["p50_ratio"] == f["p50_ratio"] else "—"
        t.row(s.name, c, f["rps"], f"{f['p50']:.1f} / {f['p99']:.1f}", f["front"], f["cores"], f["server"], f["client"],
              f"{f['engine']:.0f} ({f['engine_sps']:.0f}/s)", ct2, f["cores_ratio"], f["ct2_ratio"], p50, f["identical"])  # fmt: skip


def ct2_translators(args, engine, checkpoint) -> tuple[dict, list[str] | None]:
    """CTranslate2 on the served version's weights by inter_threads (1, 2), and its vocabulary in id order."""
    if not args.ct2:
        return {}, None
    import ctranslate2

    from export.ctranslate2 import vocabulary

    path = str(ct2_model(args.checkpoint or checkpoint))
    kw = dict(device="cpu", compute_type="float32", intra_threads=1)
    return {i: ctranslate2.Translator(path, inter_threads=i, **kw) for i in (1, 2)}, vocabulary(
        engine.codec.tokenizer
    )


def references(engine, translators, tokens, inputs, singles, s: Search, length: int) -> tuple:
    """(engine CPU µs per sequence, sequences/s), the median ms of each single input, CTranslate2's best
    (µs per sequence, sequences/s, config) on the whole inputs."""
    kw = dict(beam_size=s.beam)
    c, p = time.perf_counter(), time.process_time()
    engine.generate(inputs, max_batch_size=64 * s.beam, **kw)
    eng = ((time.process_time() - p) / len(inputs) * 1e6, len(inputs) / (time.perf_counter() - c))
    single = []
    for text in singles:
        c = time.perf_counter()
        engine.generate([text], max_batch_size=s.beam, **kw)
        single.append(1000 * (time.perf_counter() - c))
    best = None
    for inter, tr in translators.items():
        for bs in (16, 64):
            run = dict(
                max_batch_size=bs,
                batch_type="examples",
                max_decoding_length=length,
                return_scores=False,
                **s.ct2_kw,
            )
            tr.translate_batch(tokens[: 2 * bs * inter], **run)  # warm-up
            c, p = time.perf_counter(), time.process_time()
            tr.translate_batch(tokens, **run)
            got = (
                (time.process_time() - p) / len(tokens) * 1e6,
                len(tokens) / (time.perf_counter() - c),
                (bs, inter),
            )
            best = got if best is None or got[1] > best[1] else best
    return eng, statistics.median(single), best


def figures(rounds: list[tuple], single_idx: range, expected: list[str]) -> dict:
    """One cell's figures: medians over its rounds (ratios: medians of the per-round ratios)."""
    served = [w for w, *_ in rounds]
    lat = [x for w in served for x in w.latencies]
    us = lambda w, *roles: sum(w.cpu_s.get(k, 0.0) for k in roles) / w.answers * 1e6  # noqa: E731
    by_index = [dict(reversed(list(zip(w.indices, w.latencies)))) for w in served]
    texts = {i: t for w in served for i, t in w.texts.items()}
    best = [b for *_, b in rounds]
    return dict(
        rps=_med([w.rps for w in served]), p50=pct(lat, 50) * 1e3, p99=pct(lat, 99) * 1e3,
        front=_med([us(w, "front") for w in served]), cores=_med([us(w, "cores") for w in served]),
        server=_med([us(w, *w.cpu_s) for w in served]), client=_med([w.client_s / w.answers * 1e6 for w in served]),
        engine=_med([e[0] for _, e, _, _ in rounds]), engine_sps=_med([e[1] for _, e, _, _ in rounds]),
        single=_med([m for _, _, m, _ in rounds]),
        ct2=_med([b[0] for b in best if b]), ct2_sps=_med([b[1] for b in best if b]), ct2_cfg=best[-1][2] if best[-1] else None,
        cores_ratio=_med([us(w, "cores") / e[0] for w, e, _, _ in rounds]),
        ct2_ratio=_med([w.rps / b[1] for w, _, _, b in rounds if b]),
        p50_ratio=_med([statistics.median(x) / m for (w, _, m, _), d in zip(rounds, by_index) if (x := [d[i] * 1e3 for i in single_idx if i in d])]),
        identical=f"{sum(expected[i] == t for i, t in texts.items())} of {len(texts)}",
    )  # fmt: skip


def options(args, inputs: list[str], flags) -> Report:
    """The option-family table, and the no-option A/B against --baseline's server."""
    rounds = option_rounds(args, inputs, flags)
    focused = args.option_families == ["none"]
    report = Report("options-ab" if focused else "options")
    report.heading(
        "The no-option path against the baseline, alone" if focused else "Decoding options under load",
        3 if focused else 2,
    )
    report.text(
        f"One engine core, continuous batching (--max-batch-size {args.max_batch_size}), C={args.option_concurrency} closed-loop seq2seq.v1 workers, every request of a window with the family's options (beam_size=1 unless they set it); {args.rounds} round(s), the order rotated each round, pooled. *x no option*: tokens/s over the no-option row of the same server."
        + (f" Baseline: the server of commit `{args.baseline}`, same flags." if args.baseline else "")
    )
    pooled = {name: Window.pooled(ws) for name, ws in rounds.items()}
    options_table(report, pooled)
    if BASELINE in pooled and pooled[BASELINE].tps:
        baseline_ab(report, args, rounds, pooled)
    return report


def option_plan(args) -> list[tuple[str, str, dict]]:
    """(family, server key, options) for each window of a round: the families --option-families picks (the no-option
    one always), and with --baseline the baseline server's no-option row."""
    only = [f for f in args.option_families if f != "none"]
    plan = [
        (n, "this tree", o)
        for n, o in FAMILIES
        if n == "no option"
        or (not only and args.option_families != ["none"])
        or any(n.startswith(f) for f in only)
    ]
    return plan + ([(BASELINE, "baseline", {})] if args.baseline else [])


def option_rounds(args, inputs: list[str], flags) -> dict[str, list[Window]]:
    """family -> its window per round: one server of this tree (and one of --baseline's), the plan's windows in an
    order rotated each round."""
    c = args.option_concurrency
    with contextlib.ExitStack() as stack:
        servers = {
            "this tree": stack.enter_context(
                s2s_serve(args.model_repo, *flags("continuous", 1), model=args.model, metrics=True)
            )
        }
        if args.baseline:
            tree = source_tree(
                args.baseline,
                Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-baseline-"))),
            )
            servers["baseline"] = stack.enter_context(
                s2s_serve(args.model_repo, *flags("continuous", 1), root=tree, model=args.model, metrics=True)
            )
        plan = option_plan(args)
        targets = {
            k: Target(s.address, s.pid, args.model, "seq2seq", metrics_port=s.metrics_port)
            for k, s in servers.items()
        }

        def go(key: str, opts: dict) -> Window:
            t = dataclasses.replace(targets[key], params={"beam_size": 1, **opts})
            return window(t, inputs, c, args.seconds, max(40, 3 * c), max(2 * c, WARMUP))

        for key in servers:  # ONNX Runtime's first runs in no window
            go(key, {})
        rounds: dict[str, list[Window]] = {name: [] for name, _, _ in plan}
        for r in range(args.rounds):
            for k in range(len(plan)):
                name, key, opts = plan[(k + r) % len(plan)]
                rounds[name].append(go(key, opts))
                log(f"  options {name:44s} round {r + 1}: {rounds[name][-1].rps:.1f} answers/s")
    return rounds


def _ms_token(w: Window, *roles: str) -> float:
    """Server CPU ms per token (of the processes of ``roles``; all of them when none)."""
    return (
        1000 * sum(v for k, v in w.cpu_s.items() if not roles or k in roles) / w.tokens
        if w.tokens
        else float("nan")
    )


def options_table(report: Report, pooled: dict[str, Window]) -> None:
    """The options table: a row per family, its rounds pooled."""
    t = report.table("options", "family", "options", ("answers/s", "{:.1f}"), ("tokens/s", "{:.0f}"), ("x no option", "{:.2f}"), ("server CPU ms / token", "{:.2f}"), ("front end", "{:.2f}"), ("engine core", "{:.2f}"), ("p50 ms", "{:.1f}"), ("rows/step", "{:.1f}"), "errors")  # fmt: skip
    base, opts = pooled["no option"], dict(FAMILIES)
    for name, w in pooled.items():
        steps = w.metrics.get("s2s_batch_size_count", 0)
        shown = ", ".join(f"{k}={v}" for k, v in opts.get(name, {}).items()) or "—"
        rows = w.metrics["s2s_batch_size_sum"] / steps if steps else "—"
        t.row(
            name,
            shown,
            w.rps,
            w.tps,
            w.tps / base.tps if base.tps else None,
            _ms_token(w),
            _ms_token(w, "front"),
            _ms_token(w, "cores"),
            pct(w.latencies, 50) * 1e3,
            rows,
            str(sum(w.errors.values())),
        )


def baseline_ab(report: Report, args, rounds: dict[str, list[Window]], pooled: dict[str, Window]) -> None:
    """The no-option path, this tree against --baseline's server: pooled, paired by round, CPU per token."""
    base = pooled["no option"]
    ratio = base.tps / pooled[BASELINE].tps
    paired = [a.tps / b.tps for a, b in zip(rounds["no option"], rounds[BASELINE]) if b.tps]
    cpu = [_ms_token(b) / _ms_token(a) for a, b in zip(rounds["no option"], rounds[BASELINE])]
    report.text(
        f"No-option throughput, this tree / baseline `{args.baseline}`: **{ratio:.3f}** pooled (target: within 3%, >= 0.97: {'met' if ratio >= 0.97 else 'NOT met'}); paired by round, tokens/s median **{_med(paired):.3f}** (min {min(paired):.3f}, max {max(paired):.3f}); server CPU per token, baseline / this tree, median **{_med(cpu):.3f}** (> 1: this tree spends less)."
    )
    report.figures["baseline_ratio"] = ratio
