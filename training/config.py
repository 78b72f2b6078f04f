"""Training options: a torch-free dataclass, so the CLI can build --help without importing torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TrainConfig:
    task: str = "addition"
    out: str = "runs/addition"
    data: str | None = None  # translation: parallel TSV
    digits: int = 3  # addition: operand digits
    min_len: int = 1  # copy/reverse: source length range
    max_len_sym: int = 10
    n_train: int = 50_000
    n_valid: int = 1_000
    n_test: int = 10_000
    reverse_source: bool = False
    vocab_size: int = 8000  # translation BPE
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 512
    dropout: float = 0.1
    max_len: int = 64
    epochs: int = 20
    batch_size: int = 128
    lr_factor: float = 1.0  # lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    warmup: int = 1000
    label_smoothing: float = 0.1
    clip: float = 1.0
    seed: int = 1234
    device: str = "auto"
    stop_at: float | None = None  # stop once valid exact match reaches this (converged)
    eval_max: int = 2000  # valid examples decoded per epoch
    bleu_tokenize: str = "13a"
    threads: int = 0  # torch intra-op threads (0 = torch's default)
    resume: bool = False
