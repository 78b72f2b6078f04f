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
    mask_spans: bool = False  # translation: train on pairs masked as the server's text plan masks them
    vocab_size: int = 8000  # translation BPE
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 512
    norm: str = "post"  # post: LayerNorm(x + Sublayer(x)) (§3.1); pre: x + Sublayer(LayerNorm(x)), final norm
    dropout: float = 0.1
    max_len: int = 64
    epochs: int = 20
    batch_size: int = 128
    batch_tokens: int = (
        0  # > 0: batches of at most this many padded tokens per rank (§5.1), not batch_size sentences
    )
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
    init_from: str | None = (
        None  # a checkpoint folder: continue from its weights with a fresh optimizer (no trainer state)
    )
    init_warmup: int = 100  # --init-from: steps over which the learning rate ramps back up to the schedule
    precision: str = "auto"  # auto | fp32 | bf16 (autocast); auto = bf16 only where the hardware runs it fast
    max_steps: int = 0  # > 0: stop after this many optimizer steps (a time-budgeted run, reproduced exactly)
    time_budget_min: float = (
        0  # > 0: stop once training has run this long (then evaluate and save as after an epoch)
    )
    average_every: int = 0  # > 0: every this many steps keep a copy of the weights for averaging (§6.1)
    average_last: int = 5  # average this many of the last kept copies into averaged/ at the end

    def check(self) -> None:
        """Flag combinations that cannot work, refused before any data is read."""
        if self.resume and self.init_from:
            raise ValueError(
                "--resume and --init-from exclude each other: --resume continues the run in --out from "
                "last/, --init-from starts --out anew from another checkpoint's weights"
            )
        if self.norm not in ("post", "pre"):
            raise ValueError(f"--norm must be post or pre, not {self.norm!r}")
        if self.mask_spans and self.task != "translation":
            raise ValueError(f"--mask-spans masks translation pairs; --task {self.task} has none")
