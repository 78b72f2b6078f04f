"""A built-in English->Japanese parallel corpus from the Japanese gettext catalogs of pinned packages.

    python -m training.corpus_en_ja [--out data/en-ja/ui-strings.tsv]
        [--copyleft-out data/en-ja/ui-strings-copyleft.tsv] [--heldout-out data/en-ja/heldout-projects.tsv]
        [--cache .cache/corpus]

The pairs are human translations of software UI strings: the ``ja`` gettext catalogs (``.po``,
or compiled ``.mo`` where a package ships no ``.po``) of the packages pinned in :func:`~training.corpus_sources.all_sources`:
a few PyPI wheels and LibreOffice (:data:`EXPLICIT_SOURCES`), and ~1,400 Debian bookworm packages
that ship ``*/ja/LC_MESSAGES/*.mo`` (GNOME, KDE, Xfce, GNU tools, VLC, ...), pinned with their
licences in ``data/en-ja/debian-pins.tsv`` (written once by ``--write-pins`` from Debian's Contents
index, then committed). Wheels come from PyPI (``pip download --no-deps --only-binary=:all:``),
debs from Debian (``apt-get download`` + ``dpkg-deb --fsys-tarfile | tar -x`` of the catalogs and
copyright files only). Everything downloaded or extracted lives under ``--cache`` (``.cache/`` is
gitignored); only the TSVs and ``NOTICE.md`` beside them are meant to be committed.

Three files come out:

* ``ui-strings.tsv``: pairs found in a permissive (or MPL-2.0) source;
* ``ui-strings-copyleft.tsv``: pairs only copyleft (GPL/LGPL/AGPL...) or unclassified sources have
  (:func:`license_group`; each English string is in exactly one of the two: dedup is global);
* ``heldout-projects.tsv``: the leave-projects-out test set, from the :data:`HELDOUT_PROJECTS`
  whose catalogs feed no training file: their pairs whose English is in neither training file,
  capped at :data:`HELDOUT_CAP`.

Catalogs of :data:`RESERVED_PROJECTS` (pretix, Weblate, Plone, Mercurial, CKAN) never enter any
file: :func:`is_reserved` is checked on package names when pinning and on source names, catalog
paths and domains when building.

The build has two halves:

* fetching (network, ``pip``/``apt-get``/``dpkg-deb``): :func:`fetch_source` -> catalog paths;
* cleaning (pure, deterministic, what the tests exercise): :func:`build_rows` /
  :func:`catalogs_to_tsv` turn a list of catalog paths into sorted ``english<TAB>japanese`` rows.

Cleaning rules, applied per catalog entry in this order (each is a small named function below;
the summary counts every rejection under the name of the rule that made it):

1. :func:`is_fuzzy`, :func:`is_obsolete`, :func:`is_plural` - such entries are skipped.
2. :func:`context_rejected` - entries with a ``msgctxt`` are skipped in ``.po`` files (the context
   means the translation is specific to one use: Django's ``msgctxt "abbrev. month"`` turns
   "May" into "5月"). **Decision for compiled catalogs:** LibreOffice >= 6 keys *every* string
   with a ``msgctxt`` (``"sectionpage|sectionlabel"``, ``"STR_AUTH_TYPE_BOOK"``: the widget or
   resource id), so skipping ``msgctxt`` would drop all of LibreOffice. In ``.mo`` files a
   ``msgctxt`` entry is therefore kept when its msgid is a plain UI string - one that passes every
   other rule here (no markup, placeholders consistent, not placeholder-only, length limits, a
   real Japanese translation) and is not an identifier (:func:`looks_like_identifier`:
   ``STR_FOO``, ``org.example.Name``, ``camelCaseName``). The same applies to the other
   ``.mo``-only packages (Trac, JupyterLab). Context-specific ambiguity is then settled like any
   duplicate: one translation per English string, the most frequent.
3. :func:`has_markup` on the raw strings: HTML/XML tags, entities (``&lt;``), newlines, tabs,
   URLs/e-mail addresses, wiki/reST/Genshi markup (backticks, ``[[``, ``{{{``, ``[1:``) and ICU
   date patterns (``EEEE``).
4. :func:`strip_accelerators`: LibreOffice ``~`` markers; mnemonics written as a ``(_F)``,
   ``(&F)`` or ``(~F)`` suffix in Japanese, and the matching ``_F``/``&F``/``~F`` in English;
   ``_`` mnemonics of LibreOffice's ``.ui`` strings (``Wit_h password``).
5. :func:`normalise_whitespace`: Unicode NFC, then every run of whitespace (including U+3000 and
   NBSP) -> one space, trimmed.
6. :func:`is_untranslated`: empty msgstr, or msgstr == msgid.
7. :func:`is_too_long`: over :data:`MAX_CHARS` (100) characters on either side.
8. :func:`is_placeholder_only`: nothing but placeholders (``%s``, ``{0}``, ``%(name)s``, ``$1``,
   ``%PRODUCTNAME``...) and punctuation on either side.
9. :func:`placeholders_differ`: the multiset of placeholders differs between the two sides.
10. :func:`lacks_japanese`: the "translation" has no kana/kanji at all (left in English).
11. :func:`looks_like_identifier`: the msgid is a code identifier, not UI text.

Then one translation per English string (:func:`choose_translations`): the most frequent
Japanese string over all catalogs of all sources, ties broken by the lexicographically smallest.
Rows are sorted by (english, japanese) code point, written UTF-8 with ``\\n`` line ends and no
header, so a rebuild from the same pins is byte-identical.

Where a package ships both a ``.po`` and its compiled ``.mo`` only the ``.po`` is read (it keeps
the fuzzy/obsolete flags); :func:`~training.corpus_sources.all_sources` names the catalogs of each package by glob.

The summary credits each final pair to the first source (in :func:`~training.corpus_sources.all_sources` order) whose catalogs
contain exactly that pair.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from training.corpus_build import build_corpus, write_tsv
from training.corpus_fetch import FetchError, fetch_all, write_pins
from training.corpus_notice import notice_markdown, summary_table
from training.corpus_sources import (
    DEFAULT_CACHE,
    DEFAULT_COPYLEFT_OUT,
    DEFAULT_HELDOUT_OUT,
    DEFAULT_OUT,
    PINS_FILE,
    all_sources,
)


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m training.corpus_en_ja``."""
    parser = argparse.ArgumentParser(
        prog="python -m training.corpus_en_ja",
        description="Build the built-in English->Japanese corpus (TSV english<TAB>japanese) from the Japanese "
        f"gettext catalogs of {len(all_sources())} pinned packages (PyPI wheels, and the Debian packages of "
        f"{PINS_FILE.name}). Downloads with pip and apt-get into --cache, writes the permissive and copyleft "
        "training files, the held-out projects' file and NOTICE.md. Rerunning gives byte-identical files.",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="the permissive (and MPL) training file (default: %(default)s)",
    )
    parser.add_argument(
        "--copyleft-out",
        type=Path,
        default=DEFAULT_COPYLEFT_OUT,
        help="the copyleft training file (default: %(default)s)",
    )
    parser.add_argument(
        "--heldout-out",
        type=Path,
        default=DEFAULT_HELDOUT_OUT,
        help="the held-out projects' unseen pairs (default: %(default)s)",
    )
    parser.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        help="downloads and extracted packages; keep it out of git (default: %(default)s)",
    )
    parser.add_argument(
        "--notice", type=Path, default=None, help="the NOTICE file to write (default: NOTICE.md beside --out)"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=None,
        metavar="SOURCE",
        help="build from these sources only (repeatable; for debugging - the NOTICE is not written)",
    )
    parser.add_argument(
        "--write-pins",
        action="store_true",
        help=f"regenerate {PINS_FILE.name} from --contents indexes instead of building",
    )
    parser.add_argument(
        "--contents",
        type=Path,
        action="append",
        default=[],
        help="a Debian Contents-*.gz index, for --write-pins (repeatable)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.write_pins:
        if not args.contents:
            p.error("--write-pins needs --contents")
        return write_pins(args.contents, args.cache)
    return build(args)


def build(args: argparse.Namespace) -> int:
    """Fetch the sources, build the corpus, write its files (and the NOTICE, for a whole build)."""
    t0 = time.monotonic()
    sources = [s for s in all_sources() if args.only is None or s.name in args.only]
    try:
        fetched = fetch_all(sources, args.cache)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    catalogs = [(f.source.name, p) for f in fetched for p in f.catalogs]
    corpus = build_corpus(
        catalogs,
        groups={s.name: s.group for s in sources},
        heldout=[s.name for s in sources if s.heldout],
        progress=True,
    )
    outs = {"permissive": args.out, "copyleft": args.copyleft_out, "heldout": args.heldout_out}
    shas = {k: write_tsv(corpus.files[k], path) for k, path in outs.items()}
    print(summary_table(corpus.train, fetched))
    for k, path in outs.items():
        print(f"wrote {path}: {len(corpus.files[k])} pairs, {path.stat().st_size} bytes, sha256 {shas[k]}")
    print(
        f"reserved catalogs dropped: {len(corpus.train.reserved) + len(corpus.heldout.reserved)}; "
        f"{time.monotonic() - t0:.1f}s"
    )
    if args.only is None:
        notice = args.notice or args.out.with_name("NOTICE.md")
        notice.write_text(notice_markdown(corpus, fetched, outs, shas), encoding="utf-8")
        print(f"wrote {notice}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
