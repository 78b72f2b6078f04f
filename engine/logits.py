"""Per-row decoding options of the running batch, applied to its logits in one pass after the decoder graph.

Rows with different options decode side by side: each option is a vector over the rows that have
any (``RowOptions``, rebuilt only when the batch's rows change), and one pass applies them all with
numpy, in CTranslate2's order: the repetition penalty on the raw logits, then the disabled tokens
(EOS before the minimum length, repeated n-grams, ``<unk>``) set to -inf. Then, for one-row
sequences, the token: a forced prefix token, a sample, or the argmax; beams read the processed
logits themselves (``engine.search.Beam``).

Rows with no option never enter this pass: a batch of plain greedy rows costs what it did before.

Sampling follows CTranslate2's ``RandomSampler``: restrict to the top k, divide by the temperature,
keep the smallest set of tokens whose probability reaches p (a token is kept while the mass before it
is below p), renormalize, draw. Each row draws from its own generator (``numpy.random.PCG64`` seeded
per input), one uniform number per sampled step, so a seeded input gives the same tokens alone and in
any batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from engine.search import top_sorted

NO = -np.inf
SAMPLE_HEAD = 64  # tokens sorted per sampled row before the whole vocabulary is (see RowOptions._sample)


@dataclass
class Picks:
    """What the pass chose for its one-row sequences: rows, their tokens, and log P of each (0 when forced)."""

    rows: np.ndarray
    tokens: np.ndarray
    logp: np.ndarray


class RowOptions:
    """The options of the rows that have any, as vectors aligned with ``rows`` (batch row indexes)."""

    def __init__(self, seqs: list, eos: int, unk: int):
        self.eos, self.unk = eos, unk
        rows, rep, ngram, min_len, no_unk = [], [], [], [], []
        single, plen, prefixes, topk, topp, temp, rngs, scored = [], [], [], [], [], [], [], []
        for s in seqs:
            if not s.needs_pass:
                continue
            o = s.options
            for r in range(s.row, s.row + s.n_rows):
                if s.n_rows == 1:
                    single.append(len(rows))
                    plen.append(len(s.prefix)), prefixes.append(s.prefix)
                    topk.append(o.sampling_topk if o.sampling else 1), topp.append(o.sampling_topp)
                    temp.append(o.sampling_temperature), rngs.append(s.rng), scored.append(o.return_scores)
                rows.append(r)
                rep.append(o.repetition_penalty), ngram.append(o.no_repeat_ngram_size)
                min_len.append(len(s.prefix) + o.min_new_tokens), no_unk.append(o.disable_unk)
        self.rows = np.array(rows, np.int64)
        rep_a, ngram_a = np.array(rep, np.float32), np.array(ngram, np.int64)
        self.rep_at = np.flatnonzero(rep_a != 1)  # positions in ``rows``
        self.rep = rep_a[self.rep_at][:, None]
        self.ngram_groups = [(int(n), np.flatnonzero(ngram_a == n)) for n in np.unique(ngram_a[ngram_a > 0])]
        self.min_len = np.array(min_len, np.int64)
        self.no_unk = np.flatnonzero(no_unk)
        self.single = np.array(single, np.int64)
        self.plen = np.array(plen, np.int64)
        width = max(plen, default=0)
        self.prefix = np.zeros((len(single), max(width, 1)), np.int64)  # (S, longest prefix), 0-padded
        for i, p in enumerate(prefixes):
            self.prefix[i, : len(p)] = p
        topk_a = np.array(topk, np.int64)
        self.sampled = np.flatnonzero(topk_a != 1)  # positions in ``single``
        self.topk, self.topp = topk_a[self.sampled], np.array(topp, np.float64)[self.sampled]
        self.temp = np.array(temp, np.float64)[self.sampled]
        self.rngs = [rngs[i] for i in self.sampled]
        self.scored = np.flatnonzero(scored)

    @property
    def bans_only(self) -> bool:
        """Every row is a one-row sequence whose options only ban tokens (a minimum length, disable_unk): its token
        is the argmax of what is left, which ``engine.screen`` finds without the full logits."""
        plain = not (self.rep_at.size or self.ngram_groups or self.sampled.size or self.scored.size)
        return plain and len(self.single) == len(self.rows) and not (self.plen > 0).any()

    def bans(self, positions: np.ndarray) -> list[tuple[int, np.ndarray]] | None:
        """When ``bans_only``: (token, batch rows (B,) bool) pairs, the tokens these rows may not take at
        ``positions`` (B,); else None."""
        if not self.bans_only:
            return None
        eos, unk = (np.zeros(len(positions), bool) for _ in range(2))
        eos[self.rows[positions[self.rows] < self.min_len]] = True
        unk[self.rows[self.no_unk]] = True
        return [(self.eos, eos), (self.unk, unk)]

    @property
    def needs_history(self) -> bool:
        return bool(self.rep_at.size or self.ngram_groups)

    def apply(self, logits: np.ndarray, positions: np.ndarray, history: np.ndarray | None) -> Picks:
        """Process ``logits`` (B, V) in place for these rows; ``positions`` (B,) tokens each row has generated,
        ``history`` (B, L) their tokens, right-aligned, -1 before a row's first (needed for penalties/n-grams).

        Only the rows and tokens an option touches are written: copying the rows out and back cost three passes
        over (B, V) a step, a share of the step that grows with the vocabulary (docs/BENCHMARKS.md#marian-ct2-notes)."""
        rows = self.rows
        pos = positions[rows]
        # CTranslate2: a token already generated gets logit * p if negative, / p otherwise
        if self.rep_at.size:
            at = rows[self.rep_at]
            h = history[at]
            seen = np.zeros((len(h), logits.shape[1] + 1), bool)  # the extra column takes the -1 padding
            seen[np.arange(len(h))[:, None], h] = True
            xr = logits[at]
            logits[at] = np.where(seen[:, :-1], np.where(xr < 0, xr * self.rep, xr / self.rep), xr)
        for n, at in self.ngram_groups:
            self._ban_repeats(logits, rows[at], history[rows[at]], n)
        logits[rows[pos < self.min_len], self.eos] = NO
        logits[rows[self.no_unk], self.unk] = NO
        return self._pick(logits, pos)

    @staticmethod
    def _ban_repeats(x: np.ndarray, at: np.ndarray, h: np.ndarray, n: int) -> None:
        """Disable every token that would complete an n-gram already in the row's history (``no_repeat_ngram_size``):
        ``at`` the rows of ``x`` whose histories ``h`` are."""
        if h.shape[1] < n:
            return
        win = sliding_window_view(h, n, axis=1)  # (r, L-n+1, n): every n-gram of the history
        suffix = h[:, h.shape[1] - n + 1 :]  # (r, n-1): what the next token would extend
        hit = (
            (win[:, :, : n - 1] == suffix[:, None, :]).all(-1)
            & (win[:, :, -1] >= 0)
            & (suffix >= 0).all(-1)[:, None]
        )
        r, w = np.nonzero(hit)
        x[at[r], win[r, w, -1]] = NO

    def _pick(self, logits: np.ndarray, pos: np.ndarray) -> Picks:
        if not self.single.size:
            return Picks(self.single, self.single, np.zeros(0))
        at = self.rows[self.single]  # batch rows of the one-row sequences
        # every row of the batch, in order (the commonest case: one option for all): read in place, no copy
        whole = len(at) == len(logits) and at[-1] == len(at) - 1 and (np.diff(at) == 1).all()
        xs = logits if whole else logits[at]  # (S, V)
        tok = xs.argmax(-1)
        if self.sampled.size:
            tok[self.sampled] = self._sample(xs[self.sampled])
        p = pos[self.single]
        forced = np.flatnonzero(p < self.plen)
        tok[forced] = self.prefix[forced, p[forced]]
        logp = np.zeros(len(tok))
        if self.scored.size:
            # float32, as the beams' log-softmax (engine/topk.py) and CTranslate2: float64 cost 2x the time
            z = xs[self.scored]
            m = z.max(-1, keepdims=True)
            lse = (m + np.log(np.exp(z - m).sum(-1, keepdims=True)))[:, 0]
            logp[self.scored] = z[np.arange(len(z)), tok[self.scored]].astype(np.float64) - lse
            logp[forced] = 0.0  # a forced token is not chosen: it adds nothing to the score (as CTranslate2)
        return Picks(at, tok, logp)

    def _sample(self, x: np.ndarray) -> np.ndarray:
        """One draw per row from top-k / temperature / top-p, each row with its own generator.

        Only the ``SAMPLE_HEAD`` best tokens (or the largest top-k) are sorted. A row that may draw from the whole
        vocabulary (top-k 0) is normalised over all of it, and only when its top-p mass reaches past that head are
        all its tokens sorted: sorting the whole vocabulary per row per step made top-p sampling several times dearer
        than greedy (docs/BENCHMARKS.md#design-choices)."""
        n, vocab = x.shape
        k = np.where(self.topk == 0, vocab, self.topk)
        head = min(vocab, max(SAMPLE_HEAD, int(k[k < vocab].max(initial=0))))
        wide = (k > head) & (self.topp < 1)  # any token may be drawn, but top-p may stop within the head
        full = np.flatnonzero((k > head) & (self.topp >= 1))  # every token kept: sort them all
        rows = np.flatnonzero((k <= head) | wide)  # drawn from their head (unless top-p reaches past it)
        out = np.empty(n, np.int64)
        if rows.size:
            cand, vals = top_sorted(x[rows], head)
            z = vals.astype(np.float64) / self.temp[rows, None]
            z[np.arange(head)[None, :] >= k[rows, None]] = NO
            e = np.exp(z - z[:, :1])  # sorted: column 0 is the largest
            total = e.sum(-1)
            w = np.flatnonzero(wide[rows])  # their normaliser is the whole vocabulary's
            total[w] = np.exp(x[rows[w]].astype(np.float64) / self.temp[rows[w], None] - z[w, :1]).sum(-1)
            probs = e / total[:, None]
            past = w[probs[w].sum(-1) < self.topp[rows[w]]]  # top-p keeps tokens past the head: sort them all
            ok = np.setdiff1d(np.arange(len(rows)), past)
            out[rows[ok]] = self._draw(cand[ok], probs[ok], rows[ok])
            full = np.union1d(full, rows[past])
        if full.size:
            fc, fv = top_sorted(x[full], vocab)
            fz = fv.astype(np.float64) / self.temp[full, None]
            fe = np.exp(fz - fz[:, :1])
            out[full] = self._draw(fc, fe / fe.sum(-1, keepdims=True), full)
        return out

    def _draw(self, cand: np.ndarray, probs: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Top-p over each row's sorted probabilities (a token is kept while the mass before it is below p), then
        one draw from what is kept; ``rows``: positions in ``self.sampled`` (their top-p and generators)."""
        before = np.cumsum(probs, -1) - probs
        probs = np.where(before >= self.topp[rows, None], 0.0, probs)
        cdf = np.cumsum(probs, -1)
        u = np.array([self.rngs[i].random() for i in rows]) * cdf[:, -1]
        choice = np.minimum((cdf <= u[:, None]).sum(-1), cdf.shape[1] - 1)
        return cand[np.arange(len(rows)), choice]
