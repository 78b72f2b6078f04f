"""Decode speed at a forced length: the engine (with and without its KV cache) against PyTorch eager and
CTranslate2, and int8 against float32.

Every engine generates exactly N new tokens per input (EOS ignored, so all do the same work), one thread, one
engine at a time taking turns repeat by repeat, over a grid of batch sizes x new-token counts; medians of the
timed repeats. With --int8, int8's accuracy change is measured too. Writes docs/bench/decode-grid.json.

    python -m bench.engine.decode_grid [--quick] [--model translate-en-ja]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.common.report import Report, publish
from bench.engine import decode_setup
from bench.engine.real_inputs import Timed

NAME = "decode-grid"
PROG = "bench.engine.decode_grid"

ENGINES = ("ort+kv", "ort-nocache", "torch+kv", "ct2")
INT8_ENGINES = ("ort-int8+kv", "ct2-int8")
NOTES = {
    "ort+kv": "the serving engine: ONNX Runtime with the KV cache",
    "ort-nocache": "the same ONNX graphs, whole prefix recomputed each step",
    "torch+kv": "PyTorch eager with the KV cache",
    "ct2": "CTranslate2 float32 (same weights, bench/common/ct2.py)",
    "ort-int8+kv": "the engine on an int8 bundle (s2s export --quantize int8; export/quantize.py)",
    "ct2-int8": "CTranslate2 compute_type=int8",
}
BASELINE = {"ort+kv": "ct2", "ort-nocache": "ct2", "torch+kv": "ct2", "ct2": "ct2",
            "ort-int8+kv": "ct2-int8", "ct2-int8": "ct2-int8"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m {PROG}", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    decode_setup.add_common(p)
    p.add_argument("--new-tokens", type=decode_setup.ints, default=[32, 64],
                   help="comma-separated numbers of tokens generated per input, EOS ignored; at most the model's max_len (default: 32,64)")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats per cell, after one warm-up; the median is reported (>= 3; default: %(default)s)")
    p.add_argument("--min-sentences", type=int, default=32,
                   help="inputs per timed repeat: max(batch size, this), split in batches of the batch size (default: %(default)s)")
    p.add_argument("--engines", default=",".join(ENGINES),
                   help=f"comma-separated subset of {','.join(ENGINES)} (ct2 is the ratio baseline; default: all)")
    p.add_argument("--accuracy-sentences", type=int, default=200, help="test sentences for the int8 accuracy check (default: %(default)s)")
    a = p.parse_args(argv)
    if a.quick:
        a.batch_sizes, a.new_tokens, a.min_sentences = [1, 4], [8, 16], 4
        a.accuracy_sentences = min(a.accuracy_sentences, 32)
    decode_setup.finish(p, a)
    a.engines = [e for e in a.engines.split(",") if e]
    unknown = set(a.engines) - set(ENGINES)
    if unknown:
        p.error(f"unknown engines {sorted(unknown)}; choose from {ENGINES}")
    if a.int8:
        a.engines += list(INT8_ENGINES)
    if a.repeats < 3:
        p.error("--repeats must be >= 3 (the median of fewer is not a median)")
    return a


# ----------------------------------------------------------------------------- engines

@dataclass
class Runner:
    """One engine: ``run(texts, n)`` decodes a batch, exactly n new tokens each, and returns token-id rows or texts."""

    name: str
    run: Callable[[list[str], int], list]


def make_runners(args, ck, engine, engine_int8, ct2, ct2_int8) -> dict[str, Runner]:
    import torch

    from bench.engine.baselines import generate, generate_no_cache, torch_forced
    from engine.generator import pad_batch

    codec, sp = ck.codec, ck.config.special

    def ort_kv(eng):
        return lambda texts, n: generate(eng, texts, n, batch_size=len(texts), ignore_eos=True)

    def torch_kv(texts, n):
        with torch.inference_mode():
            ids, mask = (torch.from_numpy(a) for a in pad_batch([codec.source_ids(t) for t in texts], sp.pad))
            return [codec.decode(r) for r in torch_forced(ck.model, ids, mask, n)]

    def ct2_run(tr):
        return lambda texts, n: [codec.decode(r) for r in tr.greedy([codec.source_ids(t) for t in texts], n, force=True)]

    runners = {
        "ort+kv": Runner("ort+kv", ort_kv(engine)),
        "ort-nocache": Runner("ort-nocache", lambda texts, n: generate_no_cache(engine, texts, n, ignore_eos=True)),
        "torch+kv": Runner("torch+kv", torch_kv),
        "ct2": Runner("ct2", ct2_run(ct2)),
    }
    if engine_int8 is not None:
        runners["ort-int8+kv"] = Runner("ort-int8+kv", ort_kv(engine_int8))
        runners["ct2-int8"] = Runner("ct2-int8", ct2_run(ct2_int8))
    return {k: v for k, v in runners.items() if k in args.engines}


# ----------------------------------------------------------------------------- measuring

@dataclass
class Cell(Timed):
    engine: str
    batch: int
    new_tokens: int
    sequences: int
    times: list[float] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    @property
    def tok_s(self) -> float:
        return self.sequences * self.new_tokens / self.median


def time_cells(runners: list[Runner], texts: list[str], batch: int, n: int, repeats: int, tick=lambda: None) -> list[Cell]:
    """One grid cell for every engine. Engines run one at a time but take turns repeat by repeat,
    so a passing disturbance of the machine hits all of them alike rather than one engine's cell."""
    chunks = [texts[k : k + batch] for k in range(0, len(texts), batch)]
    cells = [Cell(r.name, batch, n, len(texts)) for r in runners]
    for r in runners:
        r.run(chunks[0], n)  # warm-up: session/allocator caches, lazy initialisation
    for _ in range(repeats):
        for r, cell in zip(runners, cells):
            t0 = time.perf_counter()
            out = [o for c in chunks for o in r.run(c, n)]
            cell.times.append(time.perf_counter() - t0)
            cell.outputs = out
        tick()
    return cells


# ----------------------------------------------------------------------------- accuracy (int8)

def accuracy(args, ck, engine, engine_int8, ct2, ct2_int8, pairs) -> list[dict]:
    import sacrebleu

    from bench.engine.baselines import generate

    srcs, refs = [s for s, _ in pairs], [r for _, r in pairs]
    codec = ck.codec
    budget = min(ck.task.max_new_tokens, ck.config.max_len - 1)
    tok = ck.extra.get("config", {}).get("bleu_tokenize", "13a") if ck.task.name == "translation" else "13a"

    def ct2_gen(tr):
        # The engine caps each output at min(budget, source length + 50) (Generator.budget);
        # CTranslate2 takes one cap per batch, so its outputs are cut the same way (a greedy prefix).
        out = []
        for k in range(0, len(srcs), 64):
            ids = [codec.source_ids(s) for s in srcs[k : k + 64]]
            out += [codec.decode(r[: len(i) + 50]) for i, r in zip(ids, tr.greedy(ids, budget))]
        return out

    systems = [("ort+kv", "float32", lambda: generate(engine, srcs, budget, batch_size=64)),
               ("ort+kv", "int8", lambda: generate(engine_int8, srcs, budget, batch_size=64)),
               ("ct2", "float32", lambda: ct2_gen(ct2)),
               ("ct2", "int8", lambda: ct2_gen(ct2_int8))]
    rows, base = [], {}
    for name, prec, fn in systems:
        t0 = time.perf_counter()
        hyps = fn()
        secs = time.perf_counter() - t0
        if prec == "float32":
            base[name] = hyps
        rows.append({
            "engine": name, "precision": prec, "n": len(refs),
            "exact": sum(h == r for h, r in zip(hyps, refs)) / len(refs),
            "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
            # BLEU only for translation: 4-gram BLEU of one-token answers (addition) is 0 whatever the accuracy.
            "bleu": sacrebleu.corpus_bleu(hyps, [refs], tokenize=tok).score if ck.task.name == "translation" else None,
            "bleu_tokenize": tok,
            "same_as_fp32": sum(a == b for a, b in zip(hyps, base[name])) / len(refs),
            "seconds": secs,
        })
    return rows


# ----------------------------------------------------------------------------- report

def acceptance(by: dict, args) -> list[str]:
    """The engine's first targets, read off this run's cells (a row only where both of its cells were timed)."""
    def ratio(a: str, b: str, batch: int, n: int) -> float | None:
        x, y = by.get((a, batch, n)), by.get((b, batch, n))
        return x.tok_s / y.tok_s if x and y else None

    checks = [("KV cache / no cache, 64 new tokens, batch 16", [ratio("ort+kv", "ort-nocache", 16, 64)], 3.0)]
    checks += [(f"engine / PyTorch eager, batch {b}", [ratio("ort+kv", "torch+kv", b, n) for n in args.new_tokens], 1.0)
               for b in (1, 64)]
    checks.append(("engine / CTranslate2 float32, batch 64", [ratio("ort+kv", "ct2", 64, n) for n in args.new_tokens], 0.8))
    rows = []
    for what, values, target in checks:
        values = [v for v in values if v is not None]
        if values:
            shown = " / ".join(f"{v:.2f}x" for v in values)
            ok = "met" if (min(values) > target if target == 1.0 else min(values) >= target) else "**not met**"
            rows.append(f"| {what} | {shown} | {'>' if target == 1.0 else '>='} {target:g}x | {ok} |")
    if not rows:
        return []
    return ["", f"Acceptance (the engine's first targets; tokens/s ratios, one value per new-token count {args.new_tokens}):", "",
            "| figure | measured | target | |", "|---|---|---|---|", *rows]


def render(args, info: dict, cells: list[Cell], verification: dict, consistency: dict, acc: list[dict] | None) -> Report:
    c = info["model"]
    m = info["machine"]
    by = {(x.engine, x.batch, x.new_tokens): x for x in cells}
    lines = [
        "## Decode speed: engine vs PyTorch vs CTranslate2 (`bench/engine/decode_grid.py`)",
        "",
        f"- date: {info['date']}",
        f"- machine: {m['nproc']} CPU(s) (`nproc`), {m['cpu']}; load average at start {m['loadavg'][0]:.2f}",
        f"- software: Python {platform.python_version()}, onnxruntime {info['versions']['onnxruntime']}, "
        f"torch {info['versions']['torch']}, ctranslate2 {info['versions']['ctranslate2']}",
        f"- model: `{info['model_name']}` (checkpoint `{info['checkpoint']}`, bundle `{info['bundle']}`): "
        f"d_model {c['d_model']}, {c['n_heads']} heads, {c['n_encoder_layers']}+{c['n_decoder_layers']} layers, "
        f"d_ff {c['d_ff']}, vocab {c['src_vocab_size']}/{c['tgt_vocab_size']}"
        f"{' shared' if c['share_embeddings'] else ''}{', output tied' if c['tie_output'] else ''}, max_len {c['max_len']}",
        f"- command: `{info['command']}`",
        f"- method: every engine generates exactly N new tokens per input (EOS ignored), {args.threads} thread(s) each, "
        f"never two engines at once (they take turns, repeat by repeat); per cell one warm-up each, then {args.repeats} timed repeats over max(batch, "
        f"{args.min_sentences}) held-out sources (`{info['data']}`, seed {args.seed}), split in batches; medians; "
        "timings include (de)tokenization. spread = (max-min)/median. *x CT2* = tokens/s divided by CTranslate2's "
        "of the same precision (> 1: faster than CTranslate2).",
        "- engines: " + "; ".join(f"`{e}` {NOTES[e]}" for e in args.engines) + ".",
        f"- whole run: {info['seconds']:.0f} s",
        "",
        decode_setup.conversion_check(verification),
    ]
    if verification.get("first_mismatch"):
        lines.append(f"First mismatch: `{json.dumps(verification['first_mismatch'], ensure_ascii=False)[:400]}`")
    if consistency:
        lines.append("Identical forced outputs (texts) in the timed runs, all cells: "
                     + "; ".join(f"{k}: {v}" for k, v in consistency.items()) + ".")
    report = Report(NAME)
    report.add_markdown("\n".join(lines))
    grid = report.table("grid", ("new tokens", "{}"), ("batch", "{}"), "engine", ("sequences/s", "{:.1f}"),
                        ("tokens/s", "{:.0f}"), ("spread", "{:.0%}"), ("x CT2", "{:.2f}"))
    for n in args.new_tokens:
        for b in args.batch_sizes:
            for e in args.engines:
                x = by.get((e, b, n))
                if x is None:
                    continue
                base = by.get((BASELINE[e], b, n))
                grid.row(n, b, e, x.seq_s, x.tok_s, x.spread, x.tok_s / base.tok_s if base else None)
    tail = []
    # KV-cache speed-up of the engine, the figure the engine's design rests on.
    if "ort+kv" in args.engines and "ort-nocache" in args.engines:
        ups = [f"N={n} B={b}: {by[('ort+kv', b, n)].tok_s / by[('ort-nocache', b, n)].tok_s:.1f}x"
               for n in args.new_tokens for b in args.batch_sizes if ('ort+kv', b, n) in by and ('ort-nocache', b, n) in by]
        tail.append("KV cache speed-up of the engine (ort+kv / ort-nocache tokens/s): " + ", ".join(ups) + ".")
    report.add_markdown("\n".join(tail + acceptance(by, args)), ("acceptance",))
    if acc:
        report.text(
            f"**int8** (ORT: `{info.get('bundle_int8', '?')}`, `s2s export --quantize {args.int8_variant}`; CTranslate2: "
            f"`compute_type=\"int8\"`). Accuracy on {acc[0]['n']} test sentences, greedy with EOS, batch 64 "
            f"(BLEU tokenize `{acc[0]['bleu_tokenize']}`); *same as fp32* = outputs identical to the same engine in float32:")
        t = report.table("int8_accuracy", "engine", "precision", ("exact match", "{:.1%}"), ("chrF", "{:.1f}"),
                         ("BLEU", "{:.1f}"), ("same as fp32", "{:.1%}"), ("seconds", "{:.1f}"))
        for r in acc:
            t.row(r["engine"], r["precision"], r["exact"], r["chrf"], "-" if r["bleu"] is None else r["bleu"],
                  r["same_as_fp32"], r["seconds"])
        speed = {(f32, b, n): by[(i8, b, n)].tok_s / by[(f32, b, n)].tok_s for b in args.batch_sizes for n in args.new_tokens
                 for f32, i8 in (("ort+kv", "ort-int8+kv"), ("ct2", "ct2-int8")) if (f32, b, n) in by and (i8, b, n) in by}
        if speed:
            report.text("int8 speed-up over float32 (tokens/s ratio, same engine):")
            t = report.table("int8_speedup", ("new tokens", "{}"), ("batch", "{}"), ("ort-int8+kv / ort+kv", "{:.2f}"),
                             ("ct2-int8 / ct2", "{:.2f}"))
            for n in args.new_tokens:
                for b in args.batch_sizes:
                    t.row(n, b, *(speed.get((e, b, n)) for e in ("ort+kv", "ct2")))
    return report


# ----------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    s = decode_setup.load(args, PROG, argv)
    if isinstance(s, int):
        return s
    if max(args.new_tokens) > s.ck.config.max_len:
        print(f"{PROG}: --new-tokens {max(args.new_tokens)} > the model's max_len {s.ck.config.max_len}", file=sys.stderr)
        return 2
    from tqdm import tqdm

    # The timed inputs cycle through the shuffled test set (a small test set repeats itself).
    need = max(max(args.batch_sizes), args.min_sentences)
    inputs = [s.shuffled[i % len(s.shuffled)][0] for i in range(need)]
    runners = make_runners(args, s.ck, s.engine, s.engine_int8, s.ct2, s.ct2_int8)
    order = [runners[e] for e in args.engines if e in runners]
    cells: list[Cell] = []
    bar = tqdm(total=len(args.new_tokens) * len(args.batch_sizes) * args.repeats, desc="decode grid", unit="repeat", file=sys.stderr)
    for n in args.new_tokens:
        for b in args.batch_sizes:
            bar.set_postfix_str(f"N={n} B={b}")
            cells += time_cells(order, inputs[: max(b, args.min_sentences)], b, n, args.repeats, tick=lambda: bar.update(1))
    bar.close()

    # The forced outputs must agree across our three implementations (CT2 masks EOS until N, so
    # it only agrees up to the first EOS and is compared by the conversion check instead).
    by = {(x.engine, x.batch, x.new_tokens): x for x in cells}
    consistency, same_counts = {}, {}
    for a, b_ in (("ort+kv", "ort-nocache"), ("ort+kv", "torch+kv"), ("ort-int8+kv", "ort+kv")):
        pairs_ab = [(x.outputs, by[(b_, x.batch, x.new_tokens)].outputs) for x in cells
                    if x.engine == a and (b_, x.batch, x.new_tokens) in by]
        if pairs_ab:
            same = sum(u == v for xs, ys in pairs_ab for u, v in zip(xs, ys))
            total = sum(len(xs) for xs, _ in pairs_ab)
            consistency[f"{a} = {b_}"] = f"{same}/{total}"
            same_counts[f"{a} = {b_}"] = [same, total]
    acc = None
    if args.int8:
        print(f"int8 accuracy on {args.accuracy_sentences} test sentences ...", file=sys.stderr)
        acc = accuracy(args, s.ck, s.engine, s.engine_int8, s.ct2, s.ct2_int8, s.shuffled[: args.accuracy_sentences])
    s.info["seconds"] = time.perf_counter() - s.info["started"]
    report = render(args, s.info, cells, s.verification, consistency, acc)
    report.figures.update(decode_setup.verification_figures(s.verification), identical_outputs=same_counts)
    print(report.markdown())
    publish(report, args.results)
    return 0 if s.verification["rate"] == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
