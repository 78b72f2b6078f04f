"""KServe tensors without any transport: the BYTES framing, raw little-endian values, and one
protocol-neutral inference request (``InferRequest``) that both bindings build from their wire
format (protobuf for gRPC, JSON and the binary extension for REST)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from server.errors import InvalidInput

# A request parameter as the client typed it: (the KServe kind, the value). Kinds are InferParameter's
# oneof names ("bool_param", "int64_param", "uint64_param", "double_param", "string_param"), which the
# messages name when a parameter has the wrong kind.
Param = tuple[str, object]


@dataclass
class InferInput:
    name: str
    datatype: str
    shape: list[int]
    raw: bytes | None = None  # raw_input_contents / the binary extension: the tensor's bytes
    values: list | None = None  # or its elements (bytes for BYTES, int for INT64/INT32); None: none given


@dataclass
class InferRequest:
    """A KServe ModelInferRequest as plain data: what parsing (``server/kserve/parse.py``) reads."""

    model: str
    version: str
    id: str = ""
    inputs: list[InferInput] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    parameters: dict[str, Param] = field(default_factory=dict)
    raw: bool = False  # the inputs came as raw bytes: answer the same way
    problem: str = (
        ""  # a framing problem the binding found (raised as INVALID_ARGUMENT once the model is known)
    )


def shape_str(dims) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]"


def split_bytes(buf: bytes, what: str) -> list[bytes]:
    """A BYTES tensor's raw encoding: each element as a 4-byte little-endian length, then its bytes."""
    out, off, n = [], 0, len(buf)
    while off < n:
        if n - off < 4:
            raise InvalidInput(
                f"{what} is malformed: element {len(out)} at byte {off} has a truncated length prefix "
                f"({n - off} of 4 bytes)"
            )
        (size,) = struct.unpack_from("<I", buf, off)
        off += 4
        if size > n - off:
            raise InvalidInput(
                f"{what} is malformed: element {len(out)} declares {size} bytes but only {n - off} "
                f"remain (each element is a 4-byte little-endian length, then the bytes)"
            )
        out.append(buf[off : off + size])
        off += size
    return out


def join_bytes(items: list[bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in items)


def encode_values(datatype: str, values: list) -> bytes:
    """A tensor's raw (little-endian) bytes, as raw_output_contents and the binary REST extension carry it."""
    if datatype == "BYTES":
        return join_bytes([v.encode("utf-8") for v in values])
    return struct.pack(f"<{len(values)}{'q' if datatype == 'INT64' else 'f'}", *values)
