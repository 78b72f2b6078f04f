"""What the model reads for a request's texts, and how its outputs become the answers: protected spans
(``contract.masking``) and long inputs split into pieces (``contract.splitting``), all of one request's pieces in
the same submission (one continuous batch), joined back per input.

On by default for translation models (``TextOptions``; every door has a field to turn each off); other tasks read
their inputs as sent. An input with a target prefix is read as sent too: the prefix is the start of the whole
output, which a split or masked input no longer has. A request none of whose inputs has a span, a line break or
more tokens than the model reads is decoded as sent (``Plan.changed`` False); its texts are tokenized once here
either way: ordinary requests pay for one regular-expression scan per input.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import operator
import re
from dataclasses import dataclass

from contract.masking import Masked, drop_made_up, mask, restore
from contract.spans import Span, find_spans
from contract.splitting import Pieces, split_at
from contract.text import TextCodec, UnknownCharactersError
from engine.search import TextHypothesis
from server.errors import InvalidInput

# Characters of one input when long inputs are split (per input; a request's pieces also count as rows:
# pieces x beam <= max_rows_per_request). A page of text; the model reads 64 tokens at a time.
MAX_TEXT_CHARS = 4096


@dataclass(frozen=True)
class TextOptions:
    """Per request; each on unless a request turns it off (and off for models that are not translation models)."""

    protect_spans: bool = True  # placeholders, markup, URLs, e-mail addresses kept byte for byte
    keep_numbers: bool = True  # numbers written as digits kept (protected as spans)
    split_long: bool = True  # inputs longer than the model reads (and every line) translated piece by piece

    @property
    def any(self) -> bool:
        return self.protect_spans or self.split_long


AS_SENT = TextOptions(False, False, False)


@dataclass(frozen=True)
class InputPlan:
    source: str
    masks: tuple[Masked, ...]  # one per piece (one: the input whole)
    rows: tuple[int, ...]  # per piece: its row among what the model reads, -1 = answered without the model
    pieces: Pieces | None = None  # None: not split
    protected: tuple[Span, ...] = ()  # the source's spans kept, offsets into the source


@dataclass(frozen=True)
class Plan:
    inputs: tuple[InputPlan, ...]
    texts: list[str]  # what the model reads, one per row
    ids: list[list[int]]  # their source ids
    prefixes: list[str] | None  # one per row, or None
    changed: bool = True  # False: the rows are the inputs as sent (only their ids are of use)

    @property
    def rows(self) -> int:
        return len(self.texts)

    @property
    def streamable(self) -> bool:
        """Every input is read by the model as sent, one row each (spans it copies, numbers): its text can be
        streamed token by token and repaired at the end."""
        return all(ip.rows == (i,) and ip.masks[0].text == ip.source for i, ip in enumerate(self.inputs))

    def answer_one(self, i: int, output, output_type: type):
        """Input i's output from its one row's (``streamable`` plans only)."""
        return _answer(self.inputs[i], {i: output}, output_type)

    def answer(self, outputs: list, output_type: type) -> list:
        """The model's outputs (``results.Output``, one per row) -> one ``output_type`` (``results.Output``, which
        imports this module's neighbour prepare.py: hence passed in) per input."""
        return [_answer(ip, outputs, output_type) for ip in self.inputs]


def without_made_up(outputs: list) -> list:
    """Outputs (``results.Output``) of inputs that have no span, without spans the model made up."""
    out = []
    for o in outputs:
        texts = [drop_made_up(h.text) for h in o.hypotheses]
        if any(t != h.text for t, h in zip(texts, o.hypotheses)):  # rare: a copy only then
            hyps = tuple(dataclasses.replace(h, text=t) for t, h in zip(texts, o.hypotheses))
            o = dataclasses.replace(o, text=hyps[0].text, hypotheses=hyps)
        out.append(o)
    return out


def _answer(ip: InputPlan, outputs: list, output_type: type):
    outs = [outputs[r] if r >= 0 else None for r in ip.rows]
    n = max((len(o.hypotheses) for o in outs if o), default=1)
    hyps = []
    for k in range(n):
        texts, tokens, score = [], [], 0.0
        for m, o in zip(ip.masks, outs):
            if o is None:
                texts.append(restore(m, ""))
                continue
            h = (
                o.hypotheses[min(k, len(o.hypotheses) - 1)]
                if o.hypotheses
                else TextHypothesis(o.text, [], 0.0)
            )
            texts.append(restore(m, h.text))
            tokens += h.tokens
            score += h.score
        text = ip.pieces.join(texts) if ip.pieces else texts[0]
        hyps.append(TextHypothesis(text, tokens, score))
    return output_type(
        hyps[0].text,
        sum(o.input_tokens for o in outs if o),
        hyps[0].output_tokens,
        tuple(hyps),
        protected=ip.protected,
        pieces=len(ip.masks),
    )


def plan(
    name: str,
    codec: TextCodec,
    texts: list[str],
    prefixes: list[str] | None,
    opts: TextOptions,
    max_tokens: int,
    max_rows: int | None = None,
) -> Plan:
    """The rows the model reads for ``texts`` and their ids (tokenized once, also where they are the texts as
    sent: ``changed`` False). Raises InvalidInput naming the input and the limit, and TooManyRows where there are
    more than ``max_rows`` rows: before anything is tokenized where the lines that must each be a row of their
    own are that many already, else as soon as the rows planned are."""
    numbers = opts.protect_spans and opts.keep_numbers
    reads = [_Read(text, prefixes[i] if prefixes else "", opts, numbers) for i, text in enumerate(texts)]
    if max_rows is not None and (least := sum(r.least_rows for r in reads)) > max_rows:
        raise TooManyRows(least, None)
    tokens = _Tokens(codec, max_tokens)
    inputs, rows, row_ids, row_prefix, changed = [], [], [], [], False
    for i, r in enumerate(reads):
        masks, pieces = r.plan(name, tokens, i)
        row_of = []
        for m in masks:
            if not m.text:
                row_of.append(-1)
                continue
            row_of.append(len(rows))
            rows.append(m.text)
            row_ids.append(tokens.ids(m.text, i))
            row_prefix.append(r.prefix)
            if len(row_ids[-1]) > max_tokens:  # a span longer than the model reads, kept whole
                raise InvalidInput(
                    f"input {i} has a piece of {len(row_ids[-1])} tokens that cannot be cut "
                    f"(one span); model {name!r} reads at most {max_tokens}"
                )
            if max_rows is not None and len(rows) > max_rows:
                raise TooManyRows(len(rows), i)
        changed = changed or pieces is not None or r.whole.changed or row_of != [i]
        inputs.append(InputPlan(r.text, masks, tuple(row_of), pieces, tuple(r.spans)))
    return Plan(tuple(inputs), rows, row_ids, row_prefix if prefixes else None, changed)


_LETTER_LINE = re.compile(r"[^\W\d_][^\r\n]*")  # a line from its first letter on


class _Read:
    """One input as the model will read it: its spans (found once) and its whole mask, before any tokenizing."""

    def __init__(self, text: str, prefix: str, opts: TextOptions, numbers: bool):
        self.text, self.prefix, self.numbers = text, prefix, numbers
        self.protect = opts.protect_spans and not prefix
        self.split_long = opts.split_long and not prefix
        self.spans = find_spans(text, numbers) if self.protect else []
        self.whole = (
            mask(text, numbers, spans=self.spans) if self.protect else Masked(text, text, as_sent=True)
        )
        self.lines = "\n" in text.strip() or "\r" in text.strip()

    @property
    def least_rows(self) -> int:
        """Rows it has at least: split, each line with a letter outside the spans has a piece of its own."""
        if not self.whole.text:
            return 0
        if not (self.split_long and self.lines):
            return 1
        return len(_LETTER_LINE.findall(self.blanked))

    @functools.cached_property
    def blanked(self) -> str:
        """The text with its spans blanked (a letter in one is none outside; a line break in one ends no line)."""
        out, pos = [], 0
        for s in self.spans:
            out += [self.text[pos : s.start], " " * (s.end - s.start)]
            pos = s.end
        out.append(self.text[pos:])
        return "".join(out)

    def plan(self, name: str, tokens: _Tokens, i: int) -> tuple[tuple[Masked, ...], Pieces | None]:
        """Its pieces' masks (one: the input whole) and its pieces (None: not split)."""
        whole = self.whole
        if not whole.text:
            fits = True
        elif self.split_long:
            fits = tokens.fits(whole.text, i)
        else:
            fits = tokens.count(whole.text, i) <= tokens.max_tokens
        if not self.split_long or (fits and not self.lines):
            if not fits:
                raise InvalidInput(
                    f"input {i} has {tokens.count(whole.text, i)} tokens; model {name!r} accepts at most "
                    f"{tokens.max_tokens}"
                    + ("" if self.prefix else " (send split_long to have it split into pieces)")
                )
            return (whole,), None
        piece = _Pieces(self, tokens.max_chars)
        pieces = split_at(self.text, lambda a, b: piece.fits(a, b, tokens, i), self.spans)
        return tuple(piece.masked(a, b) for a, b in pieces.bounds), pieces


class TooManyRows(Exception):
    """More rows than a request may have: ``rows`` found by input ``input`` (None: before any was planned, from
    the lines that must each be a row)."""

    def __init__(self, rows: int, i: int | None):
        super().__init__(f"{rows} rows" + ("" if i is None else f" by input {i}"))
        self.rows, self.input = rows, i


class _Tokens:
    """Source ids of texts, each tokenized once; whether a text fits, without tokenizing one that has more
    characters than ``max_tokens`` tokens can hold."""

    def __init__(self, codec: TextCodec, max_tokens: int):
        self.codec, self.max_tokens, self.memo = codec, max_tokens, {}
        self.max_chars = codec.max_chars(max_tokens) or None

    def fits(self, text: str, i: int) -> bool:
        # NFKC can compose a text longer than max_chars into one that fits: such a text is split further than
        # it had to be, never sent whole when it does not fit.
        return (self.max_chars is None or len(text) <= self.max_chars) and self.count(
            text, i
        ) <= self.max_tokens

    def count(self, text: str, i: int) -> int:
        return len(self.ids(text, i))

    def ids(self, text: str, i: int) -> list[int]:
        if text not in self.memo:
            try:
                self.memo[text] = self.codec.source_ids(text)
            except UnknownCharactersError as e:
                raise InvalidInput(f"input {i}: {e}") from None
        return self.memo[text]


class _Pieces:
    """The masks of one input's pieces, each made once from the input's spans inside it (found once); whether a
    piece fits, told without masking it where counts over the input tell: with spans and no letter outside them it
    is answered as sent (its mask is empty), and one whose mask would be longer than ``max_chars`` does not fit (every
    character outside a span but whitespace stays in the mask, and every span but a tag, as at least one character:
    a pair of tags around the whole piece is kept around its translation instead)."""

    def __init__(self, read: _Read, max_chars: int | None):
        self.text, self.spans, self.numbers, self.protect = read.text, read.spans, read.numbers, read.protect
        self.starts = [s.start for s in self.spans]
        self.memo: dict[tuple[int, int], Masked] = {}
        self.max_chars = max_chars
        outside = read.blanked  # [^\W\d_], as str methods say it: a letter
        self.letters = [
            0,
            *itertools.accumulate(map(operator.gt, map(str.isalnum, outside), map(str.isdecimal, outside))),
        ]
        kept = bytearray(map(str.isspace, self.text)).translate(_FLIP)  # 1: not whitespace
        for s in self.spans:
            kept[s.start : s.end] = bytes(s.end - s.start)
            kept[s.start] = s.kind != "tag"
        self.least = [0, *itertools.accumulate(kept)]  # the mask of text[a:b] has least[b] - least[a] or more

    def fits(self, a: int, b: int, tokens: _Tokens, i: int) -> bool:
        if self.protect and self.letters[b] == self.letters[a] and self._has_span(a, b):
            return True
        if self.max_chars is not None and self.least[b] - self.least[a] > self.max_chars:
            return False
        m = self.masked(a, b)
        return not m.text or tokens.fits(m.text, i)

    def _has_span(self, a: int, b: int) -> bool:
        k = bisect.bisect_left(self.starts, a)
        return k < len(self.spans) and self.spans[k].end <= b

    def masked(self, a: int, b: int) -> Masked:
        m = self.memo.get((a, b))
        if m is None:
            piece = self.text[a:b]
            if not self.protect:
                m = Masked(piece, piece, as_sent=True)
            else:
                k, inside = bisect.bisect_left(self.starts, a), []
                while k < len(self.spans) and self.spans[k].end <= b:
                    s = self.spans[k]
                    inside.append(Span(s.start - a, s.end - a, s.kind, s.text))
                    k += 1
                m = mask(piece, self.numbers, spans=inside)
            self.memo[a, b] = m
        return m


_FLIP = bytes([1, 0]) + bytes(254)
