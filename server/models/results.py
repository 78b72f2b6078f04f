"""What the model API answers every front door with, as small frozen dataclasses; each door maps these
to its wire format and nothing else.

One family from the engine to the wire: the engine's ``Hypothesis`` (token ids and score) travels
inside the core's ``Finished`` event (``server/core_wire/events.py``) unchanged; the model API detokenizes
it once into the engine's ``TextHypothesis``, the same type the in-process ``Translator`` answers with;
the doors only encode them (protobuf, JSON).
"""

from __future__ import annotations

from dataclasses import dataclass

from contract.spans import Span
from engine.search import TextHypothesis
from server.models.languages import Offered
from server.models.prepare import Limits


@dataclass(frozen=True)
class Output:
    text: str  # hypotheses[0].text
    input_tokens: int
    output_tokens: int
    hypotheses: tuple[TextHypothesis, ...] = ()  # num_hypotheses of them, best first
    protected: tuple[Span, ...] = ()  # the input's spans kept as they were (server/models/text_plan.py)
    pieces: int = 1  # what the input was translated as: more than one when it was split


@dataclass(frozen=True)
class Timings:
    queue_seconds: float  # arrival until the last of its inputs joined a batch
    time_to_first_token_seconds: float
    total_seconds: float


@dataclass(frozen=True)
class Generation:
    model: str
    version: str
    outputs: list[Output]  # in input order
    timings: Timings


@dataclass(frozen=True)
class StreamEvent:
    index: int
    text_delta: str
    finished: bool = False
    output: Output | None = None


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    task: str
    provider: str
    quantization: str
    limits: Limits
    cores: int
    cores_up: int
    languages: Offered | None = None  # the pairs it translates; None: a model without languages
