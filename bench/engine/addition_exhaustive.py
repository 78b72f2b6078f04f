"""The addition model on every problem it can be asked: all 1,000,000 pairs ``a+b`` with a, b < 1000, through the
engine (``engine.Translator``, the ONNX graphs the server runs), greedy and with the served default (the bundle's
``task.beam_size``; for addition that is greedy too, so one pass answers for both and the report says so).

A calculator that is right 99% of the time is wrong: held-out exact match (10,000 problems) did not see the
carry chains a first model got wrong (``109+91`` -> 100). Not in the test suite: a pass takes minutes on 2 CPUs.

    python -m bench.engine.addition_exhaustive [--bundle models/addition/1 [--bundle OTHER ...]] [--limit N] [--write]

Prints the count correct per decoding and the first wrong answers; ``--write`` publishes the table to
docs/bench/addition-exhaustive.json (and renders docs/BENCHMARKS.md); exits 1 if any answer is wrong.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
N = 1000


def problems(limit: int = 0) -> list[tuple[str, str]]:
    pairs = [(f"{a}+{b}", str(a + b)) for a in range(N) for b in range(N)]
    return pairs[:limit] if limit else pairs


def check(
    engine, pairs: list[tuple[str, str]], beam_size: int, chunk: int = 20_000, batch: int = 512
) -> dict:
    wrong: list[tuple[str, str, str]] = []
    correct = 0
    t0 = time.perf_counter()
    for i in range(0, len(pairs), chunk):
        part = pairs[i : i + chunk]
        results = engine.generate([s for s, _ in part], beam_size=beam_size, max_batch_size=batch)
        for (src, want), r in zip(part, results):
            if r.text == want:
                correct += 1
            else:
                wrong.append((src, want, r.text))
        done = i + len(part)
        print(
            f"  beam {beam_size}: {done:,} / {len(pairs):,} checked, {len(wrong)} wrong "
            f"({time.perf_counter() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    return {
        "beam_size": beam_size,
        "checked": len(pairs),
        "correct": correct,
        "wrong": len(wrong),
        "first_wrong": [f"{s} = {w}, answered {g!r}" for s, w, g in wrong[:20]],
        "seconds": round(time.perf_counter() - t0, 1),
    }


def markdown(reports: list[dict], day: str) -> str:
    """The table of BENCHMARKS.md: one row per bundle checked."""
    rows = []
    for r in reports:
        g, d = r["greedy"], r["served_default"]
        served = "(= greedy)" if d.get("same_as") else f"(beam {d['beam_size']})"
        wrong = "; ".join(g["first_wrong"][:3]) or "none"
        rows.append(
            f"| {r['label']} | {g['correct']:,} / {g['checked']:,} | {d['correct']:,} / {d['checked']:,} {served} "
            f"| {wrong} | {g['seconds']:.0f} s |"
        )
    return (
        f"## The addition model on every 3-digit pair (`bench/engine/addition_exhaustive.py`)\n\n"
        f"`python -m bench.engine.addition_exhaustive --write`, {day}, 2 CPUs (shared): all 1,000,000 problems "
        "`a+b` with a, b < 1000 through the engine (`engine.Translator`, the graphs the server runs), greedy and "
        "with the served default (the bundle's `task.beam_size`; 1 for addition, so one pass answers for both).\n\n"
        "| bundle | greedy | served default | first wrong answers | time |\n| --- | --- | --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    from bench.common.report import RESULTS, publish
    from engine import EngineOptions
    from engine.translator import Translator

    p = argparse.ArgumentParser(
        prog="python -m bench.engine.addition_exhaustive", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--bundle",
        type=Path,
        action="append",
        default=None,
        help="a bundle folder (repeat to compare; default models/addition/1)",
    )
    p.add_argument("--limit", type=int, default=0, help="check only the first N pairs (0 = all 1,000,000)")
    p.add_argument("--write", action="store_true", help="publish to docs/bench/addition-exhaustive.json")
    args = p.parse_args(argv)
    pairs = problems(args.limit)
    reports = []
    for folder in args.bundle or [ROOT / "models" / "addition" / "1"]:
        engine = Translator(folder, EngineOptions(device="cpu", intra_op_threads=1))
        served = engine.config.task.beam_size or 1
        report = {"label": f"`{folder}`", "served_default_beam": served, "greedy": check(engine, pairs, 1)}
        report["served_default"] = (
            dict(report["greedy"], same_as="greedy") if served == 1 else check(engine, pairs, served)
        )
        reports.append(report)
        for name in ("greedy", "served_default"):
            r = report[name]
            print(
                f"{folder} {name} (beam {r['beam_size']}): {r['correct']:,} / {r['checked']:,} correct"
                + (f"; first wrong: {', '.join(r['first_wrong'][:5])}" if r["wrong"] else "")
            )
    if args.write and not args.limit:
        publish(
            markdown(reports, time.strftime("%Y-%m-%d")),
            RESULTS,
            "addition-exhaustive",
            names=("pairs",),
            figures={"reports": reports},
        )
    return 0 if all(r[k]["wrong"] == 0 for r in reports for k in ("greedy", "served_default")) else 1


if __name__ == "__main__":
    sys.exit(main())
