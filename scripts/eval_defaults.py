"""Evaluate the default checkpoints on their held-out test splits and write docs/experiments.md's table.

addition: exact match on the 10,000 held-out problems (PyTorch and the ONNX engine);
translate-en-ja: BLEU (character-tokenised) and chrF on the test split, next to a baseline that
copies the source, for the checkpoint and for the served ONNX bundle.

    .venv/bin/python scripts/eval_defaults.py
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import sacrebleu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.doc_section import write_section  # noqa: E402

N_TEST = 2000  # pairs scored per test split (the en-ja split has 9,715)


def main() -> int:
    import torch

    import engine
    from training import checkpoint, tasks
    from training.evaluate import evaluate

    torch.set_num_threads(2)
    rows = [
        "| model | test set | metric | PyTorch checkpoint | ONNX engine, greedy (served bundle) | copy-the-source baseline | epochs | training time |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for name in ("addition", "translate-en-ja"):
        ck_dir = ROOT / "checkpoints" / name
        ckpt = checkpoint.load(ck_dir)
        pairs = tasks.read_tsv(ck_dir / "test.tsv")
        if (
            ckpt.task.name == "translation" and len(pairs) > N_TEST
        ):  # the 2,000 of scripts/eval_en_ja.py: smallest sha256
            pairs = sorted(pairs, key=lambda p: hashlib.sha256(p[0].encode()).digest())[:N_TEST]
        srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
        translation = ckpt.task.name == "translation"
        m = evaluate(
            ckpt.model, ckpt.codec, pairs, batch_size=256, translation=translation, bleu_tokenize="char"
        )
        bundle = engine.load(ROOT / "models" / name / "1", device="cpu")
        hyps = [r.text for r in bundle.generate(srcs, beam_size=1, max_batch_size=64)]
        trained = json.loads((ck_dir / "metrics.json").read_text())
        epochs, minutes = trained.get("epoch"), (trained.get("time_s") or 0) / 60
        if translation:
            for metric, fn in (
                ("BLEU (char)", lambda h, refs=refs: sacrebleu.corpus_bleu(h, [refs], tokenize="char").score),
                ("chrF", lambda h, refs=refs: sacrebleu.corpus_chrf(h, [refs]).score),
            ):
                torch_score = m["bleu"] if metric.startswith("BLEU") else m["chrf"]
                rows.append(
                    f"| {name} | {len(pairs):,} held-out pairs | {metric} | {torch_score:.1f} | {fn(hyps):.1f} | {fn(srcs):.1f} "
                    f"| {epochs} | {minutes:.0f} min |"
                )
            rows.append(
                f"| {name} | {len(pairs):,} held-out pairs | exact match | {m['seq_acc']:.1%} | "
                f"{sum(h == r for h, r in zip(hyps, refs)) / len(refs):.1%} | {sum(s == r for s, r in zip(srcs, refs)) / len(refs):.1%} "
                f"| {epochs} | {minutes:.0f} min |"
            )
        else:
            acc = sum(h == r for h, r in zip(hyps, refs)) / len(refs)
            rows.append(
                f"| {name} | {len(pairs):,} held-out problems | exact match | {m['seq_acc']:.2%} | {acc:.2%} | – "
                f"| {epochs} | {minutes:.0f} min |"
            )
        print(rows[-1], flush=True)
    table = "\n".join(rows)
    write_section(ROOT / "docs" / "experiments.md", "default-models", table, title="# Experiments")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
