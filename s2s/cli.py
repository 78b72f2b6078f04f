"""`s2s` — one entry point, one subcommand per pipeline stage.

Each subcommand imports its stage lazily, so `s2s serve` and `s2s client` never import torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing

TRAIN_HELP = {
    "task": "addition | copy | reverse | translation",
    "out": "run folder: checkpoints best/ and last/, metrics.jsonl, learning_curves.png, data splits",
    "data": "translation: parallel TSV(s), source<TAB>target per line, several joined by commas (split train/valid/test by a hash of the source)",
    "digits": "addition: operands have up to this many digits",
    "min_len": "copy/reverse: shortest source",
    "max_len_sym": "copy/reverse: longest source",
    "n_train": "synthetic tasks: training problems",
    "n_valid": "synthetic tasks: validation problems",
    "n_test": "synthetic tasks: held-out test problems (never seen in training)",
    "reverse_source": "feed the source reversed (the seeds' 'input reversed' option; also applied when serving)",
    "vocab_size": "translation: joint BPE vocabulary size",
    "d_model": "model width",
    "n_heads": "attention heads",
    "n_layers": "encoder and decoder layers (each)",
    "d_ff": "feed-forward inner size",
    "norm": "post | pre: where each sublayer's LayerNorm sits; post is the paper's (§3.1), pre (with a final norm "
    "per stack) trains deeper stacks at a higher learning rate without stalling",
    "dropout": "dropout rate",
    "max_len": "longest sequence in tokens",
    "epochs": "maximum epochs",
    "batch_size": "sentences per batch",
    "lr_factor": "scale of the warm-up schedule",
    "warmup": "warm-up steps",
    "label_smoothing": "label smoothing epsilon",
    "clip": "gradient-norm clip",
    "seed": "seed of data, split and initialisation",
    "device": "auto | cpu | cuda[:N]",
    "stop_at": "stop once validation exact match reaches this fraction",
    "eval_max": "validation examples decoded per epoch",
    "bleu_tokenize": "sacrebleu tokenizer (char for Japanese)",
    "threads": "torch intra-op threads (0 = default)",
    "resume": "continue the run in --out from last/",
    "init_from": "start from this checkpoint folder's weights and tokenizer when its trainer state is gone: fresh Adam "
    "moments, the schedule continues at the checkpoint's step and epoch, minutes counted on from its time",
    "init_warmup": "with --init-from: steps over which the learning rate ramps back up to the schedule (fresh Adam moments)",
    "batch_tokens": "padded tokens per batch and rank (0 = use --batch-size sentences); the paper's batching (§5.1)",
    "precision": "auto | fp32 | bf16: bf16 autocast; auto picks bf16 only on CUDA with bf16 or a CPU with AMX / AVX-512 BF16",
    "time_budget_min": "stop after this many minutes of training, resumed runs counted from their start (0 = run all --epochs); the last partial epoch is evaluated and saved",
    "max_steps": "stop after this many optimizer steps (0 = no limit); reproduces a --time-budget-min run exactly",
    "average_every": "keep the weights every N steps for checkpoint averaging (0 = off); §6.1 averaged the last 5, 10 min apart",
    "average_last": "how many kept copies averaged/ averages",
    "mask_spans": "translation: train on pairs with their named placeholders, URLs and tags masked as {0}, {1}, ... "
    "on both sides, as the server masks them at serving time (a pair whose target lacks a span is kept as it is)",
}


def _add_dataclass_args(p: argparse.ArgumentParser, cls: type, helps: dict[str, str]) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        t = hints[f.name]
        if t is bool:
            p.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=f.default, help=helps.get(f.name)
            )
        else:
            base = next((a for a in typing.get_args(t) if a is not type(None)), t)
            p.add_argument(flag, type=base, default=f.default, help=helps.get(f.name), metavar=f.name.upper())


def cmd_train(args: argparse.Namespace) -> int:
    from training.config import TrainConfig
    from training.train import check, train

    cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig)})
    try:
        check(cfg)
    except ValueError as e:
        print(f"s2s train: {e}", file=sys.stderr)
        return 2
    train(cfg)
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    import sacrebleu

    from training import checkpoint, tasks
    from training.evaluate import evaluate

    ckpt = checkpoint.load(Path(args.checkpoint), args.device)
    translation = ckpt.task.name == "translation"
    report = {}
    for data in args.data:
        pairs = tasks.read_tsv(Path(data))
        if args.limit:
            pairs = pairs[: args.limit]
        metrics = evaluate(
            ckpt.model,
            ckpt.codec,
            pairs,
            batch_size=args.batch_size,
            device=args.device,
            translation=translation,
            bleu_tokenize=args.bleu_tokenize,
        )
        if translation:  # the floor every translation must beat: the source copied unchanged
            srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
            metrics["copy_source_chrf"] = sacrebleu.corpus_chrf(srcs, [refs]).score
            metrics["copy_source_bleu"] = sacrebleu.corpus_bleu(
                srcs, [refs], tokenize=args.bleu_tokenize
            ).score
        report[data] = metrics
    # One test set prints its metrics as they are (scripts read them); several, one object per file.
    print(json.dumps(report[args.data[0]] if len(args.data) == 1 else report, indent=2))
    return 0


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return n


def _language(code: str) -> str:
    from contract.bundle import check_language

    try:
        return check_language(code)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def cmd_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from s2s.export_logging import configure

    configure()  # before torch is imported: our lines, the libraries' warnings less their noise
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
    print(out)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
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


def run_loop(main, kind: str) -> None:
    """``asyncio.run``, on uvloop unless ``kind`` says asyncio (or auto finds no uvloop)."""
    import asyncio

    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                main.close()  # never awaited: no "coroutine was never awaited" warning on the way out
                raise SystemExit(
                    "s2s serve: --event-loop uvloop, but uvloop is not installed (pip install uvloop)"
                ) from None
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


def cmd_serve(args: argparse.Namespace) -> int:
    import logging

    from contract.bundle import BundleError
    from server.app import serve
    from server.config import from_args
    from server.errors import ServingError

    config = from_args(args)
    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_loop(serve(config), config.event_loop)
    except (BundleError, ServingError) as e:  # a model folder refused at start (a link outside, a bad name)
        print(f"s2s serve: cannot load the model repository: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"s2s serve: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_check_po(args: argparse.Namespace) -> int:
    from s2s.check_po import run_cli

    return run_cli(args)


def cmd_translate(args: argparse.Namespace) -> int:
    from s2s.translate_catalog import run_cli

    return run_cli(args)


def cmd_client(args: argparse.Namespace) -> int:
    from s2s.seq2seq_client import run_cli

    return run_cli(args)


def cmd_models(args: argparse.Namespace) -> int:
    from s2s.models_command import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="s2s",
        description="Train, export and serve encoder-decoder Transformers: corpus -> checkpoint (s2s train) "
        "-> ONNX bundle (s2s export) -> server (s2s serve: HTTP :8000, gRPC :8001, metrics :8002) -> answers "
        "(s2s client, s2s translate).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from training.config import TrainConfig

    p = sub.add_parser(
        "train",
        help="train a Transformer on a task; writes a self-describing checkpoint",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Train the encoder-decoder of Vaswani et al. 2017. Data-parallel: "
        "torchrun --nproc_per_node 2 -m s2s.cli train ...",
    )
    _add_dataclass_args(p, TrainConfig, TRAIN_HELP)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "eval",
        help="evaluate a checkpoint on a TSV; prints metrics as JSON",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("checkpoint", help="checkpoint folder (e.g. runs/addition/best)")
    p.add_argument(
        "--data",
        required=True,
        action="append",
        help="TSV of source<TAB>reference; repeat for several test sets (e.g. the hash split and "
        "data/en-ja/heldout-projects.tsv, the unseen projects)",
    )
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--device", default="cpu")
    p.add_argument("--limit", type=int, default=0, help="evaluate only the first N pairs (0 = all)")
    p.add_argument("--bleu-tokenize", default="13a", help="sacrebleu tokenizer (char for Japanese)")
    p.set_defaults(func=cmd_eval)

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
        type=_language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the source language (translation), written to config.json; the "
        "LibreTranslate API (/translate, /languages) offers only models that declare both languages",
    )
    p.add_argument(
        "--target-lang",
        type=_language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the target language (translation), written to config.json",
    )
    p.add_argument(
        "--beam-size",
        type=_positive,
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
    p.set_defaults(func=cmd_export)

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
        type=_language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the source language, written to config.json: the pair the LibreTranslate API "
        "offers the model for (default: tokenizer_config.json's source_lang, where it is a code)",
    )
    p.add_argument(
        "--target-lang",
        type=_language,
        default=None,
        metavar="CODE",
        help="ISO 639-1 code of the target language (default: tokenizer_config.json's target_lang); for a "
        "multilingual model, the target a request that names none gets",
    )
    p.set_defaults(func=cmd_import)

    p = sub.add_parser(
        "serve",
        help="serve a model repository: HTTP :8000 (KServe v2 REST, LibreTranslate, playground), gRPC :8001 "
        "(seq2seq.v1, KServe v2), Prometheus /metrics :8002",
        description="Serve every model of the repository (latest version unless pinned with --models) on three "
        "ports: HTTP (--http-port, default 8000: KServe v2 REST, the LibreTranslate API, the playground page), "
        "gRPC (--port, default 8001: seq2seq.v1, KServe v2, health, reflection) and Prometheus /metrics "
        "(--metrics-port, default 8002).",
    )
    from server.config import add_arguments as add_serve_arguments

    add_serve_arguments(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "client",
        help="call a running server: one output line per input line",
        description="Send TEXT arguments (or stdin, one input per line) to a model; prints one output "
        "per line, in input order. Stdin is read as a stream, so it may be any length: its lines go "
        "in requests of at most --inputs-per-request, with up to --concurrency requests in flight, "
        "and each output is printed as soon as it and those before it are answered. Blank (or "
        "all-whitespace) lines of stdin are not sent; each prints a blank output line, so output "
        "line N answers input line N. On a failure the outputs of the inputs before the failed one are "
        "printed, the error names its stdin line (or TEXT position) and the gRPC status, and the exit "
        "status is 1.",
    )
    p.add_argument("text", nargs="*", help="inputs (default: read stdin)")
    p.add_argument("--server", default="localhost:8001", help="HOST:PORT")
    p.add_argument("--model", help="model name (see --list)")
    p.add_argument("--list", action="store_true", help="list the served models and their limits")
    p.add_argument(
        "--stream",
        action="store_true",
        help="use GenerateStream: a single input's text is printed as it is generated; more inputs are "
        "printed line by line as each finishes, one request at a time (--concurrency does not apply)",
    )
    p.add_argument(
        "--inputs-per-request",
        "--batch-size",
        type=int,
        default=0,
        metavar="N",
        help="inputs per request; 0 = as many as the model allows (ListModels: max_inputs_per_request, "
        "and max_rows_per_request / --beam-size; 64 if the model is not listed), which is also the most "
        "used. When stdin is a terminal, 0 sends each line alone",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=4,
        metavar="K",
        help="requests in flight at once, fewer if together they would hold more than the model's "
        "max_rows_per_request rows (memory stays bounded: K x N inputs). A request refused with "
        "RESOURCE_EXHAUSTED (queue full) is resent after a backoff",
    )
    p.add_argument("--max-new-tokens", type=int, default=0, help="0 = model default")
    p.add_argument(
        "--beam-size", type=int, default=0, help="0 = the model's default (ListModels shows it); 1 = greedy"
    )
    p.add_argument(
        "--source-lang",
        default="",
        metavar="CODE",
        help="the inputs' language, for a multilingual model (ISO 639-1 such as en, or the model's own code; "
        "--list shows them); default: the model's",
    )
    p.add_argument(
        "--target-lang",
        default="",
        metavar="CODE",
        help="the language to translate to, for a multilingual model (a multilingual model needs one "
        "unless its bundle names a default)",
    )
    g = p.add_argument_group(
        "decoding options (CTranslate2's names; docs/DECODING.md has defaults and ranges)"
    )
    for flag, typ, hlp in (
        ("--length-penalty", float, "length penalty alpha (default: the rule's, gnmt 0.6, ctranslate2 1)"),
        ("--length-penalty-type", str, "gnmt (the paper's beam) | ctranslate2 (default: the model's)"),
        ("--repetition-penalty", float, "CTranslate2's repetition penalty (1 = off)"),
        ("--no-repeat-ngram-size", int, "forbid repeating any n-gram of this size (0 = off)"),
        ("--min-new-tokens", int, "generate at least this many tokens (after a prefix)"),
        ("--disable-unk", None, "never generate <unk>"),
        (
            "--sampling-topk",
            int,
            "sample from the k most likely tokens (1 = greedy, 0 = the whole vocabulary)",
        ),
        ("--sampling-topp", float, "sample from the smallest set of tokens with this much probability"),
        ("--sampling-temperature", float, "divide the logits by this before sampling"),
        ("--seed", int, "seed of the sampling: the same seed gives the same output, alone or batched"),
    ):
        if typ is None:
            g.add_argument(flag, action="store_true", default=None, help=hlp)
        else:
            g.add_argument(flag, type=typ, default=None, help=hlp)
    t = p.add_argument_group(
        "text handling (translation models; each on unless turned off: docs/DECODING.md)"
    )
    t.add_argument(
        "--no-protect-spans",
        action="store_true",
        help="let the model see placeholders, markup, URLs and e-mail addresses as they are, unprotected",
    )
    t.add_argument("--no-keep-numbers", action="store_true", help="do not protect numbers written as digits")
    t.add_argument(
        "--no-split-long",
        action="store_true",
        help="refuse inputs longer than the model reads instead of translating them piece by piece",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="deadline in seconds")
    p.add_argument("--token", default=None, help="bearer token, if the server requires one")
    p.add_argument("--tls-ca", default=None, help="PEM CA to verify a TLS server")
    p.set_defaults(func=cmd_client)

    from s2s import check_po, translate_catalog  # their parsers: no translate-toolkit needed for --help

    p = sub.add_parser("check-po", help=check_po.HELP, description=check_po.DESCRIPTION)
    check_po.add_arguments(p)
    p.set_defaults(func=cmd_check_po)

    p = sub.add_parser("translate", help=translate_catalog.HELP, description=translate_catalog.DESCRIPTION)
    translate_catalog.add_arguments(p)
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser(
        "models",
        help="list, load or unload models of a running server (its model repository API)",
        description="The KServe/Triton model repository API over gRPC: `s2s models list`, `s2s models "
        "load NAME`, `s2s models unload NAME` (load and unload need the server's "
        "--model-control-mode explicit). Exit status 1 names the gRPC status on a failure.",
    )
    from s2s.models_command import add_arguments as add_models_arguments

    add_models_arguments(p)
    p.set_defaults(func=cmd_models)

    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
