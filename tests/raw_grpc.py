"""Raw gRPC calls for the hardening tests: a method called by its path with a body of any bytes (what no
generated stub would send), expected to fail; and the names of the models and the method they call.
"""

from __future__ import annotations

import grpc
import pytest

ADD, JA = "addition", "translate-en-ja"
GENERATE = "/seq2seq.v1.Seq2Seq/Generate"


def _raw_call(address: str, method: str, body: bytes, metadata=()) -> grpc.RpcError:
    with grpc.insecure_channel(address) as ch:
        call = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as e:
            call(body, timeout=10, metadata=metadata)
    return e.value
