"""Closed-loop load on the real gRPC server, per batching mode, engine-core count and concurrency, against the
engine cores' in-process ceiling and CTranslate2; then the CPU-per-request table (bench.serving.cost) and the
decoding-option table (bench.serving.option_cost).

One `s2s serve` process per (batching mode, --instances K) variant, all started up front; per concurrency C, C
closed-loop grpc.aio workers send one held-out sentence a request. Each cell's --rounds windows interleave with
the other variants' (the order rotated per round) and are pooled, so the machine's drift does not land on one
variant. The ceilings (bench.serving.ceilings) are measured after every server has exited. Writes
docs/bench/serve.json (and serve-cost.json, options.json). Run it on an otherwise idle machine:

    python -m bench.serving.serve                 # everything, < 20 minutes on 2 cores
    python -m bench.serving.serve --quick         # C in {1, 8}, few requests, ~1 minute, nothing written
    python -m bench.serving.serve --cost-only     # the CPU-per-request table alone
    python -m bench.serving.serve --options-only --baseline REF
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shlex
import signal
import sys
import time
from pathlib import Path

from bench import ROOT
from bench.common.bundles import latest
from bench.common.machine import loadavg_text
from bench.common.report import RESULTS, Report, publish
from bench.serving.ceilings import measure_ceiling
from bench.serving.load import load_inputs, run_interleaved
from bench.serving.serve_report import section

MODES = ("continuous", "request", "none")
PROG = "python -m bench.serving.serve"


# ---------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.serving.serve",
        description="Closed-loop gRPC load on `s2s serve` (separate process) for each batching mode, engine-core count "
        "and concurrency, with the engine cores' in-process ceiling and CTranslate2 as references; writes "
        "docs/bench/serve.json. Run it on an idle machine (the full grid takes < 10 minutes on 2 cores).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--model", default="translate-en-ja", help="model name in the repository")
    p.add_argument(
        "--model-repo", type=Path, default=ROOT / "models", help="model repository (models/<name>/<version>/)"
    )
    p.add_argument(
        "--inputs",
        type=Path,
        default=None,
        help="TSV source<TAB>reference; default checkpoints/<model>/test.tsv (else runs/<model>/data/test.tsv)",
    )
    p.add_argument("--modes", default=",".join(MODES), help="batching modes, comma-separated")
    p.add_argument(
        "--instances",
        default="1,2",
        help="engine cores per server (`s2s serve --instances K`), comma-separated: the continuous mode runs at "
        "each, request and none at the smallest; 0 = one per usable CPU core",
    )
    p.add_argument(
        "--concurrency", default="1,8,32,64", help="closed-loop client workers per cell, comma-separated"
    )
    p.add_argument(
        "--min-requests",
        type=int,
        default=40,
        help="a cell's window closes after max(requests-per-worker*C, this) answers ...",
    )
    p.add_argument("--requests-per-worker", type=int, default=3, help="... (see --min-requests)")
    p.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="windows per cell, interleaved with the other modes' (pooled); each window as below",
    )
    p.add_argument(
        "--seconds", type=float, default=10.0, help="... or after this many seconds, whichever first"
    )
    p.add_argument(
        "--min-seconds",
        type=float,
        default=5.0,
        help="... but never before this many seconds (so fast cells still give enough samples for p99)",
    )
    p.add_argument(
        "--warmup-s", type=float, default=3.0, help="per-cell warm-up: max(C, 8) answers or this long"
    )
    p.add_argument(
        "--max-batch-size",
        type=int,
        default=64,
        help="server --max-batch-size (its default) and the ceiling's batch_size",
    )
    p.add_argument(
        "--max-queue-size", type=int, default=4096, help="server --max-queue-size (never the limit here)"
    )
    p.add_argument("--queue-delay-ms", type=float, default=5.0, help="request mode's --max-queue-delay-ms")
    p.add_argument(
        "--intra-op-threads", type=int, default=1, help="ONNX Runtime threads, server and ceiling alike"
    )
    p.add_argument("--max-new-tokens", type=int, default=0, help="0 = the model's default")
    p.add_argument("--request-timeout-s", type=float, default=120.0, help="deadline of every request")
    p.add_argument(
        "--ceiling-repeats",
        type=int,
        default=2,
        help="timed runs (windows) of each in-process ceiling and CTranslate2 configuration (best counts)",
    )
    p.add_argument(
        "--ceiling-seconds", type=float, default=6.0, help="window of the engine cores' in-process ceiling"
    )
    p.add_argument(
        "--ceiling-warmup-s", type=float, default=2.0, help="closed-loop warm-up before each such window"
    )
    p.add_argument(
        "--ceiling-callers",
        type=int,
        default=0,
        help="closed-loop callers of the engine cores' ceiling, split over the cores (0 = the largest --concurrency)",
    )
    p.add_argument(
        "--ct2",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time CTranslate2 in process on the same weights (needs the bench extra and the checkpoint)",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="checkpoint folder CTranslate2 converts (default: the one the served version was exported from)",
    )
    p.add_argument(
        "--ct2-min-inputs",
        type=int,
        default=2048,
        help="CTranslate2 decodes at least this many inputs per run (cycled)",
    )
    p.add_argument(
        "--rtt-calls", type=int, default=300, help="bare ListModels round trips timed after each C=1 cell"
    )
    p.add_argument("--limit-inputs", type=int, default=0, help="use only the first N inputs (0 = all)")
    p.add_argument(
        "--options",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the grid, the decoding-option table (bench.serving.option_cost), in its own results",
    )
    p.add_argument("--options-only", action="store_true", help="only the decoding-option table")
    p.add_argument(
        "--option-concurrency", type=int, default=16, help="closed-loop workers of the option table"
    )
    p.add_argument(
        "--option-families",
        default="",
        help="only these rows of the option table (comma-separated name prefixes; 'no option' always runs; "
        "'none': only it, e.g. for a longer A/B against --baseline)",
    )
    p.add_argument(
        "--baseline",
        default="",
        help="git commit whose server the option table's no-option row is compared with (A/B, interleaved)",
    )
    p.add_argument(
        "--cost",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="first, the CPU-per-request table (bench.serving.cost): greedy and the served default's beam at "
        "--cost-concurrency, KServe gRPC (tritonclient aio), against the engine and CTranslate2 in process",
    )
    p.add_argument("--cost-only", action="store_true", help="only the CPU-per-request table")
    p.add_argument(
        "--cost-concurrency", default="1,64", help="closed-loop workers of the cost table, comma-separated"
    )
    p.add_argument(
        "--cost-instances",
        type=int,
        default=0,
        help="engine cores of the cost table's server (0: its default)",
    )
    p.add_argument(
        "--cost-rounds",
        type=int,
        default=2,
        help="rounds of the cost table, served and in-process sides taking turns (ABBA)",
    )
    p.add_argument(
        "--cost-seconds", type=float, default=6.0, help="a cost window lasts at least this long ..."
    )
    p.add_argument("--cost-min-requests", type=int, default=60, help="... and until max(this, 3*C) answers")
    p.add_argument(
        "--cost-single-inputs",
        type=int,
        default=120,
        help="inputs timed one at a time in process (C=1's reference)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="development grid: C in {1, 8}, 16 answers or 3 s per cell, 64 inputs, short ceilings, ~1 minute; "
        "writes no file unless --write",
    )
    p.add_argument(
        "--write",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the results into --results (default: yes, except with --quick)",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="folder of the results JSON (docs/bench also renders docs/BENCHMARKS.md)",
    )
    args = p.parse_args(argv)
    if args.quick:  # smaller defaults; flags given explicitly still win
        quick = dict(
            options=False,
            concurrency="1,8",
            min_requests=16,
            requests_per_worker=2,
            seconds=3.0,
            min_seconds=0.5,
            warmup_s=1.0,
            rounds=1,
            ceiling_repeats=1,
            ceiling_seconds=1.5,
            ceiling_warmup_s=0.5,
            ct2_min_inputs=256,
            limit_inputs=64,
            rtt_calls=50,
            cost_rounds=1,
            cost_seconds=1.0,
            cost_min_requests=16,
            cost_single_inputs=16,
        )
        for k, v in quick.items():
            if getattr(args, k) == p.get_default(k):
                setattr(args, k, v)
    args.concurrency = [int(c) for c in str(args.concurrency).split(",") if c.strip()]
    args.cost_concurrency = [int(c) for c in str(args.cost_concurrency).split(",") if c.strip()]
    try:
        ks = [int(k) for k in str(args.instances).split(",") if k.strip()]
    except ValueError:
        p.error(f"--instances {args.instances!r}: comma-separated integers")
    if not ks or min(ks) < 0:
        p.error("--instances: one or more counts >= 0")
    auto = max(
        1, len(os.sched_getaffinity(0)) // max(1, args.intra_op_threads)
    )  # as `s2s serve --instances 0` on a CPU
    args.instances = sorted({k or auto for k in ks})
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if bad := [m for m in args.modes if m not in MODES]:
        p.error(f"unknown batching mode(s) {bad}; choose from {MODES}")
    if args.ceiling_repeats < 1 or args.rounds < 1:
        p.error("--ceiling-repeats and --rounds must be at least 1")
    if args.write is None:
        args.write = not args.quick
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from engine import EngineOptions, Translator

    def on_term(
        signum, frame
    ):  # SIGTERM unwinds like Ctrl-C, so every server process is stopped on the way out
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)

    started, t_all = dt.datetime.now(dt.timezone.utc), time.perf_counter()
    load_before = loadavg_text()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    bundle = latest(args.model_repo, args.model)
    if bundle is None:
        raise SystemExit(
            f"{PROG}: no bundle under {args.model_repo / args.model}/<version>/ (build the models first)"
        )
    engine = Translator(bundle, EngineOptions(device="cpu", intra_op_threads=args.intra_op_threads))
    inputs, inputs_path = load_inputs(args, engine)
    log(
        f"{PROG}: {args.model} from {bundle}, {len(inputs)} inputs from {inputs_path}; load average {load_before}"
    )
    if float(load_before.split()[0]) > 0.7 * len(os.sched_getaffinity(0)) if load_before != "n/a" else False:
        log("  warning: the machine is busy (load average above); the figures will be depressed")

    if args.options_only:
        return options_section(args, inputs, started, load_before, t_all, log)
    if args.cost or args.cost_only:
        cost_section(args, inputs, bundle, started, load_before, log)
        if args.cost_only:
            return 0
    cells, single = asyncio.run(run_interleaved(args, inputs, engine, log))

    log("ceilings (in process, no server running)")
    ceiling = measure_ceiling(engine, bundle, args, inputs, single, log)
    elapsed = time.perf_counter() - t_all

    report = section(args, cells, ceiling, inputs, inputs_path, bundle, started, load_before, elapsed)
    print(report.markdown())
    publish(report, args.results if args.write else None)
    log(f"done in {elapsed:.0f}s")
    if args.options:
        return options_section(args, inputs, started, load_before, t_all, log)
    return 0


def cost_section(
    args: argparse.Namespace, inputs: list[str], bundle: Path, started, load_before: str, log
) -> None:
    """The CPU-per-request table (bench.serving.cost), in results of its own."""
    from bench.serving import cost as serve_cost
    from bench.serving import cost_report as serve_cost_report

    t = time.perf_counter()
    log(f"CPU per request: C in {args.cost_concurrency}, {args.cost_rounds} rounds (ABBA)")
    cells, meta = serve_cost.run(args, inputs, bundle, log)
    cmd = PROG + " " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    report = Report("serve-cost")
    report.add_markdown(
        "## Serving cost per request (`bench/serving/cost.py`)\n\n### Acceptance: the serving-cost bounds\n\n"
        + serve_cost_report.acceptance(cells)
        + "\n\n### CPU per request",
        ("acceptance",),
    )
    serve_cost_report.table(report, cells)
    report.add_markdown(
        serve_cost_report.notes(meta, args)
        + f"\n- date: {started:%Y-%m-%d %H:%M} UTC; CPU: {serve_cost_report.cpu_model()}; load average at start "
        f"{load_before}; command: `{cmd}`; {time.perf_counter() - t:.0f} s"
    )
    print(report.markdown())
    publish(report, args.results if args.write else None)


def options_section(
    args: argparse.Namespace, inputs: list[str], started, load_before: str, t_all: float, log
) -> int:
    """The option-cost table (bench.serving.option_cost), in results of its own."""
    from bench.serving import option_cost

    log(f"decoding options: C={args.option_concurrency}, baseline {args.baseline or '(none)'}")
    cells = asyncio.run(option_cost.run(args, inputs, log))
    cmd = PROG + " " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    # `--option-families none` (only the no-option windows, on both servers: the focused A/B against --baseline)
    # keeps results of its own, next to the full table's.
    focused = args.option_families.strip() == "none"
    name = "options-ab" if focused else "options"
    if focused:
        body = (
            "### The no-option path against the baseline, alone\n\nFocused A/B (`--option-families none`): only the "
            "no-option windows, on both servers, so that neither serves anything else between them (in the full table "
            "above only this tree's server also runs the other families' windows).\n\n"
            + option_cost.table(cells, args, None)
        )
    else:
        body = option_cost.table(cells, args)
    text = (
        body
        + f"\n\n- date: {started:%Y-%m-%d %H:%M} UTC; load average at start {load_before}; command: `{cmd}`; "
        f"{time.perf_counter() - t_all:.0f} s\n"
    )
    print(text)
    publish(text, args.results if args.write else None, name, names=("options",))
    return 0


if __name__ == "__main__":
    sys.exit(main())
