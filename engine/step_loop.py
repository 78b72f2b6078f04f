"""The decode-step loop: sequences join between steps, every step advances all of them, finished ones leave.

This is iteration-level (continuous) batching's mechanism; the scheduler decides *when* to
call ``add`` and ``step``, and ``step`` returns what happened (``StepOutput``: the sequences that
finished, the tokens streaming sequences got) instead of calling back into it, as vLLM's
schedule -> execute -> update. ``engine.drive.run`` drives the same loop to completion for in-process use. It
works on ids and a ``runner.Runner``; texts are ``engine.translator``'s.
"""

from __future__ import annotations

import numpy as np

from engine.cache import DecodeBatch, free_run, pad_batch, stack_rows  # noqa: F401  (pad_batch: re-exported)
from engine.greedy_rows import argmax_rows, screen_bans
from engine.logits import RowOptions
from engine.runner import Runner
from engine.search import VECTOR_MIN_BEAMS, Beam, EndRules, Greedy, advance_beams
from engine.sequence import Sequence, StepOutput


class StepLoop:
    def __init__(self, engine: Runner, rules: EndRules | None = None):
        """``rules``: the bundle's (its task's) unless given (export validation compares graphs with none)."""
        self.engine = engine
        self.rules = EndRules.of(engine.config.task) if rules is None else rules
        self.batch = DecodeBatch(engine.n_layers, engine.n_heads, engine.d_head)
        self.seqs: list[Sequence] = []  # each owns rows seq.row .. seq.row + seq.n_rows - 1
        self.n_pass = 0  # sequences whose rows go through the logits pass; 0: plain argmax, as ever
        self.row_options: RowOptions | None = (
            None  # their options as vectors; None: rebuild before the next step
        )
        # finished while joining (at their first step): the next step reports them
        self.early: list[Sequence] = []

    def __len__(self) -> int:
        return len(self.seqs) + len(self.early)

    @property
    def n_rows(self) -> int:
        """Rows in use (released rows waiting for a newcomer do not count)."""
        return len(self.batch) - len(self.batch.free)

    def budget(self, seq: Sequence) -> int:
        """Output tokens at most, the target prefix included: the prefix, then max_new_tokens. The paper's maximum
        output length is input length + 50 new tokens; never beyond the positions the model has."""
        room = self.engine.config.model.max_len - 1 - len(seq.prefix)
        return len(seq.prefix) + max(1, min(seq.max_new_tokens, len(seq.src_ids) + 50, room))

    def encode(self, seqs: list[Sequence]) -> None:
        """Run the encoder, in one batch, for the sequences not encoded yet. It touches no batch state, so
        another thread may call it while this one steps (the scheduler encodes queued requests meanwhile)."""
        todo = [s for s in seqs if s.encoded is None]
        if not todo:
            return
        ids, mask = pad_batch([s.src_ids for s in todo], self.engine.special.pad)
        cross = self.engine.encode(ids, mask)
        for i, s in enumerate(todo):
            # its own length: the batch's padding would widen the running batch for nothing
            n = len(s.src_ids)
            s.encoded = ([c[i, :, :n] for c in cross], mask[i, :n])

    def add(self, seqs: list[Sequence]) -> None:
        """Encode the newcomers that are not yet; greedy ones take released rows in place, the rest are appended
        (a beam's rows stay consecutive and repeat its encoder output). Into an idle batch, a plain beam runs its
        first step on one row (``_first_steps``) and joins with its width's rows from the second step on."""
        if not seqs:
            return
        self.encode(seqs)
        for s in seqs:
            if s.search is None:
                s.search = self._search_of(s)
        first = self._first_steps(self._apart(seqs))
        for s in seqs:
            if s.search.done:  # ended at its first step (a budget of one token, or every beam ended)
                self._finish(s)
        seqs = [s for s in seqs if not s.search.done]
        for started, group in self._place(seqs, first).items():
            if group:
                self._append(group, first if started else None)
        for s in seqs:
            s.encoded = None  # joined: the batch holds its cross K/V now
        self.seqs += seqs
        if any(s.options.repetition_penalty != 1 or s.options.no_repeat_ngram_size for s in seqs):
            self.batch.track_history()

    def _search_of(self, s: Sequence) -> Greedy | Beam:
        sp, rules, o = self.engine.special, self.rules, s.options
        if s.beam == 1 and rules.min_end > len(s.prefix) + o.min_new_tokens:
            # generate() bans the end token from the logits before its argmax: min_new_tokens' mask
            s.options = o = o.replace(min_new_tokens=rules.min_end - len(s.prefix))
        if s.beam == 1:
            return Greedy(sp.eos, self.budget(s), o.length_penalty_type, o.alpha, rules.forced_eos_id)
        return Beam(
            sp.eos,
            self.budget(s),
            s.beam,
            o.alpha,
            o.length_penalty_type,
            o.num_hypotheses,
            s.prefix,
            rules.early_stopping,
            rules.forced_eos_id,
            rules.min_end,
        )

    def _apart(self, seqs: list[Sequence]) -> list[Sequence]:
        """The beams whose first step runs on one row: only into an idle batch, where that call takes the place of
        the batch's first step (into a running one it is one more decoder call on a few rows, which cost what the
        rows saved: docs/BENCHMARKS.md#beam-int8-notes)."""
        if self.seqs:
            return []
        return [
            s
            for s in seqs
            if s.n_rows > 1
            and not s.needs_pass
            and isinstance(s.search, Beam)
            and s.search.step == 0
            and not s.prefix
        ]

    def _place(self, seqs: list[Sequence], first: dict) -> dict[bool, list[Sequence]]:
        """Newcomers into released rows in place where they fit; the rest to append, by whether their first step
        ran apart (those make the idle batch's first rows)."""
        sp, b = self.engine.special, self.batch
        appended: dict[bool, list[Sequence]] = {True: [], False: []}
        for s in seqs:
            if s.needs_pass:
                self.n_pass += 1
                self.row_options = None
            # another width joins beams that share cross K/V per input
            if b.group > 1 and s.n_rows != b.group:
                b.unfold()
            if id(s) in first:  # into an idle batch: appended, as its first rows
                appended[True].append(s)
            elif s.n_rows == 1 and b.free:
                s.row = b.free[-1]
                b.fill(s.row, *s.encoded, sp.bos)
            elif s.n_rows > 1 and (start := free_run(b.free, s.n_rows)) is not None:
                if start % b.group:  # not a released group's rows (never, while every beam is of its width)
                    b.unfold()
                s.row = start  # a beam takes consecutive released rows (a finished beam's) in place
                for r in range(start, start + s.n_rows):
                    b.fill(r, *s.encoded, sp.bos)
            else:
                appended[False].append(s)
        return appended

    def _append(self, group: list[Sequence], first: dict | None) -> None:
        """Rows appended to the batch: their cross K/V and masks to one width; with ``first`` (their first step
        ran apart), its tokens and self-attention K/V, else BOS and no cache yet. Beams all of one width, into an
        idle batch or one of that width, keep their cross K/V once per input where the decoder takes it so."""
        sp, b = self.engine.special, self.batch
        width = max(s.encoded[1].shape[0] for s in group)
        rows = [s for s in group for _ in range(s.n_rows)]
        widths = {s.n_rows for s in group}
        g = widths.pop() if len(widths) == 1 and self.engine.config.cross_per_source else 1
        if len(b) and g != b.group:
            g = 1
            b.unfold()
        cross = [
            stack_rows(group, lambda s, k=k: s.encoded[0][k], width, g == 1) for k in range(len(b.cross))
        ]
        mask = stack_rows(group, lambda s: s.encoded[1], width, g == 1)
        tokens = np.concatenate([first[id(s)][0] if first else [sp.bos] * s.n_rows for s in group])
        kv = [np.stack([first[id(s)][1][k] for s in rows]) for k in range(len(b.past))] if first else None
        start = len(b)
        b.add(cross, mask, tokens, kv, g)
        for s in group:
            s.row, start = start, start + s.n_rows

    def _first_steps(self, seqs: list[Sequence]) -> dict[int, tuple[np.ndarray, list[np.ndarray]]]:
        """The first decoder step of beams, one row each (CTranslate2 expands to beams after it): its k rows would
        all read BOS with the same cache, and only row 0's candidates count (the others start at score -inf).
        Returns per sequence (by id) its k rows' next tokens and the step's K/V (per layer (H, 1, Dh))."""
        if not seqs:
            return {}
        e = self.engine
        width = max(s.encoded[1].shape[0] for s in seqs)
        cross = [
            stack_rows(seqs, lambda s, k=k: s.encoded[0][k], width, False) for k in range(2 * e.n_layers)
        ]
        mask = stack_rows(seqs, lambda s: s.encoded[1], width, False)
        n = len(seqs)
        past = [np.zeros((n, e.n_heads, 0, e.d_head), np.float32)] * (2 * e.n_layers)
        logits, present = e.decode(
            np.full((n, 1), e.special.bos, np.int64),
            np.zeros((n, 1), np.int64),
            np.zeros((n, 0), np.int64),
            past,
            cross,
            mask,
        )
        top_lp, top_tok = e.top_logprobs(
            logits[:, -1], 2 * max(s.n_rows for s in seqs) + bool(self.rules.min_end)
        )
        out = {}
        for i, s in enumerate(seqs):
            k = s.n_rows  # the step's candidates as the k-row step would rank them: rows 1.. are at -inf
            lp, tok = np.repeat(top_lp[i : i + 1], k, 0), np.repeat(top_tok[i : i + 1], k, 0)
            if s.search.shapes:
                lp, tok = s.search.shaped(lp, tok)
            tokens, _ = s.search.advance_top(lp, tok)
            out[id(s)] = (tokens, [np.asarray(p[i]) for p in present])
        return out

    def _finish(self, s: Sequence) -> None:
        s.hypotheses = s.search.hypotheses()
        s.result = s.hypotheses[0].tokens if s.hypotheses else []
        s.encoded = None
        self.early.append(s)

    def step(self) -> StepOutput:
        """One decoder step for every row."""
        early, self.early = self.early, []
        if not self.seqs:
            return StepOutput(early, [])
        b = self.batch
        if b.stale():  # no newcomer took them for a while: stop computing them
            self._compact()
        b.trim()
        bans = (
            screen_bans(self.seqs, self.options_now() if self.n_pass else None, b.positions[:, 0])
            if self.engine.screen is not None
            else None
        )
        if bans is not None:  # greedy rows only: their tokens from the int8 screen (engine/screen.py)
            present, next_tokens = self.engine.decode_top1(
                b.tokens, b.positions, b.past_mask, b.past, b.cross, b.src_mask, bans
            )
            logp = None
        else:
            present, logits, next_tokens, logp, kept = self._decoded()
        parents = np.arange(len(b))
        streamed: list[tuple[Sequence, int]] = []
        beams: list[Sequence] = []
        for s in self.seqs:
            if isinstance(s.search, Greedy):
                tok = s.search.push(int(next_tokens[s.row]), 0.0 if logp is None else float(logp[s.row]))
                if s.stream:
                    streamed.append((s, tok))
            else:
                beams.append(s)
        if beams:  # every beam's candidates in one vector pass, then each beam picks among its own
            if kept is not None:
                logits[:, self.engine.suppressed] = kept
            rows = np.concatenate([np.arange(s.row, s.row + s.n_rows) for s in beams])
            beam_logits = (
                logits if len(rows) == len(logits) and (rows == np.arange(len(rows))).all() else logits[rows]
            )
            # one more candidate a row where the end token may be taken out (engine.search.Beam.shaped)
            n = 2 * max(s.n_rows for s in beams) + bool(self.rules.min_end)
            top_lp, top_tok = self.engine.top_logprobs(beam_logits, n)
            # regular steps by width (0: prefix steps), each group ranked together when large
            at, groups = (0, {})
            rules = self.rules.forced_eos_id is not None or self.rules.min_end  # an imported model's
            for s in beams:
                if rules and s.search.shapes:  # generate()'s end rules, after the log-softmax
                    r = slice(at, at + s.n_rows)
                    top_lp[r], top_tok[r] = s.search.shaped(top_lp[r], top_tok[r])
                groups.setdefault(s.n_rows if s.search.regular else 0, []).append((s, at))
                at += s.n_rows
            for k, group in groups.items():
                if k and len(group) >= VECTOR_MIN_BEAMS:
                    src = np.concatenate([np.arange(a, a + k) for _, a in group])
                    dst = np.concatenate([np.arange(s.row, s.row + k) for s, _ in group])
                    next_tokens[dst], par = advance_beams(
                        [s.search for s, _ in group], top_lp[src], top_tok[src]
                    )
                    parents[dst] = np.repeat([s.row for s, _ in group], k) + par
                    continue
                for s, a in group:  # a few beams, or prefix steps: each on its own
                    n = s.n_rows
                    next_tokens[s.row : s.row + n], par = s.search.advance_top(
                        top_lp[a : a + n], top_tok[a : a + n]
                    )
                    parents[s.row : s.row + n] = s.row + par
        b.advance(present, next_tokens)
        if beams:
            b.reorder(parents)
        finished = [s for s in self.seqs if s.search.done]
        for s in finished:
            s.hypotheses = s.search.hypotheses()
            s.result = s.hypotheses[0].tokens if s.hypotheses else []
        if finished:
            self.remove(finished)
        return StepOutput(early + finished, streamed)

    def _decoded(self):
        """The decoder step with full logits: (present K/V, logits (B, V), the one-row tokens, their log P or None,
        the suppressed tokens' logits that beams get back)."""
        b = self.batch
        if self.engine.io_binding:  # the cache stays in device memory from step to step
            past, cross = b.device_kv(self.engine.to_device)
            logits, present = self.engine.decode_bound(
                b.tokens, b.positions, b.past_mask, past, cross, b.src_mask
            )
        else:
            logits, present = self.engine.decode(
                b.tokens, b.positions, b.past_mask, b.past, b.cross, b.src_mask
            )
        logits = logits[:, -1]  # (B, V)
        sup, kept = self.engine.suppressed, None
        # never generated: out of every one-row choice; beams get them back, masked after the log-softmax
        if sup.size:
            kept = logits[:, sup].copy()
            logits[:, sup] = -np.inf
        picks = None
        if self.n_pass:  # rows with options: penalties and masks in place, their one-row tokens chosen
            picks = self.options_now().apply(logits, b.positions[:, 0], b.full_history())
        next_tokens = argmax_rows(
            self.seqs, self.n_pass, logits, picks
        )  # greedy rows keep these; beam rows overwrite theirs
        logp = None
        if picks is not None and picks.rows.size:
            next_tokens[picks.rows] = picks.tokens
            logp = np.zeros(len(b))
            logp[picks.rows] = picks.logp
        return present, logits, next_tokens, logp, kept

    def options_now(self) -> RowOptions:
        """The options of the rows that go through the logits pass, as vectors (rebuilt after the batch changed)."""
        if self.row_options is None:
            self.row_options = RowOptions(self.seqs, self.engine.special.eos, self.engine.special.unk)
        return self.row_options

    def remove(self, seqs: list[Sequence]) -> None:
        """Drop sequences (finished, cancelled or past their deadline): their rows are released for newcomers."""
        gone = {id(s) for s in seqs}
        self.early = [s for s in self.early if id(s) not in gone]
        live = {id(s) for s in self.seqs}
        seqs = [s for s in seqs if id(s) in live]
        passed = sum(s.needs_pass for s in seqs)
        if passed:
            self.n_pass -= passed
            self.row_options = None
        self.batch.release([r for s in seqs for r in range(s.row, s.row + s.n_rows)])
        self.seqs = [s for s in self.seqs if id(s) not in gone]
        if not self.seqs:
            self._compact()

    def _compact(self) -> None:
        order = sorted(self.seqs, key=lambda s: s.row)
        rows = [r for s in order for r in range(s.row, s.row + s.n_rows)]
        start = 0
        for s in order:
            s.row, start = start, start + s.n_rows
        self.batch.keep(np.array(rows, np.int64))
        self.row_options = None  # rows moved
