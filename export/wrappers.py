"""Thin nn.Module views of the training model with flat tensor inputs/outputs, in the contract's order.

They call ``Transformer.encode``/``cross_kv``/``decode_step`` — the code the training tests cover —
so there is no export-only copy of the model.
"""

from __future__ import annotations

from torch import Tensor, nn

from training.model import Transformer


class EncoderGraph(nn.Module):
    """(src_ids, src_mask) -> (memory, cross.0.key, cross.0.value, cross.1.key, ...)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor, src_mask: Tensor) -> tuple[Tensor, ...]:
        memory = self.model.encode(src_ids, src_mask)
        flat = [t for kv in self.model.cross_kv(memory) for t in kv]
        return (memory, *flat)


class DecoderGraph(nn.Module):
    """(tgt_ids, positions, past_mask, past K/V..., cross K/V..., src_mask) -> (logits, present K/V...)."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model = model
        self.n = model.config.n_decoder_layers

    def forward(
        self, tgt_ids: Tensor, positions: Tensor, past_mask: Tensor, *rest: Tensor
    ) -> tuple[Tensor, ...]:
        n = self.n
        past = [(rest[2 * i], rest[2 * i + 1]) for i in range(n)]
        cross = [(rest[2 * n + 2 * i], rest[2 * n + 2 * i + 1]) for i in range(n)]
        src_mask = rest[4 * n]
        logits, present = self.model.decode_step(tgt_ids, positions, past, past_mask, cross, src_mask)
        return (logits, *[t for kv in present for t in kv])
