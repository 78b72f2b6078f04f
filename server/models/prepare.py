"""Request validation and preparation, the model API's first step for every front door.

Turns texts, decoding options (``contract.decoding.DecodingOptions``, which every front door builds)
and target prefixes into ids for the engine cores, or raises ``InvalidInput`` naming the limit.
Cheap checks (counts, lengths, option ranges) come before any tokenization.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from contract import decoding
from contract.bundle import BundleConfig
from contract.decoding import DecodingOptions
from contract.text import TextCodec, UnknownCharactersError
from server.config import SchedulerConfig
from server.errors import InvalidInput
from server.models import languages
from server.models.text_plan import AS_SENT, MAX_TEXT_CHARS, Plan, TextOptions, TooManyRows, plan


@dataclass(frozen=True)
class Limits:
    """What one request may ask of a model; every front door checks these before any work."""

    max_input_tokens: int
    # Checked before tokenizing: translation models split longer inputs into pieces up to MAX_TEXT_CHARS; for
    # other tasks (and requests that turn splitting off, max_unsplit_chars) no text this long fits in max_input_tokens.
    max_input_chars: int
    max_new_tokens: int
    max_inputs: int
    max_beam: int
    # inputs x beam: a request is queued whole, so more rows than the queue holds could never be
    # admitted; beyond this it is INVALID_ARGUMENT, never an endless RESOURCE_EXHAUSTED.
    max_rows: int
    vocab_size: int = 0  # sampling_topk's bound
    max_prefix_tokens: int = 0  # a target prefix leaves room for at least one new token
    default_beam: int = (
        1  # a request's beam when it names none (the bundle's task.beam_size, within max_beam)
    )
    options: list[decoding.Range] = field(
        default_factory=list
    )  # every option's range, as ListModels shows them
    max_unsplit_chars: int = 0  # the most characters max_input_tokens can hold (0: max_input_chars)

    @property
    def max_input_bytes(self) -> int:
        return 4 * self.max_input_chars  # UTF-8: at most 4 bytes a character


@dataclass(frozen=True)
class Prepared:
    """A validated request: per input its source ids (EOS and any language token included) and target prefix ids,
    and the options (beam_size and max_new_tokens resolved to the model's defaults when 0; a sampled request's
    seed drawn when none was given)."""

    src_ids: list[list[int]]
    options: DecodingOptions
    prefixes: list[list[int]]
    plan: Plan | None = (
        None  # the inputs as the model reads them (spans protected, long ones split), if changed
    )
    protected: bool = (
        False  # spans protected: an output has none its input has not (made-up ones are dropped)
    )
    # The target language's token(s), forced before every input's prefix and left out of its answer
    forced: tuple[int, ...] = ()

    @property
    def max_new_tokens(self) -> int:
        return self.options.max_new_tokens

    @property
    def beam(self) -> int:
        return self.options.beam_size

    @property
    def rows(self) -> int:
        return len(self.src_ids) * self.beam


def limits(config: BundleConfig, codec: TextCodec, sched: SchedulerConfig) -> Limits:
    m = config.model
    max_beam = min(sched.max_beam_size, sched.max_batch_size)
    max_prefix = max(0, m.max_len - 2)
    default_beam = max(1, min(config.task.beam_size, max_beam))
    unsplit = codec.max_chars(m.max_len)
    chars = max(unsplit, MAX_TEXT_CHARS) if config.task.name == "translation" else unsplit
    return Limits(
        max_input_tokens=m.max_len,
        max_input_chars=chars,
        max_unsplit_chars=unsplit,
        max_new_tokens=m.max_len - 1,
        max_inputs=sched.max_inputs_per_request,
        max_beam=max_beam,
        max_rows=min(sched.max_queue_size, sched.max_inputs_per_request * max_beam),
        vocab_size=m.tgt_vocab_size,
        max_prefix_tokens=max_prefix,
        default_beam=default_beam,
        options=decoding.ranges(
            max_beam,
            m.max_len - 1,
            m.tgt_vocab_size,
            max_prefix,
            default_beam,
            config.task.length_penalty_type,
        ),
    )


# A request this long or shorter (the usual one: a sentence or a few) is prepared on the event loop, where the densest
# markup of this length plans in a few milliseconds; a longer one in the parse lane.
INLINE_CHARS = 256


def is_long(texts: list[str], target_prefixes: list[str] | None, lim: Limits) -> bool:
    """Whether preparing these texts may take long enough to keep it off the event loop: planning a long text
    (its spans, its pieces, their tokens) takes milliseconds; a short one, the usual request, less than a hand-off
    to the parse lane costs (and too many inputs are refused at once)."""
    return len(texts) <= lim.max_inputs and (
        sum(map(len, texts)) + sum(map(len, target_prefixes or ())) > INLINE_CHARS
    )


def check_options(options: DecodingOptions, lim: Limits) -> None:
    try:
        decoding.check(options, lim.max_beam, lim.max_new_tokens, lim.vocab_size)
    except ValueError as e:
        raise InvalidInput(str(e)) from None


def prepare(
    name: str,
    config: BundleConfig,
    codec: TextCodec,
    texts: list[str],
    options: DecodingOptions,
    lim: Limits,
    target_prefixes: list[str] | None = None,
    text: TextOptions = AS_SENT,
    asked: languages.Asked = languages.AS_SENT,
) -> Prepared:
    if not texts:
        raise InvalidInput(f"model {name!r}: the request has no inputs; send at least one text")
    if len(texts) > lim.max_inputs:
        raise InvalidInput(
            f"model {name!r}: {len(texts)} inputs in one request; the limit is {lim.max_inputs}"
        )
    options, named = _resolve(options, config, lim)
    # The model's default beam is narrowed where a request's rows (its inputs, or their pieces) x that beam would
    # pass max_rows: down to num_hypotheses, so that any input within the limits is served.
    narrowest = options.beam_size if named else max(1, options.num_hypotheses)
    _check_rows(name, texts, target_prefixes, lim, narrowest, named)
    _check_lengths(name, texts, target_prefixes, lim, text)
    max_tokens = lim.max_input_tokens - asked.lead  # a source language token is read first
    planned = _plan(name, codec, texts, target_prefixes, text, max_tokens, lim.max_rows, narrowest, named)
    if planned is not None:
        out, target_prefixes = planned.ids, planned.prefixes
    else:
        out = _source_ids(name, codec, texts, max_tokens)
    if len(out) * options.beam_size > lim.max_rows:
        options = options.replace(beam_size=lim.max_rows // len(out))
    if asked.languages is not None:
        out = [asked.source_ids(ids) for ids in out]
    forced = len(asked.forced)  # the forced language token comes first
    prefixes = [
        _prefix_ids(name, codec, i, p, lim.max_prefix_tokens - forced, forced)
        for i, p in enumerate(target_prefixes or [""] * len(out))
    ]
    if (
        options.sampling and options.seed is None
    ):  # drawn here, so the core (and a retry of the same request) has one
        options = options.replace(seed=secrets.randbits(63))
    return Prepared(
        out,
        options,
        prefixes,
        planned if planned is not None and planned.changed else None,
        text.protect_spans and not target_prefixes,
        asked.forced,
    )


def _resolve(options: DecodingOptions, config: BundleConfig, lim: Limits) -> tuple[DecodingOptions, bool]:
    """The request's options checked as sent, then resolved against the model's defaults (and checked again where
    that changed them); and whether the request chose its beam (a beam it chose is never narrowed)."""
    check_options(options, lim)  # the request's own values, as the client sent them, in any message
    # beam_size 0 -> the model's default (never wider than this server allows), max_new_tokens 0 -> its budget
    task = config.task
    named = options.beam_size != 0 or options.sampling  # a beam the request chose: never narrowed
    resolved = options.resolved(
        lim.default_beam,
        task.max_new_tokens,
        task.length_penalty_type,
        task.length_penalty,
        task.no_repeat_ngram_size,
    )
    if resolved is not options:  # e.g. sampling resolves beam 0 to 1, narrower than num_hypotheses=2
        check_options(resolved, lim)
    return resolved, named


def _check_rows(
    name: str, texts: list[str], target_prefixes: list[str] | None, lim: Limits, narrowest: int, named: bool
) -> None:
    """One target prefix per input (or none), and the inputs x the narrowest beam within max_rows."""
    if target_prefixes and len(target_prefixes) != len(texts):
        raise InvalidInput(
            f"{len(target_prefixes)} target prefixes for {len(texts)} inputs; send none, or one per input "
            "(empty for no prefix)"
        )
    if len(texts) * narrowest > lim.max_rows:
        raise InvalidInput(
            f"model {name!r}: {len(texts)} inputs x beam_size {narrowest} = {len(texts) * narrowest} "
            f"rows; one request may have at most {lim.max_rows} (max_rows_per_request): send fewer "
            "inputs per request" + (" or a narrower beam" if named else "")
        )


def _check_lengths(
    name: str, texts: list[str], target_prefixes: list[str] | None, lim: Limits, text: TextOptions
) -> None:
    """Cheap checks on every input before any is tokenized: one oversized text costs nothing."""
    split = text.split_long and lim.max_input_chars > lim.max_unsplit_chars
    max_chars = lim.max_input_chars if split or not lim.max_unsplit_chars else lim.max_unsplit_chars
    for i, t in enumerate(texts):
        if len(t) > max_chars:
            raise InvalidInput(
                f"input {i} has {len(t)} characters; model {name!r} accepts at most {max_chars}"
                + (
                    " (max_input_chars; inputs longer than the model reads are split into pieces up to this)"
                    if split
                    else f" ({lim.max_input_tokens} tokens"
                    + ("; split_long splits longer inputs)" if text is not AS_SENT else ")")
                )
            )
        if not t.strip():
            raise InvalidInput(f"input {i} is empty")
    for i, p in enumerate(target_prefixes or ()):
        if len(p) > lim.max_input_chars:
            raise InvalidInput(
                f"target prefix {i} has {len(p)} characters; model {name!r} accepts at most "
                f"{lim.max_input_chars}"
            )


def _source_ids(name: str, codec: TextCodec, texts: list[str], max_tokens: int) -> list[list[int]]:
    """Each input's token ids as sent (no text options), at most ``max_tokens`` each."""
    out = []
    for i, t in enumerate(texts):
        try:
            ids = codec.source_ids(t)
        except UnknownCharactersError as e:
            raise InvalidInput(f"input {i}: {e}") from None
        if len(ids) > max_tokens:
            raise InvalidInput(
                f"input {i} has {len(ids)} tokens; model {name!r} accepts at most {max_tokens}"
            )
        out.append(ids)
    return out


def _plan(
    name: str,
    codec: TextCodec,
    texts: list[str],
    prefixes: list[str] | None,
    text: TextOptions,
    max_tokens: int,
    max_rows: int,
    narrowest: int,
    named: bool,
) -> Plan | None:
    """The request's plan, None where it has no text options; refused once its rows pass what max_rows leaves
    at the narrowest beam it may have (planning stops there)."""
    if not text.any:
        return None
    try:
        return plan(name, codec, texts, prefixes, text, max_tokens, max_rows // narrowest)
    except TooManyRows as e:
        where = "its lines" if e.input is None else f"input {e.input}"
        raise InvalidInput(
            f"model {name!r}: the inputs are read as at least {e.rows} pieces ({where}; one per line, and more for "
            f"a line longer than the model reads) x beam_size {narrowest} = {e.rows * narrowest} rows; one request "
            f"may have at most {max_rows} (max_rows_per_request): send fewer or shorter inputs"
            + (", or a narrower beam" if named and narrowest > 1 else "")
        ) from None


def _prefix_ids(name: str, codec: TextCodec, i: int, text: str, room: int, forced: int) -> list[int]:
    """A target prefix tokenized as a target (no BOS/EOS), within the room it leaves for new tokens."""
    if not text:
        return []
    try:
        ids = codec.target_ids(text)
    except UnknownCharactersError as e:
        raise InvalidInput(f"target prefix {i}: {e}") from None
    sp = codec.special
    if {sp.pad, sp.bos, sp.eos} & set(ids):
        raise InvalidInput(f"target prefix {i} holds a special token (<pad>, <bos> or <eos>); send text only")
    if len(ids) > room:
        raise InvalidInput(
            f"target prefix {i} has {len(ids)} tokens; model {name!r} accepts at most "
            f"{room} (target_prefix_tokens{', less the forced language token' if forced else ''}), leaving "
            "room for new ones"
        )
    return ids
