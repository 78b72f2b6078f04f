"""Where the engine's decoding time goes on real inputs, in process: the decoder step by cached length, and a
``generate`` call split into decoder, encoder and the rest (Python: search, cache bookkeeping, top-k's numpy),
with how long the batch's shared past axis is against each live row's own.

    python -m bench.engine.step_cost [--model translate-en-ja] [--rows 256] [--inputs 640]

Writes docs/bench/step-cost.json (docs/BENCHMARKS.md#step-cost). One intra-op thread, the served (latest) version.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import ROOT
from bench.common.bundles import latest, rel
from bench.common.machine import machine
from bench.common.report import RESULTS, Report, publish
from bench.engine.profile_step import profile


def step_by_past(folder: Path, rows: int, pasts: list[int], src: int, steps: int) -> list[tuple]:
    """(past, step ms, us per row, Concat share, MatMul share) of one decoder step at each cached length."""
    out = []
    for p in pasts:
        ms, ops = profile(folder, argparse.Namespace(batch=rows, past=p, src=src, steps=steps))
        total = sum(ops.values()) or 1.0
        out.append((p, ms, ms / rows * 1e3, ops["Concat"] / total, ops["MatMul"] / total))
    return out


class Timed:
    """Timers around a runner's encoder and decoder calls, and the past axis each decoder call carries."""

    def __init__(self, runner):
        self.decoder_s = self.encoder_s = 0.0
        self.calls, self.row_steps, self.past_cols, self.live_ages, self.live_rows = 0, 0, 0, 0, 0
        decode, encode = runner._decode, runner._encode

        def timed_decode(tgt_ids, positions, past_mask, *rest):
            t = time.perf_counter()
            out = decode(tgt_ids, positions, past_mask, *rest)
            self.decoder_s += time.perf_counter() - t
            ages = past_mask.sum(axis=1)
            self.calls += 1
            self.row_steps += len(ages)
            self.past_cols += len(ages) * past_mask.shape[1]
            self.live_ages += int(ages.sum())
            self.live_rows += int((ages > 0).sum())
            return out

        def timed_encode(*a):
            t = time.perf_counter()
            out = encode(*a)
            self.encoder_s += time.perf_counter() - t
            return out

        runner._decode, runner._encode = timed_decode, timed_encode  # this instance only


def split(folder: Path, texts: list[str], beam: int, batch: int) -> tuple:
    """(wall s, decoder, encoder, rest shares, decoder us per row-step, row-weighted past, mean live age, steps)."""
    import engine

    t = engine.load(folder, threads=1, device="cpu")
    t.generate(texts[: 2 * batch], beam_size=beam, max_batch_size=batch * beam)  # warm-up
    timed = Timed(t.runner)
    t0 = time.perf_counter()
    t.generate(texts, beam_size=beam, max_batch_size=batch * beam)
    wall = time.perf_counter() - t0
    rest = wall - timed.decoder_s - timed.encoder_s
    return (
        wall,
        timed.decoder_s / wall,
        timed.encoder_s / wall,
        rest / wall,
        timed.decoder_s / max(1, timed.row_steps) * 1e6,
        timed.past_cols / max(1, timed.row_steps),
        timed.live_ages / max(1, timed.live_rows),
        timed.calls,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.engine.step_cost",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", default="translate-en-ja")
    ap.add_argument("--model-repo", type=Path, default=ROOT / "models")
    ap.add_argument(
        "--data", type=Path, help="TSV of source<TAB>reference (default: checkpoints/MODEL/test.tsv)"
    )
    ap.add_argument(
        "--rows", type=int, default=256, help="decoder rows in the step table (beam 4 x batch 64)"
    )
    ap.add_argument("--pasts", default="4,16,32,48", help="cached lengths in the step table")
    ap.add_argument("--src", type=int, default=14, help="source length in the step table")
    ap.add_argument("--steps", type=int, default=30, help="steps timed per cell")
    ap.add_argument("--inputs", type=int, default=640, help="held-out inputs decoded in the split table")
    ap.add_argument("--batch", type=int, default=64, help="inputs per batch in the split table")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args(argv)

    folder = latest(args.model_repo, args.model)
    if folder is None:
        ap.error(f"no bundle under {args.model_repo / args.model}")
    data = args.data or ROOT / "checkpoints" / args.model / "test.tsv"
    texts = [line.split("\t")[0] for line in data.read_text(encoding="utf-8").splitlines()[: args.inputs]]
    info, t0 = machine(), time.time()
    pasts = [int(x) for x in args.pasts.split(",")]
    print(f"step by cached length at {args.rows} rows ...", file=sys.stderr)
    steps = step_by_past(folder, args.rows, pasts, args.src, args.steps)
    print("generate split ...", file=sys.stderr)
    splits = [(beam, split(folder, texts, beam, args.batch)) for beam in (1, 4)]

    report = Report("step-cost")
    report.heading("Where the engine's decoding time goes (`bench/engine/step_cost.py`)")
    report.text(
        f"`{rel(folder)}`, one intra-op thread; {info['nproc']} × {info['cpu']}, load average at start "
        f"{info['loadavg'][0]:.2f}; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {time.time() - t0:.0f} s; "
        "command: `python -m bench.engine.step_cost`."
    )
    report.text(
        f"One decoder step at {args.rows} rows and a source of {args.src} by cached length (random inputs of those "
        f"shapes, mean of {args.steps} steps; ONNX Runtime's per-operator profile for the shares). Concat is the "
        "graph appending the step's K/V to the whole past, a copy of the cache every step:"
    )
    t = report.table(
        "step-by-past",
        ("cached positions", "{}"),
        ("step ms", "{:.1f}"),
        ("µs per row", "{:.0f}"),
        ("Concat", "{:.0%}"),
        ("MatMul", "{:.0%}"),
    )
    for row in steps:
        t.row(*row)
    report.text(
        f"`generate` on {len(texts)} held-out inputs (`{rel(data)}`), batch {args.batch} inputs refilled as they "
        "finish, timers around each ONNX Runtime call: the rest is Python (search, cache bookkeeping, top-k). "
        "*Past*: the batch's past axis, which every row carries, averaged over row-steps; *live age*: a running "
        "row's own cached positions:"
    )
    t = report.table(
        "generate-split",
        "search",
        ("wall s", "{:.2f}"),
        ("decoder", "{:.0%}"),
        ("encoder", "{:.0%}"),
        ("rest", "{:.0%}"),
        ("decoder µs per row-step", "{:.0f}"),
        ("past", "{:.1f}"),
        ("live age", "{:.1f}"),
        ("steps", "{}"),
    )
    for beam, row in splits:
        t.row("greedy" if beam == 1 else f"beam {beam}", *row)
    publish(report, None if args.no_write else args.results)
    print(report.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
