"""`s2s eval`: a checkpoint's metrics on one or more test sets, as JSON."""

from __future__ import annotations

import argparse
import json


def add_parser(sub) -> None:
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
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
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
