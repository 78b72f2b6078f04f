"""The cleaning rules of the en-ja corpus, one small named function each (the order in which
:func:`entry_rejection` and :func:`clean_pair` apply them is documented in training/corpus_en_ja.py).
Pure and deterministic: what the tests exercise."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import polib

from training.corpus_sources import MAX_CHARS

Pair = tuple[str, str]

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
_JAPANESE_RE = re.compile(
    r"[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f々〆ー]"
)
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
