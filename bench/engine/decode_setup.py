"""What the two decode benchmarks (decode_grid, decode_real) share: their common flags, and the systems they
time loaded once: the checkpoint, the engine on its bundle (and an int8 bundle), CTranslate2 on the same weights
with its conversion checked against PyTorch greedy before any timing."""

from __future__ import annotations

import argparse
import datetime as dt
import random
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import CACHE, ROOT
from bench.common.bundles import cached_bundle, latest, rel, source_checkpoint
from bench.common.machine import machine
from bench.common.report import RESULTS
from export.quantize import CHOICES as QUANTIZE_CHOICES  # torch-free: names only


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        default="translate-en-ja",
        help="model name: checkpoint checkpoints/NAME, bundle models/NAME/<latest version> (default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint CTranslate2 converts (default: the one the bundle was exported from, found by its weights' sha256 under checkpoints/)",
    )
    p.add_argument(
        "--bundle", type=Path, help="float32 ONNX bundle folder (default: the latest models/MODEL/<version>)"
    )
    p.add_argument(
        "--data", type=Path, help="TSV of source<TAB>reference (default: checkpoints/MODEL/test.tsv)"
    )
    p.add_argument(
        "--batch-sizes", type=ints, default=[1, 16, 64], help="comma-separated batch sizes (default: 1,16,64)"
    )
    p.add_argument(
        "--int8",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also time the engine on an int8 bundle and CTranslate2 int8 (the first run exports the bundle, "
        "~30 s; default: on, off with --quick)",
    )
    p.add_argument(
        "--int8-variant",
        default="int8",
        choices=[c for c in QUANTIZE_CHOICES if c != "none"],
        help="which int8 export the engine's int8 rows use (export/quantize.py; int8 = the default variant; "
        "bench.engine.int8_variants compares them all)",
    )
    p.add_argument(
        "--verify-sentences",
        type=int,
        default=64,
        help="held-out inputs on which CTranslate2 greedy must equal PyTorch greedy (default: %(default)s)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads of every engine (ORT intra-op, torch, CT2 intra_threads; default: 1)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="seed of the choice of test sentences (default: %(default)s)"
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a tiny run for development and smoke tests (< 1 minute); writes no results unless --results",
    )
    p.add_argument(
        "--results",
        type=Path,
        default=None,
        help="folder of the results JSON (default: docs/bench, which also renders docs/BENCHMARKS.md; "
        "none with --quick)",
    )
    p.add_argument("--no-write", action="store_true", help="print the report only")


def finish(p: argparse.ArgumentParser, a: argparse.Namespace) -> argparse.Namespace:
    """Defaults that depend on other flags; errors for inputs that are missing."""
    if a.quick:
        a.verify_sentences = min(a.verify_sentences, 16)
    if a.int8 is None:
        a.int8 = not a.quick
    if a.results is None and not a.quick:
        a.results = RESULTS
    if a.no_write:
        a.results = None
    if a.bundle is None:
        a.bundle = latest(ROOT / "models", a.model)
        if a.bundle is None:
            p.error(f"no bundle under {ROOT / 'models' / a.model}: export one (s2s export) or pass --bundle")
    # CTranslate2 gets the weights the bundle was exported from; the held-out inputs stay the model's own
    a.checkpoint = a.checkpoint or source_checkpoint(a.bundle, a.model)
    a.data = a.data or ROOT / "checkpoints" / a.model / "test.tsv"
    return a


@dataclass
class Setup:
    """The loaded systems and inputs; ``info`` is what the report states about the run."""

    info: dict
    ck: object  # training.checkpoint.Checkpoint
    engine: object  # engine.Translator, float32
    engine_int8: object | None
    ct2: object  # bench.common.ct2.CT2Translator, float32
    ct2_int8: object | None
    verification: dict
    shuffled: list[tuple[str, str]]  # the held-out pairs, seeded shuffle
    budget: int


def load(args: argparse.Namespace, prog: str, argv: list[str] | None) -> Setup | int:
    """Everything both benchmarks time; exit status 2 when an input is missing."""
    info = {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "command": " ".join(
            [f"python -m {prog}", shlex.join(sys.argv[1:] if argv is None else argv)]
        ).strip(),
        "started": time.perf_counter(),
    }
    m = info["machine"]
    if m["loadavg"][0] > 0.5 * m["nproc"]:
        print(
            f"warning: load average {m['loadavg'][0]:.2f} on {m['nproc']} CPUs: timings will be disturbed by other work",
            file=sys.stderr,
        )

    import ctranslate2
    import onnxruntime
    import torch

    from engine import EngineOptions, Translator
    from export.ctranslate2 import CT2Translator, convert, verify, vocabulary
    from training import checkpoint as ckpt_io
    from training.tasks import read_tsv

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (e.g. when called twice in one process)
        pass
    info["versions"] = {
        "onnxruntime": onnxruntime.__version__,
        "torch": torch.__version__.split("+")[0],
        "ctranslate2": ctranslate2.__version__,
    }
    for what, path in (
        ("checkpoint", args.checkpoint / "config.json"),
        ("data", args.data),
        ("bundle", args.bundle / "config.json"),
    ):
        if not path.is_file():
            print(
                f"{prog}: {what} {path} is missing (train/export the model, or pass --{what})",
                file=sys.stderr,
            )
            return 2
    ck = ckpt_io.load(args.checkpoint)
    info.update(
        model=ck.config.to_dict(),
        model_name=args.model,
        checkpoint=rel(args.checkpoint),
        bundle=rel(args.bundle),
        data=rel(args.data),
    )
    pairs = read_tsv(args.data)
    order = list(range(len(pairs)))
    random.Random(args.seed).shuffle(order)
    shuffled = [pairs[i] for i in order]

    print(f"converting {args.checkpoint} for CTranslate2 ...", file=sys.stderr)
    ct2_dir = convert(args.checkpoint, CACHE / f"ct2-{args.checkpoint.name}")
    tokens = vocabulary(ck.codec.tokenizer)
    ct2 = CT2Translator(ct2_dir, tokens, "float32", args.threads)
    engine = Translator(args.bundle, EngineOptions(device="cpu", intra_op_threads=args.threads))
    if engine.config.source_checkpoint_sha256 != ckpt_io.weights_sha256(args.checkpoint):
        print(
            f"warning: {args.bundle} was not exported from {args.checkpoint} (weights differ)",
            file=sys.stderr,
        )
        info["bundle"] += " (NOT exported from this checkpoint's weights)"

    budget = min(ck.task.max_new_tokens, ck.config.max_len - 1)
    verification = verify(ck.model, ck.codec, ct2, [s for s, _ in shuffled[: args.verify_sentences]], budget)
    verification["budget"] = budget
    print(
        f"CT2 vs PyTorch greedy: {verification['identical']}/{verification['n']} identical, "
        f"max |d log p| {verification['max_abs_logprob_diff']:.1e}",
        file=sys.stderr,
    )

    engine_int8 = ct2_int8 = None
    if args.int8:
        folder_int8 = cached_bundle(args.checkpoint, args.model, args.int8_variant)
        info["bundle_int8"] = rel(folder_int8)
        engine_int8 = Translator(folder_int8, EngineOptions(device="cpu", intra_op_threads=args.threads))
        ct2_int8 = CT2Translator(ct2_dir, tokens, "int8", args.threads)
    return Setup(info, ck, engine, engine_int8, ct2, ct2_int8, verification, shuffled, budget)


def conversion_check(v: dict) -> str:
    """The conversion check as the reports state it."""
    return (
        "**Conversion check** (CTranslate2 via `TransformerSpec`, export/ctranslate2.py): "
        f"greedy tokens equal PyTorch's (`training.decoding.greedy`, stopping at EOS, budget {v['budget']}) on "
        f"{v['identical']}/{v['n']} held-out inputs ({100 * v['rate']:.1f}%); "
        f"teacher-forced log-probabilities of those outputs differ by at most {v['max_abs_logprob_diff']:.1e}."
    )


def verification_figures(v: dict) -> dict:
    return {
        "conversion_identical": v["identical"],
        "conversion_inputs": v["n"],
        "conversion_max_abs_logprob_diff": v["max_abs_logprob_diff"],
    }
