"""The running batch's KV cache for a decoder that writes it in place (bundle format 9, ``names.PAST_LENGTHS``).

Per decoder layer, self-attention K and V are each one buffer (B, H, C, Dh): row b's past is its first
``lengths[b]`` positions, from position 0, whatever step it joined at, so there are no hole columns and no padded
past axis that every row pays for. The step's graph (GroupQueryAttention with each row's length, export/fused.py)
writes the new token's K/V after the row's own past and reads nothing beyond it; the runner binds each buffer as
both the step's past input and its present output (IOBinding over OrtValues that share the numpy memory), so a
step copies no cache, and the row operations here edit the same buffers in numpy.

C, the capacity, grows by ``CHUNK`` positions when the longest row reaches it (one copy of the live positions per
CHUNK steps, where the appending graph copied the whole cache every step). A newcomer in a released row needs
nothing written to its self-attention cache: its length is 0. Cross K/V, masks, tokens and positions are kept as
``DecodeBatch`` keeps them.
"""

from __future__ import annotations

import numpy as np

from engine.cache import DecodeBatch, pad_axis

CHUNK = 16  # positions the capacity grows by
# Source columns the cross K/V widen by when a newcomer's source is longer than the batch's: each widening copies
# every row's cross K/V (a third of a beam-4 generate's numpy time at 8); masked spare columns cost next to nothing.
SOURCE_CHUNK = 32


def _room(n: int) -> int:
    return -(-max(n, 1) // CHUNK) * CHUNK


class InplaceBatch(DecodeBatch):
    """``DecodeBatch``'s interface; ``past_mask`` here is each row's cached length (B,) int32, what the in-place
    decoder takes in the mask's place, and ``past`` the per-layer buffers (B, H, C, Dh)."""

    def __init__(self, n_layers: int, n_heads: int, d_head: int, dtype=np.float32):
        super().__init__(n_layers, n_heads, d_head, dtype)
        self.past_mask = np.zeros(0, np.int32)

    @property
    def lengths(self) -> np.ndarray:
        return self.past_mask

    @property
    def past_len(self) -> int:
        """The history's width (``DecodeBatch.track_history``): the longest row's past."""
        return int(self.past_mask.max()) if self.past_mask.size else 0

    @property
    def capacity(self) -> int:
        return self.past[0].shape[2]

    def _buffers(self, rows: int, capacity: int) -> list[np.ndarray]:
        h, d = self.shape_hd
        return [np.zeros((rows, h, capacity, d), self.dtype) for _ in range(2 * self.n_layers)]

    def add(self, cross, src_mask, tokens, first_kv=None) -> None:
        """As ``DecodeBatch.add``; the newcomers start at length 0 (1 with ``first_kv``: its K/V at position 0)."""
        b_new = src_mask.shape[0]
        tokens = np.asarray(tokens, np.int64).reshape(b_new, 1)
        p = 0 if first_kv is None else 1
        if not len(self):
            self.cross, self.src_mask = list(cross), src_mask
            self.past = self._buffers(b_new, CHUNK)
            if first_kv is not None:
                for a, kv in zip(self.past, first_kv):
                    a[:, :, :1] = kv
            self.past_mask = np.full(b_new, p, np.int32)
            self.tokens = tokens
            self.positions = np.full((b_new, 1), p, np.int64)
            if self.history is not None:
                self.history = np.full((b_new, p), -1, np.int64)
            return
        if first_kv is not None:
            raise ValueError("rows with their first step done join an idle batch only")
        s = max(self.src_mask.shape[1], src_mask.shape[1])
        self.cross = [
            np.concatenate([pad_axis(old, 2, s), pad_axis(new, 2, s)]) for old, new in zip(self.cross, cross)
        ]
        self.src_mask = np.concatenate([pad_axis(self.src_mask, 1, s), pad_axis(src_mask, 1, s)])
        b, live = len(self), self.past_len
        grown = self._buffers(b + b_new, self.capacity)
        for new, old in zip(grown, self.past):
            new[:b, :, :live] = old[:, :, :live]
        self.past = grown
        self.past_mask = np.concatenate([self.past_mask, np.zeros(b_new, np.int32)])
        self.tokens = np.concatenate([self.tokens, tokens])
        self.positions = np.concatenate([self.positions, np.zeros((b_new, 1), np.int64)])
        if self.history is not None:
            self.history = np.concatenate(
                [self.history, np.full((b_new, self.history.shape[1]), -1, np.int64)]
            )

    def fill(self, row: int, cross, src_mask: np.ndarray, first_token: int) -> None:
        """As ``DecodeBatch.fill``; a longer source widens the batch's cross K/V by whole SOURCE_CHUNKs."""
        if src_mask.shape[0] > self.src_mask.shape[1]:
            width = -(-src_mask.shape[0] // SOURCE_CHUNK) * SOURCE_CHUNK
            self.cross = [pad_axis(a, 2, width) for a in self.cross]
            self.src_mask = pad_axis(self.src_mask, 1, width)
        super().fill(row, cross, src_mask, first_token)

    def trim(self) -> None:
        """Before a step: room for its position in every row (no columns to drop: a row's past is its own)."""
        live = self.past_len
        if live < self.capacity:
            return
        grown = self._buffers(len(self), _room(live + 1))
        for new, old in zip(grown, self.past):
            new[:, :, :live] = old[:, :, :live]
        self.past = grown

    def advance(self, present, next_tokens: np.ndarray) -> None:
        """After a step: ``present`` are the buffers the step wrote in place; each row's past is one longer."""
        self.past_mask += 1
        if self.history is not None:
            self.history = self.full_history()
        self.tokens = next_tokens.reshape(-1, 1).astype(np.int64)
        self.positions = self.positions + 1
        self.steps += 1
        if self.free:  # released rows wait at position 0 over an empty past
            self.past_mask[self.free] = 0
            self.positions[self.free] = 0

    def reorder(self, parents: np.ndarray) -> None:
        """Row i takes row parents[i]'s cache (beam search): only the rows whose parent changed, and only their
        live positions (a beam's rows are equally long)."""
        moved = np.flatnonzero(parents != np.arange(len(parents)))
        if not moved.size:
            return
        src = parents[moved]
        live = int(self.past_mask[src].max())
        for a in self.past:
            a[moved, :, :live] = a[src, :, :live]  # the right side is gathered first: in place is safe
        self.past_mask[moved] = self.past_mask[src]
        if self.history is not None:
            self.history[moved] = self.history[src]

    def keep(self, rows: np.ndarray) -> None:
        """Keep these rows (in this order), drop the rest; the buffers keep the live positions only."""
        self.free, self.released_at = [], {}
        if not len(rows):
            self.__init__(self.n_layers, *self.shape_hd, self.dtype)
            return
        self.past_mask = self.past_mask[rows]
        live = self.past_len
        kept = self._buffers(len(rows), _room(live + 1))
        for new, old in zip(kept, self.past):
            new[:, :, :live] = old[rows, :, :live]
        self.past = kept
        self.cross = [a[rows] for a in self.cross]
        self.src_mask = self.src_mask[rows]
        self.tokens, self.positions = self.tokens[rows], self.positions[rows]
        if self.history is not None:
            self.history = self.history[rows]
            used = (self.history >= 0).any(axis=0)
            self.history = self.history[:, int(used.argmax()) if used.any() else used.size :]
        live_s = self.src_mask.any(axis=0)
        if not live_s.all():  # source padding is a suffix: keeping the live columns keeps a prefix
            # contiguous once here, or binding them to the step would copy them at every step
            self.cross = [np.ascontiguousarray(a[:, :, live_s]) for a in self.cross]
            self.src_mask = np.ascontiguousarray(self.src_mask[:, live_s])
