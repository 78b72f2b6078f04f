"""The model's attention as custom operators: one each for the export to map to ONNX Runtime's fused kernels
(export/fused.py), their eager bodies the written-out §3.2.1 math the exported graphs are validated against."""

from __future__ import annotations

import torch
from torch import Tensor

# Added to attention scores of masked positions. A large finite value rather than -inf keeps a
# fully masked row (a padding row of a batch) finite instead of NaN; exp(-1e9) is exactly 0 in
# float32, so real rows are unaffected.
MASKED = -1e9


def mask_bias(keep: Tensor) -> Tensor:
    """A boolean mask as the additive bias attention takes: 0 where seen, MASKED where not. Additive, not
    boolean, so that a fully masked row (a padding row of a batch) stays finite; built once per pass."""
    return torch.where(keep, 0.0, MASKED)  # one Where node in the exported graphs


@torch.library.custom_op("s2s::attention", mutates_args=())
def attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int, scale: float) -> Tensor:
    """§3.2.1 for all heads at once: softmax(Q K^T * scale + bias) V with the heads merged again, scale 1/sqrt(d_k).

    q: (B, T, H Dh) projected queries; k, v: (B, H, L, Dh); bias: additive, broadcastable to (B, H, T, L), 0 where a
    position is seen and MASKED where not (plus T5's position bias per head). One operator so that the export can map it to ONNX
    Runtime's fused com.microsoft.MultiHeadAttention (export/fused.py) instead of ~10 nodes per
    attention; this eager body is the reference the exported graphs are validated against.
    """
    b, t, d = q.shape
    d_k = d // n_heads
    qh = q.view(b, t, n_heads, d_k).transpose(1, 2)  # (B, H, T, Dh)
    attn = ((qh @ k.transpose(-2, -1)) * scale + bias).softmax(dim=-1)  # (B, H, T, L)
    return (attn @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, H Dh)


@attention.register_fake
def _(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, n_heads: int, scale: float) -> Tensor:
    return torch.empty_like(q)


@torch.library.custom_op("s2s::cached_attention", mutates_args=())
def cached_attention(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    past_k: Tensor,
    past_v: Tensor,
    bias: Tensor,
    n_heads: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Decoder self-attention over the cache: the new tokens' keys and values appended to it, then §3.2.1.

    q, k_new, v_new: (B, T, H Dh) projections of the T new tokens; past_k, past_v: (B, H, P, Dh); bias as
    ``attention``'s, (B, 1, T, P+T). Returns the attention (B, T, d_model) and the cache with the new tokens,
    (B, H, P+T, Dh) each. One operator so that the export can map the append and the attention together to ONNX
    Runtime's GroupQueryAttention, which appends inside its kernel (export/fused.py); this eager body (a Concat,
    then ``attention``) is what the exported graphs are validated against."""
    b, t, d = k_new.shape
    k = torch.cat([past_k, k_new.view(b, t, n_heads, d // n_heads).transpose(1, 2)], dim=2)  # (B, H, P+T, Dh)
    v = torch.cat([past_v, v_new.view(b, t, n_heads, d // n_heads).transpose(1, 2)], dim=2)
    return attention(q, k, v, bias, n_heads, scale), k, v


@cached_attention.register_fake
def _(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    past_k: Tensor,
    past_v: Tensor,
    bias: Tensor,
    n_heads: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    b, h, p, d_k = past_k.shape
    present = past_k.new_empty(b, h, p + k_new.shape[1], d_k)
    return torch.empty_like(q), present, torch.empty_like(present)


@torch.library.custom_op("s2s::inplace_attention", mutates_args=())
def inplace_attention(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    cache_k: Tensor,
    cache_v: Tensor,
    lengths: Tensor,
    n_heads: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Decoder self-attention over a cache written in place: row b's first lengths[b] positions of cache_k/v
    (B, H, C, Dh) hold its past (it started at position 0, so no holes and no padded axis), the T new tokens'
    keys and values go to positions lengths[b].. and each attends to the positions up to its own. Returns the
    attention (B, T, d_model) and the cache with the new tokens written, (B, H, C, Dh) each; C >= lengths + T.
    The export maps it to GroupQueryAttention with per-row lengths (seqlens_k) and one buffer bound as both past
    and present (export/fused.py), so a step reads each row's own positions and copies no cache."""
    b, t, d = k_new.shape
    cols = lengths.long()[:, None] + torch.arange(t, device=q.device)  # (B, T) where the new tokens go
    at = cols[:, None, :, None].expand(b, n_heads, t, d // n_heads)
    k = cache_k.scatter(2, at, k_new.view(b, t, n_heads, d // n_heads).transpose(1, 2))
    v = cache_v.scatter(2, at, v_new.view(b, t, n_heads, d // n_heads).transpose(1, 2))
    seen = torch.arange(cache_k.shape[2], device=q.device)[None, None, :] <= cols[:, :, None]  # (B, T, C)
    return attention(q, k, v, mask_bias(seen[:, None]), n_heads, scale), k, v


@inplace_attention.register_fake
def _(
    q: Tensor,
    k_new: Tensor,
    v_new: Tensor,
    cache_k: Tensor,
    cache_v: Tensor,
    lengths: Tensor,
    n_heads: int,
    scale: float,
) -> tuple[Tensor, Tensor, Tensor]:
    return torch.empty_like(q), torch.empty_like(cache_k), torch.empty_like(cache_v)
