"""Timing on real inputs: systems (an engine, CTranslate2) decoding the same held-out texts, stopped at EOS,
pass by pass, taking turns with the order reversed every other pass (ABBA); medians of the passes."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.common.abba import abba


class Timed:
    """What a cell of timings reports; the dataclasses below hold ``sequences`` and ``times``."""

    sequences: int
    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def seq_s(self) -> float:
        return self.sequences / self.median

    @property
    def spread(self) -> float:
        return (max(self.times) - min(self.times)) / self.median


@dataclass
class RealSystem:
    """One side of the real-inputs table: ``run(texts, tokens, beam, batch)`` returns raw outputs, ``ids`` maps them
    to token-id rows (EOS excluded) after the timing."""

    name: str  # "engine" | "ct2" | "engine-gnmt" (beam rows only: the engine's default, the paper's rule)
    precision: str  # "float32" | "int8"
    run: Callable[[list[str], list[list[str]], int, int], list]
    ids: Callable[[list], list[list[int]]]
    beams_only: bool = False


@dataclass
class RealCell(Timed):
    system: str
    precision: str
    beam: int
    batch: int
    sequences: int
    times: list[float] = field(default_factory=list)
    raw: list = field(default_factory=list)
    ids: list[list[int]] = field(default_factory=list)

    @property
    def mean_len(self) -> float:
        return sum(len(r) for r in self.ids) / max(len(self.ids), 1)


def time_real(
    systems: list[RealSystem],
    texts: list[str],
    tokens: list[list[str]],
    beams: list[int],
    batches: list[int],
    repeats: int,
    tick=lambda: None,
) -> list[RealCell]:
    """Every (beam, batch) cell for every system: one warm-up each on 2B inputs, then ``repeats`` passes over all
    inputs, the systems taking turns, the order reversed every other pass (ABBA: no side always runs first)."""
    cells: list[RealCell] = []
    for beam in beams:
        for batch in batches:
            active = [s for s in systems if beam > 1 or not s.beams_only]
            row = [RealCell(s.name, s.precision, beam, batch, len(texts)) for s in active]
            warm = min(len(texts), 2 * batch)
            for s in active:
                s.run(texts[:warm], tokens[:warm], beam, batch)
            for rep in range(repeats):
                for i in abba(range(len(active)), rep):
                    t0 = time.perf_counter()
                    out = active[i].run(texts, tokens, beam, batch)
                    row[i].times.append(time.perf_counter() - t0)
                    row[i].raw = out
                tick()
            for s, c in zip(active, row):
                c.ids, c.raw = s.ids(c.raw), []
            cells += row
    return cells
