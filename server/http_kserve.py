"""KServe v2 REST (the binding Triton serves on :8000): JSON <-> the KServe protocol's own messages.

An inference request is mapped to the same ``ModelInferRequest`` the gRPC door receives and goes
through the same validation (``server.kserve.parse``) and model API, so both bindings accept and
refuse exactly the same things. Tensors travel as JSON (``"data": [...]``) or with Triton's binary
tensor data extension, which ``tritonclient.http`` uses by default: the body is a JSON header of
``Inference-Header-Content-Length`` bytes followed by the tensors' raw bytes, an input saying its
size in ``parameters.binary_data_size``; a BYTES element is a 4-byte little-endian length and the
bytes. The answer is binary when an output asks for it (``parameters.binary_data``) or the request
does (``parameters.binary_data_output``), JSON otherwise.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

from aiohttp import web
from google.protobuf import json_format

from s2s import __version__
from server.errors import InvalidInput, ModelNotFound, ModelNotReady, ServingError, clip
from server.http_body import parse_json_off_loop, read_body, read_json
from server.http_server import Doors, HttpError, deadline_of, json_response
from server.kserve import (EXTENSIONS, TEXT_OUTPUT, counts, encode_values, infer, join_bytes, model_config,
                           model_metadata, pb, timings)

HEADER_LENGTH = "Inference-Header-Content-Length"
_INT_FORMATS = {"INT64": "<q", "INT32": "<i"}
_INT_RANGES = {"INT64": (-2**63, 2**63 - 1), "INT32": (-2**31, 2**31 - 1)}  # JSON integers have no bound


def _check_ints(values: list, datatype: str, what: str) -> None:
    low, high = _INT_RANGES[datatype]
    for i, v in enumerate(values):
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidInput(f"{what}: {datatype} data must be integers (element {i} is {type(v).__name__})")
        if not low <= v <= high:
            raise InvalidInput(f"{what}: element {i} is out of the {datatype} range ({low} to {high})")


def _tensor_parameters(t: dict, what: str) -> dict:
    params = t.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidInput(f"{what}: 'parameters' must be a JSON object, not {type(params).__name__}")
    return params


# ---- JSON body <-> ModelInferRequest ------------------------------------------------------------------------
def _parameter(target, key: str, value: Any) -> None:
    p = target[key]
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        if not -2**63 <= value < 2**63:
            raise InvalidInput(f"parameter {clip(key)} is out of the int64 range (-2^63 to 2^63 - 1)")
        p.int64_param = value
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"parameter {clip(key)} must be a finite number, not {value}")
        p.double_param = value
    elif isinstance(value, str):
        p.string_param = value
    else:
        raise InvalidInput(f"parameter {clip(key)} must be a boolean, number or string, not {type(value).__name__}")


def _flatten(data: Any, what: str) -> list:
    if not isinstance(data, list):
        raise InvalidInput(f"{what}: 'data' must be a JSON array")
    out: list = []
    stack = [data]
    while stack:  # nested arrays (row-major, as the shape says) or flat, as KServe allows both
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return out


def _raw_from_json(t: dict, what: str) -> bytes:
    """A JSON-encoded input as its raw bytes (when other inputs are binary, the message carries all as raw)."""
    values = _flatten(t.get("data"), what)
    datatype = t.get("datatype")
    if datatype == "BYTES":
        if not all(isinstance(v, str) for v in values):
            raise InvalidInput(f"{what}: BYTES data must be strings")
        return join_bytes([v.encode("utf-8") for v in values])
    if datatype in _INT_FORMATS:
        _check_ints(values, datatype, what)
        return b"".join(struct.pack(_INT_FORMATS[datatype], v) for v in values)
    raise InvalidInput(f"{what} has datatype {clip(str(datatype))}; this server's inputs are BYTES, INT64 or INT32")


def to_request(model: str, version: str, header: dict, binary: bytes) -> tuple[Any, bool]:
    """The REST body as a ModelInferRequest; and whether the answer should be binary."""
    req = pb.ModelInferRequest(model_name=model, model_version=version)
    rid = header.get("id", "")
    if not isinstance(rid, str):
        raise InvalidInput("'id' must be a string")
    req.id = rid
    params = header.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    binary_out = bool(params.get("binary_data_output", False))
    for key, value in params.items():
        if key != "binary_data_output":
            _parameter(req.parameters, key, value)
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidInput("'inputs' must be a non-empty JSON array of tensors")
    any_binary = any(isinstance(t, dict) and isinstance(t.get("parameters"), dict) and "binary_data_size" in t["parameters"]
                     for t in inputs)
    offset = 0
    for i, t in enumerate(inputs):
        if not isinstance(t, dict):
            raise InvalidInput(f"inputs[{i}] must be a JSON object with name, datatype, shape and data")
        what = f"input {clip(str(t.get('name', i)))}"
        name, datatype, shape = t.get("name"), t.get("datatype"), t.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str):
            raise InvalidInput(f"inputs[{i}] needs a string 'name' and 'datatype'")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise InvalidInput(f"{what}: 'shape' must be an array of integers")
        if not all(0 <= d < 2**63 for d in shape):
            raise InvalidInput(f"{what}: 'shape' {clip(str(shape))} has a dimension out of range (0 to 2^63 - 1)")
        tensor = req.inputs.add(name=name, datatype=datatype, shape=shape)
        size = _tensor_parameters(t, what).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise InvalidInput(f"{what}: binary_data_size {size!r} runs past the {len(binary)} bytes of binary data "
                                   f"after the JSON header (from byte {offset})")
            req.raw_input_contents.append(binary[offset:offset + size])
            offset += size
        elif any_binary:
            req.raw_input_contents.append(_raw_from_json(t, what))
        elif datatype == "BYTES":
            values = _flatten(t.get("data"), what)
            if not all(isinstance(v, str) for v in values):
                raise InvalidInput(f"{what}: BYTES data must be strings (or send binary data)")
            tensor.contents.bytes_contents.extend(v.encode("utf-8") for v in values)
        elif datatype in _INT_FORMATS:
            values = _flatten(t.get("data"), what)
            _check_ints(values, datatype, what)
            (tensor.contents.int64_contents if datatype == "INT64" else tensor.contents.int_contents).extend(values)
        else:
            tensor.contents.SetInParent()  # parse() names the wrong datatype
    if offset != len(binary):
        raise InvalidInput(f"{len(binary) - offset} bytes of binary data after the JSON header belong to no input")
    outputs = header.get("outputs") or []
    if not isinstance(outputs, list):
        raise InvalidInput("'outputs' must be a JSON array")
    for i, o in enumerate(outputs):
        if not isinstance(o, dict) or not isinstance(o.get("name"), str):
            raise InvalidInput("each of 'outputs' must be a JSON object with a string 'name'")
        req.outputs.add(name=o["name"])
        binary_out = binary_out or bool(_tensor_parameters(o, f"outputs[{i}]").get("binary_data", False))
    return req, binary_out


async def _body(request: web.Request) -> tuple[dict, bytes]:
    length = request.headers.get(HEADER_LENGTH)
    if length is None:
        return await read_json(request), b""
    if not (length.isascii() and length.isdigit() and len(length) <= 12):  # int() would take "+1", " 1", "1_0" and "²"
        raise InvalidInput(f"header {HEADER_LENGTH} must be a non-negative integer, not {length[:40]!r}")
    body = await read_body(request)
    n = int(length)
    if n > len(body):
        raise InvalidInput(f"header {HEADER_LENGTH} says {n} bytes of JSON but the body has {len(body)}")
    header = await parse_json_off_loop(body[:n], f"the JSON header ({n} bytes)")
    if not isinstance(header, dict):
        raise InvalidInput("the JSON header must be a JSON object")
    return header, body[n:]


def _answer(rid: str, p, g, binary: bool) -> web.Response:
    texts = [o.text for o in g.outputs]
    head: dict[str, Any] = {"model_name": g.model, "model_version": g.version, "outputs": [], "parameters": timings(g)}
    if rid:
        head["id"] = rid
    tensors: list[tuple[dict, Any, bytes]] = [
        ({"name": TEXT_OUTPUT, "datatype": "BYTES", "shape": p.shape}, texts, join_bytes([t.encode("utf-8") for t in texts]))]
    for key, datatype, shape, values in counts(p, g):
        tensors.append(({"name": key, "datatype": datatype, "shape": shape}, values, encode_values(datatype, values)))
    blobs = []
    for out, values, raw in tensors:
        if binary:
            out["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            out["data"] = values
        head["outputs"].append(out)
    if not binary:
        return json_response(head)
    header = json.dumps(head, ensure_ascii=False).encode()
    return web.Response(body=header + b"".join(blobs), content_type="application/octet-stream",
                        headers={HEADER_LENGTH: str(len(header))})


def _to_json(message) -> dict:
    """A KServe message as Triton's REST JSON: protobuf's JSON mapping writes int64 as strings, REST uses numbers."""
    def fix(x):
        if isinstance(x, dict):
            return {k: ([int(v) for v in val] if k in ("shape", "dims") else fix(val)) for k, val in x.items()}
        if isinstance(x, list):
            return [fix(v) for v in x]
        return x

    return fix(json_format.MessageToDict(message, preserving_proto_field_name=True))


# ---- routes ---------------------------------------------------------------------------------------------------
def routes(doors: Doors) -> list[web.RouteDef]:
    repo = doors.repo

    def _model(request: web.Request):
        try:
            return repo.get(request.match_info["model"], request.match_info.get("version", ""))
        except ServingError as e:  # NOT_FOUND, or UNAVAILABLE for an unloaded model
            raise HttpError(e.code, str(e)) from None

    async def live(request: web.Request) -> web.Response:
        return json_response({"live": True})

    async def ready(request: web.Request) -> web.Response:
        ok = repo.ready
        return json_response({"ready": ok}, status=200 if ok else 503)

    async def server_metadata(request: web.Request) -> web.Response:
        return json_response({"name": "s2s", "version": __version__, "extensions": list(EXTENSIONS)})

    async def metadata(request: web.Request) -> web.Response:
        return json_response(_to_json(model_metadata(repo, _model(request))))

    async def model_ready(request: web.Request) -> web.Response:
        try:
            model = repo.get(request.match_info["model"], request.match_info.get("version", ""))
        except ModelNotFound:
            return json_response({"ready": False}, status=404)
        except ModelNotReady:  # unloaded
            return json_response({"name": request.match_info["model"], "ready": False}, status=503)  # tritonclient: anything but 200 is "not ready"
        return json_response({"name": model.name, "ready": model.ready}, status=200 if model.ready else 503)

    async def config(request: web.Request) -> web.Response:
        return json_response(_to_json(model_config(_model(request))))

    async def infer_route(request: web.Request) -> web.Response:
        name, version = request.match_info["model"], request.match_info.get("version", "")
        async with doors.track(request, name, "ModelInfer"):
            repo.get(name, version)  # an unknown model is 404 whatever the body holds (as Triton answers)
            header, binary = await _body(request)
            req, binary_out = to_request(name, version, header, binary)
            p, g = await infer(repo, req, deadline_of(request))  # X-Timeout-Seconds; the 'timeout' parameter too
            return _answer(req.id, p, g, binary_out)

    m, v = "/v2/models/{model}", "/v2/models/{model}/versions/{version}"
    return [
        web.get("/v2/health/live", live), web.get("/v2/health/ready", ready), web.get("/v2", server_metadata),
        web.get(m, metadata), web.get(v, metadata), web.get(m + "/ready", model_ready), web.get(v + "/ready", model_ready),
        web.get(m + "/config", config), web.get(v + "/config", config),
        web.post(m + "/infer", infer_route), web.post(v + "/infer", infer_route),
    ]
