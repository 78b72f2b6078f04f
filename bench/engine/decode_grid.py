"""Decode speed at a forced length: the engine (with and without its KV cache) against PyTorch eager and
CTranslate2, and int8 against float32.

Every engine generates exactly N new tokens per input (EOS ignored, so all do the same work), one thread, one
engine at a time taking turns repeat by repeat, over a grid of batch sizes x new-token counts; medians of the
timed repeats. With --int8, int8's accuracy change is measured too. Writes docs/bench/decode-grid.json.

    python -m bench.engine.decode_grid [--quick] [--model translate-en-ja]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.common.report import publish
from bench.engine import decode_setup
from bench.engine.decode_grid_report import render
from bench.engine.real_inputs import Timed

PROG = "bench.engine.decode_grid"

ENGINES = ("ort+kv", "ort-nocache", "torch+kv", "ct2")
INT8_ENGINES = ("ort-int8+kv", "ct2-int8")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    decode_setup.add_common(p)
    p.add_argument(
        "--new-tokens",
        type=decode_setup.ints,
        default=[32, 64],
        help="comma-separated numbers of tokens generated per input, EOS ignored; at most the model's max_len (default: 32,64)",
    )
    p.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed repeats per cell, after one warm-up; the median is reported (>= 3; default: %(default)s)",
    )
    p.add_argument(
        "--min-sentences",
        type=int,
        default=32,
        help="inputs per timed repeat: max(batch size, this), split in batches of the batch size (default: %(default)s)",
    )
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated subset of {','.join(ENGINES)} (ct2 is the ratio baseline; default: all)",
    )
    p.add_argument(
        "--accuracy-sentences",
        type=int,
        default=200,
        help="test sentences for the int8 accuracy check (default: %(default)s)",
    )
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
    from engine.step_loop import pad_batch

    codec, sp = ck.codec, ck.config.special

    def ort_kv(eng):
        return lambda texts, n: generate(eng, texts, n, batch_size=len(texts), ignore_eos=True)

    def torch_kv(texts, n):
        with torch.inference_mode():
            ids, mask = (torch.from_numpy(a) for a in pad_batch([codec.source_ids(t) for t in texts], sp.pad))
            return [codec.decode(r) for r in torch_forced(ck.model, ids, mask, n)]

    def ct2_run(tr):
        return lambda texts, n: [
            codec.decode(r) for r in tr.greedy([codec.source_ids(t) for t in texts], n, force=True)
        ]

    runners = {
        "ort+kv": Runner("ort+kv", ort_kv(engine)),
        "ort-nocache": Runner(
            "ort-nocache", lambda texts, n: generate_no_cache(engine, texts, n, ignore_eos=True)
        ),
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


def time_cells(
    runners: list[Runner], texts: list[str], batch: int, n: int, repeats: int, tick=lambda: None
) -> list[Cell]:
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
        # The engine caps each output at min(budget, source length + 50) (StepLoop.budget);
        # CTranslate2 takes one cap per batch, so its outputs are cut the same way (a greedy prefix).
        out = []
        for k in range(0, len(srcs), 64):
            ids = [codec.source_ids(s) for s in srcs[k : k + 64]]
            out += [codec.decode(r[: len(i) + 50]) for i, r in zip(ids, tr.greedy(ids, budget))]
        return out

    systems = [
        ("ort+kv", "float32", lambda: generate(engine, srcs, budget, batch_size=64)),
        ("ort+kv", "int8", lambda: generate(engine_int8, srcs, budget, batch_size=64)),
        ("ct2", "float32", lambda: ct2_gen(ct2)),
        ("ct2", "int8", lambda: ct2_gen(ct2_int8)),
    ]
    rows, base = [], {}
    for name, prec, fn in systems:
        t0 = time.perf_counter()
        hyps = fn()
        secs = time.perf_counter() - t0
        if prec == "float32":
            base[name] = hyps
        rows.append(
            {
                "engine": name,
                "precision": prec,
                "n": len(refs),
                "exact": sum(h == r for h, r in zip(hyps, refs)) / len(refs),
                "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
                # BLEU only for translation: 4-gram BLEU of one-token answers (addition) is 0 whatever the accuracy.
                "bleu": sacrebleu.corpus_bleu(hyps, [refs], tokenize=tok).score
                if ck.task.name == "translation"
                else None,
                "bleu_tokenize": tok,
                "same_as_fp32": sum(a == b for a, b in zip(hyps, base[name])) / len(refs),
                "seconds": secs,
            }
        )
    return rows


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    s = decode_setup.load(args, PROG, argv)
    if isinstance(s, int):
        return s
    if max(args.new_tokens) > s.ck.config.max_len:
        print(
            f"{PROG}: --new-tokens {max(args.new_tokens)} > the model's max_len {s.ck.config.max_len}",
            file=sys.stderr,
        )
        return 2
    from tqdm import tqdm

    # The timed inputs cycle through the shuffled test set (a small test set repeats itself).
    need = max(max(args.batch_sizes), args.min_sentences)
    inputs = [s.shuffled[i % len(s.shuffled)][0] for i in range(need)]
    runners = make_runners(args, s.ck, s.engine, s.engine_int8, s.ct2, s.ct2_int8)
    order = [runners[e] for e in args.engines if e in runners]
    cells: list[Cell] = []
    bar = tqdm(
        total=len(args.new_tokens) * len(args.batch_sizes) * args.repeats,
        desc="decode grid",
        unit="repeat",
        file=sys.stderr,
    )
    for n in args.new_tokens:
        for b in args.batch_sizes:
            bar.set_postfix_str(f"N={n} B={b}")
            cells += time_cells(
                order, inputs[: max(b, args.min_sentences)], b, n, args.repeats, tick=lambda: bar.update(1)
            )
    bar.close()

    # The forced outputs must agree across our three implementations (CT2 masks EOS until N, so
    # it only agrees up to the first EOS and is compared by the conversion check instead).
    by = {(x.engine, x.batch, x.new_tokens): x for x in cells}
    consistency, same_counts = {}, {}
    for a, b_ in (("ort+kv", "ort-nocache"), ("ort+kv", "torch+kv"), ("ort-int8+kv", "ort+kv")):
        pairs_ab = [
            (x.outputs, by[(b_, x.batch, x.new_tokens)].outputs)
            for x in cells
            if x.engine == a and (b_, x.batch, x.new_tokens) in by
        ]
        if pairs_ab:
            same = sum(u == v for xs, ys in pairs_ab for u, v in zip(xs, ys))
            total = sum(len(xs) for xs, _ in pairs_ab)
            consistency[f"{a} = {b_}"] = f"{same}/{total}"
            same_counts[f"{a} = {b_}"] = [same, total]
    acc = None
    if args.int8:
        print(f"int8 accuracy on {args.accuracy_sentences} test sentences ...", file=sys.stderr)
        acc = accuracy(
            args, s.ck, s.engine, s.engine_int8, s.ct2, s.ct2_int8, s.shuffled[: args.accuracy_sentences]
        )
    s.info["seconds"] = time.perf_counter() - s.info["started"]
    report = render(args, s.info, cells, s.verification, consistency, acc)
    report.figures.update(decode_setup.verification_figures(s.verification), identical_outputs=same_counts)
    print(report.markdown())
    publish(report, args.results)
    return 0 if s.verification["rate"] == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
