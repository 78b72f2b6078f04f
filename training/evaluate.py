"""Evaluation: loss, token accuracy, exact-match accuracy, and BLEU/chrF (sacrebleu) for translation."""

from __future__ import annotations

from collections.abc import Sequence

import sacrebleu
import torch
import torch.nn.functional as F

from contract.text import TextCodec
from training.batching import bucketed_batches, collate, encode_pairs
from training.decoding import greedy
from training.model import Transformer
from training.tasks import Pair


@torch.no_grad()
def teacher_forced(model: Transformer, examples, batch_size: int, device: str) -> dict[str, float]:
    """Loss and token accuracy with the reference prefix fed in (no label smoothing: the true NLL)."""
    model.eval()
    pad = model.config.special.pad
    loss_sum = correct = tokens = 0.0
    for batch in bucketed_batches(examples, batch_size, model.config, seed=None):
        batch = batch.to(device)
        logits = model(batch.src, batch.src_mask, batch.tgt_in)
        keep = batch.tgt_out != pad
        loss_sum += float(F.cross_entropy(logits[keep], batch.tgt_out[keep], reduction="sum"))
        correct += float((logits.argmax(-1)[keep] == batch.tgt_out[keep]).sum())
        tokens += float(keep.sum())
    return {"loss": loss_sum / max(tokens, 1), "token_acc": correct / max(tokens, 1)}


@torch.no_grad()
def generate(
    model: Transformer,
    codec: TextCodec,
    sources: Sequence[str],
    batch_size: int,
    device: str,
    max_new_tokens: int,
) -> list[str]:
    """Greedy outputs for raw source texts, in input order (batches sorted by length for speed)."""
    model.eval()
    # A source longer than the model's positions is cut (the server refuses it; an evaluation scores it).
    ids = [codec.source_ids(s)[: model.config.max_len] for s in sources]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    out: list[str] = [""] * len(ids)
    for k in range(0, len(order), batch_size):
        chunk = order[k : k + batch_size]
        batch = collate([(ids[i], []) for i in chunk], model.config).to(device)
        for i, toks in zip(chunk, greedy(model, batch.src, batch.src_mask, max_new_tokens)):
            out[i] = codec.decode(toks)
    return out


def evaluate(
    model: Transformer,
    codec: TextCodec,
    pairs: Sequence[Pair],
    *,
    batch_size: int = 256,
    device: str = "cpu",
    max_new_tokens: int | None = None,
    translation: bool = False,
    bleu_tokenize: str = "13a",
) -> dict[str, float]:
    examples = encode_pairs(pairs, codec, model.config.max_len)
    metrics = teacher_forced(model, examples, batch_size, device)
    refs = [t for _, t in pairs]
    budget = max_new_tokens or min(model.config.max_len - 1, max(len(codec.target_ids(t)) for t in refs) + 10)
    hyps = generate(model, codec, [s for s, _ in pairs], batch_size, device, budget)
    metrics["seq_acc"] = sum(h == r for h, r in zip(hyps, refs)) / max(len(refs), 1)
    if translation:
        # For Japanese targets use bleu_tokenize="char": sacrebleu's ja-mecab needs MeCab, and
        # character BLEU is the usual fallback; chrF is character-based anyway.
        metrics["bleu"] = sacrebleu.corpus_bleu(hyps, [refs], tokenize=bleu_tokenize).score
        metrics["chrf"] = sacrebleu.corpus_chrf(hyps, [refs]).score
    metrics["n"] = len(pairs)
    return metrics
