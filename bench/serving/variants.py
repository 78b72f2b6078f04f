"""CPU per request of server variants side by side: `s2s serve` with its defaults plus some flags, from this tree
or from a git commit's (bench.serving.trees), all running at once on loopback. Each round loads every variant in
turn (the order reversed every other round: ABBA) with bench.serving.cost's window (C closed-loop tritonclient
aio workers over KServe gRPC, the load client in a process of its own) and reads the front end's and the engine
cores' CPU time from /proc. Figures are medians over the rounds; *x first* is the median of the per-round ratios
to the first variant's answers/s. Writes docs/bench/<--name>.json.

    python -m bench.serving.variants        # this tree's defaults against each default reverted, and the tree before
    python -m bench.serving.variants --name serve-commits --variant "old|--instances 2|2274987" --variant "new||HEAD"
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT
from bench.common.abba import abba
from bench.common.report import RESULTS, publish
from bench.serving.cost import Search, served_window
from bench.serving.cost_report import cpu_model
from bench.serving.server_process import ServerProcess
from bench.serving.trees import baseline_tree

# The serving-cost defaults, each reverted alone on this tree, and the tree before them (its defaults then).
DEFAULT_VARIANTS = (
    "this tree|",
    "--max-batch-size 16 (the old default)|--max-batch-size 16",
    "--instances 2 (the old default on 2 CPUs)|--instances 2",
    "--encoder-thread off|--encoder-thread off",
    "--event-loop asyncio|--event-loop asyncio",
    "before the serving-cost changes (2274987: 2 cores, batch 16)||2274987",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.serving.variants",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--variant",
        action="append",
        default=None,
        help="LABEL|FLAGS[|COMMIT] (repeat; the first is the reference); default: the set above",
    )
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--model-repo", type=Path, default=ROOT / "models")
    p.add_argument(
        "--inputs",
        type=Path,
        default=None,
        help="TSV source<TAB>reference; default checkpoints/<model>/test.tsv",
    )
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument(
        "--beam", default="1", help="beam_size sent (1 = greedy; 'default': the model's served default)"
    )
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=6.0, help="window length (at least; and 3 x C answers)")
    p.add_argument("--name", default="serve-variants", help="the results it writes: docs/bench/NAME.json")
    p.add_argument("--title", default="Server variants side by side", help="the heading of its section")
    p.add_argument("--write", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the results JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started, t0 = dt.datetime.now(dt.timezone.utc), time.perf_counter()
    inputs_path = args.inputs or ROOT / "checkpoints" / args.model / "test.tsv"
    texts = [
        line.split("\t", 1)[0]
        for line in inputs_path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    search = Search(
        "greedy" if args.beam == "1" else f"beam {args.beam}",
        1,
        {} if args.beam == "default" else {"beam_size": int(args.beam)},
        {},
        {},
    )
    variants = [(v.split("|") + ["", ""])[:3] for v in (args.variant or DEFAULT_VARIANTS)]
    results: dict[str, list] = {label: [] for label, _, _ in variants}
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-variants-")))
        servers = []
        for label, flags, commit in variants:
            if commit:
                (tmp / commit).mkdir(exist_ok=True)
            root = baseline_tree(ROOT, commit, tmp / commit) if commit else ROOT
            srv = ServerProcess(
                argparse.Namespace(
                    model_repo=args.model_repo,
                    model=args.model,
                    max_batch_size=0,
                    max_queue_size=0,
                    intra_op_threads=1,
                ),
                "continuous",
                0,
                root=root,
                label=label,
                defaults=True,
            )
            srv.cmd += shlex.split(flags)
            servers.append((label, stack.enter_context(srv)))
            print(f"  {label}: {' '.join(srv.cmd[3:])} (from {root})", file=sys.stderr, flush=True)
        for r in range(args.rounds):
            for label, srv in abba(servers, r):
                w = served_window(
                    srv,
                    args.model,
                    texts,
                    args.concurrency,
                    search,
                    args.seconds,
                    3 * args.concurrency,
                    2 * args.concurrency,
                )
                results[label].append(w)
                print(
                    f"  round {r} {label}: {w.answers / w.seconds:.1f}/s, front end {w.per(w.front_s):.0f} µs, "
                    f"cores {w.per(w.cores_s):.0f} µs",
                    file=sys.stderr,
                    flush=True,
                )
    text = report(args, variants, results, started, time.perf_counter() - t0)
    print(text)
    publish(text, args.results if args.write else None, args.name, names=("variants",))
    return 0


def report(args, variants, results, started, elapsed: float) -> str:
    first = results[variants[0][0]]
    rows = [
        "| variant | answers/s | x first | front end µs/request | engine cores µs/request | server in all µs/request | p50 ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, _flags, _commit in variants:
        ws = results[label]
        ratio = statistics.median(
            (w.answers / w.seconds) / (f.answers / f.seconds) for w, f in zip(ws, first)
        )
        lat = sorted(x for w in ws for x in w.latencies)
        rows.append(
            f"| {label} | {statistics.median(w.answers / w.seconds for w in ws):.1f} | {ratio:.3f} | "
            f"{statistics.median(w.per(w.front_s) for w in ws):.0f} | {statistics.median(w.per(w.cores_s) for w in ws):.0f} | "
            f"{statistics.median(w.per(w.front_s + w.cores_s) for w in ws):.0f} | {lat[len(lat) // 2] * 1e3:.1f} |"
        )
    cmd = "python -m bench.serving.variants " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    return (
        f"### {args.title} (`bench/serving/variants.py`)\n\nServing-cost changes, each measured on its own: `s2s serve` with its defaults, and the same with one default "
        f"reverted (or an older tree), {args.model}, C={args.concurrency} closed-loop KServe gRPC workers "
        f"({'greedy' if args.beam == '1' else 'beam ' + args.beam}), one held-out input a request; {args.rounds} rounds, "
        "the variants taking turns (order reversed every other round); medians.\n\n"
        + "\n".join(rows)
        + "\n\n"
        f"- date: {started:%Y-%m-%d %H:%M} UTC; CPU: {cpu_model()}; command: `{cmd}`; {elapsed:.0f} s\n"
    )


if __name__ == "__main__":
    sys.exit(main())
