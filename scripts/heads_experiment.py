"""The seeds' experiment: addition with 1 vs 4 attention heads, each with and without reversed input.

5,000 training / 500 test problems, embedding, query/key and FFN sizes 32, as the seeds had it.
Writes docs/img/heads_experiment.png and the results table into docs/experiments.md.

    .venv/bin/python scripts/heads_experiment.py [--epochs 40] [--jobs 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.doc_section import write_section  # noqa: E402

GRID = [(heads, rev) for heads in (1, 4) for rev in (False, True)]
CONVERGED = 0.9  # "converged": first epoch whose validation exact match reaches this


def run_name(heads: int, rev: bool) -> str:
    return f"heads{heads}{'-rev' if rev else ''}"


def train(heads: int, rev: bool, epochs: int, out: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "s2s.cli",
        "train",
        "--task",
        "addition",
        "--digits",
        "3",
        "--n-train",
        "5000",
        "--n-valid",
        "500",
        "--n-test",
        "500",
        "--d-model",
        "32",
        "--d-ff",
        "32",
        "--n-heads",
        str(heads),
        "--n-layers",
        "2",
        "--max-len",
        "16",
        "--epochs",
        str(epochs),
        "--batch-size",
        "32",
        "--warmup",
        "400",
        "--lr-factor",
        "0.5",
        "--dropout",
        "0.0",
        "--threads",
        "1",
        "--eval-max",
        "500",
        "--seed",
        "1234",
        "--out",
        str(out / run_name(heads, rev)),
    ] + (["--reverse-source"] if rev else [])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=120)
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (one thread each)")
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "heads-experiment")
    ap.add_argument("--skip-training", action="store_true", help="only rebuild the table and plot from --out")
    args = ap.parse_args()
    if not args.skip_training:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda g: train(*g, args.epochs, args.out), GRID))

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from training import checkpoint, tasks
    from training.evaluate import evaluate

    rows, fig_data = [], {}
    for heads, rev in GRID:
        run = args.out / run_name(heads, rev)
        log = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        ckpt = checkpoint.load(run / "best")
        test = evaluate(ckpt.model, ckpt.codec, tasks.read_tsv(run / "data" / "test.tsv"))
        conv = next((r["epoch"] for r in log if r["valid_seq_acc"] >= CONVERGED), None)
        summary = json.loads((run / "summary.json").read_text())
        rows.append((heads, rev, test["seq_acc"], test["token_acc"], conv, len(log), summary["train_time_s"]))
        fig_data[run_name(heads, rev)] = log

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for name, log in fig_data.items():
        ep = [r["epoch"] for r in log]
        axes[0].plot(ep, [r["valid_seq_acc"] for r in log], label=name)
        axes[1].plot(ep, [r["valid_token_acc"] for r in log], label=name)
        axes[2].plot(ep, [r["valid_loss"] for r in log], label=name)
    for ax, title in zip(
        axes, ("validation sequence accuracy", "validation token accuracy", "validation loss")
    ):
        ax.set_title(title)
        ax.set_xlabel("epoch")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
    fig.savefig(ROOT / "docs" / "img" / "heads_experiment.png", dpi=110)

    table = [
        "| heads | reversed input | test exact match | test token acc | epochs to 90% valid exact match | epochs run | train time (s) |",
        "|---:|:---:|---:|---:|---:|---:|---:|",
    ]
    for heads, rev, seq, tok, conv, n, secs in rows:
        table.append(
            f"| {heads} | {'yes' if rev else 'no'} | {seq:.1%} | {tok:.1%} | {conv if conv else 'not reached'} | {n} | {secs:.0f} |"
        )
    text = "\n".join(table)
    print(text)
    write_section(ROOT / "docs" / "experiments.md", "heads-experiment", text, title="# Experiments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
