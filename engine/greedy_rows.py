"""How a step's greedy rows get their tokens: from the int8 screen when every row may (``screen_bans``), else by
an argmax over the full logits of only the rows that need one (``argmax_rows``). The step loop calls both."""

from __future__ import annotations

import numpy as np

from engine.logits import RowOptions
from engine.search import Greedy


def screen_bans(
    seqs: list, options: RowOptions | None, positions: np.ndarray
) -> list[tuple[int, np.ndarray]] | None:
    """The tokens each row may not take this step when every row is greedy and wants only its argmax (``options``:
    the rows with options, which ban tokens at most; None when no row has any): ``engine.screen`` can choose them.
    Else None: the step needs full logits."""
    if not all(isinstance(s.search, Greedy) for s in seqs):
        return None
    return options.bans(positions) if options is not None else []


def argmax_rows(seqs: list, n_pass: int, logits: np.ndarray, picks) -> np.ndarray:
    """Each plain greedy row's argmax (B,) from full logits: only over the rows that need one. Rows the logits pass
    picked for (``picks``) and beam rows choose their own, and a (B, V) argmax of a large vocabulary is not free."""
    if not n_pass and all(isinstance(s.search, Greedy) for s in seqs):
        return logits.argmax(-1)  # plain greedy: every row (released ones too: their tokens are ignored)
    taken = set() if picks is None else set(picks.rows.tolist())
    rows = [s.row for s in seqs if isinstance(s.search, Greedy) and s.row not in taken]
    out = np.zeros(len(logits), np.int64)
    if rows:
        out[rows] = logits[rows].argmax(-1)
    return out
