"""One results schema: a benchmark's tables (typed rows), its prose and named figures, as docs/bench/<name>.json.

A table keeps each cell as a value (numbers as numbers) with its column's header, alignment and format, so a reader
of the JSON (a test, a plot) gets the figures and ``bench.harness.render`` gets the text the table had. ``figures``
holds values a reader wants by name (not rendered). ``provenance`` is the line every results file states: when,
on what machine, by which command.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import RESULTS

_NUMBER = re.compile(r"^(\*\*)?(-?\d+)(?:\.(\d+))?(%|x|×)?(\*\*)?$")


def slug(header: str) -> str:
    """A column's key: its header in lower case, runs of other characters as one underscore."""
    return re.sub(r"[^0-9a-z]+", "_", header.lower().replace("µ", "u")).strip("_") or "column"


@dataclass
class Table:
    """Rows of one table: ``columns`` are dicts of key, header, align ("l", "r", "c") and fmt (a str.format
    template for numbers; strings are shown as they are, None as an empty cell)."""

    name: str
    columns: list[dict]
    rows: list[dict] = field(default_factory=list)

    def row(self, *values) -> None:
        if len(values) != len(self.columns):
            raise ValueError(f"table {self.name}: {len(values)} values for {len(self.columns)} columns")
        # NaN (a figure the run could not measure) is not JSON: kept as the text "n/a"
        nan = [isinstance(v, float) and v != v for v in values]
        self.rows.append({c["key"]: "n/a" if n else v for c, v, n in zip(self.columns, values, nan)})

    def markdown(self) -> str:
        bar = {"l": "---", "r": "---:", "c": ":-:"}
        lines = [
            "| " + " | ".join(c["header"] for c in self.columns) + " |",
            "|" + "|".join(bar[c["align"]] for c in self.columns) + "|",
        ]
        for r in self.rows:
            lines.append("| " + " | ".join(_cell(r.get(c["key"]), c["fmt"]) for c in self.columns) + " |")
        return "\n".join(lines)


def _cell(value, fmt: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return fmt.format(value) if fmt else str(value)


def columns(*specs) -> list[dict]:
    """Column dicts from (header, fmt[, align]) or header alone (text, left-aligned); numbers align right."""
    out, seen = [], set()
    for spec in specs:
        header, fmt, align = (spec, "", "") if isinstance(spec, str) else (*spec, "")[:3]
        key = slug(header)
        while key in seen:
            key += "_"
        seen.add(key)
        out.append({"key": key, "header": header, "align": align or ("r" if fmt else "l"), "fmt": fmt})
    return out


class Report:
    """The blocks of one results file, in order: headings, markdown text, tables."""

    def __init__(self, name: str, blocks: list[dict] | None = None, figures: dict | None = None):
        self.name, self.blocks, self.figures = name, blocks or [], figures or {}

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append({"heading": text, "level": level})

    def text(self, markdown: str, tight: bool = False) -> None:
        """Markdown prose; ``tight``: right under the previous block, no blank line between."""
        self.blocks.append({"text": markdown.strip("\n"), **({"tight": True} if tight else {})})

    def table(self, name: str, *specs) -> Table:
        t = Table(name, columns(*specs))
        self.blocks.append({"table": t})
        return t

    def acceptance(self, checks: list[tuple[str, float, str, bool]], name: str = "acceptance") -> None:
        """Targets against this run's figures: (figure, measured, target, met) rows (``bound``)."""
        if checks:
            t = self.table(name, "figure", ("measured", "{:.2f}"), "target", ("met", "", "c"))
            for what, value, target, met in checks:
                t.row(what, value, target, "**met**" if met else "**not met**")

    def markdown(self) -> str:
        out = ""
        for b in self.blocks:
            if "heading" in b:
                part = "#" * b["level"] + " " + b["heading"]
            else:
                part = b["table"].markdown() if "table" in b else b["text"]
            out += ("\n" if b.get("tight") else "\n\n") + part if out else part
        return out + "\n"

    def to_json(self) -> dict:
        blocks = []
        for b in self.blocks:
            if "table" in b:
                t = b["table"]
                b = {"table": t.name, "columns": t.columns, "rows": t.rows, **_tight(b)}
            blocks.append(b)
        return {"name": self.name, "figures": self.figures, "blocks": blocks}

    @classmethod
    def from_json(cls, data: dict) -> Report:
        blocks = [
            {"table": Table(b["table"], b["columns"], b["rows"]), **_tight(b)} if "table" in b else b
            for b in data["blocks"]
        ]
        return cls(data["name"], blocks, data.get("figures", {}))

    def save(self, folder: Path = RESULTS) -> Path:
        path = Path(folder) / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)  # a reader never sees half a file
        print(f"wrote {path}", file=sys.stderr)
        return path

    @classmethod
    def load(cls, path: Path) -> Report:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    def add_markdown(self, text: str, names: tuple[str, ...] = ()) -> None:
        """Blocks from markdown (headings, tables, prose between blank lines); its tables are named ``names`` in
        order (then t<k>), and a column gets numbers where every cell of it is one number of the same shape."""
        gap, para, rows, named = True, [], [], iter(names)

        def flush() -> None:
            nonlocal gap
            if para:
                self.text("\n".join(para), tight=not gap and bool(self.blocks))
                para.clear()
            if rows:
                k = sum("table" in b for b in self.blocks) + 1
                t = _parse_table(next(named, f"t{k}"), rows)
                self.blocks.append({"table": t, **({} if gap or not self.blocks else {"tight": True})})
                rows.clear()
            gap = False

        for line in text.strip("\n").splitlines():
            if not line.strip():
                flush()
                gap = True
            elif line.startswith("|"):
                if para:
                    flush()
                rows.append(line)
            elif line.startswith("#"):
                flush()
                level = len(line) - len(line.lstrip("#"))
                self.heading(line[level:].strip(), level)
            else:
                if rows:
                    flush()
                para.append(line)
        flush()


def bound(what: str, value: float, op: str, limit: float) -> tuple[str, float, str, bool]:
    """An acceptance row: a figure of this run against its target (``op``: "<=" or ">=")."""
    return what, value, f"{op} {limit:g}", value <= limit if op == "<=" else value >= limit


def _tight(b: dict) -> dict:
    return {"tight": True} if b.get("tight") else {}


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _parse_table(name: str, lines: list[str]) -> Table:
    """A markdown table, each column typed: numbers where every cell is one number of the same shape (decimals,
    a %/x/× suffix, bold); a percentage is kept as the fraction it shows (28% -> 0.28)."""
    header, bar, body = _split_row(lines[0]), _split_row(lines[1]), [_split_row(x) for x in lines[2:]]
    align = ["c" if b.startswith(":") and b.endswith(":") else "r" if b.endswith(":") else "l" for b in bar]
    specs = []
    for j, h in enumerate(header):
        matches = [_NUMBER.match(r[j]) if j < len(r) else None for r in body if j < len(r) and r[j]]
        shapes = {
            (len(m.group(3) or ""), m.group(4) or "", bool(m.group(1))) if _even(m) else None for m in matches
        }
        fmt = ""
        if shapes and None not in shapes and len(shapes) == 1:
            decimals, suffix, bold = shapes.pop()
            fmt = "{:.%d%%}" % decimals if suffix == "%" else "{:.%df}%s" % (decimals, suffix)
            fmt = f"**{fmt}**" if bold else fmt
        specs.append((h, fmt, align[j]))
    t = Table(name, columns(*specs))
    for r in body:
        values = []
        for c, cell in zip(t.columns, r + [""] * (len(t.columns) - len(r))):
            if cell and c["fmt"]:
                m = _NUMBER.match(cell)
                number = float(f"{m.group(2)}.{m.group(3)}") if m.group(3) else int(m.group(2))
                values.append(round(number / 100, 12) if m.group(4) == "%" else number)
            else:
                values.append(cell or None)
        t.row(*values)
    return t


def _even(m: re.Match | None) -> bool:
    """A number cell whose bold is on both sides or neither."""
    return m is not None and bool(m.group(1)) == bool(m.group(5))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def nproc() -> int:
    """Usable CPUs (the affinity mask, as `nproc`)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def provenance(started: float, load: float | None = None) -> str:
    """When, where and how a run was made: its date, the machine, the load average at its start, the command
    (as typed), its length. ``started``: time.time() at the start; ``load``: the 1-minute load average then."""
    load = os.getloadavg()[0] if load is None else load
    command = "python -m bench " + shlex.join(sys.argv[1:])
    return (
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}; machine: {nproc()} × {cpu_model()}, "
        f"load average at start {load:.2f}; command: `{command}`; {time.time() - started:.0f} s"
    )
