"""Spans kept out of the model's hands: the spans of the source (``contract.spans``) the model is known to break
are replaced by numbered placeholders, and the output is repaired so that each span of the source comes back
exactly as often as in the source, byte for byte.

What the model reads: the short placeholders the default model saw thousands of times in training (``%s``,
``%d``, ``%1``, ``{0}``) and numbers stay as they are: it copies them, and masking them lowers chrF
(``docs/bench/notes/protected_spans.md``). Every other span (URLs, e-mail addresses, tags, entities, templates,
named placeholders such as ``%(name)s`` or ``{count}``) becomes ``{0}``, ``{1}``, ... (numbers the source's own
``{N}`` do not use). A pair of tags around the whole text (``<b>Save</b>``) never reaches the model: it is kept
around the translation. A source that is only spans and punctuation is not translated at all.

The repair, on the model's output, with the same rules: each span found there that stands for a span of the
source not yet placed is kept, any other (a repeat, a misspelt name, a ``%s`` the source did not have) dropped;
a number the model added stays (Japanese counters). A span the model lost is put back where it was in the source
(at the start if it started the source, after its neighbour if it followed one, else at the end); a tag pair the
model turned round (``</b>…<b>``) is turned back. The result is checked with the rules; if a restored span ran
into the model's text (a URL followed by ASCII letters), the spans are set apart by spaces, and if even that
fails the source is answered as it came: the guarantee never depends on what the model wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from contract.spans import Span, check, find_spans, is_close_tag, is_open_tag, tag_name

_WORD = re.compile(r"[^\W\d_]")  # a letter: a text with none outside its spans has nothing to translate
_BRACES = re.compile(r"[{}]")
_STOPS = "。．.！!？?：:"

# Kept as they are in the model's input: the short placeholders the default model saw thousands of times and
# copies (measured: masking them too lowers chrF); every other span is masked.
_AS_IS = re.compile(
    r"%[-+0#]*[0-9]*(?:\.[0-9]+)?(?:hh|h|ll|l|L|q|j|z|t)?[a-zA-Z@]|%%|%L?[1-9][0-9]?|\{[0-9]?\}"
)


def as_is(span: Span) -> bool:
    return span.kind == "number" or bool(_AS_IS.fullmatch(span.text))


@dataclass(frozen=True)
class Masked:
    source: str
    text: str  # what the model reads; "" = nothing to translate (the answer is the source)
    spans: tuple[Span, ...] = ()  # the source's spans inside text, in order
    marks: tuple[str, ...] = ()  # what stands for spans[i] in text: the span itself, or a placeholder
    head: str = ""  # kept as sent around the translation: whitespace and a tag pair around everything
    tail: str = ""
    leading: tuple[bool, ...] = ()  # span i comes before any word of the text
    follows: tuple[bool, ...] = ()  # span i comes right after span i - 1 (only whitespace between)
    pairs: tuple[tuple[int, int], ...] = ()  # (open, close) tags, as indexes into spans
    numbers: bool = True
    found: tuple[Span, ...] = ()  # every span of the source, those kept around the text included
    as_sent: bool = (
        False  # read as sent, not protected (a request turned it off, a target prefix): output as is
    )

    @property
    def changed(self) -> bool:
        return bool(self.spans or self.head or self.tail)


def _pairs(spans: list[Span]) -> dict[int, int]:
    """open index -> close index for the tags that match by name, nesting as a stack does: a close tag pairs with
    the innermost open tag of its name and closes every tag opened after that one (each tag is pushed and popped
    once, so a text of many unmatched tags costs no more than one of few)."""
    stack: list[int] = []
    by_name: dict[str, list[int]] = {}  # tag name -> its open tags' places in the stack, innermost last
    names: list[str] = []  # per stack entry
    out: dict[int, int] = {}
    for i, s in enumerate(spans):
        if s.kind != "tag":
            continue
        if is_open_tag(s.text):
            name = tag_name(s.text)
            by_name.setdefault(name, []).append(len(stack))
            stack.append(i)
            names.append(name)
        elif is_close_tag(s.text) and (open_at := by_name.get(tag_name(s.text))):
            k = open_at[-1]
            out[stack[k]] = i
            for name in names[k:]:
                by_name[name].pop()
            del stack[k:], names[k:]
    return out


def _marks(spans: list[Span], keep) -> tuple[str, ...]:
    """Each span's stand-in: itself where ``keep`` says so, else the next {N} the kept spans do not use."""
    used = {s.text for s in spans if keep(s)}
    n, out = 0, []
    for s in spans:
        if keep(s):
            out.append(s.text)
            continue
        while "{%d}" % n in used:
            n += 1
        out.append("{%d}" % n)
        n += 1
    return tuple(out)


def mask(text: str, numbers: bool = True, keep=as_is, spans: list[Span] | None = None) -> Masked:
    """The text the model reads for ``text``: itself when it has no span. ``keep(span)``: whether the span stays
    as it is (the benchmark compares policies; the server uses ``as_is``). ``spans``: the text's own, where they
    are known already (a piece of a longer text: the spans of that text inside the piece, offsets into the piece)."""
    spans = find_spans(text, numbers) if spans is None else spans
    if not spans:
        return Masked(text, text, numbers=numbers)
    found = tuple(spans)
    lo, hi = _inside(text, 0, len(text))
    first, last = 0, len(spans)
    pairs = _pairs(spans)
    # A tag pair around everything: kept as it is around the translation.
    while (
        first < last
        and spans[first].start == lo
        and pairs.get(first) == last - 1
        and spans[last - 1].end == hi
    ):
        lo, hi = _inside(text, spans[first].end, spans[last - 1].start)
        first, last = first + 1, last - 1
    inner = spans[first:last]
    head, tail = text[:lo], text[hi:]
    marks = _marks(inner, keep)
    pieces, pos = [], lo
    for s, mark in zip(inner, marks):
        pieces += [text[pos : s.start], mark]
        pos = s.end
    pieces.append(text[pos:hi])
    if not any(_WORD.search(p) for p in pieces[0::2]):
        return Masked(text, "", tuple(inner), marks, head, tail, numbers=numbers, found=found)
    letter = _WORD.search(text, lo)  # the first letter (a span's own too): the spans before it lead the text
    first_letter = letter.start() if letter is not None else hi
    leading = tuple(s.start <= first_letter for s in inner)
    follows = tuple(i > 0 and not text[inner[i - 1].end : s.start].strip() for i, s in enumerate(inner))
    inner_pairs = tuple((o - first, c - first) for o, c in pairs.items() if first <= o and c < last)
    return Masked(
        text, "".join(pieces), tuple(inner), marks, head, tail, leading, follows, inner_pairs, numbers, found
    )


def _inside(text: str, lo: int, hi: int) -> tuple[int, int]:
    """text[lo:hi] less the whitespace at its ends, as (lo, hi); (hi, lo) when it is only whitespace (nothing
    inside: the head then ends, and the tail starts, where the whitespace does)."""
    start = lo
    while start < hi and text[start].isspace():
        start += 1
    if start == hi:
        return hi, lo
    while text[hi - 1].isspace():
        hi -= 1
    return start, hi


def _parts(m: Masked, output: str) -> list[str | int]:
    """The output as text pieces and span indexes: each stand-in of a span not yet placed; other spans dropped
    (a number the model added stays)."""
    free: dict[str, list[int]] = {}
    for i, mark in enumerate(m.marks):
        free.setdefault(mark, []).append(i)
    parts: list[str | int] = []
    pos = 0
    for s in find_spans(output, m.numbers):
        slots = free.get(s.text)
        if not slots and s.kind == "number":
            continue
        parts.append(output[pos : s.start])
        if slots:
            parts.append(slots.pop(0))
        pos = s.end
    parts.append(output[pos:])
    if not _BRACES.search(
        re.sub(r"\{[0-9]+\}", "", m.text)
    ):  # a brace left over from a placeholder the model broke
        parts = [_BRACES.sub("", p) if isinstance(p, str) else p for p in parts]
    return parts


def _put_back(m: Masked, parts: list[str | int]) -> list[str | int]:
    present = {p for p in parts if isinstance(p, int)}
    for i in range(len(m.spans)):
        if i in present:
            continue
        if i - 1 in present and m.follows[i]:
            parts.insert(parts.index(i - 1) + 1, i)
        elif m.leading[i]:
            k = 0
            while k < len(parts) and (isinstance(parts[k], int) and parts[k] < i or parts[k] == ""):
                k += 1
            parts.insert(k, i)
        else:  # at the end, before the sentence's last punctuation ("…あります。" + "3" -> "…3あります。" is not
            # known, but "…あります3。" keeps the sentence whole)
            last = parts[-1] if parts and isinstance(parts[-1], str) else ""
            stop = len(last) - len(last.rstrip(_STOPS))
            if stop and len(last) > stop:
                parts[-1:] = [last[:-stop], i, last[-stop:]]
            else:
                parts.append(i)
        present.add(i)
    for o, c in m.pairs:  # a tag pair turned round: turned back
        a, b = parts.index(o), parts.index(c)
        if b < a:
            parts[a], parts[b] = c, o
    return parts


def drop_made_up(output: str) -> str:
    """An output whose source has no span, without the spans the model made up (a ``%s``, a tag; numbers stay)."""
    spans = find_spans(output, numbers=False)
    for s in reversed(spans):
        output = output[: s.start] + output[s.end :]
    return re.sub(" {2,}", " ", output).strip() if spans else output


def restore(m: Masked, output: str) -> str:
    """The model's output for ``m.text`` with every span of the source in it exactly as often as in the source."""
    if m.as_sent:
        return output
    if not m.changed:
        return drop_made_up(output)  # the source has no span: the output has none either
    if not m.text:
        return m.source
    parts = _put_back(m, _parts(m, output))
    for spaced in (False, True):
        pad = " " if spaced else ""
        body = "".join(f"{pad}{m.spans[p].text}{pad}" if isinstance(p, int) else p for p in parts)
        result = m.head + re.sub(" {2,}", " ", body).strip() if spaced else m.head + body.strip()
        result += m.tail
        if check(m.source, result, m.numbers, m.found).ok:
            return result
    return m.source  # the model's text could not be joined to the spans without changing one of them
