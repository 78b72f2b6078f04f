"""Study: the decoder step with cross-attention K/V once per input, the beam's queries folded into one product.

The served model's decoder (a format-2, standard-nodes graph) is rewritten in memory: each layer's cross-attention
queries (B, 1, d) are reshaped to (N, B/N, H, Dh), so that the B/N beam rows of one input attend to that input's
one copy of K/V (N, H, S, Dh) in one MatMul, and reshaped back to (B, 1, d) after (as CTranslate2 folds them). The
step is then timed against the graph as it is, whose cross K/V are repeated per beam row, at beam 4, one thread,
the two sessions taking turns (ABBA) on the same inputs; the logits of both are compared first. Random cache and
cross K/V, the served weights.

    python -m bench.engine.cross_fold [--model translate-en-ja] [--rounds 8]
    python -m bench.engine.cross_fold --export-check   # does torch.export take the fold with free batch sizes?
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from bench import ROOT
from bench.harness.inputs import latest

CASES = [(16, 12, 24), (64, 12, 24), (64, 32, 24), (64, 12, 48)]  # (inputs, cached positions, source length)
BEAM = 4


def folded(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every cross-attention taking K/V of N inputs for B = N x beam query rows."""
    g = model.graph
    consumers: dict[str, list] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    producer = {o: n for n in g.node for o in n.output}
    inits = {i.name: i for i in g.initializer}
    layers = sum(1 for i in g.input if i.name.startswith("cross.") and i.name.endswith(".key"))
    added = []
    for layer in range(layers):
        key, value = f"cross.{layer}.key", f"cross.{layer}.value"
        for n in consumers[key]:
            if (
                n.op_type == "Shape"
            ):  # the batch size the exporter read off cross K: read it off the queries fed
                n.input[0] = "tgt_ids"
        scores = consumers[next(n for n in consumers[key] if n.op_type == "Transpose").output[0]][0]
        split = producer[
            producer[scores.input[0]].input[0]
        ]  # Reshape (B, T, H, Dh) before the head transpose
        heads, d_head = (int(x) for x in numpy_helper.to_array(inits[split.input[1]])[2:])
        added += [
            helper.make_node("Shape", [key], [f"fold.{layer}.n"], start=0, end=1),
            helper.make_node("Concat", [f"fold.{layer}.n", "fold.rest"], [f"fold.{layer}.shape"], axis=0),
        ]
        split.input[1] = f"fold.{layer}.shape"  # (N, beam, H, Dh)
        merge = consumers[
            consumers[next(n for n in consumers[value] if n.op_type == "MatMul").output[0]][0].output[0]
        ][0]
        merge.input[1] = "fold.merged"  # (N, beam, H, Dh) -> (B, 1, d)
    g.initializer.extend(
        [
            numpy_helper.from_array(np.array([-1, heads, d_head], np.int64), "fold.rest"),
            numpy_helper.from_array(np.array([-1, 1, heads * d_head], np.int64), "fold.merged"),
        ]
    )
    nodes = added + list(g.node)  # the new nodes read graph inputs only
    del g.node[:]
    g.node.extend(nodes)
    return model


def feeds(layers: int, heads: int, d_head: int, inputs: int, past: int, src: int, rng) -> tuple[dict, dict]:
    """The step's inputs with cross K/V and source mask per beam row, and the same once per input."""
    rows = inputs * BEAM
    lengths = rng.integers(src // 2, src + 1, inputs)
    per_input = {"src_mask": (np.arange(src)[None] < lengths[:, None]).astype(np.int64)}
    f = {
        "tgt_ids": rng.integers(4, 1000, (rows, 1)),
        "positions": np.full((rows, 1), past, np.int64),
        "past_mask": np.ones((rows, past), np.int64),
    }
    for layer in range(layers):
        for kv in ("key", "value"):
            f[f"past_key_values.{layer}.self.{kv}"] = rng.standard_normal(
                (rows, heads, past, d_head), np.float32
            )
            per_input[f"cross.{layer}.{kv}"] = rng.standard_normal((inputs, heads, src, d_head), np.float32)
    per_row = f | {k: np.repeat(v, BEAM, 0) for k, v in per_input.items()}
    return per_row, f | per_input


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    o = ort.SessionOptions()
    o.intra_op_num_threads = o.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), o, providers=["CPUExecutionProvider"])


def export_check() -> None:
    """The fold as model code would write it (queries (B, T, d) viewed as (N, B/N x T, d)), exported by the dynamo
    exporter with the query rows and the sources as independent dynamic sizes, then run at other sizes."""
    import torch
    from torch.export import Dim

    class Fold(torch.nn.Module):
        def forward(self, q, k):  # q (B, T, d), k (N, H, S, Dh): B = N x beam
            b, t, d = q.shape
            n, h = k.shape[0], k.shape[1]
            qf = q.reshape(n, -1, d)  # an input's beam queries as one sequence
            qh = qf.view(n, qf.shape[1], h, d // h).transpose(1, 2)
            out = (qh @ k.transpose(-2, -1)).softmax(-1) @ k
            return out.transpose(1, 2).reshape(b, t, d)

    dims = {"q": {0: Dim("batch", max=4096), 1: Dim("tgt_len", max=4096)}}
    dims["k"] = {0: Dim("sources", max=4096), 2: Dim("src_len", max=4096)}
    prog = torch.onnx.export(
        Fold(), (torch.randn(6, 2, 8), torch.randn(3, 2, 5, 4)), dynamo=True, dynamic_shapes=dims
    )
    s = ort.InferenceSession(prog.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for b, n, t in [(8, 2, 1), (4, 4, 1), (12, 3, 2)]:
        q, k = torch.randn(b, t, 8), torch.randn(n, 2, 7, 4)
        got = s.run(None, {s.get_inputs()[0].name: q.numpy(), s.get_inputs()[1].name: k.numpy()})[0]
        print(
            f"rows {b}, inputs {n}, tokens {t}: max |ONNX - eager| {np.abs(got - Fold()(q, k).numpy()).max():.1e}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument(
        "--export-check", action="store_true", help="only check that the fold exports (tiny module)"
    )
    args = p.parse_args()
    if args.export_check:
        return export_check()
    folder = latest(ROOT / "models", args.model)
    base = onnx.load(str(folder / "decoder.onnx"))
    per_row, per_input = session(base), session(folded(onnx.load(str(folder / "decoder.onnx"))))
    names = {i.name: i.shape for i in per_row.get_inputs()}
    layers = sum(1 for n in names if n.startswith("cross.") and n.endswith(".key"))
    heads, d_head = names["cross.0.key"][1], names["cross.0.key"][3]
    print(
        f"{folder.relative_to(ROOT)}: {layers} layers, {heads} heads of {d_head}; {platform.processor() or platform.machine()}"
    )
    rng = np.random.default_rng(0)
    for inputs, past, src in CASES:
        fa, fb = feeds(layers, heads, d_head, inputs, past, src, rng)
        diff = float(np.abs(per_row.run(["logits"], fa)[0] - per_input.run(["logits"], fb)[0]).max())
        times: dict[str, list[float]] = {"row": [], "input": []}
        for r in range(args.rounds):
            for side in ("row", "input") if r % 2 == 0 else ("input", "row"):
                s, f = (per_row, fa) if side == "row" else (per_input, fb)
                t0 = time.perf_counter()
                for _ in range(20):
                    s.run(None, f)
                times[side].append((time.perf_counter() - t0) / 20 * 1000)
        a, b = statistics.median(times["row"]), statistics.median(times["input"])
        print(
            f"| {inputs} x beam {BEAM} = {inputs * BEAM} rows | {past} | {src} | {a:.1f} | {b:.1f} | {a / b:.3f}x "
            f"| {diff:.1e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
