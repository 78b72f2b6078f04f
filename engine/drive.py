"""The step loop driven to completion, for in-process use (``engine.translator``, the benchmarks, the tests).

The server's scheduler drives ``StepLoop`` itself, step by step; this is the same loop with one rule for when
sequences join: as many as the batch has rows for, in order, refilled as rows finish.
"""

from __future__ import annotations

from engine.runner import Runner
from engine.sequence import Sequence
from engine.step_loop import StepLoop


def run(engine: Runner, seqs: list[Sequence], batch_size: int = 64) -> list[Sequence]:
    """Decode sequences to completion, at most batch_size rows at a time, refilling as rows finish."""
    gen = StepLoop(engine)
    pending = list(seqs)
    while pending or len(gen):
        room = batch_size - gen.n_rows  # rows: a beam counts its width
        take = 0
        while take < len(pending) and (pending[take].n_rows <= room or (take == 0 and not len(gen))):
            room -= pending[take].n_rows
            take += 1
        if take:
            gen.add(pending[:take])
            pending = pending[take:]
        gen.step()
    return seqs
