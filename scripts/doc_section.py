"""Rewrite one marked section of a Markdown report, leaving the rest of the file as it is.

The experiment and evaluation scripts each own the text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
of docs/experiments.md. (docs/BENCHMARKS.md is rendered whole: `python -m bench render`.)
"""

from __future__ import annotations

from pathlib import Path


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_section(path: Path, name: str, body: str, title: str = "# Experiments") -> None:
    """Replace section ``name`` of ``path`` with ``body`` (appending it, or creating the file, if absent)."""
    begin, end = markers(name)
    block = f"{begin}\n{body.strip(chr(10))}\n{end}"
    text = path.read_text(encoding="utf-8") if path.is_file() else f"{title}\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + f"\n\n{block}\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)  # a reader never sees half a report
