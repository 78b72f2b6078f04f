"""engine: decode speed in process, the engine against CTranslate2 and PyTorch on the same weights.

Axes: system (the engine; CTranslate2; on forced greedy also the engine with no KV cache and PyTorch eager) x search
(--beams) x precision (--precisions: float32, int8 = the engine on an int8 export and CTranslate2 compute_type int8)
x batch (--batch-sizes) x inputs (--inputs: forced = exactly N new tokens per input, EOS ignored, --new-tokens;
real = held-out sources as they come, stopped at EOS) x model (--model of the repository, its served version and the
checkpoint it was exported from; or --model-family: a checkpoint of that family made here and imported). One thread
per system; per cell one warm-up each, then --repeats passes over the inputs, the systems taking turns (ABBA or
rotated); medians. CTranslate2's conversion is checked against PyTorch greedy first. Writes decode-grid.json
(forced), decode-real.json (real), <family>-ct2.json (--model-family).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from bench.engine.table import acceptance, grid_table
from bench.harness.inputs import (
    cached_bundle,
    ct2_model,
    data,
    ints,
    latest,
    log,
    model_arguments,
    pairs,
    rel,
    source_checkpoint,
    words,
)
from bench.harness.results import Report, provenance

SYSTEMS = ["engine", "engine no cache", "torch", "ct2", "engine gnmt", "engine screen off"]
QUICK = dict(batch_sizes=[1, 4], new_tokens=[8, 16], min_sentences=4, real_inputs=8, precisions=["float32"],
             verify_sentences=16, accuracy_sentences=16)  # fmt: skip


def add_arguments(p) -> None:
    from bench.engine.family import FAMILIES

    a = p.add_argument
    model_arguments(p)
    a(
        "--model-family",
        choices=sorted(FAMILIES),
        help="instead of --model: a checkpoint of this family made here",
    )
    a("--inputs", type=words, default=["forced", "real"], help="forced and/or real (default: both)")
    a("--beams", type=ints, default=[1, 4], help="beam sizes, 1 = greedy (forced, repository model: greedy)")
    a("--precisions", type=words, default=["float32", "int8"])
    a("--batch-sizes", type=ints, default=[1, 16, 64])
    a("--new-tokens", type=ints, default=[32, 64], help="forced: new tokens per input")
    a("--systems", type=words, default=SYSTEMS, help="which systems run (ct2: every ratio's baseline)")
    a("--repeats", type=int, default=0, help="timed passes per cell (default: 5 forced, 3 real)")
    a("--min-sentences", type=int, default=32, help="forced: inputs per pass, at least the batch size")
    a("--real-inputs", type=int, default=640, help="real: inputs per pass (the held-out set cycled)")
    a(
        "--ct2-length-penalty",
        type=float,
        default=0.6,
        help="beams on both sides: CTranslate2's rule, this alpha",
    )
    a("--int8-variant", default="int8", help="the export the engine's int8 rows run (export/quantize.py)")
    a("--accuracy-sentences", type=int, default=200, help="int8's accuracy: held-out inputs, greedy")
    a("--verify-sentences", type=int, default=64, help="CTranslate2 greedy = PyTorch greedy on these")
    a("--seed", type=int, default=0, help="the held-out inputs' shuffle")
    a(
        "--engine-bundle",
        action="append",
        default=[],
        metavar="LABEL=FOLDER",
        help="real, float32: also the engine on this bundle (another export of the same weights) as system "
        "`engine LABEL`, taking turns with the served one in the same cells (repeat)",
    )


@dataclass
class Setup:
    ck: object  # training.checkpoint.Checkpoint
    engines: dict  # precision -> engine.Translator
    ct2: dict  # precision -> ctranslate2.Translator
    vocab: list[str]
    pairs: list[tuple[str, str]]  # held-out, shuffled
    budget: int
    verification: dict
    about: str
    others: dict  # "engine LABEL" -> engine.Translator of --engine-bundle


def setup(args) -> Setup:
    import ctranslate2
    import torch

    import engine
    from export.ctranslate2 import CT2Translator, verify, vocabulary
    from training import checkpoint as ckpt_io

    torch.set_num_threads(1)
    bundle = latest(args.model_repo, args.model)
    ckpt = args.checkpoint or source_checkpoint(bundle, args.model)
    ck = ckpt_io.load(ckpt)
    rows = pairs(data(args), args.limit_inputs)
    random.Random(args.seed).shuffle(rows)
    converted, vocab = ct2_model(ckpt), vocabulary(ck.codec.tokenizer)
    engines = {"float32": engine.load(bundle, threads=1, device="cpu")}
    ct2 = {
        "float32": ctranslate2.Translator(
            str(converted), device="cpu", compute_type="float32", inter_threads=1, intra_threads=1
        )
    }
    about = f"`{rel(bundle)}` (checkpoint `{rel(ckpt)}`"
    if "int8" in args.precisions:
        int8 = cached_bundle(ckpt, ckpt.name, args.int8_variant)
        engines["int8"] = engine.load(int8, threads=1, device="cpu")
        ct2["int8"] = ctranslate2.Translator(
            str(converted), device="cpu", compute_type="int8", inter_threads=1, intra_threads=1
        )
        about += f"; int8: `{rel(int8)}`, `s2s export --quantize {args.int8_variant}`"
    budget = min(ck.task.max_new_tokens, ck.config.max_len - 1)
    v = verify(
        ck.model,
        ck.codec,
        CT2Translator(converted, vocab),
        [s for s, _ in rows[: args.verify_sentences]],
        budget,
    )
    v["budget"] = budget
    log(f"CTranslate2 vs PyTorch greedy: {v['identical']}/{v['n']} identical")
    extra = dict(x.split("=", 1) for x in args.engine_bundle)
    others = {f"engine {k}": engine.load(f, threads=1, device="cpu") for k, f in extra.items()}
    about += "".join(f"; `{k}`: `{f}`" for k, f in extra.items())
    return Setup(
        ck, engines, ct2, vocab, rows, budget, v, about + f"; held-out inputs `{rel(data(args))}`)", others
    )


def run(args) -> list[Report]:
    started = time.time()
    if args.model_family:
        from bench.engine import family

        return [family.run(args, started)]
    s = setup(args)
    return [grid(args, s, kind, started) for kind in args.inputs]


def grid(args, s: Setup, kind: str, started: float) -> Report:
    """Every cell of one kind of inputs, and its report."""
    from bench.engine import systems as sy

    forced, repeats = kind == "forced", args.repeats or (5 if kind == "forced" else 3)
    f32, codec, cells = s.engines["float32"], s.ck.codec, []
    lengths = args.new_tokens if forced else [s.budget]
    for n in [min(n, s.ck.config.max_len - 1) for n in lengths]:  # never past the positions the model has
        sides = [
            sy.engine_forced(e, n, p)
            if forced
            else sy.engine_real(e, s.budget, p, alpha=args.ct2_length_penalty)
            for p, e in s.engines.items()
        ]
        sides += [sy.ct2(t, s.vocab, p, n, forced, args.ct2_length_penalty) for p, t in s.ct2.items()]
        sides += (
            [sy.engine_no_cache(f32, n), sy.torch_forced(s.ck.model, codec, n)]
            if forced
            else [sy.engine_real(f32, s.budget, "float32", "gnmt")]
            + [
                sy.engine_real(e, s.budget, "float32", alpha=args.ct2_length_penalty, system=k)
                for k, e in s.others.items()
            ]
        )
        sides = [x for x in sides if x.system in args.systems or x.system in s.others]
        for beam in [1] if forced else args.beams:
            for b in args.batch_sizes:
                k = max(b, args.min_sentences) if forced else args.real_inputs
                texts = [s.pairs[i % len(s.pairs)][0] for i in range(k)]
                tokens = [[s.vocab[i] for i in codec.source_ids(t)] for t in texts]
                first = {}
                for i, t in enumerate(texts):
                    first.setdefault(t, i)
                log(f"{kind} N={n} beam {beam} batch {b}: {len(texts)} inputs")
                for c in sy.time_sides(sides, texts, tokens, beam, b, repeats):
                    c.inputs = f"forced {n}" if forced else "real"
                    c.sources, c.keep = [len(x) for x in tokens], sorted(first.values())
                    cells.append(c)
    report = Report("decode-grid" if forced else "decode-real")
    report.heading(
        "Decode speed: engine vs PyTorch vs CTranslate2"
        if forced
        else "Decode speed on real inputs, stopped at EOS: engine vs CTranslate2"
    )
    report.text(
        provenance(started)
        + f"\n- model: {s.about}\n- "
        + (FORCED if forced else REAL.format(alpha=args.ct2_length_penalty, budget=s.budget))
        + f" {repeats} timed passes a cell."
    )
    v = s.verification
    report.text(
        f"**Conversion check** (export/ctranslate2.py): CTranslate2 greedy equals PyTorch greedy (stopping at EOS, budget {v['budget']}) on {v['identical']}/{v['n']} held-out inputs; teacher-forced log-probabilities differ by at most {v['max_abs_logprob_diff']:.1e}."
    )
    grid_table(report, cells, forced)
    report.acceptance(acceptance(cells, forced))
    if forced and "int8" in s.engines:
        accuracy(report, s, args.accuracy_sentences)
    report.figures.update(
        conversion_identical=v["identical"], conversion_inputs=v["n"], failed=v["identical"] != v["n"]
    )
    return report


FORCED = (
    "method: every system generates exactly N new tokens per input (EOS ignored), one thread each, never two at once; "
    "max(batch, --min-sentences) held-out sources a pass, in batches; timings include (de)tokenization on the engine's "
    "side (CTranslate2 gets its tokens ready-made). *x CT2*: tokens/s over CTranslate2's of the same precision. "
    "Systems: `engine` (ONNX Runtime with the KV cache), `engine no cache` (the same graphs, the whole prefix again each "
    "step), `torch` (PyTorch eager with the KV cache), `ct2` (CTranslate2, same weights); *outputs =*: the same as the "
    "float32 engine's."
)
REAL = (
    "method: held-out sources as they come, each stopped at EOS or at the engine's budget (min({budget}, source length "
    "+ 50)); the engine `generate(texts, beam_size=b, max_batch_size=B x b)` refilling rows as they finish, beams by "
    "CTranslate2's rule (length_penalty {alpha:g}: the same search on both sides); `engine gnmt` the engine's default "
    "beam (GNMT's penalty, stopping once no live beam can win); CTranslate2 `translate_batch(tokens, max_batch_size=B, "
    "beam_size=b, length_penalty={alpha:g})`, its tokens made outside the timing. *x CT2*: sequences/s over "
    "CTranslate2's of the same precision; *outputs =*: the engine's token ids equal to CTranslate2's (cut at source "
    "length + 50 as the engine's are) on the distinct inputs."
)


def accuracy(report: Report, s: Setup, n: int) -> None:
    """int8 against float32 on held-out inputs, greedy with EOS, batch 64: exact match, chrF, BLEU (translation)."""
    import sacrebleu

    srcs, refs = [x for x, _ in s.pairs[:n]], [y for _, y in s.pairs[:n]]
    tokens = [[s.vocab[i] for i in s.ck.codec.source_ids(t)] for t in srcs]
    tok = s.ck.extra.get("config", {}).get("bleu_tokenize", "13a")
    report.text(
        f"int8's accuracy on {len(srcs)} held-out inputs, greedy with EOS, batch 64 (BLEU tokenize `{tok}`); *same as fp32*: outputs identical to the same system in float32:"
    )
    t = report.table("int8_accuracy", "engine", "precision", ("exact match", "{:.1%}"), ("chrF", "{:.1f}"),
                     ("BLEU", "{:.1f}"), ("same as fp32", "{:.1%}"), ("seconds", "{:.1f}"))  # fmt: skip
    base = {}
    from bench.engine import systems as sy

    for system, side in [
        ("engine", lambda p: sy.engine_real(s.engines[p], s.budget, p)),
        ("ct2", lambda p: sy.ct2(s.ct2[p], s.vocab, p, s.budget, False)),
    ]:
        for p in ("float32", "int8"):
            t0 = time.perf_counter()
            ids = side(p).run(srcs, tokens, 1, 64)
            secs = time.perf_counter() - t0
            hyps = [s.ck.codec.decode(r[: len(x) + 50]) for r, x in zip(ids, tokens)]
            base.setdefault(system, hyps)
            bleu = (
                sacrebleu.corpus_bleu(hyps, [refs], tokenize=tok).score
                if s.ck.task.name == "translation"
                else "-"
            )
            same = sum(a == b for a, b in zip(hyps, base[system])) / len(hyps)
            t.row(
                system,
                p,
                sum(h == r for h, r in zip(hyps, refs)) / len(refs),
                sacrebleu.corpus_chrf(hyps, [refs]).score,
                bleu,
                same,
                secs,
            )
