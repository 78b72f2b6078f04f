"""Decode speed on real inputs, stopped at EOS: the engine against CTranslate2, greedy and beam, float32 and int8.

The held-out sources as they come (natural lengths), one thread per system; per (search, batch) cell each system
gets a warm-up, then timed passes over all inputs, the systems taking turns with the order reversed every other
pass (ABBA); the median pass counts. Then the served default search against CTranslate2's default beam 4 (CPU per
sequence and chrF; bench.engine.served_default). Writes docs/bench/decode-real.json.

    python -m bench.engine.decode_real [--quick] [--model translate-en-ja]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench.common.report import Report, publish
from bench.engine import decode_setup
from bench.engine.real_inputs import RealSystem, time_real

NAME = "decode-real"
PROG = "bench.engine.decode_real"
# Targets: engine / CTranslate2 sequences/s, same precision, per batch size (both searches must meet them).
REAL_TARGETS = {
    ("float32", 1): 0.9,
    ("float32", 16): 1.0,
    ("float32", 64): 1.0,
    ("int8", 1): 0.8,
    ("int8", 16): 0.8,
    ("int8", 64): 0.8,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    decode_setup.add_common(p)
    p.add_argument(
        "--real-inputs",
        type=int,
        default=640,
        help="inputs per timed pass, cycling through the test set (default: %(default)s)",
    )
    p.add_argument(
        "--real-repeats",
        type=int,
        default=3,
        help="timed passes per cell, after one warm-up; the median is reported (>= 3; default: %(default)s)",
    )
    p.add_argument(
        "--served-default",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="CPU per sequence and held-out chrF of the served default search against CTranslate2's default "
        "beam 4 (bench.engine.served_default; default: on)",
    )
    p.add_argument(
        "--beams", type=decode_setup.ints, default=[1, 4], help="beam sizes (1 = greedy; default: 1,4)"
    )
    p.add_argument(
        "--ct2-length-penalty",
        type=float,
        default=0.6,
        help="CTranslate2's length_penalty in beam search (score / length**p), and the engine's with "
        "length_penalty_type ctranslate2 (default: %(default)s)",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.batch_sizes, a.real_inputs = [1, 4], min(a.real_inputs, 8)
    decode_setup.finish(p, a)
    if a.real_repeats < 3:
        p.error("--real-repeats must be >= 3 (the median of fewer is not a median)")
    if a.real_inputs < 1 or not a.beams or min(a.beams) < 1:
        p.error("--real-inputs must be >= 1 and --beams positive")
    return a


def real_systems(args, budget: int, engine, engine_int8, ct2, ct2_int8) -> list[RealSystem]:
    def eng(e, rule="ctranslate2"):
        def run(texts, _tokens, beam, batch):
            # The engine's max_batch_size counts rows (a beam counts its width): B inputs = B x beam rows, as CTranslate2.
            # Beam rows rank and stop by CTranslate2's rule with its length_penalty, so both sides do the same search;
            # "engine-gnmt" times the engine's default (GNMT's penalty, stopping when no live beam can still win).
            search = (
                {}
                if beam == 1
                else dict(length_penalty_type="gnmt")
                if rule == "gnmt"
                else dict(length_penalty_type="ctranslate2", length_penalty=args.ct2_length_penalty)
            )
            return e.generate(
                texts, beam_size=beam, max_new_tokens=budget, max_batch_size=batch * beam, **search
            )

        return run

    def ct2_run(tr):
        def run(_texts, tokens, beam, batch):
            return tr.translator.translate_batch(
                tokens,
                max_batch_size=batch,
                batch_type="examples",
                beam_size=beam,
                length_penalty=args.ct2_length_penalty,
                max_decoding_length=budget,
                min_decoding_length=0,
                return_scores=False,
            )

        return run

    def ct2_ids(tr):
        return lambda res: [[tr.ids[t] for t in r.hypotheses[0]] for r in res]

    def eng_ids(res):
        return [list(r.tokens) for r in res]

    systems = [
        RealSystem("engine", "float32", eng(engine), eng_ids),
        RealSystem("ct2", "float32", ct2_run(ct2), ct2_ids(ct2)),
        RealSystem("engine-gnmt", "float32", eng(engine, "gnmt"), eng_ids, beams_only=True),
    ]
    if engine_int8 is not None:
        systems += [
            RealSystem("engine", "int8", eng(engine_int8), eng_ids),
            RealSystem("ct2", "int8", ct2_run(ct2_int8), ct2_ids(ct2_int8)),
        ]
    return systems


def real_table(args, ck, budget: int, engine, engine_int8, ct2, ct2_int8, sources: list[str]) -> dict:
    """Time the real-inputs table; returns what render_real needs."""
    from tqdm import tqdm

    codec = ck.codec
    texts = [sources[i % len(sources)] for i in range(args.real_inputs)]
    src_ids = [codec.source_ids(t) for t in texts]
    tokens = [
        [ct2.tokens[i] for i in r] for r in src_ids
    ]  # outside the timing, as the brief of the table says
    first = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    distinct = sorted(first.values())
    loadavg = os.getloadavg()
    systems = real_systems(args, budget, engine, engine_int8, ct2, ct2_int8)
    bar = tqdm(
        total=len(args.beams) * len(args.batch_sizes) * args.real_repeats,
        desc="real inputs",
        unit="pass",
        file=sys.stderr,
    )
    t_start = time.perf_counter()
    cells = time_real(
        systems, texts, tokens, args.beams, args.batch_sizes, args.real_repeats, tick=lambda: bar.update(1)
    )
    bar.close()
    seconds = time.perf_counter() - t_start
    by = {(c.system, c.precision, c.beam, c.batch): c for c in cells}
    # The engine caps each output at min(budget, source length + 50) (StepLoop.budget); CTranslate2 takes one cap
    # per call, so its outputs are cut the same way before comparing (a prefix of what it generated).
    for c in cells:
        if c.system == "ct2":
            c.ids = [r[: len(s) + 50] for r, s in zip(c.ids, src_ids)]
    same = {}
    for c in cells:
        if c.system == "engine" and ("ct2", c.precision, c.beam, c.batch) in by:
            theirs = by[("ct2", c.precision, c.beam, c.batch)].ids
            same[(c.precision, c.beam, c.batch)] = sum(c.ids[i] == theirs[i] for i in distinct)
    # What the engine's timings include and CTranslate2's do not: tokenizing the inputs, detokenizing the outputs.
    ref = by.get(("engine", "float32", args.beams[0], args.batch_sizes[0]))
    t0 = time.perf_counter()
    for t in texts:
        codec.source_ids(t)
    for r in ref.ids if ref else []:
        codec.decode(r)
    codec_s = time.perf_counter() - t0
    return {
        "cells": cells,
        "same": same,
        "n": len(texts),
        "distinct": len(distinct),
        "loadavg": loadavg,
        "seconds": seconds,
        "codec_seconds": codec_s,
        "budget": budget,
    }


def real_acceptance(real: dict, args) -> list[str]:
    by = {(c.system, c.precision, c.beam, c.batch): c for c in real["cells"]}
    rows = []
    for (prec, batch), target in REAL_TARGETS.items():
        values = []
        for beam in args.beams:
            e, c = by.get(("engine", prec, beam, batch)), by.get(("ct2", prec, beam, batch))
            if e and c:
                values.append((beam, e.seq_s / c.seq_s))
        if not values:
            continue
        shown = " / ".join(f"{v:.2f}x" for _, v in values)
        ok = "met" if min(v for _, v in values) >= target else "**not met**"
        what = f"engine / CTranslate2 {prec}" if prec == "float32" else "int8 engine / CTranslate2 int8"
        rows.append(f"| {what}, batch {batch} | {shown} | >= {target:g}x | {ok} |")
    if not rows:
        return []
    searches = " / ".join("greedy" if b == 1 else f"beam {b}" for b in args.beams)
    return [
        "",
        f"Acceptance (targets: ahead of CTranslate2 per core; sequences/s ratios on real inputs, "
        f"one value per search: {searches}; a row is met when every value is):",
        "",
        "| figure | measured | target | |",
        "|---|---|---|---|",
        *rows,
    ]


def render_real(args, info: dict, real: dict) -> Report:
    """The real-inputs table, its method and its acceptance rows."""
    by = {(c.system, c.precision, c.beam, c.batch): c for c in real["cells"]}
    precisions = ["float32"] + (["int8"] if any(c.precision == "int8" for c in real["cells"]) else [])
    la = real["loadavg"]
    lines = [
        "## Decode speed on real inputs, stopped at EOS: engine vs CTranslate2 (`bench/engine/decode_real.py`)",
        "",
        f"- date: {info['date']}; load average at the start of this table {la[0]:.2f} on {info['machine']['nproc']} CPU(s); "
        f"this table took {real['seconds']:.0f} s",
        f"- command: `{info['command']}`",
        f"- inputs: {real['n']} held-out sources as they come (`{info['data']}` source column, seeded shuffle "
        f"(seed {args.seed}) cycled; {real['distinct']} distinct), natural lengths, each stopped at EOS or at the engine's "
        f"budget (min({real['budget']}, source length + 50) tokens); {args.threads} thread(s) per engine, one engine at a time.",
        f'- engine: `engine.load(bundle, threads={args.threads}, device="cpu").generate(texts, beam_size=b, '
        f'max_batch_size=B x b)` (beam rows add `length_penalty_type="ctranslate2", length_penalty='
        f"{args.ct2_length_penalty:g}`: CTranslate2's ranking and stopping, the same search as its side) on `{info['bundle']}`"
        + (f" and on the int8 bundle `{info.get('bundle_int8', '?')}`" if "int8" in precisions else "")
        + "; it refills the batch as rows finish; its timings include tokenizing the texts and detokenizing the "
        f"outputs ({1000 * real['codec_seconds']:.1f} ms for all {real['n']} inputs and outputs, measured apart).",
        f"- CTranslate2: `Translator(inter_threads=1, intra_threads={args.threads}, compute_type=float32"
        + ("|int8" if "int8" in precisions else "")
        + f").translate_batch(tokens, max_batch_size=B, beam_size=b, "
        f"max_decoding_length={real['budget']}, min_decoding_length=0, length_penalty={args.ct2_length_penalty:g})`, "
        "its own length sorting; tokenized with the bundle's tokenizer outside the timing.",
        f"- method: per cell one warm-up of each system on 2B inputs, then {args.real_repeats} timed passes over all "
        "inputs, the systems taking turns and the order reversed every other pass (ABBA); the median pass is reported. "
        "spread = (max-min)/median. *engine / CT2* = the engine's sequences/s divided by CTranslate2's of the same "
        "precision (> 1: the engine is faster).",
        "- *identical* = outputs (token ids) equal to CTranslate2's of the same precision, on the distinct inputs; "
        "CTranslate2's outputs are cut at source length + 50 as the engine's are.",
        "- *GNMT rule seq/s* (beam rows, float32): the engine with its default search, the paper's beam (GNMT's "
        "length penalty ((5+|Y|)/6)^0.6, stopping only once no live beam can still beat the best ended one, which "
        "runs more steps than CTranslate2's stop at beam_size ended hypotheses); timed in the same passes, "
        "for what the default costs, not compared with CTranslate2.",
        "- batch B counts inputs on both sides: the engine gets `max_batch_size=B x beam` (it counts rows, a beam "
        "its width, and refills rows as sequences finish); CTranslate2 decodes chunks of B length-sorted inputs "
        "(B x beam rows).",
    ]
    report = Report(NAME)
    report.add_markdown("\n".join(lines))
    t = report.table(
        "real",
        "search",
        ("batch", "{}"),
        "precision",
        ("engine seq/s", "{:.1f}"),
        ("CT2 seq/s", "{:.1f}"),
        ("engine / CT2", "{:.2f}"),
        ("spread engine / CT2", "", "r"),
        ("mean output tokens", "", "r"),
        ("identical", "", "r"),
        ("GNMT rule seq/s", "{:.1f}"),
    )
    for beam in args.beams:
        for batch in args.batch_sizes:
            for prec in precisions:
                e, c = by.get(("engine", prec, beam, batch)), by.get(("ct2", prec, beam, batch))
                if not (e and c):
                    continue
                same = real["same"].get((prec, beam, batch))
                g = by.get(("engine-gnmt", prec, beam, batch))
                t.row(
                    "greedy" if beam == 1 else f"beam {beam}",
                    batch,
                    prec,
                    e.seq_s,
                    c.seq_s,
                    e.seq_s / c.seq_s,
                    f"{100 * e.spread:.0f}% / {100 * c.spread:.0f}%",
                    f"{e.mean_len:.1f} / {c.mean_len:.1f}",
                    f"{same}/{real['distinct']}",
                    g.seq_s if g else None,
                )
    report.add_markdown("\n".join(real_acceptance(real, args)), ("acceptance",))
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    s = decode_setup.load(args, PROG, argv)
    if isinstance(s, int):
        return s
    real = real_table(
        args, s.ck, s.budget, s.engine, s.engine_int8, s.ct2, s.ct2_int8, [x for x, _ in s.shuffled]
    )
    report = render_real(args, s.info, real)
    if args.served_default and s.engine.config.task.beam_size > 1:
        from bench.engine import served_default
        from contract.decoding import DecodingOptions

        print("served default vs CTranslate2's default beam 4 ...", file=sys.stderr)
        texts = [s.shuffled[i % len(s.shuffled)][0] for i in range(args.real_inputs)]
        sd = served_default.measure(
            s.engine, s.ct2, s.ck.codec, texts, args.batch_sizes, args.real_repeats, s.budget
        )
        task = s.engine.config.task
        d = DecodingOptions(length_penalty_type=task.length_penalty_type)
        report.add_markdown(
            served_default.render(
                sd,
                f"beam {task.beam_size}, length_penalty_type "
                f"{d.length_penalty_type}, length_penalty {d.alpha:g}",
            ),
            ("served_default",),
        )
    report.text(decode_setup.conversion_check(s.verification))
    print(report.markdown())
    same = {f"{p}/beam{b}/batch{B}": [v, real["distinct"]] for (p, b, B), v in real["same"].items()}
    publish(
        report,
        args.results,
        figures={**decode_setup.verification_figures(s.verification), "identical_outputs": same},
    )
    return 0 if s.verification["rate"] == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
