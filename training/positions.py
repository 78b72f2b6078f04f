"""Where a token is: §3.5's positional encodings added to the embeddings, or T5's relative position bias added to the
attention scores (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
Transformer", §2.1; Shaw et al. 2018 before it)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class PositionalEncoding(nn.Module):
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    ``sinusoid_half`` lays the same values out as all sines, then all cosines (Marian, Pegasus), computed in float64
    as its trainer did, so positions agree to the last bit; ``sinusoid_fairseq`` is fairseq's table (M2M100, NLLB:
    frequencies spaced over d/2 - 1 steps, float32); ``learned`` is a stored table. In every kind the row for
    position p is p + offset (the families that reserve the first rows: fairseq's start after the padding id)."""

    def __init__(self, d_model: int, max_len: int, kind: str = "sinusoid", offset: int = 0):
        super().__init__()
        self.offset = offset
        if kind == "learned":
            self.table = nn.Embedding(max_len + offset, d_model)  # a weight, loaded with the others
            return
        rows = max_len + offset
        if kind == "sinusoid":
            pos = torch.arange(rows, dtype=torch.float32).unsqueeze(1)  # (L, 1)
            inv_freq = torch.exp(
                torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
            )
            pe = torch.zeros(rows, d_model)
            pe[:, 0::2] = torch.sin(pos * inv_freq)
            pe[:, 1::2] = torch.cos(pos * inv_freq)
        elif (
            kind == "sinusoid_fairseq"
        ):  # as fairseq computes it (M2M100SinusoidalPositionalEmbedding), to the bit
            half = d_model // 2
            freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
            angle = torch.arange(rows, dtype=torch.int64).float().unsqueeze(1) * freq.unsqueeze(0)
            pe = torch.cat([torch.sin(angle), torch.cos(angle), torch.zeros(rows, d_model % 2)], dim=1)
        else:  # sinusoid_half
            pos = torch.arange(rows, dtype=torch.float64).unsqueeze(1)  # (L, 1)
            angle = pos / torch.pow(
                10000.0, torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
            )  # (L, ceil(d/2))
            pe = torch.cat([torch.sin(angle), torch.cos(angle[:, : d_model // 2])], dim=1).float()
        self.register_buffer("pe", pe, persistent=False)  # a function of the config, not a weight

    def forward(self, positions: Tensor) -> Tensor:
        # Explicit positions (B, T) rather than arange: a decode step of a batch whose rows
        # joined at different times feeds each row its own position.
        if hasattr(self, "table"):
            return self.table(positions + self.offset)  # (B, T, d_model)
        return self.pe[positions + self.offset if self.offset else positions]  # (B, T, d_model)


def relative_buckets(distance: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each distance key - query (Mesh TensorFlow's ``_relative_position_bucket``): half the buckets
    (of each direction, where both are told apart) hold one distance each, the rest distances logarithmically wider
    up to ``max_distance``, past which all share the last. A causal stack sees no positive distance: they count as 0.
    The same float32 operations as transformers' T5, so the buckets at the boundaries of the logarithmic ones agree."""
    bucket = torch.zeros_like(distance)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (distance > 0).long() * num_buckets
        distance = distance.abs()
    else:
        distance = -torch.min(distance, torch.zeros_like(distance))
    exact = num_buckets // 2
    wide = exact + (
        torch.log(distance.float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)
    ).to(torch.long)
    wide = torch.min(wide, torch.full_like(wide, num_buckets - 1))
    return bucket + torch.where(distance < exact, distance, wide)


class RelativePositionBias(nn.Module):
    """A learned scalar per head and bucket of key - query distance, added to a stack's self-attention scores in every
    layer (T5 learns it in the first layer of each stack and shares it with the others).

    Positions are each row's own (B, T) for queries and (B, L) for keys, so that rows of a batch that joined at
    different steps (the engine's continuous batching) each see their own distances. Distances past
    ``max_distance`` all fall in the last bucket, so the buckets are one table of the distances -max..max, computed
    once (a buffer: a function of the config, not a weight), and a step looks its distances up in it."""

    def __init__(self, n_heads: int, num_buckets: int, max_distance: int, bidirectional: bool):
        super().__init__()
        self.bias = nn.Embedding(num_buckets, n_heads)  # the weight T5 calls relative_attention_bias
        self.max_distance, self.num_buckets, self.bidirectional = max_distance, num_buckets, bidirectional
        self.register_buffer("buckets", self.bucket_table(), persistent=False)

    def bucket_table(self) -> Tensor:
        """(2 max_distance + 1,) the bucket of each distance from -max_distance to max_distance."""
        d = torch.arange(-self.max_distance, self.max_distance + 1, dtype=torch.long)
        return relative_buckets(d, self.bidirectional, self.num_buckets, self.max_distance)

    def forward(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        """query_positions (B, T), key_positions (B, L) -> the additive bias (B, H, T, L)."""
        distance = key_positions[:, None, :] - query_positions[:, :, None]  # (B, T, L)
        at = distance.clamp(-self.max_distance, self.max_distance) + self.max_distance
        return self.bias(self.buckets[at]).permute(0, 3, 1, 2)  # (B, T, L, H) -> (B, H, T, L)
