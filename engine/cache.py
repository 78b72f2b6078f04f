"""The running batch's KV cache: rows that join, leave and (for beams) reorder between decode steps.

Layout, per decoder layer: self-attention K and V (B, H, P, Dh), cross-attention K and V
(B / group, H, S, Dh). A row that joins a running batch gets P zero columns marked 0 in ``past_mask``:
holes that attention ignores, so every row decodes exactly as it would alone.

Cross K/V and the source mask are kept once per ``group`` rows: a batch of beams of one width g, on a decoder that
takes them per source (``BundleConfig.cross_per_source``), keeps one copy per input where a per-row cache repeated
it g times (a quarter of the memory and of the cross-attention's reads at beam 4). Rows of another width joining
it ``unfold`` it to one copy per row (group 1, what every other batch is).

A row that leaves is only *released*: its slot is masked and handed to the next newcomer, which
is written into it in place (``fill``). Under steady load, sequences join and leave every step,
and copying the whole cache each time (as compacting would) cost about a quarter of decode time
(docs/BENCHMARKS.md, the step profile). A released row goes on being computed (masked, at position 0) for up to
``KEEP_RELEASED_STEPS`` steps: in a server, the next request arrives a round trip after the last
answer left, a step or two later, and compacting in between and then appending the newcomer copied
the whole cache twice per step (``stale`` says when to compact; ``keep`` does it). Leading columns
that no live row uses are dropped once they are a quarter of the cache.

With IOBinding (``Runner.io_binding``, the default on CUDA) the self-attention cache lives in
device memory between steps: ``advance`` keeps the step's present K/V as OrtValues, so a plain
step never copies the cache through the host, and neither does the commonest change under load:
a row released and refilled by a newcomer touches only host-side masks and the cross K/V
(uploaded again, once). Rarer row operations (appending rows, compaction, trimming, beam
reordering) work on numpy: they first bring the cache back (``host_syncs`` counts those round
trips) and the next step uploads it again.
"""

from __future__ import annotations

import numpy as np

# Steps a released row is computed for nothing while it waits for a newcomer, and the share of the batch such rows
# may take, before the batch is compacted (see the module docstring).
KEEP_RELEASED_STEPS = 2
KEEP_RELEASED_SHARE = 0.5


def _capacity(n: int, step: int = 8) -> int:
    """n rounded up to a multiple of step: widening a source axis by a few columns at a time would copy it
    again and again; masked spare columns cost cross-attention next to nothing."""
    return -(-n // step) * step


def pad_axis(a: np.ndarray, axis: int, size: int) -> np.ndarray:
    """Zero-pad one axis at the end (np.pad's generality costs ~60 us a call on the per-request path)."""
    if a.shape[axis] == size:
        return a
    shape = list(a.shape)
    shape[axis] = size
    out = np.zeros(shape, a.dtype)
    out[tuple(slice(0, n) for n in a.shape)] = a
    return out


def free_run(free: list[int], n: int) -> int | None:
    """The first row of n consecutive released rows, if there are; appending a beam instead copies the whole
    cache, and so does compacting the rows a finished beam left (together a sixth of a beam-4 step's time)."""
    if len(free) < n:
        return None
    rows = sorted(free)
    for i in range(len(rows) - n + 1):
        if rows[i + n - 1] - rows[i] == n - 1:
            return rows[i]
    return None


def stack_rows(group: list, part, width: int, each: bool = True) -> np.ndarray:
    """One array of every row of ``group``'s sequences (a beam's rows repeat its own; one row each unless ``each``),
    ``part(s)`` of each ((H, S, Dh) cross K/V or (S,) mask) zero-padded to ``width`` on its source axis: written once
    into place, where padding each row and stacking them copied every row twice."""
    first = part(group[0])
    axis = first.ndim - 2 if first.ndim > 1 else 0  # the source axis
    shape = list(first.shape)
    shape[axis] = width
    n = [s.n_rows if each else 1 for s in group]
    out = np.zeros((sum(n), *shape), first.dtype)
    at = 0
    for s, k in zip(group, n):
        a = part(s)
        out[(slice(at, at + k),) + (slice(None),) * axis + (slice(0, a.shape[axis]),)] = a
        at += k
    return out


def pad_batch(rows: list[list[int]], pad: int) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad, np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
    return ids, (ids != pad).astype(np.int64)


class DecodeBatch:
    def __init__(self, n_layers: int, n_heads: int, d_head: int, dtype=np.float32):
        self.n_layers = n_layers
        self.shape_hd = (n_heads, d_head)
        self.dtype = dtype
        z = np.zeros((0, n_heads, 0, d_head), dtype)
        self.past: list[np.ndarray] = [z] * (2 * n_layers)  # flat [k0, v0, k1, v1, ...]  (B, H, P, Dh)
        self.cross: list[np.ndarray] = [z] * (2 * n_layers)  # (B / group, H, S, Dh)
        self.past_mask = np.zeros((0, 0), np.int64)  # (B, P)
        self.src_mask = np.zeros((0, 0), np.int64)  # (B / group, S)
        self.group = 1  # rows per cross K/V entry: a beam's width, or 1 (see the module docstring)
        self.tokens = np.zeros((0, 1), np.int64)  # (B, 1) next token to feed
        self.positions = np.zeros((0, 1), np.int64)  # (B, 1) its position
        self.free: list[int] = []  # released rows, reused by ``fill``
        self.released_at: dict[int, int] = {}  # free row -> the step it was released at
        self.steps = 0  # steps advanced since the batch was (re)built
        # The tokens each row generated, one column per cached position (-1: BOS, a hole, or before the row's
        # first): what repetition penalties and n-gram bans look at. Kept only while a row needs it.
        self.history: np.ndarray | None = None  # (B, P) int64
        # Device-resident copies (IOBinding): when dev_past is set it is the cache and ``past`` is stale.
        self.dev_past: list | None = None
        self.dev_cross: list | None = None  # mirrors ``cross``; dropped whenever cross changes
        # device -> host round trips so far (kept across resets)
        self.host_syncs = getattr(self, "host_syncs", 0)

    def _host(self) -> None:
        """Bring a device-resident cache back into numpy before a row operation."""
        if self.dev_past is not None:
            self.past = [v.numpy() for v in self.dev_past]
            self.dev_past = None
            self.host_syncs += 1

    def device_kv(self, to_device) -> tuple[list, list]:
        """The past and cross K/V as device values, uploading (``to_device``) whichever changed since the last step."""
        if self.dev_past is None:
            self.dev_past = to_device(self.past)
        if self.dev_cross is None:
            self.dev_cross = to_device(self.cross)
        return self.dev_past, self.dev_cross

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def past_len(self) -> int:
        return self.past_mask.shape[1]

    def add(
        self,
        cross: list[np.ndarray],
        src_mask: np.ndarray,
        tokens: np.ndarray,
        first_kv: list[np.ndarray] | None = None,
        group: int = 1,
    ) -> None:
        """Append rows (their encoder's cross K/V and source mask, one per ``group`` rows) fed ``tokens`` (one
        each). Without ``first_kv`` they start at position 0; with it (per layer (b_new, H, 1, Dh): a beam's first
        step, run before it joined, ``StepLoop.add``) they hold that position's K/V in the last cache column and go
        on at position 1. A running batch takes only its own ``group``."""
        b_new = len(tokens)
        self.dev_cross = None
        tokens = np.asarray(tokens, np.int64).reshape(b_new, 1)
        if not len(self):  # an idle batch: the newcomers are the batch (no padding, no copies)
            self.group = group
            self.dev_past = None
            self.cross, self.src_mask = list(cross), src_mask
            p = 0 if first_kv is None else 1
            self.past = (
                [np.zeros((b_new, *self.shape_hd[:1], 0, self.shape_hd[1]), self.dtype)] * (2 * self.n_layers)
                if first_kv is None
                else [np.ascontiguousarray(a, self.dtype) for a in first_kv]
            )
            self.past_mask = np.ones((b_new, p), np.int64)
            self.tokens = tokens
            self.positions = np.full((b_new, 1), p, np.int64)
            if self.history is not None:
                self.history = np.full((b_new, p), -1, np.int64)
            return
        if first_kv is not None:
            raise ValueError("rows with their first step done join an idle batch only")
        if group != self.group:
            raise ValueError(f"rows of {group} per source join a batch of {self.group} only after unfold()")
        self._host()
        s = max(self.src_mask.shape[1], src_mask.shape[1])
        self.cross = [
            np.concatenate([pad_axis(old, 2, s), pad_axis(new, 2, s)]) for old, new in zip(self.cross, cross)
        ]
        self.src_mask = np.concatenate([pad_axis(self.src_mask, 1, s), pad_axis(src_mask, 1, s)])
        p = self.past_len
        hole = np.zeros((b_new, *self.shape_hd[:1], p, self.shape_hd[1]), self.dtype)
        self.past = [np.concatenate([old, hole]) for old in self.past]
        self.past_mask = np.concatenate([self.past_mask, np.zeros((b_new, p), np.int64)])
        self.tokens = np.concatenate([self.tokens, tokens])
        self.positions = np.concatenate([self.positions, np.zeros((b_new, 1), np.int64)])
        if self.history is not None:
            self.history = np.concatenate([self.history, np.full((b_new, p), -1, np.int64)])

    def track_history(self) -> None:
        """Start keeping ``history`` (rows already running get none: only newcomers ask for it)."""
        if self.history is None:
            self.history = np.full((len(self), self.past_len), -1, np.int64)

    def full_history(self) -> np.ndarray | None:
        """Every token each row has generated, the one fed this step included, right-aligned, -1 before."""
        if self.history is None:
            return None
        return np.concatenate([self.history, np.where(self.positions == 0, -1, self.tokens)], axis=1)

    def release(self, rows: list[int]) -> None:
        """Rows whose sequence left: masked out (so they pin no cache column) and offered to newcomers."""
        self.past_mask[rows] = 0
        self.free.extend(rows)
        self.released_at.update(dict.fromkeys(rows, self.steps))

    def stale(self) -> bool:
        """Released rows have waited too long for newcomers, or take too much of the batch: compact now."""
        if not self.free:
            return False
        if len(self.free) > KEEP_RELEASED_SHARE * len(self):
            return True
        return self.steps - min(self.released_at[r] for r in self.free) >= KEEP_RELEASED_STEPS

    def unfold(self) -> None:
        """Cross K/V and the source mask once per row again (group 1): rows of another width are joining."""
        if self.group == 1:
            return
        self.cross = [np.repeat(a, self.group, axis=0) for a in self.cross]
        self.src_mask = np.repeat(self.src_mask, self.group, axis=0)
        self.group, self.dev_cross = 1, None

    def fill(self, row: int, cross: list[np.ndarray], src_mask: np.ndarray, first_token: int) -> None:
        """Write one newcomer (cross K/V (H, S', Dh), mask (S',)) into a released row, in place (with a group, the
        first row of a released group writes the group's cross K/V; its other rows only their own state)."""
        self.dev_cross = None
        s_new, s = src_mask.shape[0], self.src_mask.shape[1]
        if s_new > s:  # a longer source than any in the batch: widen (a copy), with room for the next ones
            width = _capacity(s_new)
            self.cross = [pad_axis(a, 2, width) for a in self.cross]
            self.src_mask = pad_axis(self.src_mask, 1, width)
        # Only the newcomer's own columns are written. What the previous occupant left in the rest of the
        # row (cross K/V past s_new, all of its self-attention K/V) stays: masked (src_mask / past_mask 0),
        # it adds exactly 0 to attention. That halves a refill's memory traffic, and a device-resident
        # cache needs no round trip for a newcomer.
        if row % self.group == 0:
            at = row // self.group
            for a, c in zip(self.cross, cross):
                a[at, :, :s_new] = c
            self.src_mask[at] = 0
            self.src_mask[at, :s_new] = src_mask
        self.past_mask[row] = 0
        if self.history is not None:
            self.history[row] = -1
        self.tokens[row], self.positions[row] = first_token, 0
        self.free.remove(row)
        del self.released_at[row]

    def trim(self) -> None:
        """Drop leading columns no row uses (every row alive then has left) once they are a quarter of P."""
        used = self.past_mask.any(axis=0)
        first = int(used.argmax()) if used.any() else self.past_len
        if first and first * 4 >= self.past_len:
            self._host()
            self.past = [np.ascontiguousarray(a[:, :, first:]) for a in self.past]
            self.past_mask = self.past_mask[:, first:]
            if self.history is not None:
                self.history = self.history[:, first:]

    def advance(self, present: list[np.ndarray], next_tokens: np.ndarray) -> None:
        """After a step: the present K/V (numpy, or OrtValues that stay on the device) become the past, each
        row's next token is fed at position + 1."""
        if isinstance(present[0], np.ndarray):
            self.past, self.dev_past = present, None
        else:
            self.past, self.dev_past = None, present
        self.past_mask = np.concatenate([self.past_mask, np.ones((len(self), 1), np.int64)], axis=1)
        if self.history is not None:
            self.history = self.full_history()
        self.tokens = next_tokens.reshape(-1, 1).astype(np.int64)
        self.positions = self.positions + 1
        self.steps += 1
        # released rows wait at position 0 attending to nothing but their own token (finite, ignored)
        if self.free:
            self.past_mask[self.free] = 0
            self.positions[self.free] = 0

    def reorder(self, parents: np.ndarray) -> None:
        """Row i takes row parents[i]'s self-attention cache (beam search); cross K/V, masks and positions
        are equal within a beam group, so only the past K/V move."""
        moved = np.flatnonzero(parents != np.arange(len(parents)))
        if not moved.size:
            return
        self._host()
        # Only the rows that continue another row are copied (in place: the right side is gathered first);
        # a full gather copied every row's cache, greedy neighbours' included, at every step.
        src = parents[moved]
        for a in self.past:
            a[moved] = a[src]
        if self.history is not None:
            self.history[moved] = self.history[src]

    def keep(self, rows: np.ndarray) -> None:
        """Keep these rows (in this order), drop the rest (released ones included), then drop columns no row uses."""
        self.free = []
        self.released_at = {}
        self._host()
        self.dev_cross = None
        self.past = [a[rows] for a in self.past]
        sources = rows[:: self.group] // self.group  # rows come in whole groups, each group's in order
        self.cross = [a[sources] for a in self.cross]
        self.past_mask, self.src_mask = self.past_mask[rows], self.src_mask[sources]
        self.tokens, self.positions = self.tokens[rows], self.positions[rows]
        if self.history is not None:
            self.history = self.history[rows]
        live_p = self.past_mask.any(axis=0)
        if len(rows) and not live_p.all():
            self.past = [a[:, :, live_p] for a in self.past]
            self.past_mask = self.past_mask[:, live_p]
            if self.history is not None:
                self.history = self.history[:, live_p]
        live_s = self.src_mask.any(axis=0)
        if len(rows) and not live_s.all():
            # Source padding is a suffix, so keeping the live columns keeps a prefix.
            self.cross = [a[:, :, live_s] for a in self.cross]
            self.src_mask = self.src_mask[:, live_s]
        if not len(rows):
            self.__init__(self.n_layers, *self.shape_hd, self.dtype)
