"""KServe v2 / Triton gRPC inference protocol (``inference.GRPCInferenceService``): protobuf <-> domain
objects, validation, status codes. No ONNX Runtime here.

A second servicer on the same grpc.aio server as seq2seq.v1, mapping onto the same model API
(validation, limits, engine cores) and request metrics (``RequestTracker``, methods "ModelInfer" and
"ModelStreamInfer"). Each model takes a BYTES tensor ``text_input`` of shape [N] (or [N, 1]) and
answers a BYTES tensor ``text_output`` of the same shape, one text per input, in order. Decoding
options are request parameters named as in seq2seq.v1 / CTranslate2 (``DECODING_PARAMETERS``: beam_size,
num_hypotheses, return_scores, sampling_topk, ...); ``max_tokens`` / ``beam_width`` (Triton's names for
max_new_tokens / beam_size) may also be optional INT64/INT32 inputs of shape [1]; 0 or absent = the
model's default. An optional BYTES input ``target_prefix`` of text_input's shape gives each input's
prefix ("" = none). Optional outputs ``hypotheses`` (BYTES) and ``scores`` (FP32), shape [N,
num_hypotheses], carry the n-best lists. Triton's ``timeout`` request parameter (microseconds) shortens
the deadline. Other request parameters are ignored.

Output encoding: the response mirrors the request. ``text_input`` sent in ``raw_input_contents``
(tritonclient always does) -> ``text_output`` in ``raw_output_contents`` (4-byte little-endian
length before each element), as Triton answers; sent in ``contents.bytes_contents`` (grpcurl,
hand-built requests) -> answered in ``contents.bytes_contents``. See docs/KSERVE.md.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import struct
import sys
import time
import types
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc

from s2s import __version__
from server.calls import RequestTracker, deadline_of
from server.config import StreamConfig
from server.errors import InvalidInput, ModelNotFound, ModelNotReady, ServingError, clip
from server.kserve_repository import RepositoryServicer
from server.model_api import ModelAPI
from server.model_control import ModelControl
from server.repository import Repository
from contract.decoding import DecodingOptions
from server.requests import Limits, check_options

log = logging.getLogger("s2s.kserve")

_PB = "protos.inference.grpc_service_pb2"
_PB_GRPC = "protos.inference.grpc_service_pb2_grpc"
# Every message and enum protos/inference/grpc_service.proto declares (the stand-in below needs them all).
_MESSAGES = (
    "ServerLiveRequest", "ServerLiveResponse", "ServerReadyRequest", "ServerReadyResponse", "ModelReadyRequest",
    "ModelReadyResponse", "ServerMetadataRequest", "ServerMetadataResponse", "ModelMetadataRequest",
    "ModelMetadataResponse", "InferParameter", "InferTensorContents", "ModelInferRequest", "ModelInferResponse",
    "ModelStreamInferResponse", "ModelConfigRequest", "ModelConfigResponse", "RepositoryIndexRequest",
    "RepositoryIndexResponse", "ModelRepositoryParameter", "RepositoryModelLoadRequest", "RepositoryModelLoadResponse",
    "RepositoryModelUnloadRequest", "RepositoryModelUnloadResponse", "ModelInput", "ModelOutput", "ModelParameter", "ModelConfig",
)


def _registered_stand_in(err: TypeError) -> types.ModuleType:
    """The generated module's contents, built from the ``inference`` descriptors already in protobuf's
    default pool.

    Another generated copy of the same public protocol (tritonclient's ``grpc_service.proto``, in a
    process that is also a client, such as the test suite) registers the same ``inference.*`` names,
    and the default pool refuses a second file that defines them. Both copies keep the
    specification's field numbers, so the wire format is the same and the registered classes serve.
    """
    from google.protobuf import descriptor_pool, message_factory
    from google.protobuf.internal import enum_type_wrapper

    pool = descriptor_pool.Default()
    mod = types.ModuleType(_PB, "Stand-in for the generated module: the `inference` protocol as already registered.")
    try:
        mod.DESCRIPTOR = pool.FindServiceByName("inference.GRPCInferenceService").file
        for name in _MESSAGES:
            setattr(mod, name, message_factory.GetMessageClass(pool.FindMessageTypeByName(f"inference.{name}")))
        enum = pool.FindEnumTypeByName("inference.DataType")
    except KeyError as e:
        raise RuntimeError(f"protos/inference/grpc_service.proto cannot be loaded ({err}), and the `inference` "
                           f"package already loaded in this process lacks {e}: import only one copy of it") from err
    mod.DataType = enum_type_wrapper.EnumTypeWrapper(enum)
    for v in enum.values:
        setattr(mod, v.name, v.number)
    return mod


def _load_protos() -> tuple[types.ModuleType, types.ModuleType]:
    try:
        pb = importlib.import_module(_PB)
    except TypeError as e:  # "Couldn't build proto file into descriptor pool: duplicate symbol 'inference....'"
        pb = _registered_stand_in(e)
        sys.modules[_PB] = pb  # what server.app (reflection) and the generated *_pb2_grpc import
        log.info("KServe protocol: using the `inference` descriptors already registered in this process (%s)",
                 pb.DESCRIPTOR.name)
    return pb, importlib.import_module(_PB_GRPC)


pb, pb_grpc = _load_protos()

TEXT_INPUT, TEXT_OUTPUT = "text_input", "text_output"
# Optional INT64 outputs of text_input's shape, sent only when asked for by name in `outputs`: the
# token counts that seq2seq.v1's Output carries. Each answer also has the request's timings as
# response parameters (queue_seconds, time_to_first_token_seconds, total_seconds).
COUNT_OUTPUTS = ("input_tokens", "output_tokens")
# The n-best lists, [N, num_hypotheses] (padded with "" and 0 where a tiny vocabulary left fewer): texts, scores.
NBEST_OUTPUTS = {"hypotheses": "BYTES", "scores": "FP32"}
EXTRA_OUTPUTS = {**dict.fromkeys(COUNT_OUTPUTS, "INT64"), **NBEST_OUTPUTS}
TARGET_PREFIX = "target_prefix"  # optional BYTES input, text_input's shape
OPTIONS = ("max_tokens", "beam_width")  # request parameters or optional inputs
ALIASES = {"max_tokens": "max_new_tokens", "beam_width": "beam_size"}  # Triton's name -> ours
# Request parameters -> DecodingOptions fields, by the kind of value each takes.
DECODING_PARAMETERS = {
    "beam_size": int, "num_hypotheses": int, "max_new_tokens": int, "min_new_tokens": int, "no_repeat_ngram_size": int,
    "sampling_topk": int, "seed": int, "length_penalty": float, "repetition_penalty": float, "sampling_topp": float,
    "sampling_temperature": float, "return_scores": bool, "disable_unk": bool, "distinct_hypotheses": bool, "length_penalty_type": str,
}
PLATFORM, BACKEND = "s2s", "onnxruntime"
EXTENSIONS = ("model_configuration", "parameters")
# Triton echoes a request's id in its response; a longer one is refused rather than copied into
# every answer and error of a stream.
MAX_ID_CHARS = 256


# ---- tensors -----------------------------------------------------------------------------------
def _shape(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def split_bytes(buf: bytes, what: str) -> list[bytes]:
    """A BYTES tensor's raw encoding: each element as a 4-byte little-endian length, then its bytes."""
    out, off, n = [], 0, len(buf)
    while off < n:
        if n - off < 4:
            raise InvalidInput(f"{what} is malformed: element {len(out)} at byte {off} has a truncated length prefix "
                               f"({n - off} of 4 bytes)")
        (size,) = struct.unpack_from("<I", buf, off)
        off += 4
        if size > n - off:
            raise InvalidInput(f"{what} is malformed: element {len(out)} declares {size} bytes but only {n - off} "
                               f"remain (each element is a 4-byte little-endian length, then the bytes)")
        out.append(buf[off:off + size])
        off += size
    return out


def join_bytes(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in items)


def _texts(model: str, t, raw: bytes | None, lim: Limits) -> tuple[list[str], list[int]]:
    TEXT_INPUT = t.name  # noqa: N806 (text_input or target_prefix: the same checks, named after the tensor)
    if t.datatype != "BYTES":
        raise InvalidInput(f"input {TEXT_INPUT!r} has datatype {t.datatype!r}; model {model!r} expects 'BYTES'")
    dims = list(t.shape)
    if not (len(dims) == 1 or (len(dims) == 2 and dims[1] == 1)) or dims[0] < 0:
        raise InvalidInput(f"input {TEXT_INPUT!r} has shape {_shape(dims)}; model {model!r} expects [-1] or [-1, 1] "
                           "(one text per row)")
    if dims[0] > lim.max_inputs:  # before any element is split or decoded
        raise InvalidInput(f"model {model!r}: {dims[0]} inputs in one request; the limit is {lim.max_inputs}")
    if raw is not None:
        items = split_bytes(raw, f"raw_input_contents for input {TEXT_INPUT!r}")
        where = "raw_input_contents"
    else:
        items = list(t.contents.bytes_contents)
        where = "contents.bytes_contents"
    if len(items) != dims[0]:
        raise InvalidInput(f"input {TEXT_INPUT!r} has {len(items)} elements in {where} but its shape {_shape(dims)} "
                           f"needs {dims[0]}")
    for i, b in enumerate(items):
        if len(b) > lim.max_input_bytes:
            raise InvalidInput(f"input {TEXT_INPUT!r} element {i} has {len(b)} bytes; model {model!r} accepts at most "
                               f"{lim.max_input_chars} characters ({lim.max_input_tokens} tokens)")
    texts = []
    for i, b in enumerate(items):
        try:
            texts.append(b.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise InvalidInput(f"input {TEXT_INPUT!r} element {i} is not valid UTF-8 ({e.reason} at byte {e.start})") from None
    return texts, dims


def _scalar(t, raw: bytes | None) -> int:
    """An optional INT64/INT32 input of shape [1] (or [1, 1])."""
    if t.datatype not in ("INT64", "INT32"):
        raise InvalidInput(f"input {t.name!r} has datatype {t.datatype!r}; expected 'INT64' or 'INT32'")
    dims = list(t.shape)
    if not dims or any(d != 1 for d in dims):
        raise InvalidInput(f"input {t.name!r} has shape {_shape(dims)}; expected [1]")
    if raw is not None:
        size = 8 if t.datatype == "INT64" else 4
        if len(raw) != size:
            raise InvalidInput(f"raw_input_contents for input {t.name!r} has {len(raw)} bytes; one {t.datatype} is {size}")
        return int.from_bytes(raw, "little", signed=True)
    values = list(t.contents.int64_contents if t.datatype == "INT64" else t.contents.int_contents)
    if len(values) != 1:
        field = "int64_contents" if t.datatype == "INT64" else "int_contents"
        raise InvalidInput(f"input {t.name!r} has {len(values)} values in contents.{field}; expected 1")
    return values[0]


def _int_param(params, key: str) -> int | None:
    if key not in params:
        return None
    p = params[key]
    kind = p.WhichOneof("parameter_choice")
    if kind not in ("int64_param", "uint64_param"):
        raise InvalidInput(f"parameter {key!r} must be an integer (int64_param), got {kind or 'no value'}")
    return getattr(p, kind)


def _param(params, key: str, kind: type):
    """A decoding option given as a request parameter, or None; InvalidInput naming the kind it needs."""
    if key not in params:
        return None
    p = params[key]
    got = p.WhichOneof("parameter_choice")
    if kind is int and got in ("int64_param", "uint64_param"):
        return getattr(p, got)
    if kind is float and got in ("double_param", "int64_param", "uint64_param"):
        return float(getattr(p, got))
    if kind is bool and got == "bool_param":
        return p.bool_param
    if kind is str and got == "string_param":
        return p.string_param
    want = {int: "an integer (int64_param)", float: "a number (double_param)", bool: "a boolean (bool_param)",
            str: "a string (string_param)"}[kind]
    raise InvalidInput(f"parameter {key!r} must be {want}, got {got or 'no value'}")


def _flag(params, key: str) -> bool:
    return key in params and params[key].WhichOneof("parameter_choice") == "bool_param" and params[key].bool_param


# ---- requests ----------------------------------------------------------------------------------
@dataclass
class Parsed:
    model: ModelAPI
    texts: list[str]
    shape: list[int]
    options: DecodingOptions
    raw: bool  # answer in raw_output_contents
    deadline: float | None
    counts: tuple[str, ...] = ()  # EXTRA_OUTPUTS asked for, in the order asked
    prefixes: list[str] | None = None


def parse(repo: Repository, request, deadline: float | None) -> Parsed:
    """Validate a ModelInferRequest; raises ServingError (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE) naming the problem."""
    if len(request.id) > MAX_ID_CHARS:
        raise InvalidInput(f"request id has {len(request.id)} characters; the limit is {MAX_ID_CHARS}")
    model = repo.get(request.model_name, request.model_version)
    lim = model.limits
    if not model.ready:
        raise ModelNotReady(f"model {model.name!r} version {model.version} is not ready (shutting down, or no engine "
                            "core running); retry")
    name = model.name
    raw = list(request.raw_input_contents)
    if raw:
        if len(raw) != len(request.inputs):
            raise InvalidInput(f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs; "
                               "send one per input, in the order of inputs")
        for t in request.inputs:
            if t.HasField("contents"):
                raise InvalidInput(f"input {t.name!r} sets contents while the request uses raw_input_contents; use one or the other")
    given: dict[str, tuple] = {}
    for i, t in enumerate(request.inputs):
        if t.name not in (TEXT_INPUT, TARGET_PREFIX) and t.name not in OPTIONS:
            raise InvalidInput(f"unexpected inference input {clip(t.name)} for model {name!r}; its inputs are "
                               f"{TEXT_INPUT!r} (BYTES), optional {TARGET_PREFIX!r} (BYTES) and optional "
                               f"{' and '.join(map(repr, OPTIONS))} (INT64)")
        if t.name in given:
            raise InvalidInput(f"input {clip(t.name)} appears more than once")
        given[t.name] = (t, raw[i] if raw else None)
    if TEXT_INPUT not in given:
        raise InvalidInput(f"model {name!r}: missing input {TEXT_INPUT!r} (BYTES, shape [-1]: the texts)")
    texts, shape = _texts(name, *given[TEXT_INPUT], lim)
    counts = []
    prefixes = None
    if TARGET_PREFIX in given:
        prefixes, pshape = _texts(name, *given[TARGET_PREFIX], lim)
        if pshape[0] != shape[0]:
            raise InvalidInput(f"input {TARGET_PREFIX!r} has shape {_shape(pshape)}; it needs one prefix per text "
                               f"({_shape(shape)}, \"\" for none)")
    for o in request.outputs:
        if o.name != TEXT_OUTPUT and o.name not in EXTRA_OUTPUTS:
            raise InvalidInput(f"unexpected inference output {clip(o.name)} for model {name!r}; its outputs are "
                               f"{TEXT_OUTPUT!r} and optional "
                               + ", ".join(f"{k!r} ({v})" for k, v in EXTRA_OUTPUTS.items()))
        if o.name in EXTRA_OUTPUTS and o.name not in counts:
            counts.append(o.name)
    options = _decoding_options(request, given, name, lim)
    check_options(options, lim)
    timeout_us = _int_param(request.parameters, "timeout")
    if timeout_us:
        if timeout_us < 0:
            raise InvalidInput(f"parameter 'timeout' is {timeout_us}; it is in microseconds and must be positive")
        until = time.monotonic() + timeout_us / 1e6
        deadline = until if deadline is None else min(deadline, until)
    return Parsed(model, texts, shape, options, bool(raw), deadline, tuple(counts), prefixes)


def _decoding_options(request, given: dict, name: str, lim: Limits) -> DecodingOptions:
    """Request parameters (and the two optional inputs) -> DecodingOptions; 0 = the default for the widths."""
    kw = {}
    for key, kind in DECODING_PARAMETERS.items():
        value = _param(request.parameters, key, kind)
        if value is not None:
            kw[key] = value
    for key in OPTIONS:
        ours = ALIASES[key]
        value = _int_param(request.parameters, key)
        if key in given:
            if value is not None:
                raise InvalidInput(f"{key!r} is given both as a request parameter and as an input; send one")
            value = _scalar(*given[key])
        if value is not None:
            if ours in kw:
                raise InvalidInput(f"{key!r} and {ours!r} are the same option; send one of them")
            top = lim.max_new_tokens if key == "max_tokens" else lim.max_beam
            if not 0 <= value <= top:  # named as the client sent it
                raise InvalidInput(f"{key}={value} is out of range for model {name!r}: "
                                   + (f"0 (model default) to {top}" if key == "max_tokens" else f"0 (model default) to {top}; 1 = greedy"))
            kw[ours] = value
    kw["num_hypotheses"] = max(1, kw.get("num_hypotheses", 1))
    if kw.get("length_penalty_type") == "":
        del kw["length_penalty_type"]
    return DecodingOptions(**kw)


# ---- protocol-neutral answers (gRPC here, and the HTTP/REST binding in server/http_kserve.py) ----------
def model_metadata(repo: Repository, model: ModelAPI):
    T = pb.ModelMetadataResponse.TensorMetadata
    return pb.ModelMetadataResponse(
        name=model.name, versions=sorted(repo.models[model.name], key=int), platform=PLATFORM,
        inputs=[T(name=TEXT_INPUT, datatype="BYTES", shape=[-1]), T(name=TARGET_PREFIX, datatype="BYTES", shape=[-1]),
                *(T(name=key, datatype="INT64", shape=[1]) for key in OPTIONS)],
        outputs=[T(name=TEXT_OUTPUT, datatype="BYTES", shape=[-1]),
                 *(T(name=key, datatype="INT64", shape=[-1]) for key in COUNT_OUTPUTS),
                 *(T(name=key, datatype=dt, shape=[-1, -1]) for key, dt in NBEST_OUTPUTS.items())],
    )


def model_config(model: ModelAPI):
    info = model.info()
    lim = info.limits
    params = {
        "version": model.version, "task": info.task, "provider": info.provider, "quantization": info.quantization,
        "max_input_tokens": lim.max_input_tokens, "max_tokens": lim.max_new_tokens,
        "max_inputs_per_request": lim.max_inputs, "max_beam_width": lim.max_beam,
        "default_beam_width": lim.default_beam, "batching": model.sched.mode,
        "max_input_chars": lim.max_input_chars, "max_rows_per_request": lim.max_rows, "max_id_chars": MAX_ID_CHARS,
        "scheduler_max_batch_size": model.sched.max_batch_size, "engine_cores": info.cores,
        # Each decoding parameter's accepted range: "min..max (default D)".
        **{f"{r.name}_range": f"{r.min:g}..{r.max:g} (default {r.default:g})" for r in lim.options},
    }
    return pb.ModelConfig(
        name=model.name, platform=PLATFORM, backend=BACKEND, max_batch_size=0,  # text_input's own dimension is the batch
        input=[pb.ModelInput(name=TEXT_INPUT, data_type=pb.TYPE_STRING, dims=[-1]),
               pb.ModelInput(name=TARGET_PREFIX, data_type=pb.TYPE_STRING, dims=[-1], optional=True),
               *(pb.ModelInput(name=key, data_type=pb.TYPE_INT64, dims=[1], optional=True) for key in OPTIONS)],
        output=[pb.ModelOutput(name=TEXT_OUTPUT, data_type=pb.TYPE_STRING, dims=[-1]),
                *(pb.ModelOutput(name=key, data_type=pb.TYPE_INT64, dims=[-1]) for key in COUNT_OUTPUTS),
                pb.ModelOutput(name="hypotheses", data_type=pb.TYPE_STRING, dims=[-1, -1]),
                pb.ModelOutput(name="scores", data_type=pb.TYPE_FP32, dims=[-1, -1])],
        parameters={k: pb.ModelParameter(string_value=str(v)) for k, v in params.items()},
    )


def counts(p: Parsed, g) -> list[tuple[str, str, list[int], list]]:
    """The optional outputs the request asked for: (name, datatype, shape, values flat in row-major order)."""
    n = p.options.num_hypotheses
    nbest = [list(o.hypotheses) + [None] * (n - len(o.hypotheses)) for o in g.outputs]
    per = {"input_tokens": [o.input_tokens for o in g.outputs], "output_tokens": [o.output_tokens for o in g.outputs],
           "hypotheses": [h.text if h else "" for row in nbest for h in row],
           "scores": [h.score if h else 0.0 for row in nbest for h in row]}
    return [(key, EXTRA_OUTPUTS[key], p.shape if key in COUNT_OUTPUTS else [p.shape[0], n], per[key]) for key in p.counts]


def encode_values(datatype: str, values: list) -> bytes:
    """A tensor's raw (little-endian) bytes, as raw_output_contents and the binary REST extension carry it."""
    if datatype == "BYTES":
        return join_bytes([v.encode("utf-8") for v in values])
    return struct.pack(f"<{len(values)}{'q' if datatype == 'INT64' else 'f'}", *values)


def timings(g) -> dict[str, float]:
    t = g.timings
    return {"queue_seconds": t.queue_seconds, "time_to_first_token_seconds": t.time_to_first_token_seconds,
            "total_seconds": t.total_seconds}


async def infer(repo: Repository, request, deadline: float | None):
    """A ModelInferRequest through the model API: (what parse found, the Generation)."""
    p = parse(repo, request, deadline)
    return p, await p.model.generate(p.model.prepare(p.texts, p.options, p.prefixes), p.deadline)


class _StreamItem:
    """The ServicerContext the tracker sees for one request of a stream: an abort fails that request only."""

    class Failed(Exception):
        def __init__(self, code: grpc.StatusCode, details: str):
            super().__init__(details)
            self.status, self.details = code, details

    def __init__(self, stream: grpc.aio.ServicerContext):
        self.stream = stream

    async def abort(self, code: grpc.StatusCode, details: str = "", trailing_metadata=()) -> None:
        raise self.Failed(code, details)

    def code(self):
        return None

    def time_remaining(self):
        return self.stream.time_remaining()


class KServeServicer(RepositoryServicer, pb_grpc.GRPCInferenceServiceServicer):
    pb = pb  # for the repository RPCs (server/kserve_repository.py)

    def __init__(self, repo: Repository, stream: StreamConfig, tracker: RequestTracker, control: ModelControl):
        self.repo, self.stream, self.tracker, self.control = repo, stream, tracker, control

    async def _get(self, context: grpc.aio.ServicerContext, name: str, version: str) -> ModelAPI:
        try:
            return self.repo.get(name, version)
        except ServingError as e:
            await context.abort(grpc.StatusCode[e.code], str(e))

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
        return model_metadata(self.repo, await self._get(context, request.name, request.version))

    async def ModelConfig(self, request, context):
        return pb.ModelConfigResponse(config=model_config(await self._get(context, request.name, request.version)))

    # ---- inference -----------------------------------------------------------------------------
    async def _infer(self, request, deadline: float | None):
        p, g = await infer(self.repo, request, deadline)
        data = [o.text.encode("utf-8") for o in g.outputs]
        resp = pb.ModelInferResponse(model_name=g.model, model_version=g.version, id=request.id)
        out = resp.outputs.add(name=TEXT_OUTPUT, datatype="BYTES", shape=p.shape)
        if p.raw:
            resp.raw_output_contents.append(join_bytes(data))
        else:
            out.contents.bytes_contents.extend(data)
        for key, datatype, shape, values in counts(p, g):
            t = resp.outputs.add(name=key, datatype=datatype, shape=shape)
            if p.raw:
                resp.raw_output_contents.append(encode_values(datatype, values))
            elif datatype == "BYTES":
                t.contents.bytes_contents.extend(v.encode("utf-8") for v in values)
            elif datatype == "FP32":
                t.contents.fp32_contents.extend(values)
            else:
                t.contents.int64_contents.extend(values)
        for key, value in timings(g).items():
            resp.parameters[key].double_param = value
        return resp

    async def ModelInfer(self, request, context):
        async with self.tracker.track(context, request.model_name, "ModelInfer"):
            return await self._infer(request, deadline_of(context))

    async def _stream_one(self, request, context: grpc.aio.ServicerContext):
        item = _StreamItem(context)
        # An id over the limit is refused (below, by parse) and not echoed: the answer carries none.
        rid = request.id if len(request.id) <= MAX_ID_CHARS else ""
        try:
            async with self.tracker.track(item, request.model_name, "ModelStreamInfer"):
                resp = await self._infer(request, deadline_of(context))
            if _flag(request.parameters, "triton_enable_empty_final_response"):
                # tritonclient's enable_empty_final_response: one response per request, so this one is the last.
                resp.parameters["triton_final_response"].bool_param = True
            return pb.ModelStreamInferResponse(infer_response=resp)
        except _StreamItem.Failed as e:
            message = e.details
        except Exception as e:  # a bug must fail this request, not the stream (the tracker counted it INTERNAL)
            log.exception("ModelStreamInfer: request %s failed", clip(request.id))
            message = f"internal error ({type(e).__name__}); see server log"
        if rid:  # as Triton: the client can tell which request of the stream failed
            message = f"[request id: {rid}] {message}"
        name = request.model_name if len(request.model_name) <= MAX_ID_CHARS else ""
        return pb.ModelStreamInferResponse(
            error_message=message,
            infer_response=pb.ModelInferResponse(model_name=name, model_version=request.model_version[:MAX_ID_CHARS], id=rid))

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


def add_kserve(server: grpc.aio.Server, repo: Repository, stream: StreamConfig, tracker: RequestTracker,
               control: ModelControl) -> None:
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(KServeServicer(repo, stream, tracker, control), server)
