"""Greedy decoding in PyTorch, with the KV cache (one token per step) and without (whole prefix per step).

The two must agree token for token; the uncached one exists to prove the cached one right.
"""

from __future__ import annotations

import torch
from torch import Tensor

from training.model import Transformer


@torch.no_grad()
def greedy(
    model: Transformer, src: Tensor, src_mask: Tensor, max_new_tokens: int, suppressed: tuple[int, ...] = ()
) -> list[list[int]]:
    """Batched greedy decoding with the KV cache. Returns each row's tokens up to (excluding) EOS.
    ``suppressed``: tokens never chosen (an imported model's task.suppressed_ids)."""
    sp = model.config.special
    b = src.shape[0]
    cross = model.cross_kv(model.encode(src, src_mask))
    past, past_mask = model.empty_past(b, src.device)
    tok = torch.full((b, 1), sp.bos, dtype=torch.long, device=src.device)
    done = torch.zeros(b, dtype=torch.bool, device=src.device)
    out: list[Tensor] = []
    for step in range(min(max_new_tokens, model.config.max_len - 1)):
        positions = torch.full((b, 1), step, dtype=torch.long, device=src.device)
        logits, past = model.decode_step(tok, positions, past, past_mask, cross, src_mask)
        past_mask = torch.cat([past_mask, torch.ones(b, 1, dtype=torch.long, device=src.device)], dim=1)
        last = logits[:, -1]
        if suppressed:
            last[:, list(suppressed)] = float("-inf")
        tok = last.argmax(-1, keepdim=True)  # (B, 1)
        out.append(tok.squeeze(1))
        done |= tok.squeeze(1) == sp.eos
        if bool(done.all()):
            break
    return _strip(torch.stack(out, 1).tolist() if out else [[] for _ in range(b)], sp.eos)


@torch.no_grad()
def greedy_uncached(
    model: Transformer, src: Tensor, src_mask: Tensor, max_new_tokens: int
) -> list[list[int]]:
    """Greedy decoding that re-runs the decoder over the whole prefix at every step (no cache)."""
    sp = model.config.special
    b = src.shape[0]
    memory = model.encode(src, src_mask)
    cross = model.cross_kv(memory)
    tgt = torch.full((b, 1), sp.bos, dtype=torch.long, device=src.device)
    for _ in range(min(max_new_tokens, model.config.max_len - 1)):
        past, past_mask = model.empty_past(b, src.device)
        positions = torch.arange(tgt.shape[1], device=src.device).expand_as(tgt)
        logits, _ = model.decode_step(tgt, positions, past, past_mask, cross, src_mask)
        tgt = torch.cat([tgt, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        if bool((tgt[:, 1:] == sp.eos).any(1).all()):
            break
    return _strip(tgt[:, 1:].tolist(), sp.eos)


def _strip(rows: list[list[int]], eos: int) -> list[list[int]]:
    return [r[: r.index(eos)] if eos in r else r for r in rows]
