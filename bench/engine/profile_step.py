"""Where one decoder step spends its time: ONNX Runtime's per-operator profile of the served decoder.onnx at a
batch size and cache length (random inputs of those shapes, 1 intra-op thread), the same step with fused
attention, the encoder padded against in equal-length groups, and the engine's CPU fusion exclusions against
ONNX Runtime's full set (sessions taking turns). Writes docs/bench/profile-step.json.

    python -m bench.engine.profile_step [--model translate-en-ja] [--batch 64] [--past 32]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench import ROOT
from bench.common.abba import abba
from bench.common.bundles import cached_bundle, latest, rel, source_checkpoint
from bench.common.report import RESULTS, publish


def encoder_padding(folder: Path, data: Path, batch: int, repeats: int = 9) -> dict:
    """Median ms of the encoder on ``batch`` held-out sources: one run over the padded batch vs ``Runner.encode``
    (rows grouped by length, no padding computed), taking turns."""
    from engine import EngineOptions, Translator
    from engine.step_loop import pad_batch

    t = Translator(folder, EngineOptions(device="cpu"))
    engine = t.runner
    lines = data.read_text(encoding="utf-8").splitlines()[:batch]
    ids, mask = pad_batch([t.codec.source_ids(line.split("\t")[0]) for line in lines], engine.special.pad)
    padded, grouped = [], []
    for r in range(repeats + 1):
        for fn, out in ((engine._encode, padded), (engine.encode, grouped)):
            t = time.perf_counter()
            fn(ids, mask)
            if r:  # the first round warms both up
                out.append(1000 * (time.perf_counter() - t))
    lengths = mask.sum(axis=1)
    return {
        "n": len(lines),
        "mean_len": float(lengths.mean()),
        "max_len": int(lengths.max()),
        "padding": ids.size / lengths.sum(),
        "padded_ms": float(np.median(padded)),
        "grouped_ms": float(np.median(grouped)),
    }


def decoder_feed(m, b: int, p: int, s: int) -> dict:
    """One decoder step's inputs at batch b, p cached positions, source length s (random K/V, seeded)."""
    from contract import names

    rng = np.random.default_rng(0)
    feed = {
        names.TGT_IDS: np.full((b, 1), 5, np.int64),
        names.POSITIONS: np.full((b, 1), p, np.int64),
        names.PAST_MASK: np.ones((b, p), np.int64),
        names.SRC_MASK: np.ones((b, s), np.int64),
    }
    for i in range(m.n_decoder_layers):
        for name in (names.past_key(i), names.past_value(i)):
            feed[name] = rng.standard_normal((b, m.n_heads, p, m.d_head), dtype=np.float32)
        for name in (names.cross_key(i), names.cross_value(i)):
            feed[name] = rng.standard_normal((b, m.n_heads, s, m.d_head), dtype=np.float32)
    return feed


def profile(folder: Path, args, by_node: bool = False) -> tuple:
    """Mean ms per decoder step of folder/decoder.onnx at the given shape, and kernel microseconds per operator
    (and, ``by_node``, per node of the graph as ONNX Runtime runs it)."""
    from contract.bundle import read_bundle

    m = read_bundle(folder).model
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    so.profile_file_prefix = str(Path(tempfile.mkdtemp()) / "step")
    from engine.device import CPU_DISABLED_OPTIMIZERS

    # As the engine runs it: the same fusions turned off (engine/device.py).
    sess = ort.InferenceSession(
        str(folder / "decoder.onnx"),
        so,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(CPU_DISABLED_OPTIMIZERS),
    )
    feed = decoder_feed(m, args.batch, args.past, args.src)
    for _ in range(20):
        sess.run(None, feed)
    t0 = time.perf_counter()
    for _ in range(args.steps):
        sess.run(None, feed)
    step_ms = (time.perf_counter() - t0) / args.steps * 1e3
    events = json.loads(Path(sess.end_profiling()).read_text())
    per_op: collections.Counter = collections.Counter()
    per_node: collections.Counter = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per_op[e["args"]["op_name"]] += e["dur"] / args.steps
            per_node[e["name"].removesuffix("_kernel_time")] += e["dur"] / args.steps
    return (step_ms, per_op, per_node) if by_node else (step_ms, per_op)


def fusion_ab(folder: Path, args, rounds: int = 9) -> dict:
    """Decoder step and encoder run with the engine's CPU fusion exclusions (engine/device.py) against ONNX
    Runtime's full set, paired: the two sessions take turns, the order reversed every other round."""
    from contract import names
    from contract.bundle import read_bundle
    from engine.device import CPU_DISABLED_OPTIMIZERS

    m = read_bundle(folder).model
    dec_feed = decoder_feed(m, args.batch, args.past, args.src)
    enc_feed = {names.SRC_IDS: np.full((16, 12), 5, np.int64), names.SRC_MASK: np.ones((16, 12), np.int64)}
    out = {}
    for graph, feed, n in (("decoder.onnx", dec_feed, 50), ("encoder.onnx", enc_feed, 20)):
        sessions = {}
        for label, disabled in (("engine", list(CPU_DISABLED_OPTIMIZERS)), ("all fusions", [])):
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
            sessions[label] = ort.InferenceSession(
                str(folder / graph), so, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
            )
        times = {k: [] for k in sessions}
        for r in range(rounds):
            for label in abba(list(sessions), r):
                sess = sessions[label]
                sess.run(None, feed)
                t0 = time.perf_counter()
                for _ in range(n):
                    sess.run(None, feed)
                times[label].append((time.perf_counter() - t0) / n * 1e3)
        ratio = np.array(times["all fusions"]) / np.array(times["engine"])
        out[graph] = (
            float(np.median(times["engine"])),
            float(np.median(times["all fusions"])),
            float(np.median(ratio)),
        )
    return out


# The standard graph's attention: Q K^T and its scale fused by ONNX Runtime (FusedMatMul), the bias, the
# softmax and @ V (the two attention MatMuls are counted under MatMul with the projections, so not here).
ATTENTION_OPS = ("FusedMatMul", "Softmax")


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.engine.profile_step",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--model", default="translate-en-ja")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--past", type=int, default=32, help="cached positions P")
    ap.add_argument("--src", type=int, default=16, help="source length S")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--encoder-batch", type=int, default=64, help="held-out sentences in the encoder timing")
    ap.add_argument(
        "--fused",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also profile the same step of a --fused-attention export of the checkpoint (cached under "
        ".cache/bench/models/; the first run exports it, ~1 min)",
    )
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of the results JSON")
    args = ap.parse_args()

    b, p, s = args.batch, args.past, args.src
    folder = latest(ROOT / "models", args.model)  # the version `s2s serve` serves
    ckpt = source_checkpoint(folder, args.model)
    step_ms, per_op = profile(folder, args)
    fused = None
    if (
        args.fused
    ):  # the same step with attention as ONNX Runtime's fused operator (s2s export --fused-attention)
        fused = profile(cached_bundle(ckpt, ckpt.name, fused=True), args)
    enc = encoder_padding(folder, ROOT / "checkpoints" / args.model / "test.tsv", args.encoder_batch)
    ab = fusion_ab(folder, args)
    from engine.device import CPU_DISABLED_OPTIMIZERS

    total = sum(per_op.values())
    rows = [f"| {op} | {us / total:.1%} |" for op, us in per_op.most_common(10)]
    table = "\n".join(
        [
            "## One decoder step, per operator (`bench/engine/profile_step.py`)",
            "",
            f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; command: `python -m bench.engine.profile_step --model {args.model} "
            f"--batch {b} --past {p}`",
            f"- `{rel(folder)}` decoder.onnx, batch {b}, {p} cached positions, source {s}, 1 intra-op thread: "
            f"**{step_ms:.2f} ms per step** (mean of {args.steps})",
            "",
            "| operator | share of kernel time |",
            "|---|---:|",
            *rows,
            "",
            "`MatMul` is the projections and the tied output layer; `FusedMatMul` the attention products; `Concat`",
            "mostly the self-attention cache growing by one position (past + new -> present) each step.",
            "",
            *(
                []
                if fused is None
                else [
                    f"Fused attention (`s2s export --fused-attention`, same weights and shape): **{fused[0]:.2f} ms per step**; "
                    f"`MultiHeadAttention` {fused[1]['MultiHeadAttention']:.0f} us per step, where the standard graph spends "
                    f"{sum(per_op[o] for o in ATTENTION_OPS):.0f} us in `{'` + `'.join(ATTENTION_OPS)}` plus its attention-weights "
                    f"@ V products (counted under `MatMul`, {per_op['MatMul'] / total:.0%} of the standard step with the "
                    "projections).",
                    "",
                ]
            ),
            f"Encoder, {enc['n']} held-out sources (`checkpoints/{args.model}/test.tsv`; mean {enc['mean_len']:.1f} tokens, "
            f"longest {enc['max_len']}: {enc['padding']:.1f}x padding), median of 9 taking turns: one run over the padded "
            f"batch **{enc['padded_ms']:.1f} ms**, rows in equal-length groups (`Runner.encode`, no padding computed) "
            f"**{enc['grouped_ms']:.1f} ms** ({enc['padded_ms'] / enc['grouped_ms']:.1f}x). The encoder costs about the same "
            "per token at any batch size on one core, so padding costs in full.",
            "",
            "Fusions the engine turns off on the CPU (`engine/device.py`: "
            f"{', '.join(f'`{o}`' for o in CPU_DISABLED_OPTIMIZERS)}), "
            "measured in this run, the two sessions taking turns (median of 9 rounds): decoder step (the shape above) "
            f"**{ab['decoder.onnx'][0]:.2f} ms** as the engine runs it against {ab['decoder.onnx'][1]:.2f} ms with every "
            f"fusion ({ab['decoder.onnx'][2]:.2f}x); encoder, 16 sources of 12 tokens, {ab['encoder.onnx'][0]:.2f} against "
            f"{ab['encoder.onnx'][1]:.2f} ms ({ab['encoder.onnx'][2]:.2f}x).",
        ]
    )
    print(table)
    publish(table, args.results, "profile-step", names=("operators",))
    return 0


if __name__ == "__main__":
    sys.exit(main())
