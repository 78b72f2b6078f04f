"""The spans of a text that software needs kept exactly: placeholders, markup, URLs, e-mail addresses, numbers.

One set of rules, used by the server (to keep spans out of the model's hands, ``server/models/protect.py``), by
``s2s check-po`` and by the benchmark that measures them: a span found here in the source must be in the output
byte for byte, as many times. The kinds, in the order they are tried at each position (the first that matches
wins, so a URL's ``%20`` is part of the URL, not a printf span):

- ``url``      ``https://…``, ``ftp://…``, ``www.…``; ASCII URL characters only (so Japanese text after a URL is
               not eaten) and without trailing sentence punctuation;
- ``email``    ``name@example.org``;
- ``tag``      HTML/XML tags (``<b>``, ``</b>``, ``<br/>``, ``<a href="…">``; XLIFF's inline ``<x id="1"/>``,
               ``<g id="2">``) and comments;
- ``entity``   ``&amp;``, ``&#169;``, ``&#x2014;``;
- ``template`` ``{{ x }}``, ``{% … %}`` (Jinja, Handlebars, Angular) and ``${x}``;
- ``brace``    ``{}``, ``{0}``, ``{name}``, ``{0:.2f}`` and ICU messages ``{count, plural, one {# file} other {# files}}``
               (nested braces: one span, up to its matching ``}``);
- ``marker``   ``[X12X]``: what Weblate sends a machine translation service in place of each placeholder (and
               looks for in the answer to put the placeholder back);
- ``printf``   ``%s``, ``%d``, ``%5.2f``, ``%ld``, ``%1$s``, ``%(name)s``, ``%%`` and Qt's ``%1``, ``%L1``;
- ``number``   digits not inside a word (``3``, ``1,024``, ``2.5``), only when numbers are asked for.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from contract.span_scan import KINDS, Span, scan

__all__ = ["KINDS", "Span", "Check", "check", "find_spans", "is_close_tag", "is_open_tag", "tag_name"]

# A character every span has (or :// or www.): most UI strings have none, and this scan costs a fraction of the rules'.
_MAYBE = re.compile(r"[%{}<&@$\[0-9]|://|www\.")
_MAYBE_NO_NUMBER = re.compile(r"[%{}<&@$\[]|://|www\.")
_TAG_NAME = re.compile(r"</?([A-Za-z][A-Za-z0-9:._\-]*+)")


def find_spans(text: str, numbers: bool = True) -> list[Span]:
    """The spans of ``text``, in order, none overlapping (found in time linear in the text: ``span_scan.py``)."""
    if (_MAYBE if numbers else _MAYBE_NO_NUMBER).search(text) is None:
        return []
    return scan(text, numbers)


def is_open_tag(s: str) -> bool:
    return s.startswith("<") and not s.startswith(("</", "<!")) and not s.endswith("/>")


def is_close_tag(s: str) -> bool:
    return s.startswith("</")


def tag_name(s: str) -> str:
    m = _TAG_NAME.match(s)
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
