"""KServe v2 / Triton gRPC (``inference.GRPCInferenceService``): protobuf <-> the protocol-neutral
``InferRequest`` (``server/kserve/tensors.py``) and back, and the stream window of ModelStreamInfer.

A second servicer on the same grpc.aio server as seq2seq.v1, mapping onto the same model API and
request tracking (methods "ModelInfer" and "ModelStreamInfer"). The answer mirrors the request:
``text_input`` sent in ``raw_input_contents`` (tritonclient always does) -> ``text_output`` in
``raw_output_contents``, as Triton answers; sent in ``contents.bytes_contents`` (grpcurl, hand-built
requests) -> answered in ``contents.bytes_contents``. See docs/KSERVE.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import grpc
from google.protobuf import json_format

from contract.version import __version__
from protos.inference import grpc_service_pb2 as pb
from protos.inference import grpc_service_pb2_grpc as pb_grpc
from server.config import StreamConfig
from server.errors import ModelNotFound, ModelNotReady, ServingError, clip, clip_details
from server.kserve.infer import InferAnswer, infer
from server.kserve.parse import flag
from server.kserve.protocol import EXTENSIONS, MAX_ID_CHARS, model_config, model_metadata
from server.kserve.repository_grpc import RepositoryServicer
from server.kserve.statistics import model_statistics
from server.kserve.tensors import InferInput, InferRequest, encode_values
from server.models.control import ModelControl
from server.models.registry import ServedModels
from server.telemetry.request_tracker import RequestTracker
from server.transport.grpc_interceptors import deadline_of

log = logging.getLogger("s2s.kserve")

_CONTENTS = {"BYTES": "bytes_contents", "INT64": "int64_contents", "INT32": "int_contents"}


def from_message(request) -> InferRequest:
    """A ModelInferRequest as plain data. A framing problem is named in ``problem``, for parse to raise where
    it checks the request (after the model's name: an unknown model is NOT_FOUND whatever the body holds)."""
    raw = list(request.raw_input_contents)
    problem = ""
    if raw:
        if len(raw) != len(request.inputs):
            problem = (
                f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs; "
                "send one per input, in the order of inputs"
            )
        for t in request.inputs:
            if t.HasField("contents") and not problem:
                problem = f"input {t.name!r} sets contents while the request uses raw_input_contents; use one or the other"
    inputs = []
    for i, t in enumerate(request.inputs):
        field = _CONTENTS.get(t.datatype)
        values = list(getattr(t.contents, field)) if field and not raw else None
        inputs.append(InferInput(t.name, t.datatype, list(t.shape), raw[i] if i < len(raw) else None, values))
    params = {}
    for key, p in request.parameters.items():
        kind = p.WhichOneof("parameter_choice") or ""
        params[key] = (kind, getattr(p, kind) if kind else None)
    return InferRequest(
        request.model_name,
        request.model_version,
        request.id,
        inputs,
        [o.name for o in request.outputs],
        params,
        bool(raw),
        problem,
    )


def to_message(a: InferAnswer):
    resp = pb.ModelInferResponse(model_name=a.model, model_version=a.version, id=a.id)
    for o in a.outputs:
        t = resp.outputs.add(name=o.name, datatype=o.datatype, shape=o.shape)
        if a.raw:
            resp.raw_output_contents.append(encode_values(o.datatype, o.values))
        elif o.datatype == "BYTES":
            t.contents.bytes_contents.extend(v.encode("utf-8") for v in o.values)
        elif o.datatype == "FP32":
            t.contents.fp32_contents.extend(o.values)
        else:
            t.contents.int64_contents.extend(o.values)
    for key, value in a.parameters.items():
        resp.parameters[key].double_param = value
    return resp


class KServeServicer(RepositoryServicer, pb_grpc.GRPCInferenceServiceServicer):
    pb = pb  # for the repository RPCs (server/kserve/repository_grpc.py)

    def __init__(
        self, repo: ServedModels, stream: StreamConfig, tracker: RequestTracker, control: ModelControl
    ):
        self.repo, self.stream, self.tracker, self.control = repo, stream, tracker, control

    # ---- health and metadata -------------------------------------------------------------------
    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=self.repo.ready)

    async def ModelReady(self, request, context):
        # As Triton: an unknown model or version is simply not ready (tritonclient's is_model_ready -> False).
        try:
            model = self.repo.get(request.name, request.version)
        except (ModelNotFound, ModelNotReady):  # ModelNotReady: unloaded
            return pb.ModelReadyResponse(ready=False)
        return pb.ModelReadyResponse(ready=model.ready)

    async def ServerMetadata(self, request, context):
        return pb.ServerMetadataResponse(name="s2s", version=__version__, extensions=list(EXTENSIONS))

    async def ModelMetadata(self, request, context):
        model = self.repo.get(request.name, request.version)
        return json_format.ParseDict(model_metadata(self.repo, model), pb.ModelMetadataResponse())

    async def ModelConfig(self, request, context):
        model = self.repo.get(request.name, request.version)
        return pb.ModelConfigResponse(config=json_format.ParseDict(model_config(model), pb.ModelConfig()))

    async def ModelStatistics(self, request, context):
        stats = model_statistics(self.repo, self.tracker.statistics, request.name, request.version)
        return json_format.ParseDict(stats, pb.ModelStatisticsResponse())

    # ---- inference -----------------------------------------------------------------------------
    async def _infer(self, request, deadline: float | None, plain: InferRequest | None = None):
        return to_message(await infer(self.repo, plain or from_message(request), deadline))

    async def ModelInfer(self, request, context):
        async with self.tracker.track(request.model_name, "ModelInfer"):
            return await self._infer(request, deadline_of(context))

    async def _stream_one(self, request, context: grpc.aio.ServicerContext):
        # An id over the limit is refused (below, by parse) and not echoed: the answer carries none.
        rid = request.id if len(request.id) <= MAX_ID_CHARS else ""
        try:
            async with self.tracker.track(request.model_name, "ModelStreamInfer"):
                plain = from_message(request)
                resp = await self._infer(request, deadline_of(context), plain)
            if flag(plain.parameters, "triton_enable_empty_final_response"):
                # tritonclient's enable_empty_final_response: one response per request, so this one is the last.
                resp.parameters["triton_final_response"].bool_param = True
            return pb.ModelStreamInferResponse(infer_response=resp)
        except ServingError as e:  # fails this request of the stream only: an error message, not a status
            message = clip_details(str(e))
        except (
            Exception
        ) as e:  # a bug must fail this request, not the stream (the tracker counted it INTERNAL)
            log.exception("ModelStreamInfer: request %s failed", clip(request.id))
            message = f"internal error ({type(e).__name__}); see server log"
        if rid:  # as Triton: the client can tell which request of the stream failed
            message = f"[request id: {rid}] {message}"
        name = request.model_name if len(request.model_name) <= MAX_ID_CHARS else ""
        return pb.ModelStreamInferResponse(
            error_message=message,
            infer_response=pb.ModelInferResponse(
                model_name=name, model_version=request.model_version[:MAX_ID_CHARS], id=rid
            ),
        )

    async def ModelStreamInfer(self, request_iterator, context) -> AsyncIterator:
        """Each request runs as soon as it arrives, concurrently with the others (so they batch); each
        response is sent when its request finishes, carrying the request's id.

        Backpressure: a request holds a place in the stream's window from the moment it is read until
        its answer has been handed to gRPC, so a client that sends without reading stalls its own
        stream (the reader stops, HTTP/2 flow control stops the client) instead of piling up answers
        in server memory. The window holds at most ``stream.max_pending`` requests and
        ``stream.max_pending_bytes`` of requests and answers (always at least one)."""
        out: asyncio.Queue = asyncio.Queue()  # bounded by the window: only answers that hold a place
        window = Window(self.stream.max_pending, self.stream.max_pending_bytes)
        tasks: set[asyncio.Task] = set()

        async def one(request, size: int) -> None:
            response = await self._stream_one(request, context)
            del request  # the answer's size replaces the request's in the window
            grown = response.ByteSize()
            window.resize(size, grown)
            out.put_nowait((response, grown))

        async def read() -> None:
            try:
                async for request in request_iterator:
                    size = request.ByteSize()
                    await window.acquire(size)
                    task = asyncio.ensure_future(one(request, size))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                if tasks:
                    await asyncio.gather(*tasks)
            finally:
                out.put_nowait(None)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await out.get()) is not None:
                response, size = item
                yield response  # returns once gRPC has taken the message (flow control permitting)
                window.release(size)
            reader.result()  # a failed read fails the stream
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()


class Window:
    """Places for a stream's unanswered and unsent requests, counted and in bytes (one waiter: its reader)."""

    def __init__(self, max_count: int, max_bytes: int):
        self.max_count, self.max_bytes = max(1, max_count), max_bytes
        self.count = self.bytes = 0
        self.freed = asyncio.Event()

    def _fits(self, size: int) -> bool:
        # One request always fits, however large (it is already within the message-size limit).
        return self.count == 0 or (self.count < self.max_count and self.bytes + size <= self.max_bytes)

    async def acquire(self, size: int) -> None:
        while not self._fits(size):
            self.freed.clear()
            await self.freed.wait()
        self.count += 1
        self.bytes += size

    def resize(self, old: int, new: int) -> None:
        self.bytes += new - old

    def release(self, size: int) -> None:
        self.count -= 1
        self.bytes -= size
        self.freed.set()


def add_kserve(
    server: grpc.aio.Server,
    repo: ServedModels,
    stream: StreamConfig,
    tracker: RequestTracker,
    control: ModelControl,
) -> None:
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(KServeServicer(repo, stream, tracker, control), server)
