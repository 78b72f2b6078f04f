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
# Each level: what separates two pieces (kept as it is, between their translations). A block tag takes the
# whitespace around it along (found from the tag, not from each space before one: no run is read twice).
_BLOCK_TAG = re.compile(rf"</?(?:{_BLOCK})\b[^<>]*+>", re.I)
_LEVELS = (
    _BLOCK_TAG,
    re.compile(r"(?<=[.!?。！？])\s++|(?<=[.!?。！？][\"')\]])\s++"),
    re.compile(r"(?<=[,;:、，；：])\s++|(?<!\s)\s++(?=[-–—]\s)"),
    re.compile(r"\s++"),
)
_LINE_BREAKS = re.compile(r"[\r\n]+")


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
    return split_at(text, lambda a, b: fits(text[a:b]), spans)


def split_at(text: str, fits: Callable[[int, int], bool], spans: list[Span] = ()) -> Pieces:
    """``split``, with ``fits(a, b)`` asked of text[a:b] (a caller that knows the text's spans masks a piece from
    them, without finding them again)."""
    inside = bytearray(len(text) + 1)  # 1 where a cut would fall inside a span
    for s in spans:
        inside[s.start + 1 : s.end] = b"\x01" * (s.end - s.start - 1)
    bounds: list[tuple[int, int]] = []
    pos = 0
    for brk in _LINE_BREAKS.finditer(text):
        if inside[brk.start()]:  # a line break inside a span (a tag's attributes on two lines) is not a cut
            continue
        if (ab := _strip(text, pos, brk.start())) is not None:
            bounds += _fit(text, *ab, 0, fits, inside)
        pos = brk.end()
    if (ab := _strip(text, pos, len(text))) is not None:
        bounds += _fit(text, *ab, 0, fits, inside)
    return Pieces(text, tuple(bounds))


def _cuts(text: str, a: int, b: int, level: int):
    """(start, end) of each separator of ``level`` in text[a:b]."""
    last = a
    for m in _LEVELS[level].finditer(text, a, b):
        start, end = m.span()
        if level == 0:  # the whitespace around a block tag, back to the previous separator's end at most
            while start > last and text[start - 1].isspace():
                start -= 1
            while end < b and text[end].isspace():
                end += 1
            last = end
        yield start, end


def _fit(text: str, a: int, b: int, level: int, fits, inside) -> list[tuple[int, int]]:
    if fits(a, b):
        return [(a, b)]
    if level == len(_LEVELS):
        return _window(text, a, b, fits, inside)
    units, pos = [], a
    for start, end in _cuts(text, a, b, level):
        if inside[start] or start in (a, b) and end in (a, b):
            continue
        if (ab := _strip(text, pos, start)) is not None:
            units.append(ab)
        pos = end
    if (ab := _strip(text, pos, b)) is not None:
        units.append(ab)
    if len(units) < 2:
        return _fit(text, a, b, level + 1, fits, inside)
    out: list[tuple[int, int]] = []
    i = 0
    while i < len(units):
        # The most units from i on that fit together (at least units[i], fitted at the next level if it alone
        # does not): grown by doubling, then halved back (what fits grows with what it is given).
        last = _longest(i, len(units) - 1, lambda j, a=units[i][0]: fits(a, units[j][1]))
        if last == i:
            out += _fit(text, *units[i], level + 1, fits, inside)
        else:
            out.append((units[i][0], units[last][1]))
        i = last + 1
    return out


def _longest(lo: int, hi: int, fits_to: Callable[[int], bool]) -> int:
    """The largest j in [lo, hi] with fits_to(j), taking fits_to(lo) as given; by doubling the step from lo, then
    halving it (as many calls as the answer's distance from lo has bits, twice)."""
    step, good = 1, lo
    while good + step <= hi and fits_to(good + step):
        good += step
        step *= 2
    bad = min(hi + 1, good + step)  # fits_to(bad) is False (or bad is past hi)
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits_to(mid):
            good = mid
        else:
            bad = mid
    return good


def _window(text: str, a: int, b: int, fits, inside) -> list[tuple[int, int]]:
    """The longest runs that fit, one after the other; never inside a span: a run that would end inside one ends
    before it, or, where the span starts the run, after it (a span is masked, so it fits then)."""
    out = []
    while a < b:
        end = _longest(a + 1, b, lambda j, a=a: fits(a, j))
        if end < b and inside[end]:
            start = end
            while inside[start]:
                start -= 1  # to the span's first character
            if start > a and fits(a, start):
                end = start
            else:
                while end < b and inside[end]:
                    end += 1
        out.append(_strip(text, a, end) or (a, end))
        a = end
        while a < b and text[a].isspace():
            a += 1
    return out
