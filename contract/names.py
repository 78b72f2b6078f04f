"""Tensor names and dynamic axes of the two ONNX graphs, declared once as data.

Shapes use these axis names:
  batch           B   sequences in the batch (the decoder's: rows, a beam's rows each)
  sources         N   the decoder's cross K/V and source mask once per input, B = N x g: the g rows of one input
                      (its beam) attend to one copy (bundles that say so; older ones name it batch, N = B)
  src_len         S   source tokens (after padding)
  past_len        P   decoder positions already in the self-attention cache
  tgt_len         T   target tokens fed in this step (1 while generating)
  total_len       P+T
Per layer i, the pattern follows Hugging Face optimum: ``past_key_values.{i}.self.key`` in,
``present.{i}.self.key`` out; the cross-attention K/V are computed once by the encoder.
"""

from __future__ import annotations

from dataclasses import dataclass

# Encoder graph.
SRC_IDS = "src_ids"  # int64 [B, S]
SRC_MASK = "src_mask"  # int64 [B, S]: 1 = token, 0 = padding
MEMORY = "memory"  # float [B, S, d_model]

# Decoder-step graph.
TGT_IDS = "tgt_ids"  # int64 [B, T]
POSITIONS = "positions"  # int64 [B, T]: absolute target position of each fed token
PAST_MASK = "past_mask"  # int64 [B, P]: 1 = a real cached position, 0 = a hole or padding
LOGITS = "logits"  # float [B, T, V]


def cross_key(i: int) -> str:
    return f"cross.{i}.key"  # float [B, H, S, Dh]


def cross_value(i: int) -> str:
    return f"cross.{i}.value"


def past_key(i: int) -> str:
    return f"past_key_values.{i}.self.key"  # float [B, H, P, Dh]


def past_value(i: int) -> str:
    return f"past_key_values.{i}.self.value"


def present_key(i: int) -> str:
    return f"present.{i}.self.key"  # float [B, H, P+T, Dh]


def present_value(i: int) -> str:
    return f"present.{i}.self.value"


@dataclass(frozen=True)
class GraphIO:
    """Input and output names of one graph with their dynamic axes ({position: axis name})."""

    inputs: dict[str, dict[int, str]]
    outputs: dict[str, dict[int, str]]

    def to_dict(self) -> dict[str, dict[str, dict[str, str]]]:
        def j(d: dict[str, dict[int, str]]) -> dict[str, dict[str, str]]:
            return {name: {str(k): v for k, v in axes.items()} for name, axes in d.items()}

        return {"inputs": j(self.inputs), "outputs": j(self.outputs)}


def encoder_io(n_decoder_layers: int) -> GraphIO:
    bhsd = {0: "batch", 2: "src_len"}
    outputs: dict[str, dict[int, str]] = {MEMORY: {0: "batch", 1: "src_len"}}
    for i in range(n_decoder_layers):
        outputs[cross_key(i)] = bhsd
        outputs[cross_value(i)] = bhsd
    return GraphIO(
        inputs={SRC_IDS: {0: "batch", 1: "src_len"}, SRC_MASK: {0: "batch", 1: "src_len"}}, outputs=outputs
    )


def decoder_io(n_decoder_layers: int, per_source: bool = False) -> GraphIO:
    """``per_source``: the graph takes cross K/V and the source mask per input (axis ``sources``)."""
    bt = {0: "batch", 1: "tgt_len"}
    src = "sources" if per_source else "batch"
    inputs: dict[str, dict[int, str]] = {TGT_IDS: bt, POSITIONS: bt, PAST_MASK: {0: "batch", 1: "past_len"}}
    for i in range(n_decoder_layers):
        inputs[past_key(i)] = {0: "batch", 2: "past_len"}
        inputs[past_value(i)] = {0: "batch", 2: "past_len"}
    for i in range(n_decoder_layers):
        inputs[cross_key(i)] = {0: src, 2: "src_len"}
        inputs[cross_value(i)] = {0: src, 2: "src_len"}
    inputs[SRC_MASK] = {0: src, 1: "src_len"}
    outputs: dict[str, dict[int, str]] = {LOGITS: {0: "batch", 1: "tgt_len"}}
    for i in range(n_decoder_layers):
        outputs[present_key(i)] = {0: "batch", 2: "total_len"}
        outputs[present_value(i)] = {0: "batch", 2: "total_len"}
    return GraphIO(inputs=inputs, outputs=outputs)
