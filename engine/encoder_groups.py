"""Which source rows the encoder runs together.

An encoder call costs a fixed part, about the time to stream the encoder's weights through the caches once, plus
a part per position it computes, padding included. For a small encoder the fixed part is small and rows are best
encoded in groups of equal length, no padding at all; for a larger one a call of one short row costs about what
another row's work does, and newcomers of different lengths are cheaper padded into one call. Padding does not
change a row's result: a padded row's positions are masked, and its encoder output is bit-identical to the row
encoded alone (tests/test_encoder_groups.py), so the grouping is a matter of speed only.

``call_tokens`` is the fixed part in positions' worth of work, measured once per engine (``measure_call_tokens``);
``length_groups`` splits the rows, sorted by length, where the total of ``call_tokens`` per call plus rows x
padded length is least.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

MAX_CALL_TOKENS = 64.0  # a bound on a measurement disturbed by other work on the machine


def length_groups(lengths: np.ndarray, call_tokens: float) -> list[np.ndarray]:
    """Row indices per encoder call, each group a run of the rows sorted by length, padded to its longest.

    Dynamic programming over the distinct lengths: the cheapest split of the j shortest lengths is the cheapest
    of the i shortest plus one call for lengths i..j-1."""
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    distinct, counts = np.unique(lengths, return_counts=True)
    rows_before = np.concatenate([[0], np.cumsum(counts)])
    n = len(distinct)
    best = [0.0] + [float("inf")] * n
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        longest, waste = float(distinct[j - 1]), 0.0
        for i in range(j - 1, -1, -1):
            waste += float(counts[i]) * (longest - float(distinct[i]))  # padded positions of the call i..j-1
            # Once its padding costs more than the calls it saves, a longer run never pays again: its padding
            # grows by at least the run's length a step, the calls saved by one.
            if waste > (j - 1 - i) * call_tokens and j - i >= call_tokens:
                break
            cost = best[i] + call_tokens + float(rows_before[j] - rows_before[i]) * longest
            if cost < best[j]:
                best[j], start[j] = cost, i
    cuts, j = [], n
    while j > 0:
        cuts.append(int(rows_before[j]))
        j = start[j]
    return np.split(order, sorted(cuts)[:-1])


def measure_call_tokens(encode: Callable[[int, int], object], length: int = 6, rows: int = 6) -> float:
    """The fixed part of an encoder call in positions' worth of work: one row against ``rows`` rows of ``length``
    positions, the least of five timings each (t = fixed + per_position x positions)."""

    def least(b: int) -> float:
        encode(b, length)  # warm: the first run of a shape allocates
        times = []
        for _ in range(5):
            t = time.perf_counter()
            encode(b, length)
            times.append(time.perf_counter() - t)
        return min(times)

    one, many = least(1), least(rows)
    per_position = (many - one) / ((rows - 1) * length)
    if per_position <= 0:
        return MAX_CALL_TOKENS
    return float(min(MAX_CALL_TOKENS, max(0.0, one / per_position - length)))
