"""Sides taking turns: the order of round r, so that drift on the machine does not land on one side."""

from __future__ import annotations


def abba(sides: list, r: int) -> list:
    """Round r's order: as given on even rounds, reversed on odd ones (A B, B A, A B, ...)."""
    return list(sides) if r % 2 == 0 else list(sides)[::-1]


def rotated(sides: list, r: int) -> list:
    """Round r's order for more than two sides: rotated by r, so each side runs first in turn."""
    k = r % len(sides) if sides else 0
    return list(sides[k:]) + list(sides[:k])
