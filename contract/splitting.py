"""A text longer than the model reads, cut into pieces it can read, to be translated apart and joined back.

Cuts, coarsest first, each tried only inside a piece that is still too long: line breaks (always: the model was
trained on one line at a time, and a line break it never saw would be lost), block tags (``<p>``, ``<li>``,
``<br>``, ..., kept between the pieces as they are), sentence ends, clause punctuation, any whitespace, and as a last resort a window of characters
(the longest run that fits). Within a level, neighbouring units are packed into one piece while they fit, so the
model sees as much context as it can. No cut falls inside a protected span. Pieces carry no whitespace at their
ends: what lies between two pieces (spaces, line breaks) is the source's own and is put back as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from contract.spans import Span

_BLOCK = (
    "address|article|aside|blockquote|br|dd|details|div|dl|dt|figcaption|figure|footer|form|h[1-6]|header|hr|"
    "li|main|nav|ol|p|pre|section|summary|table|tbody|td|tfoot|th|thead|tr|ul"
)
# Each level: what separates two pieces (kept as it is, between their translations).
_LEVELS = (
    re.compile(rf"\s*</?(?:{_BLOCK})\b[^<>]*>\s*", re.I),
    re.compile(r"(?<=[.!?。！？])\s+|(?<=[.!?。！？][\"')\]])\s+"),
    re.compile(r"(?<=[,;:、，；：])\s+|\s+(?=[-–—]\s)"),
    re.compile(r"\s+"),
)


@dataclass(frozen=True)
class Pieces:
    """``text[glue ends]``: pieces[i] is text[starts[i]:ends[i]]; what lies between pieces is kept as sent."""

    text: str
    bounds: tuple[tuple[int, int], ...]

    @property
    def pieces(self) -> list[str]:
        return [self.text[a:b] for a, b in self.bounds]

    def join(self, translations: list[str]) -> str:
        out, pos = [], 0
        for (a, b), t in zip(self.bounds, translations):
            out += [self.text[pos:a], t]
            pos = b
        out.append(self.text[pos:])
        return "".join(out)


def _strip(text: str, a: int, b: int) -> tuple[int, int] | None:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return (a, b) if a < b else None


def split(text: str, fits: Callable[[str], bool], spans: list[Span] = ()) -> Pieces:
    """The pieces of ``text``: each line (when there are several), and within a line that does not ``fit``, the
    coarsest cuts that make every piece fit; no cut inside one of ``spans``."""
    inside = bytearray(len(text) + 1)  # 1 where a cut would fall inside a span
    for s in spans:
        inside[s.start + 1 : s.end] = b"\x01" * (s.end - s.start - 1)
    bounds: list[tuple[int, int]] = []
    pos = 0
    for brk in re.finditer(r"[\r\n]+", text):
        if inside[brk.start()]:  # a line break inside a span (a tag's attributes on two lines) is not a cut
            continue
        if (ab := _strip(text, pos, brk.start())) is not None:
            bounds += _fit(text, *ab, 0, fits, inside)
        pos = brk.end()
    if (ab := _strip(text, pos, len(text))) is not None:
        bounds += _fit(text, *ab, 0, fits, inside)
    return Pieces(text, tuple(bounds))


def _fit(text: str, a: int, b: int, level: int, fits, inside) -> list[tuple[int, int]]:
    if fits(text[a:b]):
        return [(a, b)]
    if level == len(_LEVELS):
        return _window(text, a, b, fits, inside)
    units, pos = [], a
    for m in _LEVELS[level].finditer(text, a, b):
        if inside[m.start()] or m.start() in (a, b) and m.end() in (a, b):
            continue
        if (ab := _strip(text, pos, m.start())) is not None:
            units.append(ab)
        pos = m.end()
    if (ab := _strip(text, pos, b)) is not None:
        units.append(ab)
    if len(units) < 2:
        return _fit(text, a, b, level + 1, fits, inside)
    out: list[tuple[int, int]] = []
    cur = units[0]
    for u in units[1:]:
        if fits(text[cur[0] : u[1]]):
            cur = (cur[0], u[1])
        else:
            out += _fit(text, *cur, level + 1, fits, inside)
            cur = u
    return out + _fit(text, *cur, level + 1, fits, inside)


def _window(text: str, a: int, b: int, fits, inside) -> list[tuple[int, int]]:
    """The longest runs that fit, one after the other (binary search on the end); never inside a span, so a
    run may be longer than fits where a span is (it is masked, so it fits then)."""
    out = []
    while a < b:
        lo, hi = a + 1, b  # the end of the longest fitting run lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(text[a:mid]):
                lo = mid
            else:
                hi = mid - 1
        end = lo
        while end < b and inside[end]:
            end += 1
        out.append(_strip(text, a, end) or (a, end))
        a = end
        while a < b and text[a].isspace():
            a += 1
    return out
