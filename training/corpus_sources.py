"""The en-ja corpus's pinned sources: which packages are read, which projects are reserved or held out,
and how a licence sorts a source into the permissive or the copyleft training file."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

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
REBUILD_COMMAND = (
    "python -m training.corpus_en_ja --out data/en-ja/ui-strings.tsv "
    "--copyleft-out data/en-ja/ui-strings-copyleft.tsv "
    "--heldout-out data/en-ja/heldout-projects.tsv --cache .cache/corpus"
)
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
RESERVED_PROJECTS = (
    "pretix",
    "weblate",
    "plone",
    "mercurial",
    "hg",
    "tortoisehg",
    "hgview",
    "hgsubversion",
    "ckan",
    "ckanext",
)
RESERVED_NAMESPACES = ("collective.", "products.")
_RESERVED_RE = re.compile(
    r"^(?:python3?-)?(?:(?:" + "|".join(map(re.escape, RESERVED_PROJECTS)) + r")(?:[-_.+].*)?"
    r"|(?:" + "|".join(map(re.escape, RESERVED_NAMESPACES)) + r").*)$"
)

#: Leave-projects-out evaluation, chosen before any training run: seven whole
#: projects, one of each kind, mid-sized (a few hundred to a few thousand strings each), from
#: different toolkits and translation teams, so the held-out test measures translating a *new
#: application*, not recalling strings seen in training. None of their catalogs feed the training
#: files; ``heldout-projects.tsv`` keeps their pairs whose English is in no training file.
HELDOUT_PROJECTS: dict[str, tuple[str, ...]] = {
    "GIMP (raster image editor, GTK)": ("gimp-data", "libgimp2.0", "gimp-plugin-registry"),
    "Okular (document viewer, KDE/Qt)": (
        "okular",
        "okular-backend-odp",
        "okular-backend-odt",
        "okular-extra-backends",
    ),
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
        "jupyterlab",
        "wheel",
        "jupyterlab-language-pack-ja-jp",
        "4.5.post3",
        "BSD-3-Clause",
        ("jupyterlab_language_pack_ja_JP/locale/ja_JP/LC_MESSAGES/*.mo",),
        "https://github.com/jupyterlab/language-packs",
    ),
    Source(
        "django",
        "wheel",
        "Django",
        "6.1.3",
        "BSD-3-Clause",
        ("django/*locale/ja/LC_MESSAGES/*.po",),
        "https://www.djangoproject.com/",
    ),
    Source(
        "sphinx",
        "wheel",
        "Sphinx",
        "9.1.1",
        "BSD-2-Clause",
        ("sphinx/locale/ja/LC_MESSAGES/*.po",),
        "https://www.sphinx-doc.org/",
    ),
    Source(
        "wagtail",
        "wheel",
        "wagtail",
        "8.0.1",
        "BSD-3-Clause",
        ("wagtail/*locale/ja/LC_MESSAGES/*.po",),
        "https://wagtail.org/",
    ),
    Source(
        "trac",
        "wheel",
        "Trac",
        "1.6",
        "BSD-3-Clause",
        ("trac/locale/ja/LC_MESSAGES/*.mo",),
        "https://trac.edgewall.org/",
    ),
    Source(
        # messages-all.po is the union of the server (messages.po), JS and React catalogs; the
        # compiled messages.mo and messages-js.po beside it would only count entries twice.
        "indico",
        "wheel",
        "indico",
        "3.3.14",
        "MIT",
        ("indico/translations/ja_JP/LC_MESSAGES/messages-all.po",),
        "https://getindico.io/",
    ),
    Source(
        "libreoffice",
        "deb",
        "libreoffice-l10n-ja",
        "4:7.4.7-1+deb12u14",
        "MPL-2.0",
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


def all_sources(pins: Path = PINS_FILE) -> tuple[Source, ...]:
    """Every source the build reads: :data:`EXPLICIT_SOURCES`, then the Debian pins."""
    return EXPLICIT_SOURCES + load_pins(pins)
