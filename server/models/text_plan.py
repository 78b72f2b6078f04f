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

import dataclasses
from dataclasses import dataclass

from contract.masking import Masked, drop_made_up, mask, restore
from contract.spans import Span, find_spans
from contract.splitting import Pieces, split
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
) -> Plan:
    """The rows the model reads for ``texts`` and their ids (tokenized once, also where they are the texts as
    sent: ``changed`` False). Raises InvalidInput naming the input and the limit."""
    memo: dict[str, list[int]] = {}

    def ids_of(text: str, i: int) -> list[int]:
        if text not in memo:
            try:
                memo[text] = codec.source_ids(text)
            except UnknownCharactersError as e:
                raise InvalidInput(f"input {i}: {e}") from None
        return memo[text]

    inputs, rows, row_ids, row_prefix, changed = [], [], [], [], False
    numbers = opts.protect_spans and opts.keep_numbers
    for i, text in enumerate(texts):
        prefix = prefixes[i] if prefixes else ""
        whole = mask(text, numbers) if opts.protect_spans and not prefix else Masked(text, text, as_sent=True)
        ids = ids_of(whole.text, i) if whole.text else []
        fits = len(ids) <= max_tokens
        lines = "\n" in text.strip() or "\r" in text.strip()
        if not opts.split_long or prefix or (fits and not lines):
            if not fits:
                raise InvalidInput(
                    f"input {i} has {len(ids)} tokens; model {name!r} accepts at most {max_tokens}"
                    + ("" if prefix else " (send split_long to have it split into pieces)")
                )
            pieces, masks = None, (whole,)
        else:

            def fit(piece: str, i=i) -> bool:
                m = mask(piece, numbers) if opts.protect_spans else Masked(piece, piece, as_sent=True)
                return not m.text or len(ids_of(m.text, i)) <= max_tokens

            pieces = split(text, fit, find_spans(text, numbers) if opts.protect_spans else [])
            masks = tuple(
                mask(p, numbers) if opts.protect_spans else Masked(p, p, as_sent=True) for p in pieces.pieces
            )
        row_of = []
        for m in masks:
            if m.text:
                row_of.append(len(rows))
                rows.append(m.text)
                row_ids.append(ids_of(m.text, i))
                row_prefix.append(prefix)
                if len(row_ids[-1]) > max_tokens:  # a span longer than the model reads, kept whole
                    raise InvalidInput(
                        f"input {i} has a piece of {len(row_ids[-1])} tokens that cannot be cut "
                        f"(one span); model {name!r} reads at most {max_tokens}"
                    )
            else:
                row_of.append(-1)
        protected = (
            (whole.found if pieces is None else tuple(find_spans(text, numbers)))
            if opts.protect_spans and not prefix
            else ()
        )
        changed = changed or pieces is not None or whole.changed or row_of != [i]
        inputs.append(InputPlan(text, masks, tuple(row_of), pieces, protected))
    return Plan(tuple(inputs), rows, row_ids, row_prefix if prefixes else None, changed)
