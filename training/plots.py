"""Learning curves from the JSONL metrics logs: the seeds' figure (sequence accuracy, token accuracy, loss;
train vs valid), plus chrF for translation and the training loss every few steps (``steps.jsonl``).

The x axis is the optimizer step: a large corpus may train for one or two epochs only, and a curve
of two points says nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (
    ("seq_acc", "sequence accuracy"),
    ("token_acc", "token accuracy"),
    ("loss", "loss"),
    ("chrf", "chrF"),
)


def read_log(path: Path) -> list[dict]:
    path = Path(path)
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
    )


def learning_curves(log: Path, out: Path, title: str = "") -> Path:
    rows = read_log(log)
    steps = read_log(Path(log).with_name("steps.jsonl"))  # training loss between evaluations
    panels = [(k, label) for k, label in PANELS if any(f"valid_{k}" in r for r in rows)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels), 3.6), squeeze=False)
    x = "step" if all("step" in r for r in rows) else "epoch"
    for ax, (key, label) in zip(axes[0], panels):
        if key == "loss" and steps:
            ax.plot(
                [s["step"] for s in steps],
                [s["train_loss"] for s in steps],
                color="0.7",
                lw=1,
                label="train (label-smoothed, per step)",
            )
        for split, style in (("train", "--"), ("valid", "-")):
            pts = [(r[x], r[f"{split}_{key}"]) for r in rows if f"{split}_{key}" in r]
            if pts:
                ax.plot(*zip(*pts), style, marker=".", label=split)
        ax.set_xlabel(x)
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
