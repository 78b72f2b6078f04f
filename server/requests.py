"""Request validation and preparation, the model API's first step for every front door.

Turns texts and options into source ids for the engine cores, or raises ``InvalidInput`` naming
the limit. Cheap checks (counts, lengths) come before any tokenization.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.bundle import BundleConfig
from contract.text import TextCodec, UnknownCharactersError
from server.config import SchedulerConfig
from server.errors import InvalidInput


@dataclass(frozen=True)
class GenOptions:
    max_new_tokens: int = 0  # 0 = the model's default
    beam: int = 1


@dataclass(frozen=True)
class Limits:
    """What one request may ask of a model; every front door checks these before any work."""

    max_input_tokens: int
    max_input_chars: int  # checked before tokenizing: no text this long fits in max_input_tokens
    max_new_tokens: int
    max_inputs: int
    max_beam: int
    # inputs x beam: a request is queued whole, so more rows than the queue holds could never be
    # admitted; beyond this it is INVALID_ARGUMENT, never an endless RESOURCE_EXHAUSTED.
    max_rows: int

    @property
    def max_input_bytes(self) -> int:
        return 4 * self.max_input_chars  # UTF-8: at most 4 bytes a character


@dataclass(frozen=True)
class Prepared:
    """A validated request: per input its source ids (EOS included), the token budget and the beam."""

    src_ids: list[list[int]]
    max_new_tokens: int
    beam: int

    @property
    def rows(self) -> int:
        return len(self.src_ids) * self.beam


def limits(config: BundleConfig, codec: TextCodec, sched: SchedulerConfig) -> Limits:
    m = config.model
    max_beam = min(sched.max_beam_size, sched.max_batch_size)
    return Limits(max_input_tokens=m.max_len, max_input_chars=codec.max_chars(m.max_len),
                  max_new_tokens=m.max_len - 1, max_inputs=sched.max_inputs_per_request, max_beam=max_beam,
                  max_rows=min(sched.max_queue_size, sched.max_inputs_per_request * max_beam))


def prepare(name: str, config: BundleConfig, codec: TextCodec, texts: list[str], options: GenOptions,
            lim: Limits) -> Prepared:
    if not texts:
        raise InvalidInput(f"model {name!r}: the request has no inputs; send at least one text")
    if len(texts) > lim.max_inputs:
        raise InvalidInput(f"model {name!r}: {len(texts)} inputs in one request; the limit is {lim.max_inputs}")
    if not 0 <= options.max_new_tokens <= lim.max_new_tokens:
        raise InvalidInput(f"max_new_tokens={options.max_new_tokens} is out of range: 0 (model default) to {lim.max_new_tokens}")
    if not 1 <= options.beam <= lim.max_beam:
        raise InvalidInput(f"beam_size={options.beam} is out of range: 1 to {lim.max_beam}")
    if len(texts) * options.beam > lim.max_rows:
        raise InvalidInput(f"model {name!r}: {len(texts)} inputs x beam_size {options.beam} = {len(texts) * options.beam} "
                           f"rows; one request may have at most {lim.max_rows} (max_rows_per_request): send fewer "
                           "inputs per request or a narrower beam")
    # Cheap checks on every input before any is tokenized: one oversized text costs nothing.
    for i, text in enumerate(texts):
        if len(text) > lim.max_input_chars:
            raise InvalidInput(f"input {i} has {len(text)} characters; model {name!r} accepts at most "
                               f"{lim.max_input_chars} ({lim.max_input_tokens} tokens)")
        if not text.strip():
            raise InvalidInput(f"input {i} is empty")
    budget = options.max_new_tokens or config.task.max_new_tokens
    out = []
    for i, text in enumerate(texts):
        try:
            ids = codec.source_ids(text)
        except UnknownCharactersError as e:
            raise InvalidInput(f"input {i}: {e}") from None
        if len(ids) > lim.max_input_tokens:
            raise InvalidInput(f"input {i} has {len(ids)} tokens; model {name!r} accepts at most {lim.max_input_tokens}")
        out.append(ids)
    return Prepared(out, budget, options.beam)
