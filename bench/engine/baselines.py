"""Decoders the benchmarks time the engine against, outside the engine's API.

``generate``: texts decoded with a plain beam or greedy search, optionally forced to exactly N new tokens (EOS
ignored), as the forced-length decode grid times every system. ``generate_no_cache``: greedy that feeds the whole
prefix at every step with an empty cache, what the KV cache is measured against. ``torch_forced``: PyTorch eager
greedy with the KV cache, forced to N tokens.
"""

from __future__ import annotations

import numpy as np

from engine.drive import run
from engine.search import Greedy
from engine.step_loop import Sequence, pad_batch
from engine.translator import Translator


def generate(
    t: Translator,
    texts: list[str],
    max_new_tokens: int | None = None,
    beam: int = 1,
    batch_size: int = 64,
    ignore_eos: bool = False,
) -> list[str]:
    """Decode texts to completion in batches. ignore_eos (greedy only): exactly max_new_tokens per input."""
    budget = max_new_tokens or t.config.task.max_new_tokens
    seqs = [Sequence(t.codec.source_ids(s), budget, beam) for s in texts]
    if ignore_eos:  # never past the positions the model has
        for s in seqs:
            s.search = Greedy(eos=-1, budget=min(budget, t.config.model.max_len - 1))
    run(t.runner, seqs, batch_size)
    return [t.codec.decode(s.result) for s in seqs]


def generate_no_cache(
    t: Translator, texts: list[str], max_new_tokens: int | None = None, ignore_eos: bool = False
) -> list[str]:
    """Greedy decoding with no KV cache: the whole prefix is fed again at every step."""
    r = t.runner
    sp = r.special
    budget = max_new_tokens or t.config.task.max_new_tokens
    src = [t.codec.source_ids(s) for s in texts]
    ids, mask = pad_batch(src, sp.pad)
    cross = r.encode(ids, mask)
    b = len(texts)
    limit = budget if ignore_eos else max(min(budget, len(s) + 50, t.config.model.max_len - 1) for s in src)
    tgt = np.full((b, 1), sp.bos, np.int64)
    empty = [np.zeros((b, r.n_heads, 0, r.d_head), np.float32)] * (2 * r.n_layers)
    no_past = np.zeros((b, 0), np.int64)
    for _ in range(limit):
        positions = np.broadcast_to(np.arange(tgt.shape[1]), tgt.shape).copy()
        logits, _ = r.decode(tgt, positions, no_past, empty, cross, mask)
        tgt = np.concatenate([tgt, logits[:, -1].argmax(-1)[:, None]], axis=1)
        if not ignore_eos and (tgt[:, 1:] == sp.eos).any(axis=1).all():
            break
    out = []
    for s, row in zip(src, tgt[:, 1:].tolist()):
        row = row if ignore_eos else row[: min(budget, len(s) + 50, t.config.model.max_len - 1)]
        out.append(t.codec.decode(row))
    return out


def torch_forced(model, src, src_mask, n: int) -> list[list[int]]:
    """PyTorch eager greedy with the KV cache, exactly n steps (EOS is fed back like any token).

    ``training.decoding.greedy`` stops at EOS; this is its loop without the stop.
    """
    import torch

    sp = model.config.special
    b = src.shape[0]
    cross = model.cross_kv(model.encode(src, src_mask))
    past, past_mask = model.empty_past(b)
    tok = torch.full((b, 1), sp.bos, dtype=torch.long)
    one = torch.ones(b, 1, dtype=torch.long)
    out = []
    for step in range(n):
        positions = torch.full((b, 1), step, dtype=torch.long)
        logits, past = model.decode_step(tok, positions, past, past_mask, cross, src_mask)
        past_mask = torch.cat([past_mask, one], dim=1)
        tok = logits[:, -1].argmax(-1, keepdim=True)
        out.append(tok)
    return torch.cat(out, 1).tolist()
