"""`s2s train`: its options are TrainConfig's fields, each with its help here."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing

TRAIN_HELP = {
    "task": "addition | copy | reverse | translation",
    "out": "run folder: checkpoints best/ and last/, metrics.jsonl, learning_curves.png, data splits",
    "data": "translation: parallel TSV(s), source<TAB>target per line, several joined by commas (split train/valid/test by a hash of the source)",
    "digits": "addition: operands have up to this many digits",
    "min_len": "copy/reverse: shortest source",
    "max_len_sym": "copy/reverse: longest source",
    "n_train": "synthetic tasks: training problems",
    "n_valid": "synthetic tasks: validation problems",
    "n_test": "synthetic tasks: held-out test problems (never seen in training)",
    "reverse_source": "feed the source reversed (the seeds' 'input reversed' option; also applied when serving)",
    "vocab_size": "translation: joint BPE vocabulary size",
    "d_model": "model width",
    "n_heads": "attention heads",
    "n_layers": "encoder and decoder layers (each)",
    "d_ff": "feed-forward inner size",
    "norm": "post | pre: where each sublayer's LayerNorm sits; post is the paper's (§3.1), pre (with a final norm "
    "per stack) trains deeper stacks at a higher learning rate without stalling",
    "dropout": "dropout rate",
    "max_len": "longest sequence in tokens",
    "epochs": "maximum epochs",
    "batch_size": "sentences per batch",
    "lr_factor": "scale of the warm-up schedule",
    "warmup": "warm-up steps",
    "label_smoothing": "label smoothing epsilon",
    "clip": "gradient-norm clip",
    "seed": "seed of data, split and initialisation",
    "device": "auto | cpu | cuda[:N]",
    "stop_at": "stop once validation exact match reaches this fraction",
    "eval_max": "validation examples decoded per epoch",
    "bleu_tokenize": "sacrebleu tokenizer (char for Japanese)",
    "threads": "torch intra-op threads (0 = default)",
    "resume": "continue the run in --out from last/",
    "init_from": "start from this checkpoint folder's weights and tokenizer when its trainer state is gone: fresh Adam "
    "moments, the schedule continues at the checkpoint's step and epoch, minutes counted on from its time",
    "init_warmup": "with --init-from: steps over which the learning rate ramps back up to the schedule (fresh Adam moments)",
    "batch_tokens": "padded tokens per batch and rank (0 = use --batch-size sentences); the paper's batching (§5.1)",
    "precision": "auto | fp32 | bf16: bf16 autocast; auto picks bf16 only on CUDA with bf16 or a CPU with AMX / AVX-512 BF16",
    "time_budget_min": "stop after this many minutes of training, resumed runs counted from their start (0 = run all --epochs); the last partial epoch is evaluated and saved",
    "max_steps": "stop after this many optimizer steps (0 = no limit); reproduces a --time-budget-min run exactly",
    "average_every": "keep the weights every N steps for checkpoint averaging (0 = off); §6.1 averaged the last 5, 10 min apart",
    "average_last": "how many kept copies averaged/ averages",
    "mask_spans": "translation: train on pairs with their named placeholders, URLs and tags masked as {0}, {1}, ... "
    "on both sides, as the server masks them at serving time (a pair whose target lacks a span is kept as it is)",
}


def _add_dataclass_args(p: argparse.ArgumentParser, cls: type, helps: dict[str, str]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        t = hints[f.name]
        if t is bool:
            p.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=f.default, help=helps.get(f.name)
            )
        else:
            base = next((a for a in typing.get_args(t) if a is not type(None)), t)
            p.add_argument(flag, type=base, default=f.default, help=helps.get(f.name), metavar=f.name.upper())


def add_parser(sub) -> None:
    from training.config import TrainConfig

    p = sub.add_parser(
        "train",
        help="train a Transformer on a task; writes a self-describing checkpoint",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train the encoder-decoder of Vaswani et al. 2017. Data-parallel: "
        "torchrun --nproc_per_node 2 -m s2s.cli train ...",
    )
    _add_dataclass_args(p, TrainConfig, TRAIN_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from training.config import TrainConfig
    from training.train import check, train

    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})
    try:
        check(cfg)
    except ValueError as e:
        print(f"s2s train: {e}", file=sys.stderr)
        return 2
    train(cfg)
    return 0
