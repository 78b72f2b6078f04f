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


def token_batches(
    chunk: list[int], examples: Sequence[tuple[list[int], list[int]]], max_tokens: int
) -> list[list[int]]:
    """Cut a length-sorted run of example indices into batches of at most ``max_tokens`` padded tokens.

    §5.1: "each training batch contained a set of sentence pairs containing approximately 25000
    source tokens and 25000 target tokens". The cost of a batch is its padded size, rows x the
    longest side (+1 for BOS/EOS), so short strings come in large batches and long ones in small.
    """
    batches: list[list[int]] = []
    cur: list[int] = []
    width = 0
    for j in chunk:
        w = max(width, len(examples[j][0]), len(examples[j][1]) + 1)
        if cur and w * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, w = [], max(len(examples[j][0]), len(examples[j][1]) + 1)
        cur.append(j)
        width = w
    if cur:
        batches.append(cur)
    return batches


def bucketed_batches(
    examples: Sequence[tuple[list[int], list[int]]],
    batch_size: int,
    config: ModelConfig,
    seed: int | None,
    rank: int = 0,
    world: int = 1,
    max_tokens: int = 0,
) -> Iterator[Batch]:
    """Sort by length inside pools, cut batches, shuffle the batches.

    Batches hold ``batch_size`` sentences, or, with ``max_tokens``, as many as fit in that many
    padded tokens (a pool is then 50 batches of the average size). With ``seed=None`` the order
    is fixed (evaluation). Under data parallelism every rank builds the same batch list from the
    same seed and takes every world-th batch.
    """
    for idx in batch_indices(examples, batch_size, seed, rank, world, max_tokens):
        yield collate([examples[j] for j in idx], config)


def batch_indices(
    examples: Sequence[tuple[list[int], list[int]]],
    batch_size: int,
    seed: int | None,
    rank: int = 0,
    world: int = 1,
    max_tokens: int = 0,
) -> list[list[int]]:
    """The batches of :func:`bucketed_batches` as index lists (cheap: its length is the epoch's step count)."""
    order = list(range(len(examples)))
    rng = random.Random(seed)
    if seed is not None:
        rng.shuffle(order)
    if max_tokens:
        mean_width = sum(max(len(s), len(t) + 1) for s, t in examples) / max(len(examples), 1)
        pool = max(1, int(max_tokens / max(mean_width, 1))) * 50
    else:
        pool = batch_size * 50
    batches: list[list[int]] = []
    for i in range(0, len(order), pool):
        chunk = sorted(order[i : i + pool], key=lambda j: (len(examples[j][0]), len(examples[j][1])))
        if max_tokens:
            batches += token_batches(chunk, examples, max_tokens)
        else:
            batches += [chunk[k : k + batch_size] for k in range(0, len(chunk), batch_size)]
    if seed is not None:
        rng.shuffle(batches)
    if world > 1:  # equal counts per rank, or one rank would wait forever in all-reduce
        batches = batches[: len(batches) // world * world][rank::world]
    return batches
