"""``s2s check-po FILE.po --model NAME``: the strings of a gettext catalog whose spans a translation does not keep.

Each msgid (and msgid_plural) is translated by a running server, as ``s2s client`` sends it, and checked with the
server's own rules (``contract.spans.check``): every placeholder, tag, entity, URL and e-mail address of the source
exactly as often in the output, and each number at least as often. ``--existing`` checks the catalog's own
msgstr instead (no server needed), which is what Weblate's placeholder checks do for human translations.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from contract.spans import Check, check


@dataclass(frozen=True)
class Entry:
    line: int
    source: str
    output: str


def _entries(path: str) -> list[tuple[int, str, str]]:
    """(line, source, its msgstr) per string of the catalog: msgid with the first plural form, msgid_plural with
    the last (Japanese has one)."""
    import polib

    out = []
    for e in polib.pofile(path):
        if e.obsolete or not e.msgid:
            continue
        if not e.msgid_plural:
            out.append((e.linenum, e.msgid, e.msgstr))
            continue
        forms = [e.msgstr_plural[k] for k in sorted(e.msgstr_plural)] or [""]
        out += [(e.linenum, e.msgid, forms[0]), (e.linenum, e.msgid_plural, forms[-1])]
    return out


def failures(entries: list[Entry], numbers: bool = True) -> list[tuple[Entry, Check]]:
    return [(e, c) for e in entries if not (c := check(e.source, e.output, numbers)).ok]


def _describe(c: Check) -> str:
    parts = []
    if c.missing:
        parts.append("missing " + " ".join(c.missing))
    if c.extra:
        parts.append("extra " + " ".join(c.extra))
    if c.missing_numbers:
        parts.append("missing numbers " + " ".join(c.missing_numbers))
    return "; ".join(parts)


def run_cli(args) -> int:
    try:
        rows = _entries(args.file)
    except ImportError:
        print("s2s check-po: needs polib (pip install polib, or make install)", file=sys.stderr)
        return 2
    except (
        OSError,
        ValueError,
    ) as e:  # polib raises OSError / ValueError for an unreadable or malformed catalog
        print(f"s2s check-po: {args.file}: {e}", file=sys.stderr)
        return 2
    numbers = not args.no_keep_numbers
    if args.existing:
        entries = [Entry(line, src, out) for line, src, out in rows if out]
    else:
        if not args.model:
            print("s2s check-po: --model NAME is required (or --existing)", file=sys.stderr)
            return 2
        import grpc

        from s2s.seq2seq_client import Seq2SeqClient

        kw = {
            k: False
            for k, off in (("protect_spans", args.no_protect_spans), ("keep_numbers", args.no_keep_numbers))
            if off
        }
        try:
            with Seq2SeqClient(
                args.server, token=args.token, tls_ca=args.tls_ca, timeout=args.timeout
            ) as client:
                outputs = list(client.generate_many(args.model, [src for _, src, _ in rows], **kw))
        except grpc.RpcError as e:
            print(f"s2s check-po: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
        entries = [Entry(line, src, out) for (line, src, _), out in zip(rows, outputs)]
    bad = failures(entries, numbers)
    for e, c in bad:
        print(f"{args.file}:{e.line}: {_describe(c)}\n  source: {e.source}\n  output: {e.output}")
    print(f"{len(bad)} of {len(entries)} strings do not keep their spans", file=sys.stderr)
    return 1 if bad else 0
