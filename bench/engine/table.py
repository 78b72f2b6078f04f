"""The engine grid's tables: one row per cell with its ratio to CTranslate2 and whose outputs it matches, and the
targets the engine is held to, read off the same cells."""

from __future__ import annotations

from bench.harness.results import Report, bound

# engine / CTranslate2 sequences/s on real inputs, same precision, per batch size (every search must meet it)
REAL_TARGETS = {"float32": {1: 0.9, 16: 1.0, 64: 1.0}, "int8": {1: 0.8, 16: 0.8, 64: 0.8}}


def _key(c, system: str, precision: str | None = None) -> tuple:
    return (c.inputs, c.beam, c.batch, system, precision or c.precision)


def grid_table(report: Report, cells: list, forced: bool) -> None:
    by = {_key(c, c.system): c for c in cells}
    t = report.table("grid", "inputs", "search", "precision", ("batch", "{}"), "system", ("sequences/s", "{:.1f}"),
                     ("tokens/s", "{:.0f}"), ("spread", "{:.0%}"), ("x CT2", "{:.2f}"), ("outputs =", "", "r"))  # fmt: skip
    for c in cells:
        base, ref, same = by.get(_key(c, "ct2")), by.get(_key(c, "engine", "float32")), None
        if forced and ref is not None and c.system != "ct2" and c is not ref:
            same = f"{sum(a == b for a, b in zip(c.ids, ref.ids))} of {len(c.ids)}"
        elif not forced and base is not None and c.system.startswith("engine") and c.system != "engine gnmt":
            cut = [r[: n + 50] for r, n in zip(base.ids, c.sources)]
            same = f"{sum(c.ids[i] == cut[i] for i in c.keep)} of {len(c.keep)}"
        rate = (c.tok_s / base.tok_s if forced else c.seq_s / base.seq_s) if base else None
        search = "greedy" if c.beam == 1 else f"beam {c.beam}"
        t.row(c.inputs, search, c.precision, c.batch, c.system, c.seq_s, c.tok_s, c.spread, rate, same)


def acceptance(cells: list, forced: bool) -> list[tuple]:
    """The engine's targets against this run's cells (a row only where its cells ran)."""
    by, out = {_key(c, c.system): c for c in cells}, []
    for c in cells:
        if c.system != "engine" or (forced and c.precision != "float32"):
            continue
        if forced:
            checks = [
                ("no cache", "engine no cache", 3.0, c.batch == 16 and c.inputs == "forced 64"),
                ("PyTorch eager", "torch", 1.0, c.batch in (1, 64)),
                ("CTranslate2", "ct2", 0.8, c.batch == 64),
            ]
        else:
            target = REAL_TARGETS.get(c.precision, {}).get(c.batch)
            checks = [(f"CTranslate2 {c.precision}", "ct2", target, target is not None)]
        for what, system, target, wanted in checks:
            if wanted and (other := by.get(_key(c, system))):
                r = c.tok_s / other.tok_s if forced else c.seq_s / other.seq_s
                search = "greedy" if c.beam == 1 else f"beam {c.beam}"
                out.append(bound(f"engine / {what}, {c.inputs}, {search}, batch {c.batch}", r, ">=", target))
    return out
