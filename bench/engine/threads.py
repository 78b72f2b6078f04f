"""ONNX Runtime intra-op threads per session, 1 against 2: in-process greedy decoding of held-out sentences at
batch 1, 16 and 64, medians of --repeats runs. Writes docs/bench/threads.json.

    python -m bench.engine.threads [--model translate-en-ja]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import ROOT
from bench.common.report import RESULTS, publish


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.engine.threads",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", default="translate-en-ja")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of the results JSON")
    args = ap.parse_args()
    from bench.engine.baselines import generate
    from engine import EngineOptions, Translator

    texts = [
        line.split("\t")[0]
        for line in (ROOT / "checkpoints" / args.model / "test.tsv").read_text(encoding="utf-8").splitlines()
    ]
    rows, base = [], {}
    for threads in (1, 2):
        engine = Translator(
            ROOT / "models" / args.model / "1", EngineOptions(device="cpu", intra_op_threads=threads)
        )
        generate(engine, texts[:64])  # warm-up
        for batch in (1, 16, 64):
            n = 32 if batch == 1 else 128
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                generate(engine, texts[:n], batch_size=batch)
                times.append(time.perf_counter() - t0)
            rate = n / statistics.median(times)
            base.setdefault(batch, rate)
            rows.append(f"| {threads} | {batch} | {rate:.0f} | {rate / base[batch]:.2f} |")
            print(rows[-1], flush=True)
    table = "\n".join(
        [
            "## ONNX Runtime intra-op threads (`bench/engine/threads.py`)",
            "",
            f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; machine: {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
            f"- command: `python -m bench.engine.threads --model {args.model}`; greedy decoding with EOS of held-out sentences, medians of {args.repeats} runs",
            "",
            "| intra-op threads | batch | sequences/s | vs 1 thread |",
            "|---:|---:|---:|---:|",
            *rows,
            "",
            "One thread per session is the default (`--intra-op-threads 1`): on this machine a second thread costs more in",
            "synchronisation than it gains at these matrix sizes, and it would compete with the gRPC event loop for the other core.",
        ]
    )
    publish(table, args.results, "threads", names=("threads",))
    return 0


if __name__ == "__main__":
    sys.exit(main())
