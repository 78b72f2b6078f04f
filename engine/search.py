"""Token choice per sequence: one row (greedy, sampling, or a forced prefix), or a beam of rows with n-best.

A ``Greedy`` search owns one row of the running batch and is pushed the row's token after each step
(chosen for the whole batch at once: argmax, or ``engine.logits`` for rows with options). A ``Beam``
owns ``width`` consecutive rows: it reads each row's best tokens by log-probability (``engine.topk``, for
every beam of the batch at once) and returns each row's next token and which row it continues (its parent),
so the batch can reorder the cache; ``advance_beams`` does the same for many beams in one vector pass.

Scores and stopping follow ``contract.decoding`` (``gnmt``: the paper's beam, 4 and alpha 0.6 by
default; ``ctranslate2``: CTranslate2's; ``transformers``: ``generate()``'s). A target prefix is forced token by token, its tokens part of
the output but not of the score, as CTranslate2 does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contract.decoding import length_penalty


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def top_sorted(x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's n largest values (all of them if n >= the row's length), largest first, ties to the lower
    index as argmax breaks them: (indices, values), each (R, n). Only those n are sorted."""
    v = x.shape[-1]
    n = min(n, v)
    idx = np.argpartition(x, v - n, axis=-1)[:, v - n :] if n < v else np.broadcast_to(np.arange(v), x.shape)
    val = np.take_along_axis(x, idx, axis=-1)
    # argpartition keeps any of the values tied at the n-th: where a tie straddles it, take the lowest ids
    if n < v:
        thr = val.min(axis=-1, keepdims=True)
        for r in np.flatnonzero((x == thr).sum(-1) > (val == thr).sum(-1)):
            idx[r] = np.argsort(-x[r], kind="stable")[:n]
            val[r] = x[r, idx[r]]
    order = np.lexsort((idx, -val), axis=-1)
    return np.take_along_axis(idx, order, axis=-1), np.take_along_axis(val, order, axis=-1)


@dataclass(frozen=True)
class Hypothesis:
    """One of an input's n-best outputs as the step loop finds it: ids only (an engine core never detokenizes)."""

    tokens: list[int]  # EOS excluded, the target prefix included
    score: float  # log P(Y|X) / length penalty (the prefix's tokens excluded from log P); 0 when not computed


@dataclass(frozen=True)
class TextHypothesis:
    """A ``Hypothesis`` with its text: made once where the tokenizer lives (the in-process ``Translator``, the
    server's model API) and passed unchanged to whoever answers (a door encodes only ``text`` and ``score``)."""

    text: str
    tokens: list[int]  # EOS excluded, the target prefix included
    score: float  # 0 unless the request asked for scores

    @property
    def output_tokens(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True)
class EndRules:
    """generate()'s rules on where an output ends, as an imported model's bundle records them (``TaskConfig``):
    ``forced_eos_id`` the last token of an output that reaches its budget, no end token before ``min_length`` tokens
    (the start token counted, as generate() counts), and the beam's ``early_stopping`` under the transformers rule.
    A bundle without them (every one before format 8) gets none: today's search."""

    forced_eos_id: int | None = None
    min_length: int = 0
    early_stopping: bool | str = False

    @classmethod
    def of(cls, task) -> EndRules:
        return cls(task.forced_eos_id, task.min_length, task.early_stopping)

    @property
    def min_end(self) -> int:
        """Tokens generated (a target prefix counted) before the end token may come: min_length less the start."""
        return max(0, self.min_length - 1)


class Greedy:
    """One row: greedy, sampled or forced tokens, pushed by the step loop; ``logp`` given when scores are asked for.
    ``forced_last``: the token an output that reaches its budget ends with (generate()'s forced_eos_token_id)."""

    def __init__(
        self, eos: int, budget: int, kind: str = "gnmt", alpha: float = 0.6, forced_last: int | None = None
    ):
        self.eos, self.budget, self.kind, self.alpha = eos, budget, kind, alpha
        self.forced_last = forced_last
        self.tokens: list[int] = []
        self.logp = 0.0
        self.done = False

    def push(self, tok: int, logp: float = 0.0) -> int:
        """Take the step's token (the forced last one instead, at the budget's last step); returns the one taken."""
        if self.forced_last is not None and len(self.tokens) + 1 >= self.budget:
            tok, logp = self.forced_last, 0.0  # forced: it adds nothing to the score, as a prefix token
        self.tokens.append(tok)
        self.logp += logp
        self.done = tok == self.eos or len(self.tokens) >= self.budget
        return tok

    def result(self) -> list[int]:
        return self.tokens[:-1] if self.tokens and self.tokens[-1] == self.eos else self.tokens

    def hypotheses(self) -> list[Hypothesis]:
        return [
            Hypothesis(self.result(), self.logp / length_penalty(self.kind, self.alpha, len(self.tokens)))
        ]


class Beam:
    """Beam search over ``width`` rows, returning the ``n_best`` best hypotheses.

    ``gnmt``: ranked by log P / ((5 + |Y|) / 6)^alpha; stops once the n-th best ended hypothesis beats what any
    live one could still reach. ``ctranslate2``: ranked by log P / |Y|^alpha; CTranslate2's rule: stop after
    ``width`` ended hypotheses (with alpha 0: once the best beam has ended and n_best have), and at the last
    step every live beam counts as a hypothesis too. ``transformers``: generate()'s, by its ``early_stopping``.

    generate()'s rules on where an output ends (an imported model's, ``contract.config.TaskConfig``) act on the
    candidates of a step after their log-softmax, as its logits processors do (``shaped``): ``forced_last`` is the
    only candidate of the budget's last step, at log-probability 0; no end token before ``min_end`` tokens."""

    def __init__(
        self,
        eos: int,
        budget: int,
        width: int,
        alpha: float = 0.6,
        kind: str = "gnmt",
        n_best: int = 1,
        prefix: list[int] | tuple = (),
        early_stopping: bool | str = False,
        forced_last: int | None = None,
        min_end: int = 0,
    ):
        self.eos, self.budget, self.width, self.alpha, self.kind = eos, budget, width, alpha, kind
        self.n_best, self.prefix = n_best, list(prefix)
        self.early_stopping, self.forced_last, self.min_end = early_stopping, forced_last, min_end
        self.scores = np.full(width, -np.inf)
        self.scores[0] = 0.0  # all rows start identical: expand from one of them only
        self.hyps: list[list[int]] = [[] for _ in range(width)]
        self.finished: list[tuple[float, list[int]]] = []  # (normalized score, tokens without EOS)
        self.top_ended = False  # ctranslate2: the best candidate of some step was an end
        self.step = 0
        self.done = False

    def lp(self, length: int) -> float:
        return length_penalty(self.kind, self.alpha, length)

    def _end(self, raw: float, tokens: list[int], length: int) -> None:
        self.finished.append((raw / self.lp(length), tokens))

    @property
    def shapes(self) -> bool:
        """An end rule acts on this step's candidates (``shaped``); a forced prefix token takes none."""
        if self.step < len(self.prefix):
            return False
        return (self.forced_last is not None and self.step + 1 >= self.budget) or self.step < self.min_end

    def shaped(self, logp: np.ndarray, toks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """This step's candidates, best first, (width, n), under the end rules (when ``shapes``): at the budget's last
        step the forced token alone, at 0 (generate()'s ForcedEOSTokenLogitsProcessor, after the log-softmax); before
        ``min_end``, the end token's taken out (its MinLengthLogitsProcessor), the rest keeping their order."""
        if self.forced_last is not None and self.step + 1 >= self.budget:
            lp = np.full(logp.shape, -np.inf)
            lp[:, 0] = 0.0
            return lp, np.full(toks.shape, self.forced_last, toks.dtype)
        lp = np.where(toks == self.eos, -np.inf, logp)
        order = np.argsort(-lp, axis=-1, kind="stable")
        return np.take_along_axis(lp, order, axis=-1), np.take_along_axis(toks, order, axis=-1)

    @property
    def regular(self) -> bool:
        """This step is neither a forced prefix token nor the first step after a prefix: ``advance_beams`` takes it."""
        return self.step > len(self.prefix) or self.step == len(self.prefix) == 0

    def advance_top(self, logp: np.ndarray, toks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One step from each row's best tokens by log-probability, best first: ``logp``, ``toks`` (width, >= 2 width).
        The 2k best of all k x V extensions are among them (a row's extensions share its score). Returns each row's
        next token and which row it continues (its parent). This loop is the definition ``advance_beams`` (many
        beams at once) is tested against, and the faster way for a few beams."""
        k, step = self.width, self.step
        self.step += 1
        if step < len(self.prefix):  # forced: every row follows row 0, whose score stays 0 (not counted)
            tok = self.prefix[step]
            self.hyps = [self.hyps[0] + [tok] for _ in range(k)]
            self.scores = np.full(k, -np.inf)
            self.scores[0] = 0.0
            self.done = len(self.hyps[0]) >= self.budget
            if self.done:
                self.finished.append((0.0, self.hyps[0]))
            return np.full(k, tok), np.zeros(k, np.int64)
        # Right after a prefix only row 0 is live, and an end ranked below the best is not taken (as CTranslate2 does:
        # short ends there dominate when nothing normalizes length); that slot stays empty for a step.
        # transformers' generate() takes such an end (its forced BOS is this engine's one-token prefix).
        after_prefix = step == len(self.prefix) and step > 0 and self.kind != "transformers"
        n = min(2 * k, logp.shape[1])
        cand = (self.scores[:, None] + logp[:, :n]).ravel()  # (k * n,)
        cand_tok = toks[:, :n].ravel()
        cand_parent = np.repeat(np.arange(k), n)
        # best first; ties to the lower (parent, token), as argmax over the flattened k x V scores
        top = np.lexsort((cand_tok, cand_parent, -cand))[: 2 * k]
        last = step + 1 >= self.budget
        parents, tokens, scores, hyps = [], [], [], []
        ranked = []  # live candidates among the k best (CTranslate2's hypotheses at the last step)
        empty = 0  # slots left empty this step
        for rank, idx in enumerate(top.tolist()):
            parent, tok, score = int(cand_parent[idx]), int(cand_tok[idx]), float(cand[idx])
            if not np.isfinite(score):
                continue
            if tok == self.eos:
                # Only an end among the k best candidates counts (as fairseq and CTranslate2 do): one ranked
                # below k live extensions would fill the finished list and stop the search early.
                if rank < k:
                    if after_prefix and rank > 0:
                        empty += 1
                    else:
                        self._end(score, self.hyps[parent], len(self.hyps[parent]) + 1)
                        self.top_ended |= rank == 0
            else:
                (
                    parents.append(parent),
                    tokens.append(tok),
                    scores.append(score),
                    hyps.append(self.hyps[parent] + [tok]),
                )
                if rank < k:
                    ranked.append((score, hyps[-1]))
            if len(parents) + empty == k:
                break
        while len(parents) < k:  # too few live candidates (or an empty slot): pad with dead rows
            parents.append(0), tokens.append(self.eos), scores.append(-np.inf), hyps.append([])
        self.scores, self.hyps = np.array(scores), hyps
        self._stop(ranked, last)
        return np.array(tokens), np.array(parents)

    def _commit(
        self,
        parents: list[int],
        tokens: list[int],
        alive: list[bool],
        scores: np.ndarray,
        ranked: list[bool],
        ends: list[tuple[float, int]],
        top_ended: bool,
        best_live: float,
    ) -> None:
        """A regular step chosen by ``advance_beams``: the k rows (parent, token, alive, score; ``ranked``: among the
        k best candidates) and the ends among the k best (raw score, parent), best first."""
        self.step += 1
        old = self.hyps
        for raw, parent in ends:
            self._end(raw, old[parent], len(old[parent]) + 1)
        self.top_ended |= top_ended
        self.hyps = [old[p] + [t] if a else [] for p, t, a in zip(parents, tokens, alive)]
        self.scores = scores
        last = self.step >= self.budget
        ranked_live = (
            [(s, h) for s, h, a, r in zip(scores.tolist(), self.hyps, alive, ranked) if a and r]
            if last
            else []
        )
        self._stop(ranked_live, last, best_live)

    def _stop(
        self, ranked: list[tuple[float, list[int]]], last: bool, best_live: float | None = None
    ) -> None:
        """The stopping rule of ``kind`` after a step; ``ranked``: its live candidates among the k best (only read
        at the last step)."""
        k = self.width
        best_live = float(self.scores.max()) if best_live is None else best_live
        if self.kind in ("ctranslate2", "transformers") and last:
            # CTranslate2 and transformers take the k best candidates of the last step as they are, ended or not
            for s, h in ranked:
                self._end(s, h, len(h))
        if self.kind == "transformers":
            # generate()'s rule: once k hypotheses ended, early_stopping=True stops; False stops when the best live
            # beam, normalized at its present length, no longer beats the k-th best of them; "never" normalizes it
            # at the budget (with a positive alpha, the best it could reach).
            if len(self.finished) >= k:
                kth = sorted((s for s, _ in self.finished), reverse=True)[k - 1]
                reach = self.budget if self.early_stopping == "never" and self.alpha > 0 else self.step
                self.done = self.early_stopping is True or best_live / self.lp(reach) <= kth
            self.done = self.done or last or not math.isfinite(best_live)
        elif self.kind == "ctranslate2":
            # nothing normalizes length: once the best beam has ended, nothing can beat it
            if self.alpha == 0:
                enough = self.top_ended and len(self.finished) >= self.n_best
            else:
                enough = len(self.finished) >= k
            self.done = last or enough or not math.isfinite(best_live)
        else:
            if len(self.finished) >= self.n_best:
                nth = sorted((s for s, _ in self.finished), reverse=True)[self.n_best - 1]
                # A live beam's raw score only falls as it grows, so best_live / lp(budget) bounds its future: stop
                # once no live hypothesis can beat the n-th best finished one. (Stopping at k finished, as fairseq
                # does, returned "258" for 864+394: three weak ends filled the list while the best beam was one step
                # from EOS.)
                self.done = nth >= best_live / self.lp(self.budget)
            self.done = self.done or last or not math.isfinite(best_live)

    def hypotheses(self) -> list[Hypothesis]:
        """The n_best best, best first: ended ones, then (gnmt, when too few ended) the best live ones."""
        pool = sorted(self.finished, key=lambda x: -x[0])
        if len(pool) < self.n_best:
            live = [(float(s) / self.lp(len(h)), h) for s, h in zip(self.scores, self.hyps) if np.isfinite(s)]
            pool += sorted(live, key=lambda x: -x[0])[: self.n_best - len(pool)]
        return [Hypothesis(list(h), float(s)) for s, h in pool[: self.n_best]]

    def result(self) -> list[int]:
        hyps = self.hypotheses()
        return hyps[0].tokens if hyps else []


# From this many beams of one width in a step, ranking them in one vector pass beats a loop per beam
# (docs/BENCHMARKS.md#design-choices).
VECTOR_MIN_BEAMS = 16


def advance_beams(beams: list[Beam], logp: np.ndarray, toks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One regular step (``Beam.regular``) of several beams of one width k, their candidates ranked in one vector
    pass instead of ``Beam.advance_top``'s Python loop per beam.

    ``logp``, ``toks``: each beam's k rows of best tokens by log-probability, best first, beams one after another
    (G x k, >= 2k). Same choices as ``Beam.advance_top``'s loop: the 2k best of each beam's k x 2k extensions, ties
    to the lower (parent, token); an end among the k best is a finished hypothesis, the first k live candidates
    are the next rows, too few live ones leave dead rows (parent 0, EOS, score -inf). Returns every row's next
    token and its parent within its beam (0..k-1), (G x k,) each."""
    g, k, eos = len(beams), beams[0].width, beams[0].eos
    n = min(2 * k, logp.shape[1])
    scores = np.stack([b.scores for b in beams])  # (G, k)
    cand = (scores[:, :, None] + logp[:, :n].reshape(g, k, n)).reshape(g, k * n)
    tok = toks[:, :n].reshape(g, k * n)
    parent = np.broadcast_to(np.repeat(np.arange(k), n), (g, k * n))
    order = np.lexsort((tok, parent, -cand), axis=-1)[:, : min(2 * k, k * n)]  # best first
    c, t, p = (np.take_along_axis(a, order, axis=1) for a in (cand, tok, parent))
    finite, is_eos = np.isfinite(c), t == eos
    rank = np.arange(c.shape[1])
    live = finite & ~is_eos
    ends = finite & is_eos & (rank < k)  # only an end among the k best counts (fairseq, CTranslate2)
    pick = live & (np.cumsum(live, axis=1) <= k)
    at = np.argsort(~pick, axis=1, kind="stable")[:, :k]  # the picked, in rank order, then (dead) fillers
    alive = np.take_along_axis(pick, at, axis=1)
    new_p = np.where(alive, np.take_along_axis(p, at, axis=1), 0)
    new_t = np.where(alive, np.take_along_axis(t, at, axis=1), eos)
    new_c = np.where(alive, np.take_along_axis(c, at, axis=1), -np.inf)
    end_by: list[list[tuple[float, int]]] = [[] for _ in range(g)]
    for b, r in zip(*(x.tolist() for x in np.nonzero(ends))):
        end_by[b].append((float(c[b, r]), int(p[b, r])))
    ps, ts, al, rk, top = (
        new_p.tolist(),
        new_t.tolist(),
        alive.tolist(),
        (at < k).tolist(),
        ends[:, 0].tolist(),
    )
    best = new_c.max(axis=1).tolist()
    for i, beam in enumerate(beams):
        beam._commit(ps[i], ts[i], al[i], new_c[i], rk[i], end_by[i], top[i], best[i])
    return new_t.ravel(), new_p.ravel()
