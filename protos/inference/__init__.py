"""The KServe v2 / Triton ``inference`` protocol, kept in a descriptor pool of its own.

``grpc_service.proto`` is a public protocol that other packages also ship (tritonclient has its
own generated copy). Protobuf's default pool refuses a second file defining the same
``inference.*`` names, so whichever copy loads second would fail to import. Our generated module
therefore never touches the default pool: this package builds it in a private pool before anyone
imports it, and ``import protos.inference.grpc_service_pb2`` (the generated ``*_pb2_grpc`` module,
the server, a test) gets that module, in any order with tritonclient. The wire format is the
specification's, whichever pool describes it.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types

from google.protobuf import descriptor_pool
from google.protobuf.internal import builder

POOL = descriptor_pool.DescriptorPool()
_NAME = __name__ + ".grpc_service_pb2"


def _serialized(source: str) -> bytes:
    """The FileDescriptorProto the generated module hands to ``AddSerializedFile`` (a bytes literal)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return ast.literal_eval(node.args[0])
    raise ImportError(
        f"{_NAME}: no AddSerializedFile call in the generated module (regenerate it: make protos)"
    )


def _load() -> types.ModuleType:
    spec = importlib.util.find_spec(_NAME)
    if spec is None:
        raise ImportError(f"{_NAME} is not generated yet (make protos)")
    module = types.ModuleType(
        _NAME, "Generated from protos/inference/grpc_service.proto, in the package's own pool."
    )
    module.__file__ = spec.origin
    module.DESCRIPTOR = POOL.AddSerializedFile(_serialized(spec.loader.get_source(_NAME)))
    builder.BuildMessageAndEnumDescriptors(module.DESCRIPTOR, module.__dict__)
    builder.BuildTopDescriptorsAndMessages(module.DESCRIPTOR, _NAME, module.__dict__)
    return module


if _NAME not in sys.modules:
    sys.modules[_NAME] = _load()
grpc_service_pb2 = sys.modules[_NAME]
