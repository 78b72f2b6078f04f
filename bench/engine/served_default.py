"""The served default search against CTranslate2's default beam 4: CPU time per sequence and chrF (bench.engine.decode_real).

Three sides, the same real inputs as the real-inputs table, taking turns pass by pass (order reversed every other):

* *served default*: ``engine.generate(texts)`` with no option, what a request without options gets (the bundle's
  ``task.beam_size`` and ``task.length_penalty_type``);
* *engine, CTranslate2's default*: ``beam_size=4, length_penalty_type="ctranslate2", length_penalty=1``;
* *CTranslate2 default beam 4*: ``translate_batch(tokens, beam_size=4)`` with its defaults (``length_penalty=1``,
  patience 1: it stops after 4 ended hypotheses).

CPU per sequence = the process's CPU time (``time.process_time``: one thread on each side) over the pass / inputs,
median of the passes. chrF: each side once (untimed) over the held-out projects (``data/en-ja/heldout-projects.tsv``,
strings of software no training file draws on; docs/experiments.md).
"""

from __future__ import annotations

import statistics
import time

from bench import ROOT
from bench.common.abba import abba

HELDOUT = ROOT / "data" / "en-ja" / "heldout-projects.tsv"
SIDES = ("served default", "engine, CTranslate2's default", "CTranslate2 default beam 4")


def measure(engine, ct2, codec, texts: list[str], batches: list[int], repeats: int, budget: int) -> dict:
    import sacrebleu

    from training.tasks import read_tsv

    def served(t, _tok, b):
        return [r.text for r in engine.generate(t, max_new_tokens=budget, max_batch_size=b * 4)]

    def eng_ct2(t, _tok, b):
        return [
            r.text
            for r in engine.generate(
                t,
                beam_size=4,
                length_penalty_type="ctranslate2",
                length_penalty=1.0,
                max_new_tokens=budget,
                max_batch_size=b * 4,
            )
        ]

    def ct2_default(_t, tok, b):
        res = ct2.translator.translate_batch(
            tok, max_batch_size=b, batch_type="examples", beam_size=4, max_decoding_length=budget
        )
        return [codec.decode([ct2.ids[x] for x in r.hypotheses[0]]) for r in res]

    sides = dict(zip(SIDES, (served, eng_ct2, ct2_default)))

    def tokens(ts: list[str]) -> list[list[str]]:
        return [[ct2.tokens[i] for i in codec.source_ids(t)] for t in ts]

    toks = tokens(texts)
    cpu: dict[tuple[str, int], list[float]] = {}
    for b in batches:
        for fn in sides.values():  # warm-up
            fn(texts[: 2 * b], toks[: 2 * b], b)
        for rep in range(repeats):
            for name in abba(SIDES, rep):
                c0 = time.process_time()
                sides[name](texts, toks, b)
                cpu.setdefault((name, b), []).append((time.process_time() - c0) / len(texts))
    chrf = {}
    if HELDOUT.is_file():
        pairs = read_tsv(HELDOUT)
        srcs, refs = [s for s, _ in pairs], [r for _, r in pairs]
        src_toks = tokens(srcs)
        for name, fn in sides.items():
            chrf[name] = sacrebleu.corpus_chrf(fn(srcs, src_toks, 64), [refs]).score
    return {
        "cpu_ms": {f"{n}/{b}": 1000 * statistics.median(v) for (n, b), v in cpu.items()},
        "chrf": chrf,
        "heldout": len(read_tsv(HELDOUT)) if HELDOUT.is_file() else 0,
        "batches": batches,
        "n": len(texts),
        "repeats": repeats,
    }


def render(m: dict, served_search: str) -> str:
    lines = [
        "",
        "### The served default search vs CTranslate2's default beam 4",
        "",
        f"CPU time per sequence (ms; median of {m['repeats']} passes over the {m['n']} inputs above, the three "
        f"sides taking turns) and chrF on the {m['heldout']} held-out-project strings. *served default*: a request "
        f"with no option ({served_search}); *engine, CTranslate2's default*: the engine with `beam_size=4, "
        'length_penalty_type="ctranslate2", length_penalty=1`; *CTranslate2*: `translate_batch(tokens, '
        "beam_size=4)`, its defaults (length_penalty 1, stop after 4 ended hypotheses).",
        "",
        "| batch | " + " | ".join(f"{s} ms/seq" for s in SIDES) + " | served / CTranslate2 CPU |",
        "|---:|" + "---:|" * (len(SIDES) + 1),
    ]
    for b in m["batches"]:
        v = [m["cpu_ms"][f"{s}/{b}"] for s in SIDES]
        lines.append(f"| {b} | " + " | ".join(f"{x:.2f}" for x in v) + f" | {v[0] / v[2]:.2f} |")
    if m["chrf"]:
        lines += [
            "",
            "chrF, held-out projects: " + "; ".join(f"{s} **{m['chrf'][s]:.2f}**" for s in SIDES) + ".",
        ]
        worst = max(m["cpu_ms"][f"{SIDES[0]}/{b}"] / m["cpu_ms"][f"{SIDES[2]}/{b}"] for b in m["batches"])
        ok = worst <= 1.0 and m["chrf"][SIDES[0]] >= m["chrf"][SIDES[2]]
        lines += [
            "",
            f"Acceptance: the served default costs no more CPU per sequence than CTranslate2's default beam 4 "
            f"at equal or better chrF: CPU ratio at most {worst:.2f}, chrF {m['chrf'][SIDES[0]]:.2f} vs "
            f"{m['chrf'][SIDES[2]]:.2f}: {'met' if ok else '**not met**'}.",
        ]
    return "\n".join(lines) + "\n"
