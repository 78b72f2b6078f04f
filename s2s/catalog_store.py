"""Translation catalogs read and written through translate-toolkit, for ``s2s translate`` and ``s2s check-po``.

Bilingual formats (gettext .po, XLIFF 1.2, Qt .ts) hold each string's source and its translation; monolingual ones
(Java .properties, JSON, i18next) hold one language, so their values are the sources and the translation is
another file of the same shape. An entry with plural forms is translated form by form: the first form from the
singular source (``msgid``) where the target language has more than one form, every other form from the plural
source (``msgid_plural``), as a translator would.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Format:
    module: str  # under translate.storage
    store: str  # its store class
    extensions: tuple[str, ...]
    monolingual: bool
    describe: str


FORMATS = {
    "po": Format("pypo", "pofile", ("po", "pot"), False, "gettext .po / .pot"),
    "xliff": Format("xliff", "Xliff1File", ("xlf", "xliff"), False, "XLIFF 1.2"),
    "ts": Format("ts2", "tsfile", ("ts",), False, "Qt Linguist .ts"),
    "properties": Format(
        "properties", "javafile", ("properties",), True, "Java .properties, non-ASCII written as \\u escapes"
    ),
    "properties-utf8": Format("properties", "javautf8file", (), True, "Java .properties in UTF-8 (Java 9+)"),
    "json": Format("jsonl10n", "JsonNestedFile", ("json",), True, "JSON, nested or flat key: string"),
    "i18next": Format(
        "jsonl10n", "I18NextV4File", (), True, "i18next v4 JSON (plurals as key_one, key_other)"
    ),
}


class CatalogError(Exception):
    """A catalog that cannot be read or written; the message names the file (and the line where the parser
    says)."""


def format_of(path: Path, name: str | None) -> str:
    if name:
        return name
    ext = path.suffix.lstrip(".").lower()
    found = next((k for k, f in FORMATS.items() if ext in f.extensions), None)
    if found is None:
        raise CatalogError(
            f"{path}: unknown catalog format '.{ext}': name it with --format ({', '.join(FORMATS)})"
        )
    return found


def read(path: Path, fmt: str):
    """The translate-toolkit store of ``path``; CatalogError for a file it cannot read or parse."""
    from importlib import import_module

    spec = FORMATS[fmt]
    cls = getattr(import_module(f"translate.storage.{spec.module}"), spec.store)
    from translate.storage.base import TranslateToolkitError

    try:
        with open(path, "rb") as f:
            return cls.parsefile(f)
    except OSError as e:
        raise CatalogError(f"{path}: {e.strerror or e}") from None
    # PoParseError and UnicodeError are ValueErrors; lxml's XMLSyntaxError is a SyntaxError.
    except (ValueError, SyntaxError, TranslateToolkitError, KeyError, TypeError) as e:
        raise CatalogError(f"{path}: not a readable {spec.describe} file: {e}") from None


def write(store, path: Path) -> None:
    """The store serialized to ``path``: into a hidden file beside it, then renamed over it, so a failure
    (a full disk) never leaves a half-written catalog; the hidden file is removed whatever happens."""
    data = bytes(store)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def where(path: Path, unit) -> str:
    """How a message names an entry: its file and line where the format has lines the parser kept (the
    entry's first line, comments included, for .po), else its key."""
    line = unit.line_number or getattr(getattr(unit, "xmlelement", None), "sourceline", None)
    if line:
        return f"{path}:{line}"
    key = str(unit.getid()).replace("\x04", " / ")
    return f"{path}: {key[:60] + '...' if len(key) > 60 else key}"


def sources(unit) -> list[str]:
    """The entry's source strings: one, or the singular and plural of a plural entry."""
    src = unit.source
    return [str(s) for s in getattr(src, "strings", [src])]


def targets(unit) -> list[str]:
    tgt = unit.target
    if tgt is None:
        return []
    return [str(s) for s in getattr(tgt, "strings", [tgt])]


def translatable(unit) -> bool:
    """An entry worth sending: not the .po header, not obsolete, a non-empty string source (JSON's numbers and
    nulls are values, not text)."""
    if unit.isheader() or unit.isobsolete() or not unit.istranslatable():
        return False
    return isinstance(unit.source, str) and any(sources(unit))


def is_plural(unit) -> bool:
    return unit.hasplural() or len(sources(unit)) > 1


def plural_count(store, unit) -> int:
    """How many forms the translation of a plural entry has: the .po header's nplurals, else the target
    language's (translate-toolkit's CLDR data), else as many as the source has."""
    if hasattr(store, "getheaderplural"):
        n, _ = store.getheaderplural()
        if n and str(n).isdigit() and int(n) > 0:
            return int(n)
    lang = store.gettargetlanguage()
    if lang:
        from translate.lang import factory

        n = factory.getlanguage(lang).nplurals
        if n:
            return n
    return max(1, len(sources(unit)))


def form_sources(store, unit) -> list[str]:
    """The source each form of the translation is made from."""
    src = sources(unit)
    if not is_plural(unit):
        return src[:1]
    n = plural_count(store, unit)
    return [src[0] if i == 0 and n > 1 else src[-1] for i in range(n)]


def set_target(unit, forms: list[str]) -> None:
    if len(forms) == 1 and not is_plural(unit):
        unit.target = forms[0]
    else:
        from translate.misc.multistring import multistring

        unit.target = multistring(forms)
