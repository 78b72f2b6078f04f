"""Where the greedy screen pays: a float32 output projection (MatMul + bias, then argmax, as a greedy step without
the screen spends it) against ``engine.screen.Top1Screen.top1`` on the same rows, by output size d_model x
vocabulary and rows per step, one thread, sessions taking turns (least of --repeats). The screen's own cost only:
rows it does not settle (a few percent on trained and on random Marian weights) add their full projection.

    python -m bench.engine.screen_rule [--repeats 7] [--bundles models/translate-en-ja/1,...]

``--bundles``: also whole greedy decoding, ``engine.load(bundle, greedy_screen="on" | "off").generate`` on the
held-out English inputs at each batch size (outputs asserted equal), taking turns, least of --repeats.

It prints the table and the smallest d_model x vocabulary at which the screen is faster at every row count: the
rule ``engine.screen.AUTO_MIN_MACS`` is set from it (docs/bench/marian-ct2-notes.md).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from bench.common.abba import abba
from engine.screen import Top1Screen


def projection(w: np.ndarray, b: np.ndarray) -> ort.InferenceSession:
    """logits = h @ w + b, in ONNX Runtime (one thread), as the decoder graph's last nodes compute them."""
    d, v = w.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["h", "w"], ["z"]), helper.make_node("Add", ["z", "b"], ["logits"])],
        "head",
        [helper.make_tensor_value_info("h", onnx.TensorProto.FLOAT, ["rows", d])],
        [helper.make_tensor_value_info("logits", onnx.TensorProto.FLOAT, ["rows", v])],
        initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def least_ms(fn, n: int) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return 1000 * best


def whole(folder: str, batches: list[int], repeats: int) -> None:
    """Greedy decoding of held-out inputs with the screen on and off, per batch size: sequences/s and the ratio."""
    import engine
    from bench import ROOT

    rows = (ROOT / "checkpoints" / "translate-en-ja" / "test.tsv").read_text(encoding="utf-8").splitlines()
    on, off = (engine.load(folder, device="cpu", greedy_screen=m) for m in ("on", "off"))
    for batch in batches:
        texts = [r.split("\t")[0] for r in rows[: max(64, 2 * batch)]]
        sides = [
            (name, lambda t=t, x=texts, b=batch: [r.tokens for r in t.generate(x, max_batch_size=b)])
            for name, t in (("on", on), ("off", off))
        ]
        assert sides[0][1]() == sides[1][1](), "the screen changed an output"
        s = {"on": float("inf"), "off": float("inf")}
        for turn in range(repeats):
            for name, fn in abba(sides, turn):
                s[name] = min(s[name], least_ms(fn, 1))
        print(
            f"{folder} greedy batch {batch}, {len(texts)} inputs: screen off {s['off']:.0f} ms, on {s['on']:.0f} ms "
            f"({s['off'] / s['on']:.2f}x)",
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--d-models", default="256,512,1024")
    p.add_argument("--vocabs", default="8000,16000,32000,64000")
    p.add_argument("--rows", default="1,16,64")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument(
        "--bundles", default="", help="comma-separated bundle folders to decode whole, screen on/off"
    )
    p.add_argument("--skip-table", action="store_true")
    args = p.parse_args(argv)
    for folder in filter(None, args.bundles.split(",")):
        whole(folder, [int(r) for r in args.rows.split(",")], args.repeats)
    if args.skip_table:
        return 0
    rng = np.random.default_rng(0)
    rows_list = [int(r) for r in args.rows.split(",")]
    print(
        "| d_model x vocab | MACs/row | " + " | ".join(f"{r} rows full / screen ms" for r in rows_list) + " |"
    )
    pays = []
    for d in map(int, args.d_models.split(",")):
        for v in map(int, args.vocabs.split(",")):
            w = (rng.standard_normal((d, v)) * 0.05).astype(np.float32)
            b = (rng.standard_normal(v) * 0.1).astype(np.float32)
            full, screen = projection(w, b), Top1Screen(np.ascontiguousarray(w.T), b, ())
            cells, wins = [], True
            for r in rows_list:
                h = rng.standard_normal((r, d)).astype(np.float32)
                sides = [
                    ("full", lambda h=h, f=full: f.run(None, {"h": h})[0].argmax(-1)),
                    ("screen", lambda h=h, s=screen: s.top1(h)),
                ]
                for _, fn in sides:
                    fn()  # warm-up
                ms = {name: float("inf") for name, _ in sides}
                for turn in range(4):
                    for name, fn in abba(sides, turn):
                        ms[name] = min(ms[name], least_ms(fn, max(1, args.repeats // 2)))
                cells.append(f"{ms['full']:.3f} / {ms['screen']:.3f} ({ms['full'] / ms['screen']:.2f}x)")
                wins &= ms["screen"] < ms["full"]
            pays.append((d * v, wins))
            print(f"| {d} x {v} | {d * v / 1e6:.1f}M | " + " | ".join(cells) + " |", flush=True)
    smallest = min((m for m, w in pays if w and all(w2 for m2, w2 in pays if m2 >= m)), default=None)
    print(
        f"screen faster at every row count from {smallest / 1e6:.1f}M multiply-adds per row"
        if smallest
        else ""
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
