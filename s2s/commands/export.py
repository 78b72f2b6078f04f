"""`s2s export`: a checkpoint -> an ONNX bundle in a model repository, validated against PyTorch."""

from __future__ import annotations

import argparse
import sys

from s2s.commands.arg_types import language, positive


def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint to an ONNX bundle in a model repository",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Write models/NAME/VERSION/{encoder.onnx, decoder.onnx, tokenizer.json, config.json}, "
        "validated against PyTorch with ONNX Runtime before it is published.",
    )
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/addition/best)")
    p.add_argument("--repo", default="models", help="model repository root")
    p.add_argument("--name", required=True, help="model name (the folder under --repo)")
    p.add_argument("--version", type=int, default=None, help="version number (default: next free)")
    from export.quantize import CHOICES as QUANTIZE_CHOICES  # torch-free: names only

    p.add_argument(
        "--quantize",
        choices=QUANTIZE_CHOICES,
        default="none",
        help="int8 weights for CPUs: int8-dynamic (quantize_dynamic of the MatMuls), int8-nbits (MatMulNBits, "
        "8-bit blocks, int8 compute); int8 = the faster of the two on docs/BENCHMARKS.md's measurement",
    )
    p.add_argument(
        "--atol", type=float, default=1e-4, help="largest |ORT - PyTorch| accepted on logits and K/V"
    )
    p.add_argument(
        "--fused-attention",
        action="store_true",
        help="attention as ONNX Runtime's fused com.microsoft.MultiHeadAttention (bundle format 3, ONNX Runtime "
        "only); default: standard ONNX nodes, 1.05x faster on CPU here (docs/BENCHMARKS.md#int8-variants)",
    )
    p.add_argument(
        "--source-lang",
        type=language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the source language (translation), written to config.json; the "
        "LibreTranslate API (/translate, /languages) offers only models that declare both languages",
    )
    p.add_argument(
        "--target-lang",
        type=language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the target language (translation), written to config.json",
    )
    p.add_argument(
        "--beam-size",
        type=positive,
        default=None,
        metavar="N",
        help="the beam a request gets when it names none (beam_size 0), written to config.json; "
        "default: the checkpoint's (1 = greedy). The paper's is 4: choose it where it raises quality "
        "enough for its cost (docs/experiments.md, docs/BENCHMARKS.md#options)",
    )
    p.add_argument(
        "--length-penalty-type",
        choices=("gnmt", "ctranslate2", "transformers"),
        default=None,
        help="the length penalty rule a beam request gets when it names none, written to config.json "
        "(default: gnmt, the paper's; docs/DECODING.md)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from export.publish import PublishRefused, destination
    from s2s.export_logging import configure

    configure()  # before torch is imported: our lines, the libraries' warnings less their noise
    try:
        # before torch is imported: a name that is a path is told at once
        destination(Path(args.repo), args.name, args.version)
        from export.onnx_export import ExportOptions, export

        out = export(
            ExportOptions(
                Path(args.checkpoint),
                Path(args.repo),
                args.name,
                args.version,
                args.quantize,
                args.atol,
                source_language=args.source_lang,
                target_language=args.target_lang,
                beam_size=args.beam_size,
                fused=args.fused_attention,
                length_penalty_type=args.length_penalty_type,
            )
        )
    except PublishRefused as e:
        print(f"s2s export: {e}", file=sys.stderr)
        return 2
    print(out)
    return 0
