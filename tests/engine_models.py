"""The committed default models as the engine tests read them: a model's bundle folder in the model repository,
and held-out sources from its own test split.
"""

from __future__ import annotations

from pathlib import Path

from conftest import CHECKPOINTS, MODEL_REPO

from engine import Translator


def bundle(name: str) -> Path:
    return MODEL_REPO / name / "1"


def sample_inputs(engine: Translator, n: int = 24) -> list[str]:
    """Held-out sources of the model's own test split (written by `s2s train` next to the checkpoint)."""
    lines = (CHECKPOINTS / engine.config.name / "test.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines[:n]]
