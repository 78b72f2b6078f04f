"""quality: what the answers are worth, not how fast they come.

spans: are placeholders, markup, URLs and numbers kept, and what does it cost in chrF, through one `s2s serve`
(seq2seq.v1, the served default search). Sets from data/en-ja/heldout-projects.tsv (strings of projects the model
never saw): the held-out strings with spans or numbers (contract/spans.py); held-out strings without any, given
markup, a URL, an e-mail address or a named placeholder on both sides; inputs of ~4,000 characters joined from
held-out strings. Each set as by default and with protect_spans, keep_numbers and split_long off; then, in process,
what the model reads (the spans as they are, the server's mix, every span masked), each with the same repair.

addition: the addition model on every problem it can be asked, all 10^6 pairs a+b with a, b < 1000, through the
engine (the graphs the server runs), greedy and with the served default; a wrong answer fails the run.

Writes protected-spans.json and addition-exhaustive.json.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench import ROOT
from bench.harness.inputs import words
from bench.harness.results import Report, provenance

JA = "translate-en-ja"
QUICK = dict(added=20, long=1, limit=2000)
DECORATIONS = (  # (source, reference) given the same span on both sides
    lambda s, i: f"<b>{s}</b>",
    lambda s, i: f"{s}: https://example.org/docs/page-{i}.html",
    lambda s, i: f"{s} (help-{i}@example.org)",
    lambda s, i: f"{{app_name}}: {s}",
    lambda s, i: f'<a href="https://example.org/{i}">{s}</a>',
)


def add_arguments(p) -> None:
    a = p.add_argument
    a("--sets", type=words, default=["spans", "addition"], help="spans and/or addition")
    a("--added", type=int, default=300, help="spans: held-out strings given a span on both sides")
    a("--long", type=int, default=20, help="spans: inputs of ~4,000 characters")
    a("--bundle", type=Path, action="append", help="addition: a bundle (repeatable; default: the served one)")
    a("--limit", type=int, default=0, help="addition: the first N pairs only (0: all 10^6)")


def run(args) -> list[Report]:
    out = []
    if "spans" in args.sets:
        out.append(spans(args))
    if "addition" in args.sets:
        out.append(addition(args))
    return out


def sets(rows: list[tuple[str, str]], n_added: int, n_long: int) -> dict[str, list[tuple[str, str]]]:
    from contract.spans import find_spans

    plain = [(s, r) for s, r in rows if not find_spans(s)]
    added = [
        (d(s, i), d(r, i))
        for i, (s, r) in enumerate(plain[:n_added])
        for d in [DECORATIONS[i % len(DECORATIONS)]]
    ]
    longs, cur_s, cur_r = [], [], []
    for s, r in plain[n_added:]:
        if sum(len(x) + 1 for x in cur_s) + len(s) > 4000:
            longs.append((" ".join(cur_s), "".join(cur_r)))
            cur_s, cur_r = [], []
            if len(longs) == n_long:
                break
        cur_s.append(s if s.rstrip()[-1:] in ".!?:" else s + ".")
        cur_r.append(r)
    return {
        "held-out strings with spans or numbers": [(s, r) for s, r in rows if find_spans(s)],
        "held-out strings, markup/URL/e-mail/{name} added": added,
        "inputs of ~4,000 characters": longs,
    }


def served(client, texts: list[str], protect: bool) -> list[str | None]:
    """Each text's output through the server; None where it was refused."""
    import grpc

    kw = {} if protect else {"protect_spans": False, "keep_numbers": False, "split_long": False}
    out: list[str | None] = []
    for i in range(0, len(texts), 16):
        try:
            out += client.generate(JA, texts[i : i + 16], **kw)
        except grpc.RpcError:  # refused whole: each alone, to count what is refused
            for t in texts[i : i + 16]:
                try:
                    out += client.generate(JA, [t], **kw)
                except grpc.RpcError:
                    out.append(None)
    return out


def chrf(outputs: list[str | None], refs: list[str]) -> float:
    import sacrebleu

    return sacrebleu.corpus_chrf([o or "" for o in outputs], [refs]).score


def spans(args) -> Report:
    from bench.harness.inputs import HELDOUT, pairs
    from bench.harness.server import s2s_serve
    from contract.spans import check
    from s2s.seq2seq_client import Seq2SeqClient

    started = time.time()
    data = sets(pairs(HELDOUT), args.added, args.long)
    data = {k: v[: args.added] for k, v in data.items()} if args.quick else data  # a few strings a set
    report = Report("protected-spans")
    report.heading("Protected spans and long inputs")
    report.text(
        provenance(started)
        + "\n\nThrough one `s2s serve` (seq2seq.v1, the served default: beam 4), each set sent as by default and with `protect_spans`, `keep_numbers` and `split_long` off. *Kept*: the output has every span of the source exactly as often (`contract.spans.check`: placeholders, tags, entities, URLs, e-mail addresses; each number at least as often). chrF against the held-out references (sacrebleu)."
    )
    t = report.table(
        "served",
        "set",
        ("strings", "{:d}"),
        "protection",
        ("kept", "{:d}"),
        ("kept %", "{:.1f}"),
        ("refused", "{:d}"),
        ("chrF", "{:.2f}"),
        ("pieces per input", "{:.1f}"),
    )
    with (
        s2s_serve(ROOT / "models", "--models", JA, "--log-level", "WARNING", model=JA) as server,
        Seq2SeqClient(server.address, timeout=600) as client,
    ):
        for name, items in data.items():
            src, ref = [s for s, _ in items], [r for _, r in items]
            for protect in (True, False):
                outs = served(client, src, protect)
                kept, refused = (
                    sum(o is not None and check(s, o).ok for s, o in zip(src, outs)),
                    sum(o is None for o in outs),
                )
                # one request each: 16 such inputs at beam 4 would be more rows than a request may hold
                pieces = (
                    statistics.mean(client.generate_full(JA, [s]).outputs[0].pieces for s in src)
                    if name.startswith("inputs") and protect
                    else None
                )
                label = "on (default)" if protect else "off"
                t.row(name, len(src), label, kept, 100 * kept / len(src), refused, chrf(outs, ref), pieces)
                report.figures[f"{name}, {label}"] = {"kept": kept, "n": len(src), "chrf": chrf(outs, ref)}
    report.text(
        "The ~4,000-character inputs are held-out strings joined into paragraphs, each answered whole from its pieces; their chrF is against the references joined likewise. The guarantee does not rest on the model: tests/test_spans.py feeds the repair outputs that lose, double, reorder, misspell and invent spans, and tests/test_protected_spans.py serves a model that never writes one."
    )
    report.text(
        "What the model reads, in process (`engine.load`, beam 4) on the held-out strings with spans or numbers. *Copied*: kept before any repair."
    )
    t = report.table(
        "reads", "what the model reads", ("copied", "{:d}"), ("kept", "{:d}"), ("chrF", "{:.2f}")
    )
    for row in reads(data["held-out strings with spans or numbers"]):
        t.row(*row)
    return report


def reads(rows: list[tuple[str, str]]) -> list[tuple[str, int, int, float]]:
    """(what the model reads, kept without repair, kept, chrF), in process on the served version."""
    import engine
    from bench.harness.inputs import latest
    from contract.masking import as_is, mask, restore
    from contract.spans import check

    src, ref = [s for s, _ in rows], [r for _, r in rows]
    tr = engine.load(latest(ROOT / "models", JA), threads=1)
    raw = [r.text for r in tr.generate(src)]
    kept = sum(check(s, o).ok for s, o in zip(src, raw))
    out = [("the source as it is, no repair", kept, kept, chrf(raw, ref))]
    for name, keep in (
        ("spans as they are, repaired", lambda s: True),
        ("the server's mix, repaired", as_is),
        ("every span masked as {N}, repaired", lambda s: False),
    ):
        ms = [mask(s, True, keep) for s in src]
        got = [r.text for r in tr.generate([m.text or "x" for m in ms])]
        fixed = [restore(m, o) for m, o in zip(ms, got)]
        copied = sum(
            check(s, unmasked(m, g) if m.changed else (g if m.text else s)).ok
            for s, m, g in zip(src, ms, got)
        )
        out.append((name, copied, sum(check(s, o).ok for s, o in zip(src, fixed)), chrf(fixed, ref)))
    return out


def unmasked(m, output: str) -> str:
    """The model's output with its placeholders replaced by their spans, nothing repaired."""
    for i in sorted(range(len(m.marks)), key=lambda i: -len(m.marks[i])):
        output = output.replace(m.marks[i], m.spans[i].text)
    return m.head + output + m.tail if m.text else m.source


def addition(args) -> Report:
    """Every pair through the engine, greedy and the served default (one pass when that is greedy too)."""
    import engine
    from bench.harness.inputs import latest, log, rel

    started, limit = time.time(), args.limit
    problems = [(f"{a}+{b}", str(a + b)) for a in range(1000) for b in range(1000)][: limit or None]
    report = Report("addition-exhaustive")
    report.heading("The addition model on every 3-digit pair")
    t = report.table(
        "pairs", "bundle", "greedy", "served default", "first wrong answers", ("time", "{:.0f} s")
    )
    for folder in args.bundle or [latest(ROOT / "models", "addition")]:
        eng, checked = engine.load(folder, threads=1, device="cpu"), {}
        served = eng.config.task.beam_size or 1
        for beam in sorted({1, served}):
            wrong, c = [], time.perf_counter()
            for i in range(0, len(problems), 20_000):
                part = problems[i : i + 20_000]
                results = eng.generate([s for s, _ in part], beam_size=beam, max_batch_size=512)
                wrong += [
                    f"{s} = {w}, answered {r.text!r}" for (s, w), r in zip(part, results) if r.text != w
                ]
                log(f"  {rel(folder)} beam {beam}: {i + len(part):,} checked, {len(wrong)} wrong")
            checked[beam] = (len(problems) - len(wrong), wrong, time.perf_counter() - c)
        g, d = checked[1], checked[served]
        default = f"{d[0]:,} / {len(problems):,} " + ("(= greedy)" if served == 1 else f"(beam {served})")
        t.row(
            f"`{rel(folder)}`", f"{g[0]:,} / {len(problems):,}", default, "; ".join(g[1][:3]) or "none", g[2]
        )
        report.figures[rel(folder)] = {
            "checked": len(problems),
            "wrong": {str(b): w[:20] for b, (_, w, _) in checked.items()},
        }
        report.figures["failed"] = report.figures.get("failed") or any(w for _, w, _ in checked.values())
    report.text(
        provenance(started)
        + "\n\nAll a+b with a, b < 1000 through the engine (`engine.load`, the graphs the server runs), greedy and with the served default (the bundle's `task.beam_size`; for addition 1, so one pass answers for both). A calculator that is right 99% of the time is wrong: held-out exact match did not see the carry chains a first model got wrong.",
        tight=False,
    )
    return report
