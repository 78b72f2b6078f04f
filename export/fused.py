"""ONNX translations of the model's own operators: ``s2s::attention`` and ``s2s::cached_attention``.

``training.model.attention`` is one custom operator (its eager body is the written-out §3.2.1
math). The exporter maps it here to ONNX Runtime's fused contrib operator instead of
tracing ~10 nodes (split heads, MatMul, scale, mask, Softmax, MatMul, merge heads) per attention:

    MultiHeadAttention(query (B, T, d_model), key (B, H, L, Dh), value (B, H, L, Dh),
                       attention_bias (B, 1, T, L); num_heads) -> (B, T, d_model)

Queries arrive before the head split and leave merged, keys and values in the cache's BNSH
layout, so neither side needs a Transpose. The graphs then need ONNX Runtime (the contrib domain),
which is why bundles with them are format 3 (contract/bundle.py); every export is still checked
against PyTorch (export/validate.py).

``training.model.cached_attention`` is the decoder's self-attention with its cache: the new tokens' keys and
values appended (a Concat of the whole cache), then attention. Written out, or with MultiHeadAttention, that
is a Concat and the attention; with ``gqa`` it is one node,

    GroupQueryAttention(query, key, value (B, T, d_model), past_key, past_value (B, H, P, Dh),
                        seqlens_k (B,) = P + T - 1, total_sequence_length = P + T,
                        attention_bias (B, 1, T, P + T); num_heads = kv_num_heads) -> (out, present K, present V)

whose CPU kernel appends and attends per (row, head) in one pass over that row's cache, where the separate
nodes pass over the whole batch's cache three times (Concat, Q K^T, softmax x V). It is what ONNX Runtime runs
for decoder-only LLMs on CPUs (its onnxruntime-genai). Two limits, both outside what the engine asks of a
decoder: more than one new token over a non-empty cache only at batch 1 (ONNX Runtime refuses it otherwise;
the engine feeds one token a step, and export/validate.py checks what it feeds), and CUDA's kernel takes float16
only (a float32 graph runs that node on the CPU there): for GPUs, export without it.
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


def _register_gqa_schema() -> None:
    """GroupQueryAttention's inputs up to attention_bias (no rotary embedding here), as _register_schema."""
    if onnx.defs.has("GroupQueryAttention", DOMAIN):
        return
    opt, single = OpSchema.FormalParameterOption.Optional, OpSchema.FormalParameterOption.Single
    types = {"seqlens_k": "M", "total_sequence_length": "M", "position_ids": "P"}
    names = ("query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length")
    names += ("cos_cache", "sin_cache", "position_ids", "attention_bias")
    inputs = [
        OpSchema.FormalParameter(
            n, types.get(n, "T"), param_option=single if n in names[:1] + names[5:7] else opt
        )
        for n in names
    ]
    onnx.defs.register_schema(
        OpSchema(
            "GroupQueryAttention",
            DOMAIN,
            1,
            "ONNX Runtime contrib operator (onnxruntime/docs/ContribOperators.md)",
            inputs=inputs,
            outputs=[OpSchema.FormalParameter(n, "T") for n in ("output", "present_key", "present_value")],
            type_constraints=[
                ("T", ["tensor(float)", "tensor(float16)"], "float tensors"),
                ("M", ["tensor(int32)"], "lengths"),
                ("P", ["tensor(int64)"], "positions"),
            ],
            attributes=[
                OpSchema.Attribute("num_heads", OpSchema.AttrType.INT, "query heads", required=True),
                OpSchema.Attribute("kv_num_heads", OpSchema.AttrType.INT, "key/value heads", required=True),
                OpSchema.Attribute(
                    "scale", OpSchema.AttrType.FLOAT, "default 1/sqrt(head size)", required=False
                ),
            ],
        )
    )


_register_schema()
_register_gqa_schema()
MSFT = onnxscript.values.Opset(DOMAIN, 1)
MULTI_HEAD_ATTENTION = MSFT.MultiHeadAttention
GROUP_QUERY_ATTENTION = MSFT.GroupQueryAttention


def _scale_of(q, n_heads: int, scale: float) -> dict:
    """The kernels' ``scale`` attribute where it is not their default 1/sqrt(d_k) (T5's 1.0), so that the graphs of the
    other families stay as they were."""
    return {} if abs(scale - (int(q.shape[-1]) // n_heads) ** -0.5) < 1e-12 else {"scale": float(scale)}


def multi_head_attention(q, k, v, bias, n_heads: int, scale: float):
    from onnxscript import opset18 as op

    # attention_bias must be (B or 1, 1 or H, T, L): the model's masks broadcast over the queries, so expand (a bias
    # per head, T5's, keeps its H: Expand broadcasts).
    full = op.Concat(
        op.Shape(q, start=0, end=1),
        op.Constant(value_ints=[1]),
        op.Shape(q, start=1, end=2),
        op.Shape(k, start=2, end=3),
        axis=0,
    )
    # Inputs by position: query, key, value, bias (of a packed QKV projection: none), key_padding_mask
    # (none: the mask is in attention_bias), attention_bias.
    return MULTI_HEAD_ATTENTION(
        q, k, v, None, None, op.Expand(bias, full), num_heads=n_heads, **_scale_of(q, n_heads, scale)
    )


def written_out_attention(q, k, v, bias, n_heads: int, scale: float):
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
    scores = op.MatMul(qh, op.Transpose(k, perm=[0, 1, 3, 2]))  # (B, H, T, L)
    if scale != 1.0:
        scores = op.Mul(scores, const(scale, np.float32))
    attn = op.Softmax(op.Add(scores, bias), axis=-1)
    merged = op.Transpose(op.MatMul(attn, v), perm=[0, 2, 1, 3])  # (B, T, H, Dh)
    return op.Reshape(merged, const([0, 0, n_heads * d_k], np.int64))  # (B, T, d_model)


def _split_heads(x, n_heads: int):
    """(B, T, d_model) -> (B, H, T, Dh), as MultiHeadAttention.split_heads."""
    import numpy as np
    from onnxscript import ir
    from onnxscript import opset18 as op

    shape = op.Constant(value=ir.tensor(np.asarray([0, 0, n_heads, int(x.shape[-1]) // n_heads], np.int64)))
    return op.Transpose(op.Reshape(x, shape), perm=[0, 2, 1, 3])


def _appended(attend):
    """``cached_attention`` as a Concat of the cache and the new tokens' keys and values, then ``attend``."""

    def cached(q, k_new, v_new, past_k, past_v, bias, n_heads: int, scale: float):
        from onnxscript import opset18 as op

        k = op.Concat(past_k, _split_heads(k_new, n_heads), axis=2)  # (B, H, P+T, Dh)
        v = op.Concat(past_v, _split_heads(v_new, n_heads), axis=2)
        return attend(q, k, v, bias, n_heads, scale), k, v

    return cached


def group_query_attention(q, k_new, v_new, past_k, past_v, bias, n_heads: int, scale: float):
    """``cached_attention`` as one GroupQueryAttention node: every row's cache is P long, so each row's length
    (seqlens_k, the kernel's "total length - 1") is P + T - 1, and the bias masks the holes."""
    import numpy as np
    from onnxscript import ir
    from onnxscript import opset18 as op

    # (1,) P + T, from the bias (the cache's mask and the new tokens): not from past_k, which may be a buffer with
    # room for more steps (written in place when it is also the present output)
    total = op.Shape(bias, start=3, end=4)
    seqlens = op.Expand(
        op.Cast(op.Sub(total, op.Constant(value=ir.tensor(np.asarray([1], np.int64)))), to=ir.DataType.INT32),
        op.Shape(q, start=0, end=1),
    )  # (B,)
    scalar = op.Constant(value=ir.tensor(np.asarray([], np.int64)))
    total_scalar = op.Reshape(op.Cast(total, to=ir.DataType.INT32), scalar)
    # attention_bias (B, 1 or H, T, P+T) as given; inputs by position: query, key, value, past_key, past_value,
    # seqlens_k, total_sequence_length, cos_cache, sin_cache, position_ids (none: no rotary), attention_bias.
    out, k, v = GROUP_QUERY_ATTENTION(
        q,
        k_new,
        v_new,
        past_k,
        past_v,
        seqlens,
        total_scalar,
        None,
        None,
        None,
        bias,
        num_heads=n_heads,
        kv_num_heads=n_heads,
        _num_outputs=3,
        **_scale_of(q, n_heads, scale),
    )
    return out, k, v


def translation_table(fused: bool = True, gqa: bool = False) -> dict:
    """fused: com.microsoft.MultiHeadAttention (bundle format 3); else the standard ONNX nodes (format 2). gqa: the
    decoder's self-attention and its cache as com.microsoft.GroupQueryAttention (format 3)."""
    import torch

    import training.model  # noqa: F401  (registers torch.ops.s2s.attention)

    attend = multi_head_attention if fused else written_out_attention
    return {
        torch.ops.s2s.attention.default: attend,
        torch.ops.s2s.cached_attention.default: group_query_attention if gqa else _appended(attend),
    }
