#!/usr/bin/env python
"""An imported model of OPUS-MT's size: the engine per core against CTranslate2 on the same checkpoint.

The checkpoint is made here, as a user's download would look (never downloaded): a ``MarianMTModel`` of
OPUS-MT's shape (d 512, 6+6 layers, 8 heads, d_ff 2048, swish, tied embeddings) with transformers' random
initialisation, a vocabulary of --vocab pieces (SentencePiece models trained on generated lines, vocab.json
filled to size), saved with ``save_pretrained``. Then, from that one folder:

  engine       ``s2s import`` (float32, and ``--quantize int8``), run by
               engine.load(bundle, threads=1).generate(texts, beam_size=b, max_batch_size=B * b,
               min_new_tokens=N, max_new_tokens=N)
  CTranslate2  CTranslate2's own converter, ``ct2-transformers-converter --model DIR``, loaded as
               Translator(inter_threads=1, intra_threads=1, compute_type=float32 | int8).translate_batch(tokens,
               beam_size=b, max_batch_size=B, min_decoding_length=N, max_decoding_length=N)

Every output has exactly N tokens on both sides (random weights would stop anywhere), so both do the same
steps. Per (precision, search, batch) cell: one warm-up each, then 3 passes over the inputs, the systems
taking turns in ABBA order; the least of the 3 is reported as sequences/s, with the ratio engine /
CTranslate2. Timings include the engine's tokenizing and detokenizing; CTranslate2 gets its source tokens
ready-made. Results: docs/bench/marian-ct2.json, rendered into docs/BENCHMARKS.md#marian-ct2.

    python -m bench.engine.marian_ct2 [--quick]

Run it under cpu-bench on an otherwise idle machine; ``--quick`` (a small model, 4 inputs) checks the script
and writes nothing unless given ``--results DIR``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import CACHE as BENCH_CACHE
from bench import ROOT
from bench.common.abba import abba, rotated
from bench.common.machine import machine
from bench.common.report import RESULTS, Report

os.environ["HF_HUB_OFFLINE"] = "1"  # the checkpoint is made here; nothing is downloaded
CACHE = BENCH_CACHE / "marian"
NAME = "marian-ct2"


def make_checkpoint(folder: Path, d: int, layers: int, heads: int, ff: int, vocab: int) -> None:
    """A random OPUS-MT-shaped Marian checkpoint, saved as transformers saves one."""
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    sys.path.insert(0, str(ROOT / "tests"))
    import marian_models as mm

    folder.mkdir(parents=True, exist_ok=True)
    texts = mm.lines(3000, 0, japanese=True)
    mm.train_spm(texts, folder / "source.spm", 400)
    mm.train_spm(texts, folder / "target.spm", 400)
    v = mm.vocab_of(folder / "source.spm", folder / "target.spm")
    pad = v.pop("<pad>")
    for i in range(len(v), vocab - 1):  # filler pieces up to the size of a real vocabulary (never produced)
        v[f"▁w{i}"] = i
    v["<pad>"] = vocab - 1
    assert len(v) == vocab and pad <= vocab - 1
    (folder / "vocab.json").write_text(json.dumps(v, ensure_ascii=False))
    tok = MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
    )
    torch.manual_seed(0)
    cfg = MarianConfig(
        vocab_size=vocab,
        d_model=d,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ff,
        decoder_ffn_dim=ff,
        max_position_embeddings=512,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=vocab - 1,
        decoder_start_token_id=vocab - 1,
        eos_token_id=0,
    )
    model = MarianMTModel(cfg).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=vocab - 1,
        eos_token_id=0,
        pad_token_id=vocab - 1,
        bad_words_ids=[[vocab - 1]],
        num_beams=4,
        max_length=512,
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def build(args) -> tuple[Path, Path, Path, Path]:
    """(checkpoint, float32 bundle, int8 bundle, CTranslate2 model), each made once and cached (and the
    ``--int8-alt`` variant's bundle, beside them)."""
    from export.hf_import import ImportOptions, import_model

    tag = f"d{args.d_model}-l{args.layers}-v{args.vocab}"
    ckpt, repo, ct2 = CACHE / tag / "hf", CACHE / tag / "models", CACHE / tag / "ct2"
    if not (ckpt / "config.json").is_file():
        make_checkpoint(ckpt, args.d_model, args.layers, args.heads, args.d_ff, args.vocab)
    bundles = []
    variants = [("marian", "none"), ("marian-int8", "int8")]
    if args.int8_alt:
        variants.append((f"marian-{args.int8_alt}", args.int8_alt))
    for name, q in variants:
        if not (repo / name / "1" / "config.json").is_file():
            import_model(ImportOptions(ckpt, repo, name, 1, q))
        bundles.append(repo / name / "1")
    if not (ct2 / "model.bin").is_file():
        converter = Path(sys.executable).with_name("ct2-transformers-converter")
        subprocess.run(
            [str(converter), "--model", str(ckpt), "--output_dir", str(ct2), "--force"], check=True
        )
    return ckpt, bundles[0], bundles[1], ct2


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--no-screen",
        action="store_true",
        help="leave out the float32 greedy cells' third system: the engine with greedy_screen off (the default, "
        "auto, screens a projection this size: engine/screen.py)",
    )
    p.add_argument(
        "--int8-alt",
        choices=("int8-nbits",),
        default=None,
        help="a third system in the int8 cells: the checkpoint imported with this --quantize variant instead of "
        "int8's default (export/quantize.py), the three taking turns",
    )
    p.add_argument("--precisions", default="float32,int8", help="which precisions' cells to run")
    p.add_argument(
        "--quick", action="store_true", help="a small model and 4 inputs; writes nothing unless --results"
    )
    p.add_argument(
        "--results", type=Path, default=None, help="folder of the results JSON (default: docs/bench/)"
    )
    p.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="B",
        help="only print where a greedy step at batch B goes: the decoder graph per operator "
        "(bench/engine/profile_step.py) against the engine's whole step",
    )
    args = p.parse_args(argv)
    if args.quick:
        args.d_model, args.layers, args.heads, args.d_ff, args.vocab, args.new_tokens = 64, 2, 4, 128, 2000, 8
        args.batches, args.repeats = "1,4", 1
    import ctranslate2

    import engine

    sys.path.insert(0, str(ROOT / "tests"))
    import marian_models as mm

    info = machine()
    _, f32, i8, ct2_dir = build(args)
    if args.profile:
        return profile(f32, args.profile, args.new_tokens)
    systems = {
        "float32": (
            engine.load(f32, threads=1, device="cpu"),
            ctranslate2.Translator(
                str(ct2_dir), device="cpu", compute_type="float32", inter_threads=1, intra_threads=1
            ),
        ),
        "int8": (
            engine.load(i8, threads=1, device="cpu"),
            ctranslate2.Translator(
                str(ct2_dir), device="cpu", compute_type="int8", inter_threads=1, intra_threads=1
            ),
        ),
    }
    systems = {k: v for k, v in systems.items() if k in args.precisions.split(",")}
    # the default (greedy_screen auto) screens this model's greedy rows; the third system is the engine without
    screen = None if args.no_screen else engine.load(f32, threads=1, device="cpu", greedy_screen="off")
    alt = None
    if args.int8_alt:
        alt = engine.load(i8.parent.parent / f"marian-{args.int8_alt}" / "1", threads=1, device="cpu")
    n = args.new_tokens
    rows = []
    for precision, (eng, ct2) in systems.items():
        for beam in map(int, args.beams.split(",")):
            for batch in map(int, args.batches.split(",")):
                texts = mm.lines(max(4 if args.quick else 8, batch * (1 if batch >= 64 else 2)), 5)
                tokens = [eng.source_tokens(t) for t in texts]

                def run_engine(eng=eng, texts=texts, beam=beam, batch=batch):
                    out = eng.generate(
                        texts, beam_size=beam, max_batch_size=batch * beam, min_new_tokens=n, max_new_tokens=n
                    )
                    assert all(len(r.tokens) == n for r in out)
                    return [r.tokens for r in out]

                def run_ct2(ct2=ct2, tokens=tokens, beam=beam, batch=batch):
                    out = ct2.translate_batch(
                        tokens,
                        beam_size=beam,
                        max_batch_size=batch,
                        min_decoding_length=n,
                        max_decoding_length=n,
                    )
                    assert all(len(r.hypotheses[0]) == n for r in out), [len(r.hypotheses[0]) for r in out][
                        :4
                    ]

                sides = [("engine", run_engine), ("ct2", run_ct2)]
                if screen is not None and precision == "float32" and beam == 1:
                    sides.append(
                        ("screen", lambda texts=texts, batch=batch: run_engine(screen, texts, 1, batch))
                    )
                if alt is not None and precision == "int8":
                    sides.append(
                        (
                            "alt",
                            lambda texts=texts, beam=beam, batch=batch: run_engine(alt, texts, beam, batch),
                        )
                    )
                times = {name: [] for name, _ in sides}
                warm = [fn() for _, fn in sides]  # warm-up; the screen's tokens are the engine's
                assert len(sides) < 3 or sides[2][0] == "alt" or warm[2] == warm[0], (
                    "the screen changed an output"
                )
                for r in range(args.repeats):
                    for name, fn in (abba if len(sides) == 2 else rotated)(sides, r):
                        t0 = time.perf_counter()
                        fn()
                        times[name].append(time.perf_counter() - t0)
                e, c = len(texts) / min(times["engine"]), len(texts) / min(times["ct2"])
                third = "screen" if "screen" in times else "alt" if "alt" in times else None
                sc = len(texts) / min(times[third]) if third else None
                rows.append((precision, beam, batch, len(texts), e, c, sc))
                print(
                    f"{precision} beam {beam} batch {batch}: engine {e:.2f}/s ct2 {c:.2f}/s = {e / c:.2f}x"
                    + (f"; {third} {sc:.2f}/s = {sc / c:.2f}x" if sc else ""),
                    flush=True,
                )
    report = render(args, info, rows)
    print(report.markdown())
    if not args.quick or args.results:
        from bench.render import write

        report.save(args.results or RESULTS)
        if not args.results:
            write()
    return 0


def profile(folder: Path, batch: int, n: int) -> int:
    """The decoder graph's time per operator at ``batch`` rows and n/2 cached positions, and the engine's whole
    greedy step (graph, logits pass, argmax, cache bookkeeping, Python) on the same rows, both one thread."""
    from types import SimpleNamespace

    import engine
    from bench.engine.profile_step import profile as graph_profile

    sys.path.insert(0, str(ROOT / "tests"))
    import marian_models as mm

    step_ms, per_op = graph_profile(folder, SimpleNamespace(batch=batch, past=n // 2, src=12, steps=20))
    total = sum(per_op.values())
    print(f"decoder graph, batch {batch}, {n // 2} cached, source 12: {step_ms:.2f} ms per step")
    for op, us in per_op.most_common(8):
        print(f"  {op:24s} {us / total:6.1%}  {us / 1e3:7.2f} ms")
    t = engine.load(folder, threads=1, device="cpu")
    texts = mm.lines(batch, 5)
    t.generate(texts, beam_size=1, max_batch_size=batch, min_new_tokens=n, max_new_tokens=n)
    t0 = time.perf_counter()
    t.generate(texts, beam_size=1, max_batch_size=batch, min_new_tokens=n, max_new_tokens=n)
    print(
        f"engine: {(time.perf_counter() - t0) / n * 1e3:.2f} ms per step (whole generate / {n} steps, encoder included)"
    )
    return 0


def render(args, info: dict, rows: list) -> Report:
    report = Report(NAME)
    report.heading("An imported model of OPUS-MT's size against CTranslate2 (bench/engine/marian_ct2.py)")
    report.text(
        f"A random Marian checkpoint of OPUS-MT's shape (d {args.d_model}, {args.layers}+{args.layers} layers, "
        f"{args.heads} heads, d_ff {args.d_ff}, vocabulary {args.vocab}, swish, tied embeddings), saved with "
        "`save_pretrained`; the engine runs it as `s2s import` made it (float32, and `--quantize int8`), CTranslate2 as "
        "its own `ct2-transformers-converter` made it (compute_type float32 / int8). "
        f"Exactly {args.new_tokens} tokens per output on both sides (min = max decoding length), one thread each, "
        f"least of {args.repeats} passes in ABBA order after a warm-up; sequences/s. The engine as it loads by "
        "default: `greedy_screen` auto, on for a float32 projection this size (engine/screen.py: greedy rows' tokens "
        "from an int8 screen of the output projection, each proven to be the argmax or computed in full; same "
        "outputs). The last two columns: the engine with `greedy_screen` off, in the same passes (the three taking "
        "turns) for float32 greedy"
        + (
            f"; in the int8 cells, the checkpoint imported with `--quantize {args.int8_alt}` in the same passes. "
            if args.int8_alt
            else ". "
        )
        + f"Machine: {info['nproc']} × {info['cpu']}, load average at start {info['loadavg'][0]:.2f}."
    )
    t = report.table(
        "speed",
        "precision",
        "search",
        ("batch", "{}"),
        ("inputs", "{}"),
        ("engine seq/s", "{:.2f}"),
        ("CTranslate2 seq/s", "{:.2f}"),
        ("engine / CTranslate2", "{:.2f}×"),
        ("screen off" + (f" / {args.int8_alt}" if args.int8_alt else "") + " seq/s", "{:.2f}"),
        ("screen off" + (f" / {args.int8_alt}" if args.int8_alt else "") + " / CTranslate2", "{:.2f}×"),
    )
    for precision, beam, batch, k, e, c, sc in rows:
        search = "greedy" if beam == 1 else f"beam {beam}"
        t.row(precision, search, batch, k, e, c, e / c, sc, sc / c if sc else None)
    return report


if __name__ == "__main__":
    sys.exit(main())
