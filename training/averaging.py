"""§6.1's checkpoint averaging: weight copies kept every N steps, and their mean saved as averaged/."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from training import checkpoint
from training.evaluate import evaluate
from training.model import Transformer
from training.run_state import Run


def keep_copy(model: torch.nn.Module, folder: Path, step: int, keep: int) -> None:
    """Write the weights as averaging/step-N.safetensors and drop all but the newest ``keep``."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file(checkpoint.weights(model), str(folder / f"step-{step}.safetensors"))
    for old in sorted(folder.glob("step-*.safetensors"), key=lambda f: int(f.stem.split("-")[1]))[:-keep]:
        old.unlink()


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """§6.1: "a single model obtained by averaging the last 5 checkpoints". Arithmetic mean per tensor."""
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        for k, v in load_file(str(path)).items():
            total[k] = total[k] + v.double() if k in total else v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}


def save_averaged(run: Run, row: dict, valid: list) -> None:
    """The mean of the last ``--average-last`` kept copies, evaluated on ``valid`` and saved as averaged/."""
    cfg = run.cfg
    copies = sorted(run.kept.glob("step-*.safetensors"), key=lambda f: int(f.stem.split("-")[1]))[
        -cfg.average_last :
    ]
    if len(copies) < 2:
        return
    averaged = Transformer(run.config)
    averaged.load_state_dict(average_weights(copies), strict=False)
    averaged.eval()
    va = evaluate(
        averaged, run.codec, valid, device="cpu", translation=run.translation, bleu_tokenize=cfg.bleu_tokenize
    )
    steps = [int(f.stem.split("-")[1]) for f in copies]
    arow = {
        "epoch": row.get("epoch"),
        "step": steps[-1],
        "time_s": row.get("time_s"),
        "averaged_steps": steps,
        **{f"valid_{k}": v for k, v in va.items() if k != "n"},
    }
    checkpoint.save(
        run.out / "averaged",
        averaged,
        run.task,
        run.tokenizer,
        arow,
        {"config": dataclasses.asdict(cfg), "averaged_steps": steps, "world": run.env.world},
    )
    print(
        "averaged "
        + ",".join(map(str, steps))
        + ": "
        + " ".join(f"{k}={v:.4f}" for k, v in arow.items() if k.startswith("valid_")),
        flush=True,
    )
