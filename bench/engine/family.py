"""Imported checkpoints for the engine grid (``--model-family``: ``marian``, OPUS-MT's shape; ``t5``, Flan-T5-base's):
a checkpoint of a family's shape made here as a user's download would look (transformers' random initialisation,
saved with ``save_pretrained``; nothing is downloaded), imported by ``s2s import`` (float32 and ``--quantize int8``) and converted by CTranslate2's own
``ct2-transformers-converter``; each made once and cached under .cache/bench/<family>/. Random weights would stop
anywhere, so both sides generate exactly --new-tokens tokens (min = max decoding length). In float32 greedy cells the
engine also runs with its greedy screen off (the default, auto, screens a projection this size: engine/screen.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench import CACHE, ROOT
from bench.harness.inputs import log
from bench.harness.results import Report, provenance

os.environ["HF_HUB_OFFLINE"] = "1"  # the checkpoint is made here; nothing is downloaded
QUICK = dict(d=64, layers=2, heads=4, ff=128, vocab=2000)
SIZES = {  # family -> its released model's shape (OPUS-MT's; Flan-T5-base's), and the --quick one
    "marian": {"full": dict(d=512, layers=6, heads=8, ff=2048, vocab=32000), "quick": QUICK},
    "t5": {"full": dict(d=768, layers=12, heads=12, ff=2048, vocab=32128), "quick": QUICK},
}


def _helpers():
    """The tests' builders of tiny real checkpoints (SentencePiece models, vocabularies, generated lines)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import marian_models

    return marian_models


def marian(folder: Path, d: int, layers: int, heads: int, ff: int, vocab: int) -> None:
    """A random Marian checkpoint of OPUS-MT's shape (swish, tied embeddings), a vocabulary of ``vocab`` pieces
    (SentencePiece models trained on generated lines, vocab.json filled to size with pieces never produced)."""
    import torch
    from transformers import GenerationConfig, MarianConfig, MarianMTModel, MarianTokenizer

    mm = _helpers()
    folder.mkdir(parents=True, exist_ok=True)
    texts = mm.lines(3000, 0, japanese=True)
    mm.train_spm(texts, folder / "source.spm", 400)
    mm.train_spm(texts, folder / "target.spm", 400)
    v = mm.vocab_of(folder / "source.spm", folder / "target.spm")
    v.pop("<pad>")
    for i in range(len(v), vocab - 1):
        v[f"▁w{i}"] = i
    v["<pad>"] = vocab - 1
    (folder / "vocab.json").write_text(json.dumps(v, ensure_ascii=False))
    tok = MarianTokenizer(
        source_spm=str(folder / "source.spm"),
        target_spm=str(folder / "target.spm"),
        vocab=str(folder / "vocab.json"),
    )
    torch.manual_seed(0)
    cfg = MarianConfig(vocab_size=vocab, d_model=d, encoder_layers=layers, decoder_layers=layers, encoder_attention_heads=heads,
                       decoder_attention_heads=heads, encoder_ffn_dim=ff, decoder_ffn_dim=ff, max_position_embeddings=512,
                       activation_function="swish", scale_embedding=True, pad_token_id=vocab - 1,
                       decoder_start_token_id=vocab - 1, eos_token_id=0)  # fmt: skip
    model = MarianMTModel(cfg).eval()
    model.generation_config = GenerationConfig(decoder_start_token_id=vocab - 1, eos_token_id=0, pad_token_id=vocab - 1,
                                               bad_words_ids=[[vocab - 1]], num_beams=4, max_length=512)  # fmt: skip
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


T5_EXTRA_IDS, T5_SPARE_ROWS = 100, 28  # Flan-T5: 32100 ids (100 of them extra ids) in a vocab_size of 32128


def t5(folder: Path, d: int, layers: int, heads: int, ff: int, vocab: int) -> None:
    """A random T5 checkpoint of Flan-T5's kind (gated GELU, its own lm_head, heads of d / heads), config.json as
    Flan-T5's reads (tie_word_embeddings false), its tokenizer.json: a SentencePiece unigram trained on generated
    lines, filled with pieces never produced up to the vocabulary's size, in transformers' ``T5Tokenizer``."""
    import torch
    from transformers import GenerationConfig, T5Config, T5ForConditionalGeneration, T5Tokenizer
    from transformers.convert_slow_tokenizer import T5Converter

    mm = _helpers()
    import t5_models

    folder.mkdir(parents=True, exist_ok=True)
    _, proto = t5_models.spm_pieces(mm.lines(3000, 0, japanese=True), [])
    pieces = [(p.piece, p.score) for p in proto.pieces]
    floor = min(score for _, score in pieces) - 1
    pieces += [(f"▁w{i}", floor) for i in range(len(pieces), vocab - T5_SPARE_ROWS - T5_EXTRA_IDS)]
    charsmap = proto.normalizer_spec.precompiled_charsmap
    spm = T5Converter.convert_from_spm(
        vocab=pieces, _spm_precompiled_charsmap=charsmap, extra_ids=T5_EXTRA_IDS
    )
    tok = T5Tokenizer(**spm)
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=vocab, d_model=d, d_kv=d // heads, d_ff=ff, num_layers=layers, num_heads=heads,
                   feed_forward_proj="gated-gelu", tie_word_embeddings=False, decoder_start_token_id=0)  # fmt: skip
    model = T5ForConditionalGeneration(cfg).eval()
    model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight))  # its own, as Flan-T5's
    model.generation_config = GenerationConfig(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    # transformers 5 writes the v1.0 rescaling as scale_decoder_outputs; Flan-T5's config.json says it this way
    config.pop("scale_decoder_outputs", None)
    (folder / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}, indent=2))


FAMILIES = {"marian": marian, "t5": t5}  # family -> maker of a checkpoint folder of its shape


def build(
    family: str, sizes: dict, variant: str, precisions: list[str]
) -> tuple[Path, dict[str, Path], Path]:
    """(checkpoint, bundle by precision (those asked for), CTranslate2 model), each made once."""
    from export.hf_import import ImportOptions, import_model

    tag = f"d{sizes['d']}-l{sizes['layers']}-v{sizes['vocab']}"
    ckpt, repo, ct2 = (
        CACHE / family / tag / "hf",
        CACHE / family / tag / "models",
        CACHE / family / tag / "ct2",
    )
    if not (ckpt / "config.json").is_file():
        FAMILIES[family](ckpt, **sizes)
    bundles = {}
    for precision, quantize in (("float32", "none"), ("int8", variant)):
        if precision not in precisions:
            continue
        name = family if quantize == "none" else f"{family}-{quantize}"
        if not (repo / name / "1" / "config.json").is_file():
            import_model(ImportOptions(ckpt, repo, name, 1, quantize))
        bundles[precision] = repo / name / "1"
    if not (ct2 / "model.bin").is_file():
        converter = Path(sys.executable).with_name("ct2-transformers-converter")
        subprocess.run(
            [str(converter), "--model", str(ckpt), "--output_dir", str(ct2), "--force"], check=True
        )
    return ckpt, bundles, ct2


def run(args, started: float) -> Report:
    import ctranslate2

    import bench.engine.systems as sy
    import engine
    from bench.engine.table import grid_table

    sizes = SIZES[args.model_family]["quick" if args.quick else "full"]
    _, bundles, ct2_dir = build(args.model_family, sizes, args.int8_variant, args.precisions)
    n, repeats, sides, engines = args.new_tokens[0], args.repeats or 3, [], {}
    for p in args.precisions:
        engines[p] = eng = engine.load(bundles[p], threads=1, device="cpu")
        tr = ctranslate2.Translator(
            str(ct2_dir), device="cpu", compute_type=p, inter_threads=1, intra_threads=1
        )
        vocab = eng.codec.target_tokenizer.get_vocab()
        sides += [sy.engine_forced(eng, n, p), sy.ct2(tr, sorted(vocab, key=vocab.get), p, n, forced=True)]
        if p == "float32" and "engine screen off" in args.systems:
            off = engine.load(bundles[p], threads=1, device="cpu", greedy_screen="off")
            sides.append(sy.Side("engine screen off", p, sy.engine_forced(off, n).run, "greedy"))
    cells = []
    for beam in args.beams:
        for b in args.batch_sizes:
            texts = _helpers().lines(max(4 if args.quick else 8, b * (1 if b >= 64 else 2)), 5)
            log(f"{args.model_family} beam {beam} batch {b}: {len(texts)} inputs")
            for p, eng in engines.items():
                tokens = [eng.source_tokens(t) for t in texts]
                for c in sy.time_sides(
                    [x for x in sides if x.precision == p], texts, tokens, beam, b, repeats
                ):
                    c.inputs, c.sources, c.keep = f"forced {n}", [len(x) for x in tokens], []
                    cells.append(c)
    report = Report(f"{args.model_family}-ct2")
    report.heading(
        f"An imported {args.model_family} checkpoint against CTranslate2 (`python -m bench engine --model-family {args.model_family}`)"
    )
    shape = ", ".join(f"{k} {v}" for k, v in sizes.items())
    report.text(provenance(started) + f"\n- model: a random {args.model_family} checkpoint ({shape}) made here, `s2s import` (float32, "
                f"`--quantize {args.int8_variant}`) against CTranslate2's own converter (compute_type float32 / int8); exactly {n} tokens "
                f"per output on both sides, one thread each, {repeats} passes a cell taking turns after a warm-up, medians; `engine screen off`: "
                "the engine with `greedy_screen` off (its default screens a projection this size). *x CT2*: sequences/s over CTranslate2's.")  # fmt: skip
    grid_table(report, cells, forced=True)
    return report
