"""A benchmark's results as JSON: its tables (typed rows), its prose, and named figures.

A benchmark builds a ``Report`` and saves it as docs/bench/<name>.json; ``bench.render`` turns every such file
(and the hand-written notes beside them) into docs/BENCHMARKS.md. A table keeps each cell as a value (numbers as
numbers) with its column's header, alignment and format, so a reader of the JSON (a test, a plot) gets the
figures, and the renderer gets the text the table had. ``figures`` holds values a test or a reader wants by name
(not rendered).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from bench import ROOT

RESULTS = ROOT / "docs" / "bench"  # committed: the figures docs/BENCHMARKS.md is rendered from

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
        # NaN (a figure the run could not measure) is not JSON: it is kept as the text "n/a"
        self.rows.append(
            {c["key"]: "n/a" if isinstance(v, float) and v != v else v for c, v in zip(self.columns, values)}
        )

    def markdown(self) -> str:
        bar = {"l": "---", "r": "---:", "c": ":-:"}
        lines = [
            "| " + " | ".join(c["header"] for c in self.columns) + " |",
            "|" + "|".join(bar[c["align"]] for c in self.columns) + "|",
        ]
        for r in self.rows:
            cells = [_cell(r.get(c["key"]), c["fmt"]) for c in self.columns]
            lines.append("| " + " | ".join(cells) + " |")
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

    def tables(self) -> dict[str, Table]:
        return {b["table"].name: b["table"] for b in self.blocks if "table" in b}

    def markdown(self) -> str:
        out = ""
        for b in self.blocks:
            if "heading" in b:
                part = "#" * b["level"] + " " + b["heading"]
            elif "table" in b:
                part = b["table"].markdown()
            else:
                part = b["text"]
            out += ("\n" if b.get("tight") else "\n\n") + part if out else part
        return out + "\n"

    # ---- JSON
    def to_json(self) -> dict:
        blocks = [
            {
                "table": b["table"].name,
                "columns": b["table"].columns,
                "rows": b["table"].rows,
                **({"tight": True} if b.get("tight") else {}),
            }
            if "table" in b
            else b
            for b in self.blocks
        ]
        return {"name": self.name, "figures": self.figures, "blocks": blocks}

    @classmethod
    def from_json(cls, data: dict) -> Report:
        blocks = []
        for b in data["blocks"]:
            if "table" in b:
                blocks.append(
                    {
                        "table": Table(b["table"], b["columns"], b["rows"]),
                        **({"tight": True} if b.get("tight") else {}),
                    }
                )
            else:
                blocks.append(b)
        return cls(data["name"], blocks, data.get("figures", {}))

    def save(self, folder: Path = RESULTS) -> Path:
        path = Path(folder) / f"{self.name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        tmp.replace(path)  # a reader never sees half a file
        return path

    @classmethod
    def load(cls, path: Path) -> Report:
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    # ---- from markdown
    def add_markdown(self, text: str, names: tuple[str, ...] = ()) -> None:
        """Blocks from markdown (headings, tables, prose between blank lines); its tables are named ``names`` in
        order (then t<k>), and a column gets numbers where every cell of it is one number of the same shape
        (decimals, a %/x/× suffix)."""

        def count() -> int:
            return sum("table" in b for b in self.blocks)

        gap, para, rows, before = True, [], [], count()

        def flush() -> None:
            nonlocal gap
            if para:
                self.text("\n".join(para), tight=not gap and bool(self.blocks))
                para.clear()
                gap = False
            if rows:
                k, n = count(), count() - before
                self.blocks.append(
                    {
                        "table": _parse_table(names[n] if n < len(names) else f"t{k + 1}", rows),
                        **({} if gap or not self.blocks else {"tight": True}),
                    }
                )
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
                self.blocks.append({"heading": line[level:].strip(), "level": level})
                gap = False
            else:
                if rows:
                    flush()
                para.append(line)
        flush()


def _shape(m: re.Match) -> tuple[int, str, bool] | None:
    """A number cell's decimals, suffix and bold (None where the bold is not on both sides)."""
    if bool(m.group(1)) != bool(m.group(5)):
        return None
    return len(m.group(3) or ""), m.group(4) or "", bool(m.group(1))


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _parse_table(name: str, lines: list[str]) -> Table:
    header, bar, body = _split_row(lines[0]), _split_row(lines[1]), [_split_row(x) for x in lines[2:]]
    align = ["c" if b.startswith(":") and b.endswith(":") else "r" if b.endswith(":") else "l" for b in bar]
    specs = []
    for j, h in enumerate(header):
        cells = [r[j] if j < len(r) else "" for r in body]
        shapes = {_shape(m) if (m := _NUMBER.match(c)) else None for c in cells if c}
        fmt = ""
        if shapes and None not in shapes and len(shapes) == 1:
            decimals, suffix, bold = shapes.pop()
            # a percentage is kept as the fraction it shows (28% -> 0.28), as a benchmark records it
            fmt = "{:.%d%%}" % decimals if suffix == "%" else "{:.%df}%s" % (decimals, suffix)
            fmt = f"**{fmt}**" if bold else fmt
        specs.append((h, fmt, align[j]))
    t = Table(name, columns(*specs))
    for r in body:
        values = []
        for c, cell in zip(t.columns, r + [""] * (len(t.columns) - len(r))):
            if not cell:
                values.append(None)
            elif c["fmt"]:
                m = _NUMBER.match(cell)
                number = float(f"{m.group(2)}.{m.group(3)}") if m.group(3) else int(m.group(2))
                values.append(round(number / 100, 12) if m.group(4) == "%" else number)
            else:
                values.append(cell)
        t.row(*values)
    return t


def publish(
    report: Report | str,
    results: Path | None,
    name: str = "",
    figures: dict | None = None,
    names: tuple[str, ...] = (),
) -> Report:
    """One benchmark's results, saved as ``results``/<name>.json (None: not saved); docs/BENCHMARKS.md is rendered
    again when ``results`` is the committed folder. ``report``: a Report, or markdown whose tables are named
    ``names`` in order."""
    if isinstance(report, str):
        text, report = report, Report(name)
        report.add_markdown(text, names)
    report.figures.update(figures or {})
    if results is not None:
        print(f"wrote {report.save(results)}", file=sys.stderr)
        if Path(results).resolve() == RESULTS.resolve():
            from bench import render

            print(f"wrote {render.write()}", file=sys.stderr)
    return report
