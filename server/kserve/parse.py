"""A KServe inference request (``InferRequest``, from either binding) -> the model API's domain request (``Parsed``).

Only what is KServe's own is checked here: tensor names, datatypes and shapes, the BYTES framing,
parameter kinds, Triton's ``timeout``. Everything the model decides (option ranges, input counts
and lengths, readiness) is the model API's, checked once in ``ServedVersion.prepare``; the few bounds
read here are the ones that must hold before an element is split or decoded (bounded work).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from contract.decoding import DecodingOptions
from server.errors import InvalidInput, ModelNotReady, clip
from server.kserve.protocol import (
    ALIASES,
    DECODING_PARAMETERS,
    EXTRA_OUTPUTS,
    LANGUAGE_PARAMETERS,
    MAX_ID_CHARS,
    OPTIONS,
    TARGET_PREFIX,
    TEXT_INPUT,
    TEXT_OUTPUT,
    TEXT_PARAMETERS,
    TIMINGS,
)
from server.kserve.tensors import InferInput, InferRequest, Param, shape_str, split_bytes
from server.models.prepare import Limits
from server.models.registry import ServedModels
from server.models.served_version import ServedVersion
from server.models.text_plan import TextOptions
from server.telemetry import model_statistics as statistics


@dataclass
class Parsed:
    model: ServedVersion
    texts: list[str]
    shape: list[int]
    options: DecodingOptions
    raw: bool  # answer in raw bytes (raw_output_contents / binary data)
    deadline: float | None
    counts: tuple[str, ...] = ()  # EXTRA_OUTPUTS asked for, in the order asked
    prefixes: list[str] | None = None
    timings: bool = False  # the answer carries the request's timings (the TIMINGS parameter)
    text: TextOptions = TextOptions()
    languages: tuple[str | None, str | None] = (None, None)  # source, target: the model API checks them


def _texts(model: str, t: InferInput, lim: Limits) -> tuple[list[str], list[int]]:
    name = t.name  # text_input or target_prefix: the same checks, named after the tensor
    if t.datatype != "BYTES":
        raise InvalidInput(f"input {name!r} has datatype {t.datatype!r}; model {model!r} expects 'BYTES'")
    dims = list(t.shape)
    if not (len(dims) == 1 or (len(dims) == 2 and dims[1] == 1)) or dims[0] < 0:
        raise InvalidInput(
            f"input {name!r} has shape {shape_str(dims)}; model {model!r} expects [-1] or [-1, 1] "
            "(one text per row)"
        )
    if dims[0] > lim.max_inputs:  # before any element is split or decoded
        raise InvalidInput(f"model {model!r}: {dims[0]} inputs in one request; the limit is {lim.max_inputs}")
    if t.raw is not None:
        items = split_bytes(t.raw, f"raw_input_contents for input {name!r}")
        where = "raw_input_contents"
    else:
        items = t.values or []
        where = "contents.bytes_contents"
    if len(items) != dims[0]:
        raise InvalidInput(
            f"input {name!r} has {len(items)} elements in {where} but its shape {shape_str(dims)} "
            f"needs {dims[0]}"
        )
    for i, b in enumerate(items):
        if len(b) > lim.max_input_bytes:
            raise InvalidInput(
                f"input {name!r} element {i} has {len(b)} bytes; model {model!r} accepts at most "
                f"{lim.max_input_chars} characters ({lim.max_input_tokens} tokens)"
            )
    texts = []
    for i, b in enumerate(items):
        try:
            texts.append(b.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise InvalidInput(
                f"input {name!r} element {i} is not valid UTF-8 ({e.reason} at byte {e.start})"
            ) from None
    return texts, dims


def _scalar(t: InferInput) -> int:
    """An optional INT64/INT32 input of shape [1] (or [1, 1])."""
    if t.datatype not in ("INT64", "INT32"):
        raise InvalidInput(f"input {t.name!r} has datatype {t.datatype!r}; expected 'INT64' or 'INT32'")
    dims = list(t.shape)
    if not dims or any(d != 1 for d in dims):
        raise InvalidInput(f"input {t.name!r} has shape {shape_str(dims)}; expected [1]")
    if t.raw is not None:
        size = 8 if t.datatype == "INT64" else 4
        if len(t.raw) != size:
            raise InvalidInput(
                f"raw_input_contents for input {t.name!r} has {len(t.raw)} bytes; one {t.datatype} is {size}"
            )
        return int.from_bytes(t.raw, "little", signed=True)
    values = t.values or []
    if len(values) != 1:
        field = "int64_contents" if t.datatype == "INT64" else "int_contents"
        raise InvalidInput(f"input {t.name!r} has {len(values)} values in contents.{field}; expected 1")
    return values[0]


def _int_param(params: dict[str, Param], key: str) -> int | None:
    if key not in params:
        return None
    kind, value = params[key]
    if kind not in ("int64_param", "uint64_param"):
        raise InvalidInput(f"parameter {key!r} must be an integer (int64_param), got {kind or 'no value'}")
    return value


def _param(params: dict[str, Param], key: str, want: type):
    """A decoding option given as a request parameter, or None; InvalidInput naming the kind it needs."""
    if key not in params:
        return None
    got, value = params[key]
    if want is int and got in ("int64_param", "uint64_param"):
        return value
    if want is float and got in ("double_param", "int64_param", "uint64_param"):
        return float(value)
    if (want is bool and got == "bool_param") or (want is str and got == "string_param"):
        return value
    name = {
        int: "an integer (int64_param)",
        float: "a number (double_param)",
        bool: "a boolean (bool_param)",
        str: "a string (string_param)",
    }[want]
    raise InvalidInput(f"parameter {key!r} must be {name}, got {got or 'no value'}")


def flag(params: dict[str, Param], key: str) -> bool:
    return params.get(key) == ("bool_param", True)


def parse(repo: ServedModels, request: InferRequest, deadline: float | None) -> Parsed:
    """Validate an inference request; raises ServingError (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE) naming the problem."""
    if len(request.id) > MAX_ID_CHARS:
        raise InvalidInput(f"request id has {len(request.id)} characters; the limit is {MAX_ID_CHARS}")
    model = repo.get(request.model, request.version)
    statistics.noted(model.name, model.version)  # a request refused below is this version's failure
    lim = model.limits
    if not model.ready:  # before any element is decoded; the model API would refuse it anyway
        why = (
            "loading: its engine cores are starting"
            if model.loading
            else "shutting down, or no engine core running"
        )
        raise ModelNotReady(f"model {model.name!r} version {model.version} is not ready ({why}); retry")
    name = model.name
    if request.problem:
        raise InvalidInput(request.problem)
    given: dict[str, InferInput] = {}
    for t in request.inputs:
        if t.name not in (TEXT_INPUT, TARGET_PREFIX) and t.name not in OPTIONS:
            raise InvalidInput(
                f"unexpected inference input {clip(t.name)} for model {name!r}; its inputs are "
                f"{TEXT_INPUT!r} (BYTES), optional {TARGET_PREFIX!r} (BYTES) and optional "
                f"{' and '.join(map(repr, OPTIONS))} (INT64)"
            )
        if t.name in given:
            raise InvalidInput(f"input {clip(t.name)} appears more than once")
        given[t.name] = t
    if TEXT_INPUT not in given:
        raise InvalidInput(f"model {name!r}: missing input {TEXT_INPUT!r} (BYTES, shape [-1]: the texts)")
    texts, shape = _texts(name, given[TEXT_INPUT], lim)
    counts: list[str] = []
    prefixes = None
    if TARGET_PREFIX in given:
        prefixes, pshape = _texts(name, given[TARGET_PREFIX], lim)
        if pshape[0] != shape[0]:
            raise InvalidInput(
                f"input {TARGET_PREFIX!r} has shape {shape_str(pshape)}; it needs one prefix per text "
                f'({shape_str(shape)}, "" for none)'
            )
    for out in request.outputs:
        if out != TEXT_OUTPUT and out not in EXTRA_OUTPUTS:
            raise InvalidInput(
                f"unexpected inference output {clip(out)} for model {name!r}; its outputs are "
                f"{TEXT_OUTPUT!r} and optional " + ", ".join(f"{k!r} ({v})" for k, v in EXTRA_OUTPUTS.items())
            )
        if out in EXTRA_OUTPUTS and out not in counts:
            counts.append(out)
    options = _decoding_options(request.parameters, given, name, lim)
    timeout_us = _int_param(request.parameters, "timeout")
    if timeout_us:
        if timeout_us < 0:
            raise InvalidInput(
                f"parameter 'timeout' is {timeout_us}; it is in microseconds and must be positive"
            )
        until = time.monotonic() + timeout_us / 1e6
        deadline = until if deadline is None else min(deadline, until)
    text = TextOptions(**{key: _param(request.parameters, key, bool) is not False for key in TEXT_PARAMETERS})
    source, target = (_param(request.parameters, key, str) for key in LANGUAGE_PARAMETERS)
    return Parsed(
        model,
        texts,
        shape,
        options,
        request.raw,
        deadline,
        tuple(counts),
        prefixes,
        flag(request.parameters, TIMINGS),
        text,
        (source, target),
    )


def _decoding_options(
    params: dict[str, Param], given: dict[str, InferInput], name: str, lim: Limits
) -> DecodingOptions:
    """Request parameters (and the two optional inputs) -> DecodingOptions; 0 = the default for the widths."""
    kw = {}
    for key, kind in DECODING_PARAMETERS.items():
        value = _param(params, key, kind)
        if value is not None:
            kw[key] = value
    for key in OPTIONS:
        ours = ALIASES[key]
        value = _int_param(params, key)
        if key in given:
            if value is not None:
                raise InvalidInput(f"{key!r} is given both as a request parameter and as an input; send one")
            value = _scalar(given[key])
        if value is not None:
            if ours in kw:
                raise InvalidInput(f"{key!r} and {ours!r} are the same option; send one of them")
            top = lim.max_new_tokens if key == "max_tokens" else lim.max_beam
            if not 0 <= value <= top:  # Triton's names: the range is named as the client sent it
                raise InvalidInput(
                    f"{key}={value} is out of range for model {name!r}: "
                    + (
                        f"0 (model default) to {top}"
                        if key == "max_tokens"
                        else f"0 (model default) to {top}; 1 = greedy"
                    )
                )
            kw[ours] = value
    kw["num_hypotheses"] = max(1, kw.get("num_hypotheses", 1))
    if kw.get("length_penalty_type") == "":
        del kw["length_penalty_type"]
    return DecodingOptions(**kw)
