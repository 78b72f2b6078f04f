"""``s2s check-po FILE.po --model NAME``: the strings of a gettext catalog whose spans a translation does not keep.

Each msgid (and msgid_plural) is translated by a running server, as ``s2s client`` sends it, and checked with the
server's own rules (``contract.spans.check``): every placeholder, tag, entity, URL and e-mail address of the source
exactly as often in the output, and each number at least as often. A string the server refuses (blank, too long)
is reported with its line and the server's reason, and the others are checked on. ``--existing`` checks the
catalog's own msgstr instead (no server needed), which is what Weblate's placeholder checks do for human
translations. The catalog is read with translate-toolkit (``s2s/catalog_store.py``): a malformed one is refused
with the parser's line, before anything is sent.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from contract.spans import Check, check

HELP = "translate a gettext catalog's strings and print those whose spans do not survive"
DESCRIPTION = (
    "Sends every msgid of FILE.po to a running server's model (as s2s client does) and prints, for each string "
    "whose placeholders, markup, URLs, e-mail addresses or numbers the output does not keep exactly (the server's "
    "own rules, contract/spans.py), its line, the string, the output and what is missing or extra, as Weblate's "
    "placeholder checks would. A string the server refuses (blank, too long) is printed with its line and the "
    "server's reason, and the rest are checked on. --existing checks the catalog's own msgstr instead, without "
    "a server. Exit status 1 when a string fails or is refused; 2 for a catalog that cannot be read (a malformed "
    "one is named with its line)."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a .po (or .pot) file")
    p.add_argument("--model", help="model name (required unless --existing)")
    p.add_argument("--server", default="localhost:8001", help="HOST:PORT of the gRPC port")
    p.add_argument(
        "--existing", action="store_true", help="check the catalog's msgstr, not the model's output"
    )
    p.add_argument(
        "--no-protect-spans", action="store_true", help="ask the model without protection (to compare)"
    )
    p.add_argument("--no-keep-numbers", action="store_true", help="neither protect nor check numbers")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline of each request in seconds")
    p.add_argument("--token", default=None, help="bearer token, if the server requires one")
    p.add_argument("--tls-ca", default=None, help="PEM CA to verify a TLS server")


@dataclass(frozen=True)
class Entry:
    where: str  # FILE:LINE
    source: str
    output: str


def _rows(store, path: Path) -> list[tuple[str, str, str]]:
    """(where, source, its msgstr) per string of the catalog: msgid with the first plural form, msgid_plural with
    the last (Japanese has one)."""
    from s2s.catalog_store import sources, targets, translatable, where

    out = []
    for unit in store.units:
        if not translatable(unit):
            continue
        src, forms = sources(unit), targets(unit) or [""]
        here = where(path, unit)
        out.append((here, src[0], forms[0]))
        if len(src) > 1:
            out.append((here, src[-1], forms[-1]))
    return out


def failures(entries: list[Entry], numbers: bool = True) -> list[tuple[Entry, Check]]:
    return [(e, c) for e in entries if not (c := check(e.source, e.output, numbers)).ok]


def describe(c: Check) -> str:
    parts = []
    if c.missing:
        parts.append("missing " + " ".join(c.missing))
    if c.extra:
        parts.append("extra " + " ".join(c.extra))
    if c.missing_numbers:
        parts.append("missing numbers " + " ".join(c.missing_numbers))
    return "; ".join(parts)


def _translated(args, rows: list[tuple[str, str, str]]) -> tuple[list[Entry], list[tuple[str, str, str]]]:
    """(the entries the model answered, (where, source, the server's reason) of those it refused)."""
    from s2s.catalog_client import translate_each
    from s2s.seq2seq_client import Seq2SeqClient

    kw = {
        k: False
        for k, off in (("protect_spans", args.no_protect_spans), ("keep_numbers", args.no_keep_numbers))
        if off
    }
    with Seq2SeqClient(args.server, token=args.token, tls_ca=args.tls_ca, timeout=args.timeout) as client:
        answers = translate_each(client, args.model, [src for _, src, _ in rows], **kw)
    entries, refused = [], []
    for (here, src, _), a in zip(rows, answers):
        if a.text is None:
            refused.append((here, src, a.refused))
        else:
            entries.append(Entry(here, src, a.text))
    return entries, refused


def run_cli(args) -> int:
    try:
        from s2s.catalog_store import CatalogError, read
    except ImportError:  # translate-toolkit: the catalogs extra
        print('s2s check-po: needs translate-toolkit (pip install -e ".[catalogs]")', file=sys.stderr)
        return 2
    path = Path(args.file)
    try:
        rows = _rows(read(path, "po"), path)
    except CatalogError as e:
        print(f"s2s check-po: {e}", file=sys.stderr)
        return 2
    numbers = not args.no_keep_numbers
    refused: list[tuple[str, str, str]] = []
    if args.existing:
        entries = [Entry(here, src, out) for here, src, out in rows if out]
    else:
        if not args.model:
            print("s2s check-po: --model NAME is required (or --existing)", file=sys.stderr)
            return 2
        from s2s.catalog_client import RequestRefused

        try:
            entries, refused = _translated(args, rows)
        except RequestRefused as e:
            print(f"s2s check-po: {e}", file=sys.stderr)
            return 1
        except OSError as e:  # the --tls-ca file
            print(f"s2s check-po: --tls-ca {args.tls_ca}: {e.strerror or e}", file=sys.stderr)
            return 2
    for here, src, reason in refused:
        print(f"{here}: refused by the server: {reason}\n  source: {_short(src)}")
    bad = failures(entries, numbers)
    for e, c in bad:
        print(f"{e.where}: {describe(c)}\n  source: {e.source}\n  output: {e.output}")
    summary = f"{len(bad)} of {len(entries)} strings do not keep their spans"
    if refused:
        summary += f"; {len(refused)} refused by the server"
    print(summary, file=sys.stderr)
    return 1 if bad or refused else 0


def _short(text: str, limit: int = 120) -> str:
    if not text.strip():
        return repr(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
