"""Length-bucketed batches (§5.1: "sentence pairs were batched together by approximate sequence length")."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from contract.config import ModelConfig
from contract.text import TextCodec
from training.tasks import Pair


@dataclass
class Batch:
    src: Tensor  # (B, S) ids, padded
    src_mask: Tensor  # (B, S) 1 = token
    tgt_in: Tensor  # (B, T) BOS y1 .. yn, padded
    tgt_out: Tensor  # (B, T) y1 .. yn EOS, padded

    def to(self, device: str | torch.device) -> "Batch":
        return Batch(*(t.to(device) for t in (self.src, self.src_mask, self.tgt_in, self.tgt_out)))

    @property
    def n_tokens(self) -> int:
        return int((self.tgt_out != 0).sum()) if self.tgt_out.numel() else 0


def encode_pairs(pairs: Sequence[Pair], codec: TextCodec, max_len: int) -> list[tuple[list[int], list[int]]]:
    """Tokenise once; pairs longer than the model's max_len are dropped (and counted by the caller)."""
    out = []
    for src, tgt in pairs:
        s, t = codec.source_ids(src), codec.target_ids(tgt)
        if len(s) <= max_len and len(t) + 1 <= max_len:
            out.append((s, t))
    return out


def pad(rows: list[list[int]], pad_id: int) -> Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad_id] * (width - len(r)) for r in rows], dtype=torch.long)


def collate(examples: Sequence[tuple[list[int], list[int]]], config: ModelConfig) -> Batch:
    sp = config.special
    src = pad([s for s, _ in examples], sp.pad)
    tgt_in = pad([[sp.bos, *t] for _, t in examples], sp.pad)
    tgt_out = pad([[*t, sp.eos] for _, t in examples], sp.pad)
    return Batch(src, (src != sp.pad).long(), tgt_in, tgt_out)


def bucketed_batches(
    examples: Sequence[tuple[list[int], list[int]]],
    batch_size: int,
    config: ModelConfig,
    seed: int | None,
    rank: int = 0,
    world: int = 1,
) -> Iterator[Batch]:
    """Sort by length inside pools of 50 batches, cut batches, shuffle the batches.

    With ``seed=None`` the order is fixed (evaluation). Under data parallelism every rank
    builds the same batch list from the same seed and takes every world-th batch.
    """
    order = list(range(len(examples)))
    rng = random.Random(seed)
    if seed is not None:
        rng.shuffle(order)
    pool = batch_size * 50
    batches = []
    for i in range(0, len(order), pool):
        chunk = sorted(order[i : i + pool], key=lambda j: (len(examples[j][0]), len(examples[j][1])))
        batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    if seed is not None:
        rng.shuffle(batches)
    if world > 1:  # equal counts per rank, or one rank would wait forever in all-reduce
        batches = batches[: len(batches) // world * world][rank::world]
    for idx in batches:
        yield collate([examples[j] for j in idx], config)
