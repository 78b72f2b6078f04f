"""seq2seq.v1.Seq2Seq: protobuf <-> the model API's domain objects. Nothing else happens here."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import grpc

from contract.decoding import DecodingOptions
from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from server.models.registry import ServedModels
from server.models.results import Output
from server.models.text_plan import TextOptions
from server.telemetry.request_tracker import RequestTracker
from server.transport.grpc_interceptors import deadline_of
from server.transport.offload import off_loop_if

DEFAULT_OPTIONS = DecodingOptions()


def _output(o: Output) -> pb.Output:
    return pb.Output(
        text=o.text,
        input_tokens=o.input_tokens,
        output_tokens=o.output_tokens,
        hypotheses=[
            pb.Hypothesis(text=h.text, score=h.score, output_tokens=h.output_tokens) for h in o.hypotheses
        ],
        protected_spans=[pb.Span(kind=s.kind, text=s.text, start=s.start, end=s.end) for s in o.protected],
        pieces=o.pieces,
    )


_TEXT_DEFAULT = TextOptions()


def _text_options(request: pb.GenerateRequest) -> TextOptions:
    """The three optional flags; absent = on."""
    if not (
        request.HasField("protect_spans")
        or request.HasField("keep_numbers")
        or request.HasField("split_long")
    ):
        return _TEXT_DEFAULT
    on = {
        f: getattr(request, f) if request.HasField(f) else True
        for f in ("protect_spans", "keep_numbers", "split_long")
    }
    return TextOptions(**on)


def _options(request: pb.GenerateRequest) -> DecodingOptions:
    """GenerateOptions -> DecodingOptions: 0 / absent means the default where proto3 cannot tell them apart,
    and ``optional`` fields (where 0 is a value of its own) are read only when set."""
    o = request.options
    if not o.ListFields():  # the common request: no option set (building the dataclass costs ~10 us)
        return DEFAULT_OPTIONS
    # Requests repeat a few option sets: building the dataclass from the message costs ~7 us, a cache hit ~2.
    return _options_of(o.SerializeToString(deterministic=True))


@functools.lru_cache(maxsize=1024)
def _options_of(raw: bytes) -> DecodingOptions:
    o = pb.GenerateOptions.FromString(raw)
    given = {f.name: v for f, v in o.ListFields()}
    kw = {
        name: given[name]
        for name in (
            "length_penalty",
            "repetition_penalty",
            "sampling_topk",
            "sampling_topp",
            "sampling_temperature",
            "seed",
        )
        if name in given
    }
    return DecodingOptions(
        beam_size=o.beam_size,
        num_hypotheses=max(1, o.num_hypotheses),
        return_scores=o.return_scores,
        length_penalty_type=o.length_penalty_type,
        no_repeat_ngram_size=o.no_repeat_ngram_size,
        min_new_tokens=o.min_new_tokens,
        max_new_tokens=o.max_new_tokens,
        disable_unk=o.disable_unk,
        distinct_hypotheses=o.distinct_hypotheses,
        **kw,
    )


async def _prepare(model, request: pb.GenerateRequest):
    texts, prefixes = list(request.inputs), list(request.target_prefixes) or None
    prepare = functools.partial(
        model.prepare,
        texts,
        _options(request),
        prefixes,
        _text_options(request),
        request.source_language,
        request.target_language,
    )
    return await off_loop_if(model.long(texts, prefixes), prepare)


class Seq2SeqServicer(pb_grpc.Seq2SeqServicer):
    def __init__(self, repo: ServedModels, tracker: RequestTracker):
        self.repo, self.tracker = repo, tracker

    async def Generate(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> pb.GenerateResponse:
        async with self.tracker.track(request.model, "Generate"):
            model = self.repo.get(request.model, request.version)
            g = await model.generate(await _prepare(model, request), deadline_of(context))
            t = g.timings
            return pb.GenerateResponse(
                model=g.model,
                version=g.version,
                outputs=[_output(o) for o in g.outputs],
                timings=pb.Timings(
                    queue_seconds=t.queue_seconds,
                    time_to_first_token_seconds=t.time_to_first_token_seconds,
                    total_seconds=t.total_seconds,
                ),
            )

    async def GenerateStream(
        self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GenerateStreamResponse]:
        async with self.tracker.track(request.model, "GenerateStream"):
            model = self.repo.get(request.model, request.version)
            prepared = await _prepare(model, request)
            async for ev in model.stream(prepared, deadline_of(context)):
                yield pb.GenerateStreamResponse(
                    index=ev.index,
                    text_delta=ev.text_delta,
                    finished=ev.finished,
                    output=_output(ev.output) if ev.output else None,
                )

    async def ListModels(
        self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListModelsResponse:
        out = []
        for name, versions in sorted(self.repo.models.items()):
            info = self.repo.get(name).info()
            lim = info.limits
            out.append(
                pb.ModelInfo(
                    name=name,
                    version=info.version,
                    task=info.task,
                    provider=info.provider,
                    max_input_tokens=lim.max_input_tokens,
                    max_new_tokens=lim.max_new_tokens,
                    max_inputs_per_request=lim.max_inputs,
                    max_beam_size=lim.max_beam,
                    versions=sorted(versions, key=int),
                    quantization=info.quantization,
                    max_input_chars=lim.max_input_chars,
                    max_rows_per_request=lim.max_rows,
                    option_limits=[
                        pb.OptionLimit(name=r.name, min=r.min, max=r.max, default=r.default, note=r.note)
                        for r in lim.options
                    ],
                    source_languages=info.languages.sources if info.languages else (),
                    target_languages=info.languages.targets if info.languages else (),
                )
            )
        return pb.ListModelsResponse(models=out)
