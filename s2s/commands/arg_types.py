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
