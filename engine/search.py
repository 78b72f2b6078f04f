"""Token choice per sequence: greedy, and beam search with the GNMT length penalty (paper §6.1: beam 4, alpha 0.6).

A greedy search owns one row of the running batch and is pushed the row's argmax after each step.
A beam owns ``width`` consecutive rows: it reads their logits and returns each row's next token
and which row it continues (its parent), so the batch can reorder the cache.
"""

from __future__ import annotations

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


class Greedy:
    """One row; the step loop takes a single argmax over the whole batch and pushes each row its token."""

    def __init__(self, eos: int, budget: int):
        self.eos, self.budget = eos, budget
        self.tokens: list[int] = []
        self.done = False

    def push(self, tok: int) -> None:
        self.tokens.append(tok)
        self.done = tok == self.eos or len(self.tokens) >= self.budget

    def result(self) -> list[int]:
        return self.tokens[:-1] if self.tokens and self.tokens[-1] == self.eos else self.tokens


class Beam:
    """Beam search; hypotheses are ranked by log P(Y|X) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016)."""

    def __init__(self, eos: int, budget: int, width: int, alpha: float = 0.6):
        self.eos, self.budget, self.width, self.alpha = eos, budget, width, alpha
        self.scores = np.full(width, -np.inf)
        self.scores[0] = 0.0  # all rows start identical: expand from one of them only
        self.hyps: list[list[int]] = [[] for _ in range(width)]
        self.finished: list[tuple[float, list[int]]] = []
        self.done = False

    def lp(self, length: int) -> float:
        return ((5 + length) / 6) ** self.alpha

    def advance(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = self.width
        cand = (self.scores[:, None] + log_softmax(logits.astype(np.float64))).ravel()  # (k * V,)
        top = np.argpartition(-cand, 2 * k)[: 2 * k] if cand.size > 2 * k else np.arange(cand.size)
        top = top[np.lexsort((top, -cand[top]))]  # best first; ties to the lower index, as argmax
        vocab = logits.shape[1]
        parents, tokens, scores, hyps = [], [], [], []
        for rank, idx in enumerate(top):
            parent, tok, score = int(idx // vocab), int(idx % vocab), float(cand[idx])
            if not np.isfinite(score):
                continue
            if tok == self.eos:
                # Only an end among the k best candidates counts (as fairseq and CTranslate2 do): one ranked
                # below k live extensions would fill the finished list and stop the search early.
                if rank < k:
                    self.finished.append((score / self.lp(len(self.hyps[parent]) + 1), self.hyps[parent]))
            else:
                parents.append(parent), tokens.append(tok), scores.append(score), hyps.append(self.hyps[parent] + [tok])
            if len(parents) == k:
                break
        while len(parents) < k:  # too few live candidates: pad with dead rows
            parents.append(0), tokens.append(self.eos), scores.append(-np.inf), hyps.append([])
        self.scores, self.hyps = np.array(scores), hyps
        length = len(hyps[0])
        best_live = self.scores.max()
        if self.finished:
            best_done = max(s for s, _ in self.finished)
            # A live beam's raw score only falls as it grows, so best_live / lp(budget) bounds its future: stop
            # once no live hypothesis can beat the best finished one. (Stopping at k finished, as fairseq does,
            # returned "258" for 864+394: three weak ends filled the list while the best beam was one step from EOS.)
            self.done = best_done >= best_live / self.lp(self.budget) or not np.isfinite(best_live)
        self.done = self.done or length >= self.budget
        return np.array(tokens), np.array(parents)

    def result(self) -> list[int]:
        pool = self.finished or [(s / self.lp(len(h)), h) for s, h in zip(self.scores, self.hyps) if np.isfinite(s)]
        return max(pool, key=lambda x: x[0])[1] if pool else []
