"""docs/BENCHMARKS.md from docs/bench/: each benchmark's results (<name>.json) and the hand-written notes between
them (<name>.md), in the order of ``PARTS``; a results file not listed there comes at the end, so a new benchmark
is never left out. Each part gets an anchor (BENCHMARKS.md#<name>) and says where its figures come from: the
maintained command that writes them again, or the study note (docs/studies/) and the commit whose script made them.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench import RESULTS, ROOT
from bench.harness.results import Report

DOC = ROOT / "docs" / "BENCHMARKS.md"
STUDY_COMMIT = "c358c12"  # the last commit with every study's script in bench/: `git show c358c12:<script>`
# Results `python -m bench` writes: the command that writes each again.
MAINTAINED = {
    "decode-grid": "python -m bench engine --inputs forced",
    "decode-real": "python -m bench engine --inputs real",
    "marian-ct2": "python -m bench engine --model-family marian",
    "t5-ct2": "python -m bench engine --model-family t5",
    "profile-step": "python -m bench profile",
    "serve": "python -m bench serve --only grid",
    "options": "python -m bench serve --only options",
    "options-ab": "python -m bench serve --only options --option-families none --baseline REF",
    "serve-cost": "python -m bench serve --only cost",
    "fairness": "python -m bench serve --only fairness --fairness-serve 'one engine core=--instances 1'",
    "serve-peers": "python -m bench peers",
    "addition-exhaustive": "python -m bench quality --sets addition",
    "protected-spans": "python -m bench quality --sets spans",
    "gpu-check": "make gpu-check (scripts/gpu_check.py --write)",
}
# Answered studies: results whose script left the tree -> (the note in docs/studies/, the script at STUDY_COMMIT).
STUDIES = {
    "served-default": ("served-default-search.md", "bench/engine/served_default.py"),
    "nllb-ct2": ("nllb-600m.md", "bench/engine/nllb_ct2.py"),
    "int8-variants": ("int8-variants.md", "bench/engine/int8_variants.py"),
    "threads": ("intra-op-threads.md", "bench/engine/threads.py"),
    "step-cost": ("step-cost.md", "bench/engine/step_cost.py"),
    "model-versions": ("model-versions.md", "bench/serving/model_versions.py"),
    "serve-variants": ("serve-variants.md", "bench/serving/variants.py"),
    "serve-commits": ("serve-variants.md", "bench/serving/variants.py"),
    "grpc-floor": ("grpc-floor.md", "bench/serving/grpc_floor.py"),
    "http-deadlines": ("http-deadlines.md", "bench/serving/http_deadlines.py"),
}
PARTS = (
    "intro.md",
    "decode-grid",
    "decode-real",
    "served-default",
    "marian-ct2",
    "marian-ct2-notes.md",
    "t5-ct2",
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
    "fairness",
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
    "# Benchmarks\n\n<!-- Written by `python -m bench render` from docs/bench/ (figures: <name>.json, written by "
    "each benchmark; notes: <name>.md). Edit those, not this file. -->\n"
)


def source(name: str) -> str:
    """The line that says where a part's figures come from."""
    if name in STUDIES:
        note, script = STUDIES[name]
        return (
            f"*A study, answered:* [docs/studies/{note}](studies/{note}); its script left the tree "
            f"(`git show {STUDY_COMMIT}:{script}`)."
        )
    return f"*Rerun with* `{MAINTAINED[name]}`." if name in MAINTAINED else ""


def render(results: Path = RESULTS) -> str:
    listed = [p if p.endswith(".md") else f"{p}.json" for p in PARTS]
    extra = sorted(p.name for p in results.glob("*.json") if p.name not in listed)
    parts = []
    for name in listed + extra:
        path = results / name
        if not path.is_file():
            continue
        if name.endswith(".md"):
            text = path.read_text(encoding="utf-8").strip("\n")
        else:
            text = Report.load(path).markdown().strip("\n")
            if line := source(path.stem):
                head, _, rest = text.partition("\n\n")  # under the part's heading
                text = f"{head}\n\n{line}\n\n{rest}" if rest else f"{head}\n\n{line}"
        # An anchor per part, so that docs/BENCHMARKS.md#<name> links to it whatever its heading says.
        anchor = "" if name == "intro.md" else f'<a id="{Path(name).stem}"></a>\n\n'
        parts.append(anchor + text)
    return HEADER + "\n" + "\n\n".join(parts) + "\n"


def write(results: Path = RESULTS, doc: Path = DOC) -> Path:
    doc = Path(doc)
    tmp = doc.with_suffix(".md.tmp")
    tmp.write_text(render(results), encoding="utf-8")
    tmp.replace(doc)
    return doc


def check(results: Path = RESULTS, doc: Path = DOC) -> list[str]:
    """What is wrong with the committed results and the rendered file (empty: nothing): a results file that does
    not parse back into itself, a study without its note, a doc that is not what the results render to."""
    problems = []
    for path in sorted(Path(results).glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if Report.from_json(data).to_json() != data:
            problems.append(f"{path.name} does not parse back into itself")
    for name, (note, _) in STUDIES.items():
        if (results / f"{name}.json").is_file() and not (ROOT / "docs" / "studies" / note).is_file():
            problems.append(f"{name}.json names the study docs/studies/{note}, which is missing")
    if not (doc.is_file() and doc.read_text(encoding="utf-8") == render(results)):
        problems.append(f"{doc} is not what {results} renders to: run `python -m bench render`")
    return problems
