"""Write docs/BENCHMARKS.md from docs/bench/: each benchmark's results (<name>.json, written by the benchmark)
and the hand-written notes between them (<name>.md), in the order of ``PARTS``; a results file not listed
there comes at the end, so a new benchmark is never left out. Each part gets an anchor: BENCHMARKS.md#<name>.

    python -m bench.render [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench import ROOT
from bench.common.report import RESULTS, Report

DOC = ROOT / "docs" / "BENCHMARKS.md"
PARTS = (
    "intro.md",
    "decode-grid",
    "decode-real",
    "marian-ct2",
    "marian-ct2-notes.md",
    "nllb-ct2",
    "nllb-ct2-notes.md",
    "beam-int8-notes.md",
    "int8-variants",
    "threads",
    "profile-step",
    "profile-step-notes.md",
    "step-cost",
    "serve",
    "options",
    "options-ab",
    "serve-cost-notes.md",
    "serve-cost",
    "model-versions",
    "serve-variants",
    "serve-commits",
    "serve-peers",
    "serve-peers-notes.md",
    "grpc-floor",
    "grpc-floor-notes.md",
    "http-deadlines",
    "gpu-check",
    "design-choices.md",
    "addition-exhaustive",
    "addition-exhaustive-notes.md",
)
HEADER = (
    "# Benchmarks\n\n<!-- Written by `python -m bench.render` from docs/bench/ (figures: <name>.json, written by "
    "each benchmark; notes: <name>.md). Edit those, not this file. -->\n"
)


def render(results: Path = RESULTS) -> str:
    listed = [p if p.endswith(".md") else f"{p}.json" for p in PARTS]
    extra = sorted(p.name for p in results.glob("*.json") if p.name not in listed)
    parts = []
    for name in listed + extra:
        path = results / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8") if name.endswith(".md") else Report.load(path).markdown()
        # An anchor per part, so that docs/BENCHMARKS.md#<name> links to it whatever its heading says.
        anchor = "" if name == "intro.md" else f'<a id="{Path(name).stem}"></a>\n\n'
        parts.append(anchor + text.strip("\n"))
    return HEADER + "\n" + "\n\n".join(parts) + "\n"


def write(results: Path = RESULTS, doc: Path = DOC) -> Path:
    doc = Path(doc)
    tmp = doc.with_suffix(".md.tmp")
    tmp.write_text(render(results), encoding="utf-8")
    tmp.replace(doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, default=RESULTS, help="folder of the results and notes")
    p.add_argument("--output", type=Path, default=DOC)
    p.add_argument(
        "--check", action="store_true", help="exit 1 if --output is not what the results render to"
    )
    args = p.parse_args(argv)
    if args.check:
        same = args.output.is_file() and args.output.read_text(encoding="utf-8") == render(args.results)
        print(
            "up to date" if same else f"{args.output} differs from what {args.results} renders to",
            file=sys.stderr,
        )
        return 0 if same else 1
    print(f"wrote {write(args.results, args.output)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
