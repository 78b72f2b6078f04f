"""Request validation and preparation, shared by every API (seq2seq.v1 and KServe v2).

Turns texts and options into engine ``Sequence``s or raises ``InvalidInput`` naming the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.text import UnknownCharactersError
from server.config import SchedulerConfig
from server.engine import Sequence
from server.errors import InvalidInput
from server.repository import ModelVersion


@dataclass(frozen=True)
class GenOptions:
    max_new_tokens: int = 0  # 0 = the model's default
    beam: int = 1


@dataclass(frozen=True)
class Limits:
    max_input_tokens: int
    max_new_tokens: int
    max_inputs: int
    max_beam: int


def limits(mv: ModelVersion, sched: SchedulerConfig) -> Limits:
    m = mv.engine.config.model
    return Limits(max_input_tokens=m.max_len, max_new_tokens=m.max_len - 1,
                  max_inputs=sched.max_inputs_per_request, max_beam=min(sched.max_beam_size, sched.max_batch_size))


def prepare(mv: ModelVersion, texts: list[str], options: GenOptions, lim: Limits) -> list[Sequence]:
    name = mv.name
    if not texts:
        raise InvalidInput(f"model {name!r}: the request has no inputs; send at least one text")
    if len(texts) > lim.max_inputs:
        raise InvalidInput(f"model {name!r}: {len(texts)} inputs in one request; the limit is {lim.max_inputs}")
    if not 0 <= options.max_new_tokens <= lim.max_new_tokens:
        raise InvalidInput(f"max_new_tokens={options.max_new_tokens} is out of range: 0 (model default) to {lim.max_new_tokens}")
    if not 1 <= options.beam <= lim.max_beam:
        raise InvalidInput(f"beam_size={options.beam} is out of range: 1 to {lim.max_beam}")
    budget = options.max_new_tokens or mv.engine.config.task.max_new_tokens
    seqs = []
    for i, text in enumerate(texts):
        if not text.strip():
            raise InvalidInput(f"input {i} is empty")
        try:
            ids = mv.engine.codec.source_ids(text)
        except UnknownCharactersError as e:
            raise InvalidInput(f"input {i}: {e}") from None
        if len(ids) > lim.max_input_tokens:
            raise InvalidInput(f"input {i} has {len(ids)} tokens; model {name!r} accepts at most {lim.max_input_tokens}")
        seqs.append(Sequence(ids, budget, options.beam))
    return seqs
