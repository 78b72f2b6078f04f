"""Export variants side by side: which int8 export `s2s export --quantize int8` should mean on a CPU, and
whether the fused attention of `s2s export --fused-attention` pays.

Each int8 variant of export/quantize.py and the fused-attention bundle is exported once (cached under
.cache/bench/models/) and measured against the float32 bundle in one run: accuracy (chrF, exact match, outputs
identical to float32, on translation and on addition: the bar is chrF within 0.5 of float32 and addition's exact
match unchanged) and speed on real inputs (EOS-stopped, greedy, one thread, batch 1/16/64, systems taking turns
ABBA as in bench.engine.decode_real), with CTranslate2 int8 and float32 alongside. The verdict names the fastest
variant within the bar. Writes docs/bench/int8-variants.json.

    python -m bench.engine.int8_variants            # ~6 min on 2 idle cores
    python -m bench.engine.int8_variants --quick    # 32 inputs; prints only
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import random
import shlex
import sys
import time
from pathlib import Path

from bench import CACHE, ROOT
from bench.common.bundles import cached_bundle
from bench.common.machine import machine
from bench.common.report import RESULTS, publish
from bench.engine.real_inputs import RealSystem, time_real

NAME = "int8-variants"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.engine.int8_variants",
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        default="translate-en-ja",
        help="checkpoints/MODEL and models/MODEL/1 (default: %(default)s)",
    )
    p.add_argument(
        "--batch-sizes", default="1,16,64", help="comma-separated batch sizes (default: %(default)s)"
    )
    p.add_argument(
        "--real-inputs", type=int, default=640, help="inputs per timed pass (default: %(default)s)"
    )
    p.add_argument(
        "--repeats", type=int, default=3, help="timed passes per cell, median reported (default: %(default)s)"
    )
    p.add_argument(
        "--accuracy-sentences", type=int, default=1000, help="held-out pairs for chrF (default: %(default)s)"
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the shuffle of the held-out set (default: %(default)s)"
    )
    p.add_argument(
        "--quick", action="store_true", help="32 inputs, 3 quick passes, 64 accuracy sentences; prints only"
    )
    p.add_argument("--no-write", action="store_true", help="print the report only")
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the results JSON")
    a = p.parse_args(argv)
    a.batch_sizes = [int(x) for x in a.batch_sizes.split(",") if x]
    if a.quick:
        a.real_inputs, a.accuracy_sentences, a.no_write = 32, 64, True
    return a


def main(argv=None) -> int:
    args = parse_args(argv)
    import sacrebleu
    import torch

    from bench.engine.baselines import generate
    from engine import EngineOptions, Translator
    from export.ctranslate2 import CT2Translator, convert, vocabulary
    from export.quantize import INT8, VARIANTS
    from training import checkpoint as ckpt_io
    from training.tasks import read_tsv

    torch.set_num_threads(1)
    started = time.perf_counter()
    info = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": " ".join(
            ["python -m bench.engine.int8_variants", shlex.join(sys.argv[1:] if argv is None else argv)]
        ).strip(),
    }
    ck_dir = ROOT / "checkpoints" / args.model
    ck = ckpt_io.load(ck_dir)
    codec = ck.codec
    budget = min(ck.task.max_new_tokens, ck.config.max_len - 1)
    pairs = read_tsv(ck_dir / "test.tsv")
    random.Random(args.seed).shuffle(pairs)
    opts = EngineOptions(device="cpu", intra_op_threads=1)
    f32 = Translator(ROOT / "models" / args.model / "1", opts)
    engines = {
        "float32": f32,
        **{v: Translator(cached_bundle(ck_dir, args.model, v), opts) for v in VARIANTS},
    }
    fused = Translator(cached_bundle(ck_dir, args.model, fused=True), opts)

    # Accuracy: translation chrF on held-out pairs, and addition's exact match (its own bar).
    acc: dict[str, dict] = {}
    srcs, refs = (
        [s for s, _ in pairs[: args.accuracy_sentences]],
        [r for _, r in pairs[: args.accuracy_sentences]],
    )
    add_dir = ROOT / "checkpoints" / "addition"
    add_pairs = read_tsv(add_dir / "test.tsv")[: args.accuracy_sentences]
    add_engines = {
        "float32": Translator(ROOT / "models" / "addition" / "1", opts),
        **{v: Translator(cached_bundle(add_dir, "addition", v), opts) for v in VARIANTS},
    }
    for name, e in engines.items():
        hyps = generate(e, srcs, budget, batch_size=64)
        add = generate(add_engines[name], [s for s, _ in add_pairs], batch_size=64)
        acc[name] = {
            "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
            "exact": sum(h == r for h, r in zip(hyps, refs)) / len(refs),
            "hyps": hyps,
            "addition_exact": sum(h == r for h, (_, r) in zip(add, add_pairs)) / len(add_pairs),
        }
    for name in acc:
        acc[name]["same"] = sum(a == b for a, b in zip(acc[name]["hyps"], acc["float32"]["hyps"])) / len(srcs)

    # Speed: real inputs, greedy, EOS-stopped; CTranslate2 int8 alongside as the reference.
    ct2_dir = convert(ck_dir, CACHE / f"ct2-{args.model}")
    tokens_vocab = vocabulary(codec.tokenizer)
    ct2 = CT2Translator(ct2_dir, tokens_vocab, "int8", 1)
    ct2_f32 = CT2Translator(ct2_dir, tokens_vocab, "float32", 1)
    texts = [pairs[i % len(pairs)][0] for i in range(args.real_inputs)]
    tokens = [[ct2.tokens[i] for i in codec.source_ids(t)] for t in texts]

    def eng(e):
        return lambda t, _tok, beam, batch: e.generate(
            t, beam_size=beam, max_new_tokens=budget, max_batch_size=batch * beam
        )

    def ct2_run(tr):
        return lambda _t, tok, beam, batch: tr.translator.translate_batch(
            tok,
            max_batch_size=batch,
            batch_type="examples",
            beam_size=beam,
            max_decoding_length=budget,
            min_decoding_length=0,
            return_scores=False,
        )

    systems = [RealSystem(name, name, eng(e), lambda r: r) for name, e in engines.items()]
    systems.append(RealSystem("float32-fused", "float32", eng(fused), lambda r: r))
    systems.append(RealSystem("ct2-int8", "int8", ct2_run(ct2), lambda r: r))
    systems.append(RealSystem("ct2-float32", "float32", ct2_run(ct2_f32), lambda r: r))
    cells = time_real(systems, texts, tokens, [1], args.batch_sizes, args.repeats)
    speed = {(c.system, c.batch): c.seq_s for c in cells}

    base = acc["float32"]
    ok = {
        v: base["chrf"] - acc[v]["chrf"] <= 0.5 and acc[v]["addition_exact"] >= base["addition_exact"]
        for v in VARIANTS
    }
    geo = {
        v: math.exp(
            sum(math.log(speed[(v, b)] / speed[("float32", b)]) for b in args.batch_sizes)
            / len(args.batch_sizes)
        )
        for v in VARIANTS
    }
    winners = sorted((v for v in VARIANTS if ok[v]), key=lambda v: -geo[v])
    verdict = (
        (
            f"fastest variant within the accuracy bar: **{winners[0]}** ({geo[winners[0]]:.2f}x float32, geometric mean "
            f"over batch sizes); export/quantize.py's default int8 is `{INT8}`"
            + ("" if winners[0] == INT8 else " (**differs: update INT8**)")
        )
        if winners
        else "no variant meets the accuracy bar"
    )

    la = info["machine"]["loadavg"]
    lines = [
        "## Export variants: int8 and fused attention",
        "",
        f"- date: {info['date']}; CPU: {info['machine']['cpu']} ({info['machine']['nproc']} cores), load average at start "
        f"{la[0]:.2f}; took {time.perf_counter() - started:.0f} s",
        f"- command: `{info['command']}`",
        f"- accuracy: {len(srcs)} held-out pairs of `checkpoints/{args.model}/test.tsv` (seeded shuffle), greedy with EOS, "
        f"batch 64; addition: {len(add_pairs)} problems of `checkpoints/addition/test.tsv`. Bar: chrF within 0.5 of float32 "
        "and addition exact match unchanged.",
        f"- speed: {args.real_inputs} held-out sources as they come, greedy, EOS-stopped, one thread per system, sequences/s "
        f"(median of {args.repeats} ABBA passes); CTranslate2 `compute_type=int8` on the same weights alongside.",
        "",
        "| variant | chrF | exact | same as float32 | addition exact | "
        + " | ".join(f"seq/s B={b}" for b in args.batch_sizes)
        + " | vs float32 (geo. mean) | vs CT2 int8 ("
        + " / ".join(f"B={b}" for b in args.batch_sizes)
        + ") | bar |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(args.batch_sizes) + "---:|---:|:---:|",
    ]
    for name in ["float32", *VARIANTS]:
        a = acc[name]
        rel = "1.00x" if name == "float32" else f"{geo[name]:.2f}x"
        vs = " / ".join(f"{speed[(name, b)] / speed[('ct2-int8', b)]:.2f}" for b in args.batch_sizes)
        bar = "-" if name == "float32" else ("met" if ok[name] else "not met")
        lines.append(
            f"| {name} | {a['chrf']:.2f} | {100 * a['exact']:.1f}% | {100 * a['same']:.1f}% | {100 * a['addition_exact']:.2f}% | "
            + " | ".join(f"{speed[(name, b)]:.1f}" for b in args.batch_sizes)
            + f" | {rel} | {vs} | {bar} |"
        )
    lines.append(
        "| CTranslate2 int8 | | | | | "
        + " | ".join(f"{speed[('ct2-int8', b)]:.1f}" for b in args.batch_sizes)
        + " | | | |"
    )
    fused_same = sum(
        list(a.tokens) == list(b.tokens)
        for a, b in zip(
            fused.generate(srcs[:200], max_new_tokens=budget, beam_size=1),
            f32.generate(srcs[:200], max_new_tokens=budget, beam_size=1),
        )
    )
    fgeo = math.exp(
        sum(math.log(speed[("float32-fused", b)] / speed[("float32", b)]) for b in args.batch_sizes)
        / len(args.batch_sizes)
    )
    lines += [
        "",
        verdict,
        "",
        "Fused attention (`s2s export --fused-attention`: com.microsoft.MultiHeadAttention, bundle format 3) in the same "
        "passes, float32, greedy; CTranslate2 float32 alongside:",
        "",
        "| bundle | "
        + " | ".join(f"seq/s B={b}" for b in args.batch_sizes)
        + " | vs standard (geo. mean) | vs CT2 float32 ("
        + " / ".join(f"B={b}" for b in args.batch_sizes)
        + ") |",
        "|---|" + "---:|" * len(args.batch_sizes) + "---:|---:|",
    ]
    for name, label in (
        ("float32", "standard ONNX attention (served)"),
        ("float32-fused", "fused MultiHeadAttention"),
    ):
        rel = 1.0 if name == "float32" else fgeo
        lines.append(
            f"| {label} | "
            + " | ".join(f"{speed[(name, b)]:.1f}" for b in args.batch_sizes)
            + f" | {rel:.2f}x | "
            + " / ".join(f"{speed[(name, b)] / speed[('ct2-float32', b)]:.2f}" for b in args.batch_sizes)
            + " |"
        )
    lines.append(
        "| CTranslate2 float32 | "
        + " | ".join(f"{speed[('ct2-float32', b)]:.1f}" for b in args.batch_sizes)
        + " | | |"
    )
    lines += ["", f"Fused and standard outputs identical on {fused_same}/200 inputs (greedy)."]
    report = "\n".join(lines) + "\n"
    print(report)
    publish(report, None if args.no_write else args.results, NAME, names=("variants", "fused"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
