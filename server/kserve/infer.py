"""One KServe inference, from either binding: parse the protocol-neutral request, call the model API, and
build the answer as plain tensors. The bindings only translate their wire format to ``InferRequest`` and
``InferAnswer`` to their wire format: the way goes down (binding -> parse -> model API -> core) and back
up once, with no return into a file it has left."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from server.kserve.parse import Parsed, parse
from server.kserve.protocol import EXTRA_OUTPUTS, PER_INPUT_OUTPUTS, TEXT_OUTPUT
from server.kserve.tensors import InferRequest
from server.models.registry import ServedModels
from server.models.results import Generation
from server.transport.offload import off_loop_if


@dataclass(frozen=True)
class OutputTensor:
    name: str
    datatype: str  # BYTES (str values), INT64 or FP32
    shape: list[int]
    values: list  # flat, in row-major order


@dataclass(frozen=True)
class InferAnswer:
    """A ModelInferResponse as plain data: what both bindings encode."""

    model: str
    version: str
    id: str
    outputs: list[OutputTensor]  # text_output first, then the optional outputs in the order asked
    raw: bool  # answer in raw bytes (raw_output_contents / the binary extension), as the request came
    parameters: dict[str, float]  # the request's timings, where it asked for them (else empty)


def answer(request_id: str, p: Parsed, g: Generation) -> InferAnswer:
    n = p.options.num_hypotheses
    nbest = [list(o.hypotheses) + [None] * (n - len(o.hypotheses)) for o in g.outputs]
    per = {
        "input_tokens": [o.input_tokens for o in g.outputs],
        "output_tokens": [o.output_tokens for o in g.outputs],
        "hypotheses": [h.text if h else "" for row in nbest for h in row],
        "scores": [h.score if h else 0.0 for row in nbest for h in row],
        "protected_spans": [
            json.dumps(
                [{"kind": s.kind, "text": s.text, "start": s.start, "end": s.end} for s in o.protected],
                ensure_ascii=False,
            )
            for o in g.outputs
        ],
        "pieces": [o.pieces for o in g.outputs],
    }
    outputs = [OutputTensor(TEXT_OUTPUT, "BYTES", p.shape, [o.text for o in g.outputs])]
    outputs += [
        OutputTensor(
            key, EXTRA_OUTPUTS[key], p.shape if key in PER_INPUT_OUTPUTS else [p.shape[0], n], per[key]
        )
        for key in p.counts
    ]
    t = g.timings
    timings = (
        {
            "queue_seconds": t.queue_seconds,
            "time_to_first_token_seconds": t.time_to_first_token_seconds,
            "total_seconds": t.total_seconds,
        }
        if p.timings
        else {}
    )
    return InferAnswer(g.model, g.version, request_id, outputs, p.raw, timings)


async def infer(served: ServedModels, request: InferRequest, deadline: float | None) -> InferAnswer:
    """Raises ServingError (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, ...) naming the problem."""
    p = parse(served, request, deadline)
    prepare = functools.partial(p.model.prepare, p.texts, p.options, p.prefixes, p.text, *p.languages)
    prepared = await off_loop_if(p.model.long(p.texts, p.prefixes), prepare)
    g = await p.model.generate(prepared, p.deadline)
    return answer(request.id, p, g)
