"""profile: where one decoder step spends its time, by ONNX Runtime's own profiler on the served decoder.onnx.

The step at --batch rows, --past cached positions (each of them: a row of the by-length table) and a source of
--src tokens, random inputs of those shapes, one intra-op thread, the session as the engine runs it (its CPU
fusion exclusions, engine/device.py); kernel time per operator and per node of the graph as ONNX Runtime runs it.
--fused: the same step of a --fused-attention export of the same checkpoint (cached under .cache/bench/models/).
Writes profile-step.json.
"""

from __future__ import annotations

import collections
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.harness.inputs import ints, model_arguments
from bench.harness.results import Report, provenance

QUICK = dict(past=[32, 4], steps=10, batch=8)
ATTENTION_OPS = ("FusedMatMul", "Softmax")  # the standard graph's attention, besides its @ V MatMuls


def add_arguments(p) -> None:
    a = p.add_argument
    model_arguments(p)
    a("--batch", type=int, default=64, help="decoder rows")
    a("--past", type=ints, default=[32, 4, 16, 48], help="cached positions; the first: per operator and node")
    a("--src", type=int, default=16, help="source length")
    a("--steps", type=int, default=200, help="steps timed and profiled per shape")
    a("--fused", action="store_true", help="also the step of a --fused-attention export (exported once)")


def feed(m, b: int, p: int, s: int) -> dict:
    """One decoder step's inputs at batch b, p cached positions, source length s (random K/V, seeded)."""
    from contract import names

    rng = np.random.default_rng(0)
    out = {names.TGT_IDS: np.full((b, 1), 5, np.int64), names.POSITIONS: np.full((b, 1), p, np.int64),
           names.PAST_MASK: np.ones((b, p), np.int64), names.SRC_MASK: np.ones((b, s), np.int64)}  # fmt: skip
    for i in range(m.n_decoder_layers):
        for name, n in (
            (names.past_key(i), p),
            (names.past_value(i), p),
            (names.cross_key(i), s),
            (names.cross_value(i), s),
        ):
            out[name] = rng.standard_normal((b, m.n_heads, n, m.d_head), dtype=np.float32)
    return out


def profile(
    folder: Path, batch: int, past: int, src: int, steps: int
) -> tuple[float, collections.Counter, collections.Counter]:
    """Mean ms per step, and kernel µs per step by operator and by node."""
    import onnxruntime as ort

    from contract.bundle import read_bundle
    from engine.device import CPU_DISABLED_OPTIMIZERS

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    so.enable_profiling, so.profile_file_prefix = True, str(Path(tempfile.mkdtemp()) / "step")
    sess = ort.InferenceSession(
        str(folder / "decoder.onnx"),
        so,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(CPU_DISABLED_OPTIMIZERS),
    )
    inputs = feed(read_bundle(folder).model, batch, past, src)
    for _ in range(20):
        sess.run(None, inputs)
    t0 = time.perf_counter()
    for _ in range(steps):
        sess.run(None, inputs)
    step_ms = (time.perf_counter() - t0) / steps * 1e3
    per_op, per_node = collections.Counter(), collections.Counter()
    for e in json.loads(Path(sess.end_profiling()).read_text()):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_op[e["args"]["op_name"]] += e["dur"] / steps
            per_node[(e["name"].removesuffix("_kernel_time"), e["args"]["op_name"])] += e["dur"] / steps
    return step_ms, per_op, per_node


def run(args) -> list[Report]:
    from bench.harness.inputs import cached_bundle, latest, rel, source_checkpoint

    started = time.time()
    folder = latest(args.model_repo, args.model)
    shapes = {p: profile(folder, args.batch, p, args.src, args.steps) for p in args.past}
    step_ms, per_op, per_node = shapes[args.past[0]]
    total = sum(per_op.values())
    r = Report("profile-step")
    r.heading("One decoder step, per operator")
    r.text(
        provenance(started)
        + f"\n- `{rel(folder)}` decoder.onnx, batch {args.batch}, {args.past[0]} cached positions, source {args.src}, 1 intra-op thread: **{step_ms:.2f} ms per step** (mean of {args.steps})"
    )
    t = r.table("operators", "operator", ("share of kernel time", "{:.1%}"))
    for op, us in per_op.most_common(10):
        t.row(op, us / total)
    r.text(
        "`MatMul` is the projections and the tied output layer; `FusedMatMul` the attention products; `Concat` mostly the self-attention cache growing by one position (past + new -> present) each step. The nodes that cost most:"
    )
    t = r.table("nodes", "node", "operator", ("µs per step", "{:.0f}"), ("share", "{:.1%}"))
    for (node, op), us in per_node.most_common(12):
        t.row(node, op, us, us / total)
    r.text(
        "By cached length (same rows and source; Concat: the step's K/V appended to the whole past, a copy of the cache every step):"
    )
    t = r.table(
        "by-past",
        ("cached positions", "{}"),
        ("step ms", "{:.2f}"),
        ("µs per row", "{:.0f}"),
        ("Concat", "{:.0%}"),
        ("MatMul", "{:.0%}"),
    )
    for p, (ms, ops, _) in sorted(shapes.items()):
        t.row(
            p, ms, ms / args.batch * 1e3, ops["Concat"] / sum(ops.values()), ops["MatMul"] / sum(ops.values())
        )
    if args.fused:
        ckpt = source_checkpoint(folder, args.model)
        fused_ms, fused_ops, _ = profile(
            cached_bundle(ckpt, ckpt.name, fused=True), args.batch, args.past[0], args.src, args.steps
        )
        r.text(
            f"Fused attention (`s2s export --fused-attention`, same weights and shape): **{fused_ms:.2f} ms per step**; `MultiHeadAttention` {fused_ops['MultiHeadAttention']:.0f} µs per step, where the standard graph spends {sum(per_op[o] for o in ATTENTION_OPS):.0f} µs in `{'` + `'.join(ATTENTION_OPS)}` plus its attention-weights @ V products (under `MatMul`)."
        )
    return [r]
