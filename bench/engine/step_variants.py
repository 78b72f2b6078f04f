"""Prototype decoder steps at the served model's shapes: what design changes to the step would save.

Builds one decoder step (pre-LN Transformer layers: self-attention with a KV cache, cross-attention, feed-forward,
tied output projection) directly with onnx.helper, at a bundle's sizes (d_model, heads, layers, d_ff, vocab),
random weights, and times variants of it against the graph shaped as the engine's decoder.onnx, the two sessions
taking turns (ABBA) in one process, 1 intra-op thread. Each variant changes one thing:

* ``cross-shared``: cross-attention K/V fed once per input (batch, heads, src, d_head) instead of once per beam row;
  the k beam queries of an input are the rows of one product against them (a reshape, uniform beam width).
* ``cross-gather``: the same per-input K/V plus a row -> input index (``row_input``), gathered to rows inside the
  graph (what mixed beam widths and greedy rows in one batch would need without a reshape).
* ``gqa``: self-attention by ``com.microsoft.GroupQueryAttention`` (num_heads == kv_num_heads) writing into a
  preallocated past/present buffer bound to the same memory (IOBinding), per-row lengths in ``seqlens_k``,
  instead of ``Concat`` of past and new K/V.
* ``int8-row``: every projection's activations quantized per row (QuantizeLinear per axis, symmetric int8,
  MatMulInteger, rescale by row scale x column scale), against ``quantize_dynamic`` (one scale per tensor, what
  ``--quantize int8-dynamic`` exports).

This is a measurement of the step's cost, not an engine change: search, cache bookkeeping and the encoder are
outside it. Timings of a variant are only comparable with its own baseline in the same run.

    python -m bench.engine.step_variants [--model translate-en-ja] [--batch 16 64] [--beam 4] [--past 8 32]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bench import ROOT
from bench.common.abba import abba

F = TensorProto.FLOAT


class G:
    """A tiny graph builder: nodes, initializers, fresh names."""

    def __init__(self, rng):
        self.nodes, self.inits, self.rng, self.n = [], [], rng, 0

    def name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, arr, base="c"):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def w(self, *shape):
        return self.const((self.rng.standard_normal(shape) * 0.05).astype(np.float32), "w")

    def op(self, kind, inputs, n_out=1, domain="", **attrs):
        outs = [self.name(kind) for _ in range(n_out)]
        self.nodes.append(helper.make_node(kind, inputs, outs, domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x, d_in, d_out, int8_row=False):
        if not int8_row:
            return self.op("Add", [self.op("MatMul", [x, self.w(d_in, d_out)]), self.w(d_out)])
        # per-row symmetric int8 activations: scale_r = max|x_r| / 127, weights int8 per output column
        w = (self.rng.standard_normal((d_in, d_out)) * 0.05).astype(np.float32)
        wscale = np.abs(w).max(axis=0) / 127.0
        wq = self.const(np.round(w / wscale).astype(np.int8), "wq")
        x2 = self.op("Reshape", [x, self.const(np.array([-1, d_in], np.int64))])
        amax = self.op("ReduceMax", [self.op("Abs", [x2])], axes=[1], keepdims=0)
        scale = self.op(
            "Add", [self.op("Mul", [amax, self.const(np.float32(1 / 127.0))]), self.const(np.float32(1e-12))]
        )
        # uint8 with zero point 128 (symmetric in effect): MLAS's fast kernels are u8 x s8; s8 x s8 measured 9x slower
        zp = self.op(
            "Cast",
            [
                self.op(
                    "Add", [self.op("Mul", [scale, self.const(np.float32(0))]), self.const(np.float32(128))]
                )
            ],
            to=TensorProto.UINT8,
        )
        xq = self.op("QuantizeLinear", [x2, scale, zp], axis=0)
        acc = self.op("Cast", [self.op("MatMulInteger", [xq, wq, self.const(np.uint8(128))])], to=F)
        rs = self.op("Unsqueeze", [scale, self.const(np.array([1], np.int64))])
        y = self.op("Mul", [self.op("Mul", [acc, rs]), self.const(wscale.astype(np.float32))])
        y = self.op("Add", [y, self.w(d_out)])
        return self.op("Reshape", [y, self.const(np.array([-1, 1, d_out], np.int64))])

    def ln(self, x, d):
        return self.op(
            "LayerNormalization",
            [x, self.const(np.ones(d, np.float32)), self.const(np.zeros(d, np.float32))],
            axis=-1,
        )

    def heads(self, x, h, dh):  # (R, 1, D) -> (R, H, 1, dh)
        return self.op(
            "Transpose",
            [self.op("Reshape", [x, self.const(np.array([0, 1, h, dh], np.int64))])],
            perm=[0, 2, 1, 3],
        )

    def merge(self, x, d):  # (R, H, 1, dh) -> (R, 1, D)
        return self.op(
            "Reshape",
            [self.op("Transpose", [x], perm=[0, 2, 1, 3]), self.const(np.array([0, 1, d], np.int64))],
        )

    def attend(self, q, k, v, mask, dh):
        s = self.op(
            "Add",
            [
                self.op(
                    "Mul",
                    [
                        self.op("MatMul", [q, self.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                        self.const(np.float32(dh**-0.5)),
                    ],
                ),
                mask,
            ],
        )
        return self.op("MatMul", [self.op("Softmax", [s], axis=-1), v])


def build(m: dict, variant: str, beam: int) -> tuple[onnx.ModelProto, dict]:
    """One decoder step; returns the model and {input name: role} for feeding."""
    d, h, ff, nl, vocab = m["d_model"], m["n_heads"], m["d_ff"], m["n_decoder_layers"], m["tgt_vocab_size"]
    dh = d // h
    g = G(np.random.default_rng(0))
    i8 = variant == "int8-row"
    inputs = [
        helper.make_tensor_value_info("x", F, ["R", 1, d]),
        helper.make_tensor_value_info("src_mask", F, ["B" if variant == "cross-shared" else "R", 1, 1, "S"]),
    ]
    if variant == "cross-gather":
        inputs = inputs[:1]  # src_mask is added per row below, as the base graph has it
        inputs.append(helper.make_tensor_value_info("src_mask", F, ["R", 1, 1, "S"]))
    outputs = []
    shared = variant in ("cross-shared", "cross-gather")
    if variant == "cross-gather":
        inputs.append(helper.make_tensor_value_info("row_input", TensorProto.INT64, ["R"]))
    if variant == "gqa":
        inputs += [
            helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["R"]),
            helper.make_tensor_value_info("total_len", TensorProto.INT32, []),
        ]
    else:
        inputs.append(helper.make_tensor_value_info("self_mask", F, ["R", 1, 1, "T"]))
    x = "x"
    for i in range(nl):
        pk, pv, ck, cv = f"past_key.{i}", f"past_value.{i}", f"cross_key.{i}", f"cross_value.{i}"
        inputs += [
            helper.make_tensor_value_info(pk, F, ["R", h, "P", dh]),
            helper.make_tensor_value_info(pv, F, ["R", h, "P", dh]),
        ]
        rows = "B" if shared else "R"
        inputs += [
            helper.make_tensor_value_info(ck, F, [rows, h, "S", dh]),
            helper.make_tensor_value_info(cv, F, [rows, h, "S", dh]),
        ]
        y = g.ln(x, d)
        q, k, v = (g.linear(y, d, d, i8) for _ in range(3))
        if variant == "gqa":
            a, prk, prv = g.op(
                "GroupQueryAttention",
                [q, k, v, pk, pv, "seqlens_k", "total_len"],
                n_out=3,
                domain="com.microsoft",
                num_heads=h,
                kv_num_heads=h,
                scale=dh**-0.5,
            )
            outputs += [prk, prv]
        else:
            kk = g.op("Concat", [pk, g.heads(k, h, dh)], axis=2)
            vv = g.op("Concat", [pv, g.heads(v, h, dh)], axis=2)
            a = g.merge(g.attend(g.heads(q, h, dh), kk, vv, "self_mask", dh), d)
            outputs += [kk, vv]
        x = g.op("Add", [x, g.linear(a, d, d, i8)])
        y = g.ln(x, d)
        q = g.linear(y, d, d, i8)
        if (
            variant == "cross-shared"
        ):  # (R,1,D) -> (B,k,H,dh) -> (B,H,k,dh): the beams of one input as one GEMM's rows
            qb = g.op(
                "Transpose",
                [g.op("Reshape", [q, g.const(np.array([-1, beam, h, dh], np.int64))])],
                perm=[0, 2, 1, 3],
            )
            a = g.attend(qb, ck, cv, "src_mask", dh)  # (B,H,k,dh)
            a = g.op(
                "Reshape",
                [g.op("Transpose", [a], perm=[0, 2, 1, 3]), g.const(np.array([-1, 1, d], np.int64))],
            )
        elif variant == "cross-gather":
            gk, gv = g.op("Gather", [ck, "row_input"], axis=0), g.op("Gather", [cv, "row_input"], axis=0)
            a = g.merge(g.attend(g.heads(q, h, dh), gk, gv, "src_mask", dh), d)
        else:
            a = g.merge(g.attend(g.heads(q, h, dh), ck, cv, "src_mask", dh), d)
        x = g.op("Add", [x, g.linear(a, d, d, i8)])
        y = g.ln(x, d)
        x = g.op("Add", [x, g.linear(g.op("Relu", [g.linear(y, d, ff, i8)]), ff, d, i8)])
    logits = g.linear(g.ln(x, d), d, vocab, i8)
    outs = [helper.make_tensor_value_info(logits, F, None)] + [
        helper.make_tensor_value_info(o, F, None) for o in outputs
    ]
    graph = helper.make_graph(g.nodes, "step", inputs, outs, g.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    return model, outs


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(
        model.SerializeToString(),
        so,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=["SkipLayerNormFusion"],
    )


def feed(m: dict, variant: str, b: int, beam: int, past: int, src: int, max_len: int) -> dict:
    h, dh, rows = m["n_heads"], m["d_model"] // m["n_heads"], b * beam
    rng = np.random.default_rng(1)
    f = {"x": rng.standard_normal((rows, 1, m["d_model"]), dtype=np.float32)}
    f["src_mask"] = np.zeros((b if variant == "cross-shared" else rows, 1, 1, src), np.float32)
    if variant == "gqa":
        f["seqlens_k"] = np.full(rows, past, np.int32)  # total length - 1 per row
        f["total_len"] = np.array(past + 1, np.int32)
    else:
        f["self_mask"] = np.zeros((rows, 1, 1, past + 1), np.float32)
    cross_rows = b if variant in ("cross-shared", "cross-gather") else rows
    if variant == "cross-gather":
        f["row_input"] = np.repeat(np.arange(b, dtype=np.int64), beam)
    for i in range(m["n_decoder_layers"]):
        p = max_len if variant == "gqa" else past  # the shared buffer is preallocated to the longest output
        f[f"past_key.{i}"] = rng.standard_normal((rows, h, p, dh), dtype=np.float32)
        f[f"past_value.{i}"] = rng.standard_normal((rows, h, p, dh), dtype=np.float32)
        f[f"cross_key.{i}"] = rng.standard_normal((cross_rows, h, src, dh), dtype=np.float32)
        f[f"cross_value.{i}"] = rng.standard_normal((cross_rows, h, src, dh), dtype=np.float32)
    return f


def runner(sess: ort.InferenceSession, f: dict, variant: str, n_layers: int):
    """A callable running one step. For ``gqa`` the past buffers are bound as the present outputs too (in place)."""
    if variant != "gqa":
        return lambda: sess.run(None, f)
    io = sess.io_binding()
    vals = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in f.items()}
    for k, v in vals.items():
        io.bind_ortvalue_input(k, v)
    outs = [o.name for o in sess.get_outputs()]
    io.bind_output(outs[0], "cpu")
    for i in range(n_layers):
        io.bind_ortvalue_output(outs[1 + 2 * i], vals[f"past_key.{i}"])
        io.bind_ortvalue_output(outs[2 + 2 * i], vals[f"past_value.{i}"])
    return lambda: sess.run_with_iobinding(io)


def check(m: dict, sb, sv, variant: str, beam: int, past: int, src: int) -> float:
    """Max |logits difference| between the variant and the base graph on the same state (same weights: both are
    built from one seed in one order). Cross-shared gets each input's K/V once, the base the same K/V per beam row;
    gqa gets the base's past in the first ``past`` columns of its buffer."""
    b, n = 2, m["n_decoder_layers"]
    fb, fv = (
        feed(m, "base", b, beam, past, src, m["max_len"]),
        feed(m, variant, b, beam, past, src, m["max_len"]),
    )
    fv["x"] = fb["x"]
    for i in range(n):
        for kind in ("key", "value"):
            if variant in ("cross-shared", "cross-gather"):
                fb[f"cross_{kind}.{i}"] = np.repeat(fv[f"cross_{kind}.{i}"], beam, axis=0)
                fv[f"past_{kind}.{i}"] = fb[f"past_{kind}.{i}"]
            else:
                fv[f"past_{kind}.{i}"][:, :, :past] = fb[f"past_{kind}.{i}"]
                fv[f"cross_{kind}.{i}"] = fb[f"cross_{kind}.{i}"]
    return float(np.abs(sb.run(None, fb)[0] - sv.run(None, fv)[0]).max())


def ab(run_a, run_b, rounds: int, reps: int) -> tuple[float, float, float]:
    """Median ms per step of A and B over ABBA rounds, and the median of the per-round ratios A/B."""
    ta, tb, ratios = [], [], []
    for fn in (run_a, run_b):
        for _ in range(3):
            fn()
    for r in range(rounds):
        order = abba([run_a, run_b], r)
        got = {}
        for fn in order:
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            got[fn] = 1000 * (time.perf_counter() - t) / reps
        ta.append(got[run_a]), tb.append(got[run_b]), ratios.append(got[run_a] / got[run_b])
    return float(np.median(ta)), float(np.median(tb)), float(np.median(ratios))


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.engine.step_variants", description=__doc__.splitlines()[0]
    )
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--variant", nargs="+", default=["cross-shared", "cross-gather", "gqa", "int8-row"])
    p.add_argument("--batch", type=int, nargs="+", default=[16, 64])
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--past", type=int, nargs="+", default=[8, 32])
    p.add_argument("--src", type=int, default=16)
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--reps", type=int, default=20)
    args = p.parse_args()
    m = json.loads((ROOT / "models" / args.model / "1" / "config.json").read_text())["model"]
    base, _ = build(m, "base", args.beam)
    sb = session(base)
    for variant in args.variant:
        if variant == "int8-row":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            with tempfile.TemporaryDirectory() as tmp:
                onnx.save(base, f"{tmp}/f.onnx")
                quantize_dynamic(
                    f"{tmp}/f.onnx",
                    f"{tmp}/q.onnx",
                    weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul"],
                )
                sa_ref = session(onnx.load(f"{tmp}/q.onnx"))  # the per-tensor path the engine exports today
        model, _ = build(m, variant, args.beam)
        sv = session(model)
        if variant != "int8-row":
            print(
                f"{variant}: max |logits - base logits| = {check(m, sb, sv, variant, args.beam, 8, args.src):.2e}",
                flush=True,
            )
        for b in args.batch:
            for past in args.past:
                fb = feed(m, "base", b, args.beam, past, args.src, m["max_len"])
                fv = feed(m, variant, b, args.beam, past, args.src, m["max_len"])
                ref = sa_ref if variant == "int8-row" else sb
                a = runner(sv, fv, variant, m["n_decoder_layers"])
                r = runner(ref, fb, "base", m["n_decoder_layers"])
                ms_v, ms_r, ratio = ab(a, r, args.rounds, args.reps)
                label = "int8-dynamic" if variant == "int8-row" else "concat/replicated (as decoder.onnx)"
                print(
                    f"{variant:13s} beam {args.beam} batch {b:3d} ({b * args.beam:3d} rows) past {past:2d} src {args.src}: "
                    f"{ms_v:7.3f} ms vs {label} {ms_r:7.3f} ms; speedup {1 / ratio:5.3f}x (median of {args.rounds} paired rounds)",
                    flush=True,
                )
                if variant == "int8-row":  # and against float32, for scale
                    _, ms_f, ratio2 = ab(
                        a, runner(sb, fb, "base", m["n_decoder_layers"]), args.rounds // 2, args.reps
                    )
                    print(f"{'':13s} int8-row vs float32 {ms_f:7.3f} ms: {1 / ratio2:5.3f}x", flush=True)


if __name__ == "__main__":
    main()
