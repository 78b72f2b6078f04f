"""Greedy rows' next token without the float32 output projection: an int8 screen, proven by a bound.

A greedy row needs only the argmax of its logits, and at OPUS-MT's size the float32 output projection (d_model x
vocabulary multiply-adds per row) is a third of a decoder step (docs/BENCHMARKS.md#marian-ct2-notes). With
``EngineOptions(greedy_screen="on")``, or ``"auto"`` (the default) where the projection is large enough for the
screen to pay (``choose``), a float32 bundle's decoder is split where its hidden state enters that
projection (``split_decoder``); for rows that only take their argmax, ``Top1Screen``

1. computes every token's logit in int8 (ONNX Runtime's DynamicQuantizeMatMul: the activations quantized per
   step, the weights per token, 7 bits, so no CPU's int8 dot product saturates),
2. takes the ``K`` best of them and computes those exactly (float64 dot products of the float32 weights),
3. proves the best of those is the row's argmax: for every token v, |z_v - a_v| <= e = s_max ||h||_1 / 2 + t
   max_v(s_v ||q_v||_1) (z the exact logit, a the screened one, h the hidden state, s_v and q_v token v's weight
   scale and weights, t the activation scale: a weight is off by s_v / 2 at most, an activation by t, its rounding
   and the clipping its rounded zero point may cause), so a token outside the K best has z_v <= a_K + e.

A row is settled when its best candidate beats a_K + e, and its second best, by more than the float32 rounding of
a d_model-long dot product; any other row gets its logits in full (the split-off projection, as before), so the
tokens are the ones the whole projection's argmax gives. Suppressed tokens (``task.suppressed_ids``) and a row's
banned ones (EOS before its minimum length, ``<unk>`` with ``disable_unk``) are never candidates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from contract import names

log = logging.getLogger("s2s.engine")
K = 16  # candidates per row: a trained model's top token stands far above its 16th; random weights settle too
BITS = 7  # weights in [-63, 63]: u8 x s7 pairs fit int16, where AVX2's int8 dot product saturates with s8
# "auto" screens from this many multiply-adds per row in the output projection (d_model x target vocabulary): below
# it the screen's fixed cost (its session, the candidates' exact logits) outweighs the float32 GEMM it saves
# (docs/studies/greedy-screen-rule.md; docs/bench/marian-ct2-notes.md).
AUTO_MIN_MACS = 4_000_000
MODES = ("auto", "on", "off")


def mode_of(value: bool | str) -> str:
    """``greedy_screen`` as given (True / False, or a mode) -> auto | on | off; anything else is refused."""
    if value is True or value is False:
        return "on" if value else "off"
    if value not in MODES:
        raise ValueError(f"greedy_screen must be auto, on or off, not {value!r}")
    return value


def choose(
    mode: str, quantization: str, d_model: int, vocab: int, on_cpu: bool, external_data: bool = False
) -> tuple[bool, str]:
    """Whether a bundle's greedy rows are screened, and why: ``on`` wherever it can run (a float32 bundle on the
    CPU), ``auto`` there too when its projection has ``AUTO_MIN_MACS`` multiply-adds per row or more and its
    decoder keeps its weights in the graph. ``external_data``: the decoder's weights are in ``decoder.onnx.data``
    (past protobuf's limit); the split reads them into memory, serializes both halves and holds the projection
    again, which at NLLB-600M's size cost a core several times its memory and start, for no faster answer
    (docs/BENCHMARKS.md#nllb-ct2-notes)."""
    macs = f"output projection {d_model} x {vocab} = {d_model * vocab / 1e6:.1f}M multiply-adds per row"
    if mode == "off":
        return False, "greedy_screen off"
    if not on_cpu:
        return False, "it runs on the CPU only"
    if quantization != "none":
        return False, f"the bundle is {quantization}"
    if mode == "on":
        return True, f"greedy_screen on, {macs}"
    if external_data:
        return (
            False,
            f"auto: {macs}, but the decoder's weights are external data: splitting it holds them again",
        )
    if d_model * vocab < AUTO_MIN_MACS:
        return False, f"auto: {macs}, under {AUTO_MIN_MACS / 1e6:g}M, where the float32 GEMM costs less"
    return True, f"auto: {macs}, at least {AUTO_MIN_MACS / 1e6:g}M"


@dataclass
class Split:
    """A decoder graph cut where its last hidden state (B, T, d_model) enters the output projection."""

    trunk: bytes  # the decoder with ``hidden`` output instead of logits (present K/V as before)
    head: bytes  # hidden -> logits: the projection's own nodes, the same numerics as the whole graph
    hidden: str  # the hidden state's name
    weight: np.ndarray  # (V, d_model) float32: logits = hidden @ weight.T + bias
    bias: np.ndarray  # (V,) float32


def _weight(name: str, inits: dict, producer: dict) -> np.ndarray | None:
    """The (d_model, V) projection matrix behind ``name``: an initializer, or a Transpose of one (a tied table)."""
    if name in inits:
        return numpy_helper.to_array(inits[name])
    t = producer.get(name)
    if t is not None and t.op_type == "Transpose" and t.input[0] in inits:
        return numpy_helper.to_array(inits[t.input[0]]).T
    return None


def split_decoder(path) -> Split | None:
    """``path``'s decoder split at its output projection, or None when its logits are not such a projection (a
    quantized graph, or a shape this engine did not export): MatMul(Concat(h, 1), Concat(W, b)) as
    export.onnx_export.fold_output_bias writes it, MatMul(h, W) + b, or MatMul(h, W)."""
    model = onnx.load(str(path))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    last = producer.get(names.LOGITS)
    head_nodes, bias = [last], None
    if last is not None and last.op_type == "Add":
        b = next((i for i in last.input if i in inits), None)
        mm = next((producer.get(i) for i in last.input if i != b), None)
        if b is None or mm is None:
            return None
        bias, last = numpy_helper.to_array(inits[b]), mm
        head_nodes.append(mm)
    if last is None or last.op_type != "MatMul":
        return None
    x, w = last.input
    cat_x, cat_w = producer.get(x), producer.get(w)
    if cat_x is not None and cat_x.op_type == "Concat" and cat_w is not None and cat_w.op_type == "Concat":
        row = producer.get(cat_w.input[1])  # Unsqueeze(b): the bias as the weight's last row
        if row is None or row.op_type != "Unsqueeze" or row.input[0] not in inits:
            return None
        bias, w, x = numpy_helper.to_array(inits[row.input[0]]), cat_w.input[0], cat_x.input[0]
    weight = _weight(w, inits, producer)
    if weight is None or weight.ndim != 2:
        return None
    v = weight.shape[1]
    bias = np.zeros(v, np.float32) if bias is None else bias.astype(np.float32)
    head = onnx.utils.Extractor(model).extract_model([x], [names.LOGITS])
    for o in list(g.output):
        if o.name == names.LOGITS:
            g.output.remove(o)
    g.output.insert(0, helper.make_tensor_value_info(x, onnx.TensorProto.FLOAT, None))
    trunk = onnx.utils.Extractor(model).extract_model([i.name for i in g.input], [o.name for o in g.output])
    return Split(
        trunk.SerializeToString(),
        head.SerializeToString(),
        x,
        np.ascontiguousarray(weight.T, np.float32),
        bias,
    )


class Top1Screen:
    """``top1(hidden (R, d_model), banned) -> (tokens (R,), settled (R,) bool)``: see the module docstring."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray, suppressed: tuple[int, ...], threads: int = 1):
        v, d = weight.shape
        self.weight, self.bias, self.d = weight, bias, d
        top = float(2**BITS / 2 - 1)
        scale = np.maximum(np.abs(weight).max(axis=1), np.finfo(np.float32).tiny) / top  # (V,) per token
        q = np.clip(np.round(weight / scale[:, None]), -top, top).astype(np.int8)
        self.s_max = float(scale.max())
        self.g_max = float((scale * np.abs(q.astype(np.float32)).sum(axis=1)).max())
        self.w_max = float(np.abs(weight).max())
        self.suppressed = np.unique(np.asarray(suppressed, np.int64))
        self.k = min(
            v, K + len(self.suppressed) + 2
        )  # room for the suppressed and two banned tokens (EOS, unk)
        graph = helper.make_graph(
            [
                helper.make_node(
                    "DynamicQuantizeMatMul",
                    ["h", "q", "scale", "zero", "bias"],
                    ["a"],
                    domain="com.microsoft",
                ),
                helper.make_node("TopK", ["a", "k"], ["values", "ids"], axis=-1, largest=1, sorted=1),
            ],
            "screen",
            [helper.make_tensor_value_info("h", onnx.TensorProto.FLOAT, ["rows", d])],
            [
                helper.make_tensor_value_info("values", onnx.TensorProto.FLOAT, ["rows", self.k]),
                helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["rows", self.k]),
            ],
            initializer=[
                numpy_helper.from_array(np.ascontiguousarray(q.T), "q"),
                numpy_helper.from_array(scale.astype(np.float32), "scale"),
                numpy_helper.from_array(np.zeros(v, np.int8), "zero"),
                numpy_helper.from_array(bias, "bias"),
                numpy_helper.from_array(np.array([self.k], np.int64), "k"),
            ],
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
        )
        model.ir_version = 9
        so = ort.SessionOptions()
        so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 3
        self.session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    def top1(self, h: np.ndarray, banned: list[tuple[int, np.ndarray]] = ()) -> tuple[np.ndarray, np.ndarray]:
        """h (R, d_model) float32; banned: (token, rows (R,) bool) pairs, beyond the suppressed tokens. Returns each
        row's argmax where ``settled``; the other rows' tokens are meaningless (compute their logits)."""
        h = np.ascontiguousarray(h, np.float32)
        values, ids = self.session.run(None, {"h": h})
        out = np.isin(ids, self.suppressed)
        for token, rows in banned:
            out |= (ids == token) & rows[:, None]
        exact = np.einsum("rkd,rd->rk", self.weight[ids].astype(np.float64), h.astype(np.float64))
        exact += self.bias[ids]
        exact[out] = -np.inf
        order = np.argsort(-exact, axis=1, kind="stable")  # best first, ties to the lower TopK rank
        r = np.arange(len(h))
        best, second = (
            exact[r, order[:, 0]],
            exact[r, order[:, 1]] if self.k > 1 else np.full(len(h), -np.inf),
        )
        # DynamicQuantizeLinear's scale: uint8 over [min(h, 0), max(h, 0)] of the whole step
        t = (max(float(h.max()), 0.0) - min(float(h.min()), 0.0)) / 255
        l1 = np.abs(h).sum(axis=1).astype(np.float64)
        bound = self.s_max * l1 / 2 + t * self.g_max
        # float32 rounding of a d-long dot product (the full projection's, the screen's scaling): 2 d 2^-24 |h| |w|
        rounding = 2 * self.d * 2.0**-24 * l1 * self.w_max + 1e-6 * (np.abs(values[:, -1]) + np.abs(best))
        rest = values[:, -1] if self.k < self.weight.shape[0] else np.full(len(h), -np.inf)
        settled = np.isfinite(best) & (best > rest + bound + rounding) & (best - second > rounding)
        return ids[r, order[:, 0]], settled
