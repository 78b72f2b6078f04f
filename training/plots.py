"""Learning curves from the JSONL metrics log: the seeds' figure (sequence accuracy, token accuracy, loss; train vs valid)."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on servers
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (("seq_acc", "sequence accuracy"), ("token_acc", "token accuracy"), ("loss", "loss"))


def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def learning_curves(log: Path, out: Path, title: str = "") -> Path:
    rows = read_log(log)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, (key, label) in zip(axes, PANELS):
        for split, style in (("train", "--"), ("valid", "-")):
            pts = [(r["epoch"], r[f"{split}_{key}"]) for r in rows if f"{split}_{key}" in r]
            if pts:
                ax.plot(*zip(*pts), style, marker=".", label=split)
        ax.set_xlabel("epoch")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
