"""The option table of bench.serving.serve: what each decoding-option family costs under load, and the no-option
path against an earlier commit.

One continuous-batching server (one engine core) of this tree, and with ``--baseline REF`` a second one
running REF's code (bench.serving.trees: ``git archive REF``, its stubs generated; the same models, and flags). Every
request of a window sets one family's options (``FAMILIES``); ``--option-concurrency`` closed-loop
workers, windows as in the main grid (``run_cell``), ``--rounds`` rounds with the order rotated each
round, pooled. The table gives answers/s and generated tokens/s per family and the ratio to "no
option" on the same server (same minutes); the baseline row gives this tree's no-option throughput over
REF's, which a change to the serving path must keep within 3%.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

from bench import ROOT
from bench.common.abba import rotated
from bench.serving.load import Cell, run_cell
from bench.serving.server_process import ServerProcess
from bench.serving.trees import baseline_repo, baseline_tree

FAMILIES: list[tuple[str, dict]] = [
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


async def run(args: argparse.Namespace, inputs: list[str], log) -> dict[str, object]:
    """Cells per family (and the baseline's no-option cell), pooled over --rounds."""
    conc = args.option_concurrency
    with contextlib.ExitStack() as stack:
        servers = {"current": stack.enter_context(ServerProcess(args, "continuous", 1, label="this tree"))}
        if args.baseline:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-baseline-")))
            tree = baseline_tree(ROOT, args.baseline, tmp)
            old = argparse.Namespace(
                **{**vars(args), "model_repo": baseline_repo(args.model_repo, args.model, tmp)}
            )
            servers["baseline"] = stack.enter_context(
                ServerProcess(old, "continuous", 1, root=tree, label=f"baseline {args.baseline}")
            )
        only = [f.strip() for f in args.option_families.split(",") if f.strip()]
        plan = [
            (name, "current", opts)
            for name, opts in FAMILIES  # "none": the no-option row (and baseline) only
            if name == "no option" or not only or any(name.startswith(f) for f in only if f != "none")
        ]
        if "baseline" in servers:
            plan.append((BASELINE, "baseline", {}))
        for key in servers:  # warm each server (ONNX Runtime's first runs) outside every window
            await run_cell(servers[key], args, inputs, conc, start_index=0)
        rounds: dict[str, list] = {name: [] for name, _, _ in plan}
        for r in range(args.rounds):
            for name, key, opts in rotated(plan, r):
                t = time.perf_counter()
                cell = await run_cell(servers[key], args, inputs, conc, start_index=0, options=opts)
                rounds[name].append(cell)
                log(
                    f"  options {name:44s} round {r + 1}: {cell.answers:4d} answers {cell.rps:7.1f} req/s "
                    f"({time.perf_counter() - t:.1f}s)"
                )
        pooled = {name: Cell.pooled(cells) for name, cells in rounds.items()}
        pooled["_rounds"] = rounds  # per-round windows, for the paired baseline ratio
        return pooled


def cpu_ms_per_token(c) -> float:
    """Server CPU per generated token: what a family costs, steadier than throughput on a shared machine."""
    return 1000 * c.server_cpu_s / c.tokens if c.tokens else float("nan")


def paired(rounds: dict, a: str, b: str, metric) -> list[float]:
    """metric(a) / metric(b) of each round: both windows ran minutes apart at most, so the machine's drift
    between rounds cancels out of each ratio."""
    return [metric(x) / metric(y) for x, y in zip(rounds[a], rounds[b]) if metric(y)]


def table(
    cells: dict,
    args: argparse.Namespace,
    heading: str = "## Decoding options under load (`bench/serving/option_cost.py`)",
) -> str:
    import statistics

    rounds = cells.pop("_rounds", {})
    base = cells["no option"]
    opts = dict(FAMILIES)
    lines = [
        *([heading, ""] if heading else []),
        f"One engine core, continuous batching (--max-batch-size {args.max_batch_size}), C={args.option_concurrency} "
        f"closed-loop workers, one held-out input per request, every request of a window with the family's options "
        "(and beam_size=1 unless they set it: the model's default may be a beam); "
        f"{args.rounds} round(s) per row, the order rotated each round, pooled. *x no option*: tokens/s over the "
        "no-option row of the same server."
        + (
            f" Baseline: the server of commit `{args.baseline}`, same flags, interleaved with the others."
            if args.baseline
            else ""
        ),
        "",
        "| family | options | answers/s | tokens/s | x no option | server CPU ms / token | p50 ms | rows/step | errors |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, c in cells.items():
        o = opts.get(name, {})
        shown = ", ".join(f"{k}={v}" for k, v in o.items()) or "—"
        rows = f"{c.rows_per_step:.1f}" if c.rows_per_step else "—"
        ratio = c.tps / base.tps if base.tps else float("nan")
        lines.append(
            f"| {name} | {shown} | {c.rps:.1f} | {c.tps:.0f} | {ratio:.2f} | {cpu_ms_per_token(c):.2f} | "
            f"{1000 * c.lat(50):.1f} | {rows} | {sum(c.errors.values())} |"
        )
    if BASELINE in cells and cells[BASELINE].tps:
        b = cells[BASELINE]
        ratio = base.tps / b.tps
        per_round = paired(rounds, "no option", BASELINE, lambda c: c.tps) if rounds else []
        cpu = (
            paired(rounds, BASELINE, "no option", cpu_ms_per_token) if rounds else []
        )  # baseline's CPU / ours: > 1 = cheaper
        lines += [
            "",
            f"No-option throughput, this tree / baseline `{args.baseline}`: **{ratio:.3f}** pooled "
            f"({base.tps:.0f} vs {b.tps:.0f} tokens/s; target: within 3%, i.e. >= 0.97: "
            f"{'met' if ratio >= 0.97 else 'NOT met'}).",
        ]
        if len(per_round) >= 2:
            lines += [
                "",
                f"Paired by round ({len(per_round)} rounds; each ratio from two windows of one round): tokens/s "
                f"median **{statistics.median(per_round):.3f}** (min {min(per_round):.3f}, max {max(per_round):.3f}); "
                f"server CPU per token, baseline / this tree, median **{statistics.median(cpu):.3f}** "
                f"(min {min(cpu):.3f}, max {max(cpu):.3f}; > 1 = this tree spends less CPU per token).",
            ]
    return "\n".join(lines)
