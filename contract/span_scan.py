"""The scan behind ``contract.spans.find_spans``: one pass, left to right, in time linear in the text.

Each kind is what its pattern says (the comments give the pattern each matcher keeps, byte for byte), found the
way one alternation of them all would find it: at the leftmost position where any kind matches, the first kind
in ``KINDS`` order that matches there. What keeps it linear, where a plain alternation reads to the end of the text
from every opener (``{{`` with no ``}}`` after it, ``<!--`` with no ``-->``) and so takes time quadratic in the
text:

- the next position where a span may start comes from one search for the characters that start one (an e-mail
  address starts before its ``@``: its own search), and a search's answer is kept until the scan passes it;
- a matcher reads the run of characters it takes with a pattern that cannot backtrack (possessive), or inside
  a window no longer than that run;
- an opener's closer (``}}``, ``%}``, ``-->``) is looked up once and kept until the scan passes it; once none is
  left, openers of that kind are no longer start positions;
- a brace's matching ``}`` is read on from it over a few braces at most, else looked up in the nesting depth of
  every brace of the text, computed once.
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass

KINDS = ("url", "email", "tag", "entity", "template", "brace", "marker", "printf", "number")

_URL_CHARS = r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]"  # ASCII only: Japanese text after a URL is not eaten
_URL_TAIL = ".,;:!?)'"  # sentence punctuation after a URL is not part of it ("see https://x.org.")
_LOCAL = r"[A-Za-z0-9._%+\-]"
_LOCAL_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-")
_DOMAIN_PATTERN = r"[A-Za-z0-9\-]++(?:\.[A-Za-z0-9\-]++)++"
# email: LOCAL+@DOMAIN, searched from the start of each run of local-part characters only (no run is read twice)
_EMAIL = re.compile(rf"(?<!{_LOCAL}){_LOCAL}++@{_DOMAIN_PATTERN}")
_LOCAL_RUN = re.compile(rf"{_LOCAL}*+")
_DOMAIN_RUN = re.compile(r"[A-Za-z0-9\-.]*+")
_DOMAIN = re.compile(_DOMAIN_PATTERN)
# template and tag: \{\{.*?\}\} | \{%.*?%\} | <!--.*?--> : the first closer after the opener
_CLOSERS = {"{{": re.compile(r"\}\}"), "{%": re.compile(r"%\}"), "<!--": re.compile(r"-->")}
_BRACE = re.compile(r"[{}]")
_MAX_BRACE_DEPTH = 16  # deeper than any ICU message; a longer run of '{' is prose, not a placeholder
_BRACE_REACH = 4096  # a brace span ends within this many characters of its '{'
# Braces read on from a brace's head before its match is looked up in the nesting of the whole text.
_NEAR = 32
# A digit not inside an ASCII word ("3つ" has a 3, "UTF-8" none).
_NUMBER_START = r"[0-9](?<![A-Za-z0-9_.,][0-9])(?<![A-Za-z]-[0-9])"

# Each kind at one position, in KINDS order, as one alternation searched from the scan's position: a kind whose
# pattern cannot backtrack is matched whole here; for the others ("{{", "{%", "<!--" openers and a brace's head)
# the alternation finds where one starts and the scan reads the rest. No alternative reads past the run of
# characters it takes, so no position is read again from each of many starts.
_RULES = (
    # (?:(?:https?|ftp)://|www\.)URL+, then less its trailing sentence punctuation
    ("url", rf"(?:https?|ftp)://{_URL_CHARS}++|www\.{_URL_CHARS}++"),
    ("comment", r"<!--"),
    # </?[A-Za-z]NAME*(?:\s+[^<>]*?)?\s*/?> : after the name, either attributes up to the first '>' (with no
    # '<' before it) or '>' or '/>'
    ("tag", r"</?[A-Za-z][A-Za-z0-9:._\-]*+(?:\s[^<>]*+>|/?>)"),
    ("entity", r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});"),
    ("opener", None),  # {{ or {% whose closer may still come
    ("template", r"\$\{[^{}]*+\}"),
    # what a brace placeholder starts with: nothing ({}), an argument index or name, then a format spec or ICU's
    # ", type"; it ends at its matching '}'
    ("brace", r"\{\s*+(?:[A-Za-z_0-9][A-Za-z0-9_.\[\]\-]*+)?\s*+[:,!}]"),
    ("marker", r"\[X[0-9]++X\]"),  # Weblate's stand-in for a placeholder
    # printf: Python's %(name)s, positional %1$s, the C conversions with flags, width, precision and length (no
    # space flag: "50% done" is prose, not "% d"), %% and Qt's %1 / %L1. Possessive where the greedy split is the
    # only one the rest can follow (flags, then width digits, then a length or conversion letter).
    (
        "printf",
        r"%%|%\([A-Za-z_][A-Za-z0-9_.]*+\)[-+0#]*+[0-9]*+(?:\.[0-9]++)?+[diouxXeEfFgGcrsa]"
        r"|%[0-9]++\$[-+0#]*+[0-9]*+(?:\.[0-9]++)?+(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcsSpn@]"
        r"|%[-+0#]*+[0-9]*+(?:\.[0-9]++)?+(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcsSpn@]"
        r"|%L?[1-9][0-9]?",
    ),
    ("number", rf"{_NUMBER_START}[0-9]*(?:[.,:][0-9]+)*(?![A-Za-z0-9_])"),
)


def _rules(numbers: bool, dead: frozenset[str]) -> re.Pattern:
    """The alternation, less the openers whose closer is no longer ahead (and numbers unless asked for)."""
    parts = []
    for kind, rx in _RULES:
        if kind == "opener":
            rx = "|".join(rf"\{{{c}" for c in "{%" if "{" + c not in dead) or None
        elif kind == "comment" and "<!--" in dead or kind == "number" and not numbers:
            rx = None
        if rx is not None:
            parts.append(f"(?P<{kind}>{rx})")
    return re.compile("|".join(parts))


_ALTERNATIONS = {
    (numbers, frozenset(dead)): _rules(numbers, frozenset(dead))
    for numbers in (True, False)
    for k in range(len(_CLOSERS) + 1)
    for dead in itertools.combinations(_CLOSERS, k)
}


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str
    text: str


_NO_DEAD: frozenset[str] = frozenset()
_AS_MATCHED = frozenset(("tag", "entity", "template", "marker", "printf", "number"))


def scan(text: str, numbers: bool) -> list[Span]:
    """Every span of ``text``, in order, none overlapping."""
    n, out = len(text), []
    openers: _Openers | None = None  # what openers, comments and braces need, made once one is found
    rules = _ALTERNATIONS[numbers, _NO_DEAD]
    pos, hit = 0, rules.search(text)
    email = _next_email(text, 0) if "@" in text else None  # (start, its '@', end)
    while pos < n:
        if hit is not None and hit.start() < pos:
            hit = rules.search(text, pos)
        if email is not None and email[1] <= pos:  # at or past its '@': the next one
            email = _next_email(text, pos)
        p = hit.start() if hit is not None else n
        # An address matches from any position of its local part; only a URL comes before it at one position.
        if email is not None and (e := max(pos, email[0])) <= p and (e < p or hit.lastgroup != "url"):
            out.append(Span(e, email[2], "email", text[e : email[2]]))
            pos = email[2]
            continue
        if hit is None:
            break
        kind = hit.lastgroup
        if kind in _AS_MATCHED:
            end = hit.end()
        elif kind == "url":
            end = _url_end(text, p, hit.end())
        elif kind == "brace" and (end := _brace_near(text, p)) is not None:
            pass
        else:
            openers = openers or _Openers(text)
            end, kind = openers.end(hit)
            if openers.dead and rules is not _ALTERNATIONS[numbers, openers.dead]:
                # A closer ran out: its openers start nothing from now on.
                rules = _ALTERNATIONS[numbers, openers.dead]
                hit = rules.search(text, p + 1)
        if end > p:
            out.append(Span(p, end, kind, text[p:end]))
            pos = end
        else:
            pos = p + 1
    return out


class _Openers:
    """Where the closers of ``{{``, ``{%`` and ``<!--`` are, and the nesting depth of the braces."""

    def __init__(self, text: str):
        self.text = text
        self.dead: frozenset[str] = _NO_DEAD  # openers with no closer left ahead
        # opener -> (from, its first closer from there; -1: none)
        self.closers: dict[str, tuple[int, int]] = {}
        # brace position -> the nesting depth after it; depth -> the braces after which it is that, in order
        self.depth: dict[int, int] = {}
        self.levels: dict[int, list[int]] = {}

    def end(self, hit: re.Match) -> tuple[int, str]:
        """The end and kind of the span whose start the alternation found (-1: none starts there after all)."""
        kind, p = hit.lastgroup, hit.start()
        if kind == "comment":
            close = self._closer("<!--", p + 4)
            return (close + 3 if close >= 0 else -1), "tag"
        if kind == "opener":  # with no closer, "{{" and "{%" are no brace either
            close = self._closer(hit.group(), p + 2)
            return (close + 2 if close >= 0 else -1), "template"
        return self._brace_end(p), kind

    def _closer(self, opener: str, start: int) -> int:
        """Where the first closer of ``opener`` at or after ``start`` is (-1: none): looked up once, and again only
        once the scan is past it, however many openers share it."""
        known = self.closers.get(opener)
        if known is not None and known[0] <= start and (known[1] < 0 or known[1] >= start):
            return known[1]
        m = _CLOSERS[opener].search(self.text, start)
        self.closers[opener] = (start, m.start() if m else -1)
        if m is None:
            self.dead |= {opener}
        return self.closers[opener][1]

    def _brace_end(self, start: int) -> int:
        """The end of the brace placeholder whose head is at ``start``: its matching '}', or -1 (an unbalanced '{',
        one nested deeper than _MAX_BRACE_DEPTH or closed farther than _BRACE_REACH is left to the model)."""
        if not self.depth:
            self._nesting()
        # The depth before this '{' is L: its match is the first brace after it that brings the depth back to L,
        # unless one takes it past L + _MAX_BRACE_DEPTH first.
        level = self.depth[start] - 1
        back, deep = self._next_at(level, start), self._next_at(level + _MAX_BRACE_DEPTH + 1, start)
        if back < 0 or back >= start + _BRACE_REACH or 0 <= deep < back:
            return -1
        return back + 1

    def _nesting(self) -> None:
        depth = 0
        for m in _BRACE.finditer(self.text):
            depth += 1 if m.group() == "{" else -1
            self.depth[m.start()] = depth
            self.levels.setdefault(depth, []).append(m.start())

    def _next_at(self, level: int, after: int) -> int:
        at = self.levels.get(level, ())
        k = bisect.bisect_right(at, after)
        return at[k] if k < len(at) else -1


def _brace_near(text: str, start: int) -> int | None:
    """The end of the brace placeholder whose head is at ``start``, found by reading on from it (its matching '}'
    or -1) when that takes at most _NEAR braces; None: farther (``_Openers`` knows where, without reading on)."""
    depth, reach = 0, min(len(text), start + _BRACE_REACH)
    i = start
    for _ in range(_NEAR):
        m = _BRACE.search(text, i, reach)
        if m is None:
            return -1
        if m.group() == "{":
            depth += 1
            if depth > _MAX_BRACE_DEPTH:
                return -1
        else:
            depth -= 1
            if depth == 0:
                return m.end()
        i = m.end()
    return None


def _url_end(text: str, p: int, end: int) -> int:
    """A URL's end less its trailing sentence punctuation (a closing parenthesis stays when it balances one)."""
    opens = closes = -1
    while end > p and text[end - 1] in _URL_TAIL:
        if text[end - 1] == ")":
            if opens < 0:
                opens, closes = text.count("(", p, end), text.count(")", p, end)
            if opens >= closes:
                break
            closes -= 1
        end -= 1
    return end


def _next_email(text: str, pos: int) -> tuple[int, int, int] | None:
    """The first e-mail address that starts at or after pos: (its start, its '@', its end). An address matches
    from any position of its local part, so one whose local part holds pos starts at pos."""
    if pos > 0 and text[pos - 1] in _LOCAL_CHARS:  # pos is inside a run of local-part characters
        at = _LOCAL_RUN.match(text, pos).end()
        if at > pos and text.startswith("@", at):
            m = _DOMAIN.match(text, at + 1, _DOMAIN_RUN.match(text, at + 1).end())
            if m is not None:
                return pos, at, m.end()
        pos = at
    m = _EMAIL.search(text, pos)
    return (m.start(), text.index("@", m.start()), m.end()) if m is not None else None
