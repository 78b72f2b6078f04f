"""One training run's state, built once by ``training/train.py`` and handed to the loop's parts."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from contract.config import ModelConfig, TaskConfig
from contract.text import TextCodec
from training.config import TrainConfig
from training.distributed import DistEnv


@dataclass
class Run:
    cfg: TrainConfig
    env: DistEnv
    out: Path  # the run folder
    task: TaskConfig
    tokenizer: Any  # tokenizers.Tokenizer
    model: torch.nn.Module  # training.model.Transformer
    ddp: torch.nn.Module  # the model, wrapped for data-parallel training when there are several ranks
    codec: TextCodec
    train_ex: list  # the training pairs, encoded
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LambdaLR
    autocast_dtype: torch.dtype | None  # None: plain float32
    t0: float = 0.0  # time.time() when the loop started
    elapsed_before: float = 0.0  # seconds of training before this process (--resume, --init-from)
    best: float = -math.inf  # the best validation score so far (main rank)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def translation(self) -> bool:
        return self.task.name == "translation"

    @property
    def log_path(self) -> Path:
        return self.out / "metrics.jsonl"

    @property
    def kept(self) -> Path:
        """Weight copies for §6.1 averaging; in the run folder, never published."""
        return self.out / "averaging"

    def elapsed(self) -> float:
        """Seconds of training, resumed runs counted from their start."""
        return self.elapsed_before + time.time() - self.t0
