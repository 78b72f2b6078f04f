#!/usr/bin/env python
"""An NLLB-600M-shaped model: what it costs to import, store, load and serve, and the engine per core against
CTranslate2 on the same checkpoint.

The checkpoint is made here as a user's download would look (bench/engine/nllb_setup.py: NLLB-200-distilled-600M's
M2M100Config, d 1024, 12+12 layers, 16 heads, d_ff 4096, vocabulary 256,206, random weights, NLLB's tokenizer.json
layout with the FLORES-200 codes). Then, from that one folder, each made once and cached in .cache/bench/nllb/:

  cost    ``s2s import`` (float32 and ``--quantize int8``): wall time, peak RSS, the bundle's files;
          ``ct2-transformers-converter``: the same; each engine and CTranslate2 loaded in a fresh process (load time,
          RSS, first answer); ``s2s serve`` with one engine core (time to ready, first answer, the core's RSS)
  speed   engine.load(bundle, threads=1).generate(texts, beam_size=b, max_batch_size=B * b, source_languages=en,
          target_languages=fr, min_new_tokens=N + 1, max_new_tokens=N + 1) against
          Translator(ct2, compute_type=float32 | int8, 1 thread).translate_batch(tokens,
          target_prefix=[["fra_Latn"]], beam_size=b, max_batch_size=B, min/max_decoding_length=N + 1):
          the target language forced as one token on both sides, then exactly N tokens (random weights would stop
          anywhere). Per cell one warm-up each, then 3 passes in ABBA order; the least of 3, sequences/s.

Each cell's figures are kept in .cache/bench/nllb/<shape>/costs.json, so the figure set can be made over several
invocations (each under ~10 minutes on a 2-core machine); every run writes docs/bench/nllb-ct2.json from all the
figures made so far, rendered into docs/BENCHMARKS.md#nllb-ct2.

    python -m bench.engine.nllb_ct2 --step cost
    python -m bench.engine.nllb_ct2 --step speed --precisions float32 --beams 1 --batches 1,16
    python -m bench.engine.nllb_ct2 --quick      (a tiny shape, every step; writes nothing unless --results DIR)

Run it under cpu-bench on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bench.common.abba import abba
from bench.common.machine import machine
from bench.common.report import RESULTS
from bench.engine import nllb_cost
from bench.engine.nllb_report import render
from bench.engine.nllb_setup import CACHE, QUICK, Artifacts, Shape, lines

NAME = "nllb-ct2"
SOURCE, TARGET, TARGET_TOKEN = "en", "fr", "fra_Latn"


def cost(a: Artifacts, n: int, again: bool) -> None:
    """Imports, conversion, loads and a served answer; a figure already in costs.json is kept unless ``again``."""
    f32, i8, ct2 = a.bundle("none"), a.bundle("int8"), a.ct2_model()
    tokens = nllb_cost.ct2_source(f32)
    probes = {
        "load-engine-float32": lambda: nllb_cost.probe("engine", f32, n),
        # the greedy screen forced on (auto leaves a decoder with external data unsplit): what it costs at load
        "load-engine-float32-screen-on": lambda: nllb_cost.probe("engine", f32, n, "on"),
        "load-engine-int8": lambda: nllb_cost.probe("engine", i8, n),
        "load-ct2-float32": lambda: nllb_cost.probe("ct2", ct2, n, "float32", tokens),
        "load-ct2-int8": lambda: nllb_cost.probe("ct2", ct2, n, "int8", tokens),
        "serve-float32": lambda: nllb_cost.serve(a.repo, f32.parent.name, n),
        "serve-int8": lambda: nllb_cost.serve(a.repo, i8.parent.name, n),
    }
    for key, fn in probes.items():
        if again or key not in a.costs():
            print(f"{key} ...", flush=True)
            # Twice, the quicker kept: the first may read the files from disk where the page cache lost them (the
            # machine's other work), the second reads them from memory, as a restarted core does.
            runs = [fn(), fn()]
            when = "ready_s" if key.startswith("serve") else "load_s"
            best = min(runs, key=lambda r: r[when])
            a.record(key, {**best, "runs": [r[when] for r in runs], "loadavg": os.getloadavg()[0]})
            print(f"{key}: {a.costs()[key]}", flush=True)


def speed(a: Artifacts, args, quick: bool) -> None:
    """The ABBA cells asked for, each recorded as it is done."""
    import ctranslate2

    import engine

    n = args.new_tokens
    for precision in args.precisions.split(","):
        folder = a.bundle("none" if precision == "float32" else precision)
        eng = engine.load(folder, threads=1, device="cpu")
        ct2 = ctranslate2.Translator(
            str(a.ct2_model()), device="cpu", compute_type=precision, inter_threads=1, intra_threads=1
        )
        for beam in map(int, args.beams.split(",")):
            for batch in map(int, args.batches.split(",")):
                key = f"speed-{precision}-b{beam}-x{batch}"
                if key in a.costs() and not args.again:
                    continue
                count = args.inputs or max(4, 2 * batch)
                texts = lines(count if not quick else 4, 5)
                src = [eng.config.languages.apply(eng.codec.source_ids(t), SOURCE, TARGET)[0] for t in texts]
                tokens = [[eng.codec.tokenizer.id_to_token(i) for i in ids] for ids in src]

                def run_engine(eng=eng, texts=texts, beam=beam, batch=batch):
                    out = eng.generate(
                        texts,
                        beam_size=beam,
                        max_batch_size=batch * beam,
                        min_new_tokens=n + 1,  # the forced language token counts among the new tokens
                        max_new_tokens=n + 1,
                        source_languages=[SOURCE] * len(texts),
                        target_languages=[TARGET] * len(texts),
                    )
                    assert all(len(r.tokens) == n for r in out), [len(r.tokens) for r in out][:4]

                def run_ct2(ct2=ct2, tokens=tokens, beam=beam, batch=batch):
                    out = ct2.translate_batch(
                        tokens,
                        target_prefix=[[TARGET_TOKEN]] * len(tokens),
                        beam_size=beam,
                        max_batch_size=batch,
                        min_decoding_length=n + 1,  # the prefix token included, as in its hypotheses
                        max_decoding_length=n + 1,
                    )
                    assert all(len(r.hypotheses[0]) == n + 1 for r in out), [
                        len(r.hypotheses[0]) for r in out
                    ]

                times, load = {"engine": [], "ct2": []}, os.getloadavg()[0]
                run_engine(), run_ct2()  # warm-up
                for r in range(args.repeats):
                    for name, fn in abba([("engine", run_engine), ("ct2", run_ct2)], r):
                        t0 = time.perf_counter()
                        fn()
                        times[name].append(time.perf_counter() - t0)
                e, c = len(texts) / min(times["engine"]), len(texts) / min(times["ct2"])
                a.record(
                    key,
                    {
                        "inputs": len(texts),
                        "engine_seq_s": e,
                        "ct2_seq_s": c,
                        "times": times,
                        "repeats": args.repeats,
                        "loadavg": load,
                    },
                )
                print(f"{key}: engine {e:.3f}/s ct2 {c:.3f}/s = {e / c:.2f}x", flush=True)
        eng = ct2 = None  # freed before the next precision's pair loads


def profile(a: Artifacts, precisions: str, batches: str, n: int) -> None:
    """Where a decoder step goes: ONNX Runtime's per-operator profile of decoder.onnx (bench/engine/profile_step.py)
    at each batch, n/2 cached positions and a source of 12, with the output projection (the MatMul that makes the
    logits, and its int8 nodes) counted apart from the layers' MatMuls."""
    from types import SimpleNamespace

    import onnx

    from bench.engine.profile_step import profile as graph_profile
    from contract import names

    for precision in precisions.split(","):
        folder = a.bundle("none" if precision == "float32" else precision)
        g = onnx.load(str(folder / "decoder.onnx"), load_external_data=False).graph
        producer = {o: node for node in g.node for o in node.output}
        node = producer[names.LOGITS]
        while node.op_type not in ("MatMul", "MatMulInteger"):
            node = producer[node.input[0]]  # int8: back through the dequantizing Mul and Cast
        projection = node.name.removesuffix("_quant")
        for batch in map(int, batches.split(",")):
            shape = SimpleNamespace(batch=batch, past=n // 2, src=12, steps=20)
            step_ms, per_op, per_node = graph_profile(folder, shape, by_node=True)
            total = sum(per_op.values())
            matched = [name for name in per_node if name.startswith(projection)]
            proj = sum(per_node[name] for name in matched)
            top = {op: us / total for op, us in per_op.most_common(6)}
            a.record(
                f"profile-{precision}-x{batch}",
                {"step_ms": step_ms, "projection_share": proj / total, "ops": top, "nodes": matched},
            )
            print(
                f"profile {precision} batch {batch}: {step_ms:.1f} ms, projection {proj / total:.0%}, {top}"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--step", choices=("cost", "speed", "profile", "report", "all"), default="all")
    p.add_argument("--new-tokens", type=int, default=16, help="N: tokens of every answer, after the language")
    p.add_argument("--precisions", default="float32,int8")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--repeats", type=int, default=3, help="ABBA passes per cell; the least is kept")
    p.add_argument(
        "--inputs", type=int, default=0, help="inputs per speed cell (default: twice the batch, at least 4)"
    )
    p.add_argument("--again", action="store_true", help="measure again what costs.json already holds")
    p.add_argument("--quick", action="store_true", help="a tiny shape; writes nothing unless --results")
    p.add_argument(
        "--cache", type=Path, default=CACHE, help="where the checkpoint and its artifacts are kept"
    )
    p.add_argument(
        "--results", type=Path, default=None, help="folder of the results JSON (default: docs/bench/)"
    )
    args = p.parse_args(argv)
    shape = QUICK if args.quick else Shape()
    if args.quick:
        args.batches, args.repeats, args.new_tokens = "1,4", 1, 8
    a = Artifacts(shape, args.cache)
    info = machine()
    if args.step in ("cost", "all"):
        cost(a, args.new_tokens, args.again)
    if args.step in ("speed", "all"):
        speed(a, args, args.quick)
    if args.step in ("profile", "all"):
        profile(a, args.precisions, args.batches, args.new_tokens)
    report = render(shape, a.costs(), info, args.new_tokens)
    print(report.markdown())
    if not args.quick or args.results:
        from bench.render import write

        report.save(args.results or RESULTS)
        if not args.results:
            write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
