"""Argument types the stages' subcommands share: argparse names the option and the value it refused."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return n


def language(code: str) -> str:
    from contract.bundle import check_language

    try:
        return check_language(code)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# s2s export's and s2s import's --attention
ATTENTION_HELP = (
    "the decoder's self-attention: gqa = ONNX Runtime's GroupQueryAttention over a cache written in place, each "
    "row as long as its own (bundle format 9; faster on CPUs); standard = ONNX nodes appending to the cache, for "
    "CUDA, whose GroupQueryAttention takes float16 only"
)
