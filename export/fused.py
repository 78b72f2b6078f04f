"""ONNX translations of the model's own operators: ``s2s::attention`` -> ``com.microsoft.MultiHeadAttention``.

``training.model.attention`` is one custom operator (its eager body is the written-out §3.2.1
math). The exporter maps it here to ONNX Runtime's fused contrib operator instead of
tracing ~10 nodes (split heads, MatMul, scale, mask, Softmax, MatMul, merge heads) per attention:

    MultiHeadAttention(query (B, T, d_model), key (B, H, L, Dh), value (B, H, L, Dh),
                       attention_bias (B, 1, T, L); num_heads) -> (B, T, d_model)

Queries arrive before the head split and leave merged, keys and values in the cache's BNSH
layout, so neither side needs a Transpose. The graphs then need ONNX Runtime (the contrib domain),
which is why bundles with them are format 3 (contract/bundle.py); every export is still checked
against PyTorch (export/validate.py).
"""

from __future__ import annotations

import onnx
import onnxscript
from onnx.defs import OpSchema

DOMAIN = "com.microsoft"


def _register_schema() -> None:
    """The onnx package knows no schemas of ONNX Runtime's contrib domain, and onnxscript builds nodes
    (and onnx.checker checks them) from schemas: declare the part of MultiHeadAttention used here."""
    if onnx.defs.has("MultiHeadAttention", DOMAIN):
        return
    opt = OpSchema.FormalParameterOption.Optional
    inputs = [
        OpSchema.FormalParameter(
            n, "T", param_option=OpSchema.FormalParameterOption.Single if n in ("query",) else opt
        )
        for n in ("query", "key", "value", "bias")
    ]
    inputs.append(OpSchema.FormalParameter("key_padding_mask", "M", param_option=opt))
    inputs += [
        OpSchema.FormalParameter(n, "T", param_option=opt)
        for n in ("attention_bias", "past_key", "past_value")
    ]
    onnx.defs.register_schema(
        OpSchema(
            "MultiHeadAttention",
            DOMAIN,
            1,
            "ONNX Runtime contrib operator (onnxruntime/docs/ContribOperators.md)",
            inputs=inputs,
            outputs=[OpSchema.FormalParameter("output", "T")],  # present_key / present_value: not used here
            type_constraints=[
                ("T", ["tensor(float)", "tensor(float16)"], "float tensors"),
                ("M", ["tensor(int32)"], "mask"),
            ],
            attributes=[
                OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "heads", required=True),
                OpSchema.Attribute(
                    "scale", OpSchema.AttrType.FLOAT, "default 1/sqrt(head size)", required=False
                ),
                OpSchema.Attribute(
                    "mask_filter_value", OpSchema.AttrType.FLOAT, "masked score", required=False
                ),
                OpSchema.Attribute("unidirectional", OpSchema.AttrType.INT, "causal", required=False),
            ],
        )
    )


_register_schema()
MSFT = onnxscript.values.Opset(DOMAIN, 1)
MULTI_HEAD_ATTENTION = MSFT.MultiHeadAttention


def multi_head_attention(q, k, v, bias, n_heads: int):
    from onnxscript import opset18 as op

    # attention_bias must be (B or 1, 1, T, L): the model's masks broadcast over the queries, so expand.
    full = op.Concat(
        op.Shape(q, start=0, end=1),
        op.Constant(value_ints=[1]),
        op.Shape(q, start=1, end=2),
        op.Shape(k, start=2, end=3),
        axis=0,
    )
    # Inputs by position: query, key, value, bias (of a packed QKV projection: none), key_padding_mask
    # (none: the mask is in attention_bias), attention_bias.
    return MULTI_HEAD_ATTENTION(q, k, v, None, None, op.Expand(bias, full), num_heads=n_heads)


def written_out_attention(q, k, v, bias, n_heads: int):
    """The same operator as standard ONNX nodes (any runtime; format 2): split heads, Q K^T, scale, + bias,
    Softmax, @ V, merge heads."""
    import numpy as np
    from onnxscript import ir
    from onnxscript import opset18 as op

    def const(values, dtype):
        return op.Constant(value=ir.tensor(np.asarray(values, dtype=dtype)))

    d_k = int(q.shape[-1]) // n_heads  # d_model is static in the exported graphs
    # Reshape's 0 copies a dimension (B, T) from the input, so no Shape/Concat is needed for them.
    qh = op.Transpose(
        op.Reshape(q, const([0, 0, n_heads, d_k], np.int64)), perm=[0, 2, 1, 3]
    )  # (B, H, T, Dh)
    scores = op.Mul(
        op.MatMul(qh, op.Transpose(k, perm=[0, 1, 3, 2])), const(d_k**-0.5, np.float32)
    )  # (B, H, T, L)
    attn = op.Softmax(op.Add(scores, bias), axis=-1)
    merged = op.Transpose(op.MatMul(attn, v), perm=[0, 2, 1, 3])  # (B, T, H, Dh)
    return op.Reshape(merged, const([0, 0, n_heads * d_k], np.int64))  # (B, T, d_model)


def translation_table(fused: bool = True) -> dict:
    """fused: com.microsoft.MultiHeadAttention (bundle format 3); else the standard ONNX nodes (format 2)."""
    import torch

    import training.model  # noqa: F401  (registers torch.ops.s2s.attention)

    return {torch.ops.s2s.attention.default: multi_head_attention if fused else written_out_attention}
