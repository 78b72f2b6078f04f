"""The spans of a text that software needs kept exactly: placeholders, markup, URLs, e-mail addresses, numbers.

One set of rules, used by the server (to keep spans out of the model's hands, ``server/models/protect.py``), by
``s2s check-po`` and by the benchmark that measures them: a span found here in the source must be in the output
byte for byte, as many times. The kinds, in the order they are tried at each position (the first that matches
wins, so a URL's ``%20`` is part of the URL, not a printf span):

- ``url``      ``https://…``, ``ftp://…``, ``www.…``; ASCII URL characters only (so Japanese text after a URL is
               not eaten) and without trailing sentence punctuation;
- ``email``    ``name@example.org``;
- ``tag``      HTML/XML tags (``<b>``, ``</b>``, ``<br/>``, ``<a href="…">``) and comments;
- ``entity``   ``&amp;``, ``&#169;``, ``&#x2014;``;
- ``template`` ``{{ x }}``, ``{% … %}`` (Jinja, Handlebars, Angular) and ``${x}``;
- ``brace``    ``{}``, ``{0}``, ``{name}``, ``{0:.2f}`` and ICU messages ``{count, plural, one {# file} other {# files}}``
               (nested braces: one span, up to its matching ``}``);
- ``printf``   ``%s``, ``%d``, ``%5.2f``, ``%ld``, ``%1$s``, ``%(name)s``, ``%%`` and Qt's ``%1``, ``%L1``;
- ``number``   digits not inside a word (``3``, ``1,024``, ``2.5``), only when numbers are asked for.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

KINDS = ("url", "email", "tag", "entity", "template", "brace", "printf", "number")

_URL = r"(?:(?:https?|ftp)://|www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+"
_EMAIL = r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+"
_TAG = r"<!--.*?-->|</?[A-Za-z][A-Za-z0-9:._\-]*(?:\s+[^<>]*?)?\s*/?>"
_ENTITY = r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"
_TEMPLATE = r"\{\{.*?\}\}|\{%.*?%\}|\$\{[^{}]*\}"
# printf: Python's %(name)s, positional %1$s, the C conversions with flags, width, precision and length (no space
# flag: "50% done" is prose, not "% d"), %% and Qt's %1 / %L1.
_PRINTF = (
    r"%%|%\([A-Za-z_][A-Za-z0-9_.]*\)[-+0#]*[0-9]*(?:\.[0-9]+)?[diouxXeEfFgGcrsa]"
    r"|%[0-9]+\$[-+0#]*[0-9]*(?:\.[0-9]+)?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcsSpn@]"
    r"|%[-+0#]*[0-9]*(?:\.[0-9]+)?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcsSpn@]"
    r"|%L?[1-9][0-9]?"
)
_NUMBER = (
    r"(?<![A-Za-z0-9_.,])(?<![A-Za-z]-)[0-9]+(?:[.,:][0-9]+)*(?![A-Za-z0-9_])"  # ASCII words: "3つ" has a 3
)
_BRACE_START = r"\{"

_RULES = (
    ("url", _URL),
    ("email", _EMAIL),
    ("tag", _TAG),
    ("entity", _ENTITY),
    ("template", _TEMPLATE),
    ("brace", _BRACE_START),
    ("printf", _PRINTF),
    ("number", _NUMBER),
)
_ANY = re.compile("|".join(f"(?P<{kind}>{rx})" for kind, rx in _RULES), re.S)
_NO_NUMBER = re.compile("|".join(f"(?P<{kind}>{rx})" for kind, rx in _RULES if kind != "number"), re.S)
# What a brace span may start with: nothing ({}), an argument index or name, then a format spec or ICU's ", type".
_BRACE_HEAD = re.compile(r"\{\s*(?:[A-Za-z_0-9][A-Za-z0-9_.\[\]\-]*)?\s*(?:[:,!}])")
_URL_TAIL = ".,;:!?)'"  # sentence punctuation after a URL is not part of it ("see https://x.org.")
_MAX_BRACE_DEPTH = 16  # deeper than any ICU message; a longer run of '{' is prose, not a placeholder


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str
    text: str


def _brace_end(text: str, start: int) -> int:
    """The end of the brace placeholder at ``start`` (its matching '}'), or -1 when it is not one."""
    if not _BRACE_HEAD.match(text, start):
        return -1
    depth = 0
    for i in range(start, min(len(text), start + 4096)):
        c = text[i]
        if c == "{":
            depth += 1
            if depth > _MAX_BRACE_DEPTH:
                return -1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1  # unbalanced: a lone '{' is left to the model


# A character every span has (or :// or www.): most UI strings have none, and this scan costs a fraction of the rules'.
_MAYBE = re.compile(r"[%{}<&@$0-9]|://|www\.")
_MAYBE_NO_NUMBER = re.compile(r"[%{}<&@$]|://|www\.")


def find_spans(text: str, numbers: bool = True) -> list[Span]:
    """The spans of ``text``, in order, none overlapping."""
    if (_MAYBE if numbers else _MAYBE_NO_NUMBER).search(text) is None:
        return []
    rx = _ANY if numbers else _NO_NUMBER
    out: list[Span] = []
    pos = 0
    while (m := rx.search(text, pos)) is not None:
        kind, start, end = m.lastgroup, m.start(), m.end()
        if kind == "brace":
            end = _brace_end(text, start)
            if end < 0:
                pos = start + 1
                continue
        elif kind == "url":
            while end > start and text[end - 1] in _URL_TAIL:
                if text[end - 1] == ")" and text.count("(", start, end) >= text.count(")", start, end):
                    break  # a URL's own balanced parentheses (wiki links) stay
                end -= 1
        out.append(Span(start, end, kind, text[start:end]))
        pos = end
    return out


def is_open_tag(s: str) -> bool:
    return s.startswith("<") and not s.startswith(("</", "<!")) and not s.endswith("/>")


def is_close_tag(s: str) -> bool:
    return s.startswith("</")


def tag_name(s: str) -> str:
    m = re.match(r"</?([A-Za-z][A-Za-z0-9:._\-]*)", s)
    return m.group(1).lower() if m else ""


@dataclass(frozen=True)
class Check:
    """How an output keeps its source's spans: ``missing`` are in the source more often than in the output,
    ``extra`` in the output more often (both span texts, repeated as often as they differ)."""

    missing: tuple[str, ...]
    extra: tuple[str, ...]
    missing_numbers: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not (self.missing or self.extra or self.missing_numbers)


def check(
    source: str, output: str, numbers: bool = True, source_spans: tuple[Span, ...] | None = None
) -> Check:
    """Whether ``output`` keeps exactly the spans of ``source`` (numbers: each of the source's digits at least as
    often: a translation may add a digit of its own, as Japanese counters do). ``source_spans``: the source's,
    where they are known already."""
    src = find_spans(source, numbers) if source_spans is None else source_spans
    out = [s for s in find_spans(output, numbers)]
    want = Counter(s.text for s in src if s.kind != "number")
    got = Counter(s.text for s in out if s.kind != "number")
    want_n = Counter(s.text for s in src if s.kind == "number")
    got_n = Counter(s.text for s in out if s.kind == "number")
    return Check(
        tuple((want - got).elements()), tuple((got - want).elements()), tuple((want_n - got_n).elements())
    )
