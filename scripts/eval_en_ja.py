"""Score en->ja bundles on the two test sets of docs/experiments.md: the hash split and the unseen projects.

    .venv/bin/python scripts/eval_en_ja.py                       # the served bundle, greedy and beam 4
    .venv/bin/python scripts/eval_en_ja.py --bundle old=/tmp/old/1 --bundle new=models/translate-en-ja/1
    .venv/bin/python scripts/eval_en_ja.py --plan served --bundle "v1, served=models/translate-en-ja/1"
    .venv/bin/python scripts/eval_en_ja.py --rule bundle --bundle "v2=models/translate-en-ja/2"  # the served default

* **hash split**: 2,000 pairs of the corpus's test split (``training.tasks.split_of``: a hash of the
  English string, so no model trained on this corpus, old or new, saw them), the 2,000 with the
  smallest sha256 of the English (the file is sorted by code point; its head is all "A...").
* **unseen projects** (leave-projects-out): ``data/en-ja/heldout-projects.tsv``, strings of whole
  projects that no training file draws on (``training.corpus_en_ja.HELDOUT_PROJECTS``), none of
  whose English strings occurs in a training file. This is the realistic measure: users send
  strings of software the model has never seen.
* **plain sentences**: ``data/en-ja/plain-sentences.tsv``, 50 everyday sentences (not UI strings) with
  references written for this project: what a new user tries first. Their outputs at the served default
  are kept too, one column per bundle, in docs/experiments.md#en-ja-plain.

Each bundle is decoded by the ONNX engine (what is served), greedy and beam 4 (α 0.6, or with ``--rule bundle``
the bundle's own length rule, what a request without options gets), the texts read as sent
or, with ``--plan served``, through the server's default text plan (spans masked and restored), and scored
with sacrebleu's chrF and character BLEU, next to copying the source. Results accumulate in
``docs/eval_en_ja.json`` (one entry per label), so a bundle that no longer exists (the previous
default model) keeps its row; the table in docs/experiments.md is rebuilt from that file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import sacrebleu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.doc_section import write_section  # noqa: E402

CORPUS = (ROOT / "data/en-ja/ui-strings.tsv", ROOT / "data/en-ja/ui-strings-copyleft.tsv")
HELDOUT = ROOT / "data/en-ja/heldout-projects.tsv"
PLAIN = ROOT / "data/en-ja/plain-sentences.tsv"
RESULTS = ROOT / "docs/eval_en_ja.json"
N_HASH = 2000


def test_sets() -> dict[str, list[tuple[str, str]]]:
    from training import tasks

    test = tasks.translation(*CORPUS).test
    test = sorted(test, key=lambda p: hashlib.sha256(p[0].encode()).digest())[:N_HASH]
    return {
        "hash split": test,
        "unseen projects": tasks.read_tsv(HELDOUT),
        "plain sentences": tasks.read_tsv(PLAIN),
    }


def scores(hyps: list[str], refs: list[str]) -> dict[str, float]:
    return {
        "chrf": round(sacrebleu.corpus_chrf(hyps, [refs]).score, 2),
        "bleu_char": round(sacrebleu.corpus_bleu(hyps, [refs], tokenize="char").score, 2),
        "exact": round(sum(h == r for h, r in zip(hyps, refs)) / len(refs), 4),
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--bundle",
        action="append",
        default=[],
        metavar="LABEL=DIR",
        help="a bundle to score under LABEL (default: served=models/translate-en-ja/1); repeatable",
    )
    ap.add_argument("--beams", default="1,4", help="beam sizes to decode with (1 = greedy)")
    ap.add_argument(
        "--sets",
        default="hash split,unseen projects,plain sentences",
        help="which test sets to decode (comma-separated); the others keep their stored figures",
    )
    ap.add_argument(
        "--plan",
        choices=("as-sent", "served"),
        default="as-sent",
        help="as-sent: the engine reads each text as it is (the table's rows so far); served: through the "
        "server's default text plan (spans masked and restored, long inputs split), as s2s serve answers",
    )
    ap.add_argument(
        "--rule",
        choices=("gnmt", "bundle"),
        default="gnmt",
        help="the beam's length rule: gnmt = the paper's alpha 0.6 whatever the bundle serves (the table's rows so "
        "far); bundle = the bundle's own rule and alpha, what a request without options gets (the served default)",
    )
    return ap


def main() -> int:
    args = parser().parse_args()
    wanted = {name.strip() for name in args.sets.split(",")}
    sets = {name: pairs for name, pairs in test_sets().items() if name in wanted}
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results.setdefault("copy the source", {}).update(
        {name: {"1": scores([s for s, _ in pairs], [t for _, t in pairs])} for name, pairs in sets.items()}
    )
    for spec in args.bundle or ["served=models/translate-en-ja/1"]:
        label, _, path = spec.partition("=")
        score_bundle(args, label, path, sets, results.setdefault(label, {}))
    RESULTS.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    table = eval_table(results)
    write_section(ROOT / "docs" / "experiments.md", "en-ja-eval", table, title="# Experiments")
    write_section(
        ROOT / "docs" / "experiments.md", "en-ja-plain", plain_table(results), title="# Experiments"
    )
    print(table)
    return 0


def score_bundle(args, label: str, path: str, sets: dict[str, list[tuple[str, str]]], entry: dict) -> None:
    """One bundle decoded on every set at every beam (as --plan and --rule say), its scores into ``entry``."""
    import engine
    from server.models.in_process import served_texts

    eng = engine.load(ROOT / path if not Path(path).is_absolute() else path, threads=1, device="cpu")
    entry["bundle"] = str(path)
    entry["plan"] = args.plan
    entry["rule"] = args.rule
    for name, pairs in sets.items():
        srcs, refs = [s for s, _ in pairs], [t for _, t in pairs]
        for beam in (int(b) for b in args.beams.split(",")):
            t0 = time.perf_counter()
            # beam 4 with the paper's alpha 0.6 whatever the bundle serves: the table's rows stay comparable
            rule = {"length_penalty_type": "gnmt"} if beam > 1 and args.rule == "gnmt" else {}
            if args.plan == "served":
                hyps = served_texts(eng, srcs, 64 * beam, beam_size=beam, **rule)
            else:
                hyps = [r.text for r in eng.generate(srcs, beam_size=beam, max_batch_size=64 * beam, **rule)]
            entry.setdefault(name, {})[str(beam)] = {
                **scores(hyps, refs),
                "seconds": round(time.perf_counter() - t0, 1),
            }
            if name == "plain sentences":
                entry.setdefault("plain outputs", {})[str(beam)] = hyps
            print(f"{label:>16} {name:>16} beam {beam}: {entry[name][str(beam)]}", flush=True)


def eval_table(results: dict) -> str:
    """docs/experiments.md's en-ja-eval section: what the sets are, and a row per label and decoding."""
    rows = [
        "| model | decoding | hash split chrF | hash split BLEU (char) | unseen projects chrF | unseen projects BLEU (char) "
        "| plain sentences chrF |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for label, entry in results.items():
        for beam in ("1", "4"):
            if beam not in entry.get("hash split", {}):
                continue
            h, u = entry["hash split"][beam], entry["unseen projects"][beam]
            plain = entry.get("plain sentences", {}).get(beam)
            beam4 = "beam 4, the bundle's length rule" if entry.get("rule") == "bundle" else "beam 4, α 0.6"
            decoding = "–" if label == "copy the source" else ("greedy" if beam == "1" else beam4)
            if entry.get("plan") == "served":
                decoding += ", served text plan"
            rows.append(
                f"| {label} | {decoding} | {h['chrf']:.1f} | {h['bleu_char']:.1f} | {u['chrf']:.1f} | {u['bleu_char']:.1f} "
                f"| {'–' if plain is None else format(plain['chrf'], '.1f')} |"
            )
    n = {name: len(p) for name, p in test_sets().items()}
    return (
        f"Hash split: {n['hash split']:,} pairs of the corpus's test split; unseen projects: {n['unseen projects']:,} "
        f"pairs of `data/en-ja/heldout-projects.tsv`; plain sentences: the {n['plain sentences']} of "
        "`data/en-ja/plain-sentences.tsv`. Decoded by the ONNX engine; `python scripts/eval_en_ja.py`.\n\n"
        + "\n".join(rows)
    )


def plain_table(results: dict) -> str:
    """The plain sentences, their references and each bundle's beam-4 outputs, side by side."""
    pairs = test_sets()["plain sentences"]
    labels = [label for label, entry in results.items() if "4" in entry.get("plain outputs", {})]
    rows = [
        "| English | reference | " + " | ".join(labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for i, (src, ref) in enumerate(pairs):
        outs = [results[label]["plain outputs"]["4"][i].replace("|", "\\|") for label in labels]
        rows.append(f"| {src} | {ref} | " + " | ".join(outs) + " |")
    return (
        "What a new user sees: everyday sentences, not UI strings, each bundle at beam 4 (α 0.6); "
        '`python scripts/eval_en_ja.py --sets "plain sentences"`.\n\n' + "\n".join(rows)
    )


if __name__ == "__main__":
    sys.exit(main())
