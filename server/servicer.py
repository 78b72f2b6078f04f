"""seq2seq.v1.Seq2Seq: protobuf <-> the model API's domain objects. Nothing else happens here."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from server.calls import RequestTracker, deadline_of
from server.model_api import Output
from server.repository import Repository
from server.requests import GenOptions


def _output(o: Output) -> pb.Output:
    return pb.Output(text=o.text, input_tokens=o.input_tokens, output_tokens=o.output_tokens)


def _options(request: pb.GenerateRequest) -> GenOptions:
    return GenOptions(max_new_tokens=request.options.max_new_tokens, beam=max(1, request.options.beam_size))


class Seq2SeqServicer(pb_grpc.Seq2SeqServicer):
    def __init__(self, repo: Repository, tracker: RequestTracker):
        self.repo, self.tracker = repo, tracker

    async def Generate(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext) -> pb.GenerateResponse:
        async with self.tracker.track(context, request.model, "Generate"):
            model = self.repo.get(request.model, request.version)
            g = await model.generate(model.prepare(list(request.inputs), _options(request)), deadline_of(context))
            t = g.timings
            return pb.GenerateResponse(
                model=g.model, version=g.version, outputs=[_output(o) for o in g.outputs],
                timings=pb.Timings(queue_seconds=t.queue_seconds, time_to_first_token_seconds=t.time_to_first_token_seconds,
                                   total_seconds=t.total_seconds))

    async def GenerateStream(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateStreamResponse]:
        async with self.tracker.track(context, request.model, "GenerateStream"):
            model = self.repo.get(request.model, request.version)
            prepared = model.prepare(list(request.inputs), _options(request))
            async for ev in model.stream(prepared, deadline_of(context)):
                yield pb.GenerateStreamResponse(index=ev.index, text_delta=ev.text_delta, finished=ev.finished,
                                                output=_output(ev.output) if ev.output else None)

    async def ListModels(self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext) -> pb.ListModelsResponse:
        out = []
        for name, versions in sorted(self.repo.models.items()):
            info = self.repo.get(name).info()
            lim = info.limits
            out.append(pb.ModelInfo(
                name=name, version=info.version, task=info.task, provider=info.provider,
                max_input_tokens=lim.max_input_tokens, max_new_tokens=lim.max_new_tokens,
                max_inputs_per_request=lim.max_inputs, max_beam_size=lim.max_beam,
                versions=sorted(versions, key=int), quantization=info.quantization,
                max_input_chars=lim.max_input_chars, max_rows_per_request=lim.max_rows,
            ))
        return pb.ListModelsResponse(models=out)
