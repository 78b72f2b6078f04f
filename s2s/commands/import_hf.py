"""`s2s import`: a local Hugging Face checkpoint folder -> a bundle, through `s2s export`'s export."""

from __future__ import annotations

import argparse
import os
import sys

from s2s.commands.arg_types import language


def add_parser(sub) -> None:
    from export.quantize import CHOICES as QUANTIZE_CHOICES  # torch-free: names only

    p = sub.add_parser(
        "import",
        help="import a Hugging Face checkpoint (Marian: OPUS-MT, FuguMT; M2M100, NLLB; BART, mBART-50; T5, Flan-T5, "
        "mT5, MADLAD-400; Pegasus) as a bundle",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Read a local Hugging Face checkpoint folder (config.json, generation_config.json, "
        "model.safetensors or pytorch_model.bin, the tokenizer files; nothing is downloaded) and write "
        "models/NAME/VERSION/ through `s2s export`'s export and validation. Decoding defaults come from "
        "generation_config.json; a folder it cannot take is refused with the file and field named, "
        "and nothing is written.",
    )
    p.add_argument(
        "folder",
        help="the checkpoint folder (e.g. from `huggingface-cli download Helsinki-NLP/opus-mt-en-de "
        "--local-dir opus-mt-en-de`)",
    )
    p.add_argument("--repo", default="models", help="model repository root")
    p.add_argument("--name", required=True, help="model name (the folder under --repo)")
    p.add_argument("--version", type=int, default=None, help="version number (default: next free)")
    p.add_argument("--quantize", choices=QUANTIZE_CHOICES, default="none", help="as `s2s export --quantize`")
    p.add_argument(
        "--attention",
        choices=("gqa", "standard"),
        default="gqa",
        help="the decoder's self-attention: gqa = ONNX Runtime's GroupQueryAttention, its cache appended inside "
        "the kernel (faster on CPUs, docs/BENCHMARKS.md#marian-ct2-notes); standard = ONNX nodes, for CUDA, "
        "whose GroupQueryAttention takes float16 only",
    )
    p.add_argument(
        "--source-lang",
        type=language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the source language, written to config.json: the pair the LibreTranslate API "
        "offers the model for (default: tokenizer_config.json's source_lang, where it is a code)",
    )
    p.add_argument(
        "--target-lang",
        type=language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the target language (default: tokenizer_config.json's target_lang); for a "
        "multilingual model, the target a request that names none gets",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from s2s.export_logging import configure

    os.environ["HF_HUB_OFFLINE"] = "1"  # before anything can import transformers: nothing is downloaded
    configure()
    from export.hf_import import ImportOptions, ImportRefused, import_model

    try:
        out = import_model(
            ImportOptions(
                Path(args.folder),
                Path(args.repo),
                args.name,
                args.version,
                args.quantize,
                gqa=args.attention == "gqa",
                source_language=args.source_lang,
                target_language=args.target_lang,
            )
        )
    except ImportRefused as e:
        print(f"s2s import: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0
