"""The forced-length decode grid's report: its method, the grid with each engine's ratio to CTranslate2, the KV
cache's speed-up, the engine's first targets, and int8's accuracy and speed-up."""

from __future__ import annotations

import json
import platform

from bench.common.report import Report
from bench.engine import decode_setup

NAME = "decode-grid"
NOTES = {
    "ort+kv": "the serving engine: ONNX Runtime with the KV cache",
    "ort-nocache": "the same ONNX graphs, whole prefix recomputed each step",
    "torch+kv": "PyTorch eager with the KV cache",
    "ct2": "CTranslate2 float32 (same weights, export/ctranslate2.py)",
    "ort-int8+kv": "the engine on an int8 bundle (s2s export --quantize int8; export/quantize.py)",
    "ct2-int8": "CTranslate2 compute_type=int8",
}
BASELINE = {
    "ort+kv": "ct2",
    "ort-nocache": "ct2",
    "torch+kv": "ct2",
    "ct2": "ct2",
    "ort-int8+kv": "ct2-int8",
    "ct2-int8": "ct2-int8",
}


def acceptance(by: dict, args) -> list[str]:
    """The engine's first targets, read off this run's cells (a row only where both of its cells were timed)."""

    def ratio(a: str, b: str, batch: int, n: int) -> float | None:
        x, y = by.get((a, batch, n)), by.get((b, batch, n))
        return x.tok_s / y.tok_s if x and y else None

    checks = [("KV cache / no cache, 64 new tokens, batch 16", [ratio("ort+kv", "ort-nocache", 16, 64)], 3.0)]
    checks += [
        (
            f"engine / PyTorch eager, batch {b}",
            [ratio("ort+kv", "torch+kv", b, n) for n in args.new_tokens],
            1.0,
        )
        for b in (1, 64)
    ]
    checks.append(
        (
            "engine / CTranslate2 float32, batch 64",
            [ratio("ort+kv", "ct2", 64, n) for n in args.new_tokens],
            0.8,
        )
    )
    rows = []
    for what, values, target in checks:
        values = [v for v in values if v is not None]
        if values:
            shown = " / ".join(f"{v:.2f}x" for v in values)
            ok = (
                "met" if (min(values) > target if target == 1.0 else min(values) >= target) else "**not met**"
            )
            rows.append(f"| {what} | {shown} | {'>' if target == 1.0 else '>='} {target:g}x | {ok} |")
    if not rows:
        return []
    return [
        "",
        f"Acceptance (the engine's first targets; tokens/s ratios, one value per new-token count {args.new_tokens}):",
        "",
        "| figure | measured | target | |",
        "|---|---|---|---|",
        *rows,
    ]


def render(
    args, info: dict, cells: list, verification: dict, consistency: dict, acc: list[dict] | None
) -> Report:
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
        lines.append(
            f"First mismatch: `{json.dumps(verification['first_mismatch'], ensure_ascii=False)[:400]}`"
        )
    if consistency:
        lines.append(
            "Identical forced outputs (texts) in the timed runs, all cells: "
            + "; ".join(f"{k}: {v}" for k, v in consistency.items())
            + "."
        )
    report = Report(NAME)
    report.add_markdown("\n".join(lines))
    grid = report.table(
        "grid",
        ("new tokens", "{}"),
        ("batch", "{}"),
        "engine",
        ("sequences/s", "{:.1f}"),
        ("tokens/s", "{:.0f}"),
        ("spread", "{:.0%}"),
        ("x CT2", "{:.2f}"),
    )
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
        ups = [
            f"N={n} B={b}: {by[('ort+kv', b, n)].tok_s / by[('ort-nocache', b, n)].tok_s:.1f}x"
            for n in args.new_tokens
            for b in args.batch_sizes
            if ("ort+kv", b, n) in by and ("ort-nocache", b, n) in by
        ]
        tail.append(
            "KV cache speed-up of the engine (ort+kv / ort-nocache tokens/s): " + ", ".join(ups) + "."
        )
    report.add_markdown("\n".join(tail + acceptance(by, args)), ("acceptance",))
    if acc:
        report.text(
            f"**int8** (ORT: `{info.get('bundle_int8', '?')}`, `s2s export --quantize {args.int8_variant}`; CTranslate2: "
            f'`compute_type="int8"`). Accuracy on {acc[0]["n"]} test sentences, greedy with EOS, batch 64 '
            f"(BLEU tokenize `{acc[0]['bleu_tokenize']}`); *same as fp32* = outputs identical to the same engine in float32:"
        )
        t = report.table(
            "int8_accuracy",
            "engine",
            "precision",
            ("exact match", "{:.1%}"),
            ("chrF", "{:.1f}"),
            ("BLEU", "{:.1f}"),
            ("same as fp32", "{:.1%}"),
            ("seconds", "{:.1f}"),
        )
        for r in acc:
            t.row(
                r["engine"],
                r["precision"],
                r["exact"],
                r["chrf"],
                "-" if r["bleu"] is None else r["bleu"],
                r["same_as_fp32"],
                r["seconds"],
            )
        speed = {
            (f32, b, n): by[(i8, b, n)].tok_s / by[(f32, b, n)].tok_s
            for b in args.batch_sizes
            for n in args.new_tokens
            for f32, i8 in (("ort+kv", "ort-int8+kv"), ("ct2", "ct2-int8"))
            if (f32, b, n) in by and (i8, b, n) in by
        }
        if speed:
            report.text("int8 speed-up over float32 (tokens/s ratio, same engine):")
            t = report.table(
                "int8_speedup",
                ("new tokens", "{}"),
                ("batch", "{}"),
                ("ort-int8+kv / ort+kv", "{:.2f}"),
                ("ct2-int8 / ct2", "{:.2f}"),
            )
            for n in args.new_tokens:
                for b in args.batch_sizes:
                    t.row(n, b, *(speed.get((e, b, n)) for e in ("ort+kv", "ct2")))
    return report
