"""KServe v2 REST bodies <-> the protocol-neutral ``InferRequest``: JSON tensors (``"data": [...]``) and
Triton's binary tensor data extension (a JSON header, then each binary input's raw bytes, its size in
``parameters.binary_data_size``; a BYTES element is a 4-byte little-endian length and the bytes).
Straight to plain data: no protobuf and no transport here (``server/kserve/rest_binding.py`` reads the body)."""

from __future__ import annotations

import math
from typing import Any

from server.errors import InvalidInput, clip
from server.kserve.infer import InferAnswer
from server.kserve.tensors import InferInput, InferRequest, Param, encode_values

_INT_RANGES = {"INT64": (-(2**63), 2**63 - 1), "INT32": (-(2**31), 2**31 - 1)}  # JSON integers have no bound


def _check_ints(values: list, datatype: str, what: str) -> None:
    low, high = _INT_RANGES[datatype]
    for i, v in enumerate(values):
        if not isinstance(v, int) or isinstance(v, bool):
            raise InvalidInput(
                f"{what}: {datatype} data must be integers (element {i} is {type(v).__name__})"
            )
        if not low <= v <= high:
            raise InvalidInput(f"{what}: element {i} is out of the {datatype} range ({low} to {high})")


def _tensor_parameters(t: dict, what: str) -> dict:
    params = t.get("parameters")
    if params is None:
        return {}
    if not isinstance(params, dict):
        raise InvalidInput(f"{what}: 'parameters' must be a JSON object, not {type(params).__name__}")
    return params


def _parameter(key: str, value: Any) -> Param:
    """A JSON parameter as the KServe kind it would have on the wire of gRPC."""
    if isinstance(value, bool):
        return "bool_param", value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise InvalidInput(f"parameter {clip(key)} is out of the int64 range (-2^63 to 2^63 - 1)")
        return "int64_param", value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"parameter {clip(key)} must be a finite number, not {value}")
        return "double_param", value
    if isinstance(value, str):
        return "string_param", value
    raise InvalidInput(
        f"parameter {clip(key)} must be a boolean, number or string, not {type(value).__name__}"
    )


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


def _values(t: dict, datatype: str, what: str, binary_request: bool) -> list | None:
    """A JSON-encoded input's elements (bytes for BYTES, int for INT64/INT32); None for another datatype (parse
    names it), unless other inputs are binary (then every input must be one this server reads)."""
    if datatype == "BYTES":
        values = _flatten(t.get("data"), what)
        if not all(isinstance(v, str) for v in values):
            raise InvalidInput(
                f"{what}: BYTES data must be strings" + ("" if binary_request else " (or send binary data)")
            )
        return [v.encode("utf-8") for v in values]
    if datatype in _INT_RANGES:
        values = _flatten(t.get("data"), what)
        _check_ints(values, datatype, what)
        return values
    if binary_request:
        _flatten(t.get("data"), what)
        raise InvalidInput(
            f"{what} has datatype {clip(str(datatype))}; this server's inputs are BYTES, INT64 or INT32"
        )
    return None


def from_json(model: str, version: str, header: dict, binary: bytes) -> tuple[InferRequest, bool]:
    """The REST body (its JSON header and the binary data after it) as an InferRequest; and whether the answer
    should be binary."""
    rid = header.get("id", "")
    if not isinstance(rid, str):
        raise InvalidInput("'id' must be a string")
    req = InferRequest(model, version, rid)
    params = header.get("parameters") or {}
    if not isinstance(params, dict):
        raise InvalidInput("'parameters' must be a JSON object")
    binary_out = bool(params.get("binary_data_output", False))
    req.parameters = {
        key: _parameter(key, value) for key, value in params.items() if key != "binary_data_output"
    }
    inputs = header.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise InvalidInput("'inputs' must be a non-empty JSON array of tensors")
    req.raw = any(
        isinstance(t, dict)
        and isinstance(t.get("parameters"), dict)
        and "binary_data_size" in t["parameters"]
        for t in inputs
    )
    offset = 0
    for i, t in enumerate(inputs):
        if not isinstance(t, dict):
            raise InvalidInput(f"inputs[{i}] must be a JSON object with name, datatype, shape and data")
        what = f"input {clip(str(t.get('name', i)))}"
        name, datatype, shape = t.get("name"), t.get("datatype"), t.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str):
            raise InvalidInput(f"inputs[{i}] needs a string 'name' and 'datatype'")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape
        ):
            raise InvalidInput(f"{what}: 'shape' must be an array of integers")
        if not all(0 <= d < 2**63 for d in shape):
            raise InvalidInput(
                f"{what}: 'shape' {clip(str(shape))} has a dimension out of range (0 to 2^63 - 1)"
            )
        size = _tensor_parameters(t, what).get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(binary):
                raise InvalidInput(
                    f"{what}: binary_data_size {size!r} runs past the {len(binary)} bytes of binary data "
                    f"after the JSON header (from byte {offset})"
                )
            req.inputs.append(InferInput(name, datatype, shape, raw=binary[offset : offset + size]))
            offset += size
        else:
            req.inputs.append(InferInput(name, datatype, shape, values=_values(t, datatype, what, req.raw)))
    if offset != len(binary):
        raise InvalidInput(
            f"{len(binary) - offset} bytes of binary data after the JSON header belong to no input"
        )
    outputs = header.get("outputs") or []
    if not isinstance(outputs, list):
        raise InvalidInput("'outputs' must be a JSON array")
    for i, o in enumerate(outputs):
        if not isinstance(o, dict) or not isinstance(o.get("name"), str):
            raise InvalidInput("each of 'outputs' must be a JSON object with a string 'name'")
        req.outputs.append(o["name"])
        binary_out = binary_out or bool(_tensor_parameters(o, f"outputs[{i}]").get("binary_data", False))
    return req, binary_out


def to_json(a: InferAnswer, binary: bool) -> tuple[dict, list[bytes]]:
    """The answer: its JSON header, and when ``binary`` each output's raw bytes in order (else the data is in the JSON)."""
    head: dict[str, Any] = {"model_name": a.model, "model_version": a.version, "outputs": []}
    if a.parameters:
        head["parameters"] = a.parameters
    if a.id:
        head["id"] = a.id
    blobs = []
    for o in a.outputs:
        out: dict[str, Any] = {"name": o.name, "datatype": o.datatype, "shape": o.shape}
        if binary:
            raw = encode_values(o.datatype, o.values)
            out["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            out["data"] = o.values
        head["outputs"].append(out)
    return head, blobs
