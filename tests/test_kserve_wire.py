"""The KServe v2 / Triton gRPC protocol's wire format and its refusals: our proto against Triton's field by
field, every malformed request refused with its status (unary and in a stream) while the server keeps serving, a
model that is not ready, and the two `inference` protobuf packages in one process.

tritonclient and our generated stubs both define the `inference` protobuf package; ours lives in a
descriptor pool of its own (protos/inference/__init__.py), so the two load in any order in one process
(test_either_import_order).
"""

from __future__ import annotations

import struct
import subprocess
import sys
import textwrap

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from conftest import ROOT, ServerThread, server_config
from kserve_grpc import MODELS, SAMPLES, TIMEOUT, contents_request, outputs_of, seq2seq, text_input
from tritonclient.grpc import service_pb2 as triton_pb
from tritonclient.utils import InferenceServerException

from protos.inference import grpc_service_pb2 as pb
from protos.inference import grpc_service_pb2_grpc as pb_grpc
from server.kserve.tensors import join_bytes


@pytest.fixture(scope="module")
def client(server):
    c = triton.InferenceServerClient(server.address)
    yield c
    c.close()


@pytest.fixture(scope="module")
def stub(server):
    channel = grpc.insecure_channel(server.address)
    yield pb_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


# ---- the protocol itself --------------------------------------------------------------------------
def test_proto_matches_the_triton_wire_format(tmp_path):
    """Every field of protos/inference/grpc_service.proto has the public protocol's number, type and label."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    out = tmp_path / "set.pb"
    assert (
        protoc.main(
            ["protoc", f"-I{ROOT}", f"--descriptor_set_out={out}", "protos/inference/grpc_service.proto"]
        )
        == 0
    )
    (ours,) = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    assert ours.package == "inference"
    pool = triton_pb.DESCRIPTOR.pool

    def check(msg: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        theirs = pool.FindMessageTypeByName(f"{prefix}{msg.name}")
        for f in msg.field:
            t = theirs.fields_by_number.get(f.number)
            assert t is not None, (
                f"{prefix}{msg.name}.{f.name} = {f.number}: no such field number in Triton's"
            )
            repeated = f.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
            assert (t.name, t.type, t.is_repeated) == (f.name, f.type, repeated), (
                f"{prefix}{msg.name}.{f.name}"
            )
            if f.type_name:
                ref = t.message_type or t.enum_type
                assert f.type_name == f".{ref.full_name}", f"{prefix}{msg.name}.{f.name}"
            if t.containing_oneof or f.HasField("oneof_index"):
                assert t.containing_oneof.name == msg.oneof_decl[f.oneof_index].name
        for nested in msg.nested_type:
            check(nested, f"{prefix}{msg.name}.")

    for msg in ours.message_type:
        check(msg, "inference.")
    for enum in ours.enum_type:
        theirs = pool.FindEnumTypeByName(f"inference.{enum.name}")
        assert {v.name: v.number for v in enum.value} == {v.name: v.number for v in theirs.values}
    (service,) = ours.service
    theirs = pool.FindServiceByName("inference.GRPCInferenceService")
    for m in service.method:
        t = theirs.methods_by_name[m.name]
        assert (m.input_type, m.output_type) == (f".{t.input_type.full_name}", f".{t.output_type.full_name}")
        assert (m.client_streaming, m.server_streaming) == (t.client_streaming, t.server_streaming)
    assert {m.name for m in service.method} >= {
        "ServerLive",
        "ServerReady",
        "ModelReady",
        "ServerMetadata",
        "ModelMetadata",
        "ModelInfer",
        "ModelStreamInfer",
        "ModelConfig",
        "RepositoryIndex",
        "RepositoryModelLoad",
        "RepositoryModelUnload",
    }


# ---- errors ------------------------------------------------------------------------------------
def _bad_requests(model: str):
    """(case, request, the status it gets, a phrase its message holds), for every way a request can be wrong."""
    ok = [b"12+30"] if model == "addition" else [SAMPLES[model][0].encode()]
    yield from _bad_addresses(model, ok)
    yield from _bad_tensors(model, ok)
    yield from _bad_raw_contents(model, ok)
    yield from _bad_options(model, ok)


def _bad_addresses(model: str, ok: list[bytes]):
    """A model or version that is not served."""
    yield (
        "unknown model",
        pb.ModelInferRequest(model_name="no-such-model", inputs=contents_request(model, ok).inputs),
        grpc.StatusCode.NOT_FOUND,
        "no-such-model",
    )
    yield (
        "unknown version",
        contents_request(model, ok, model_version="999"),
        grpc.StatusCode.NOT_FOUND,
        "'999'",
    )


def _bad_tensors(model: str, ok: list[bytes]):
    """Input tensors of the wrong datatype, shape, name or number, or not UTF-8."""
    r = contents_request(model, ok)
    r.inputs[0].datatype = "FP32"
    yield "wrong datatype", r, grpc.StatusCode.INVALID_ARGUMENT, "datatype 'FP32'"
    yield (
        "wrong shape",
        contents_request(model, ok * 4, shape=[2, 2]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "shape [2, 2]",
    )
    yield (
        "shape vs elements",
        contents_request(model, ok, shape=[3]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "needs 3",
    )
    r = contents_request(model, ok)
    r.inputs[0].name = "text"
    yield "unknown tensor", r, grpc.StatusCode.INVALID_ARGUMENT, "unexpected inference input 'text'"
    r = contents_request(model, ok)
    r.inputs.add(name="temperature", datatype="FP32", shape=[1]).contents.fp32_contents.append(0.5)
    yield "extra tensor", r, grpc.StatusCode.INVALID_ARGUMENT, "'temperature'"
    yield (
        "missing text_input",
        pb.ModelInferRequest(model_name=model),
        grpc.StatusCode.INVALID_ARGUMENT,
        "missing input 'text_input'",
    )
    yield "invalid UTF-8", contents_request(model, [b"\xff\xfe12"]), grpc.StatusCode.INVALID_ARGUMENT, "UTF-8"


def _bad_raw_contents(model: str, ok: list[bytes]):
    """raw_input_contents whose length prefixes or entries do not add up."""
    raw = lambda *items: pb.ModelInferRequest(  # noqa: E731
        model_name=model,
        raw_input_contents=list(items),
        inputs=[pb.ModelInferRequest.InferInputTensor(name="text_input", datatype="BYTES", shape=[1])],
    )
    yield (
        "raw: length beyond buffer",
        raw(struct.pack("<I", 100) + b"12+30"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "declares 100 bytes but only 5 remain",
    )
    yield (
        "raw: truncated prefix",
        raw(join_bytes(ok) + b"\x01\x00"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "truncated length prefix",
    )
    yield (
        "raw: count",
        raw(join_bytes(ok), join_bytes(ok)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "2 entries for 1 inputs",
    )


def _bad_options(model: str, ok: list[bytes]):
    """Unknown outputs, parameters of the wrong type or range, option tensors of the wrong shape, an empty text."""
    r = contents_request(model, ok)
    r.outputs.add(name="logits")
    yield "unknown output", r, grpc.StatusCode.INVALID_ARGUMENT, "unexpected inference output 'logits'"
    r = contents_request(model, ok)
    r.parameters["max_tokens"].string_param = "ten"
    yield "parameter type", r, grpc.StatusCode.INVALID_ARGUMENT, "'max_tokens' must be an integer"
    r = contents_request(model, ok)
    r.parameters["beam_width"].int64_param = 1000
    yield "beam_width range", r, grpc.StatusCode.INVALID_ARGUMENT, "beam_width=1000"
    r = contents_request(model, ok)
    r.inputs.add(name="max_tokens", datatype="INT64", shape=[2]).contents.int64_contents.extend([1, 2])
    yield "option shape", r, grpc.StatusCode.INVALID_ARGUMENT, "'max_tokens' has shape [2]"
    yield (
        "empty text",
        contents_request(model, [b"   "]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "input 0 is empty",
    )


def test_bad_requests_are_refused_and_the_server_keeps_serving(client, stub, server):
    model = MODELS[0]
    cases = list(_bad_requests(model))
    for name, request, code, needle in cases:
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(request, timeout=TIMEOUT)
        assert (e.value.code(), needle in e.value.details()) == (code, True), f"{name}: {e.value.details()}"

    # Through tritonclient too (its own InferInput validation is bypassed by the datatype/shape it trusts).
    bad = triton.InferInput("text_input", [1], "INT32")
    bad.set_data_from_numpy(np.array([7], dtype=np.int32))
    with pytest.raises(InferenceServerException) as e:
        client.infer(model, [bad])
    assert e.value.status() == "StatusCode.INVALID_ARGUMENT" and "datatype 'INT32'" in e.value.message()

    # The same requests in one stream: each answered with an error_message, the stream stays open.
    def stream():
        for i, (_, request, _, _) in enumerate(cases):
            request.id = f"bad-{i}"
            yield request
        yield contents_request(model, [SAMPLES[model][0].encode()], id="good")

    responses = {r.infer_response.id: r for r in stub.ModelStreamInfer(stream(), timeout=TIMEOUT)}
    assert len(responses) == len(cases) + 1
    for i, (name, _, _, needle) in enumerate(cases):
        msg = responses[f"bad-{i}"].error_message
        assert msg.startswith(f"[request id: bad-{i}] ") and needle in msg, f"{name}: {msg}"
    assert not responses["good"].error_message

    # And the server still serves.
    texts = SAMPLES[model]
    assert outputs_of(client.infer(model, [text_input(texts)])) == seq2seq(server, model, texts)


def test_model_not_ready_is_unavailable(model_repo):
    srv = ServerThread(server_config(models=(MODELS[0],)))
    try:
        c = triton.InferenceServerClient(srv.address)
        assert c.is_model_ready(MODELS[0])
        for mv in srv.running.repo.all():
            mv.stop()  # what shutdown does first
        assert not c.is_server_ready() and not c.is_model_ready(MODELS[0])
        with pytest.raises(InferenceServerException) as e:
            c.infer(MODELS[0], [text_input(SAMPLES[MODELS[0]][:1])])
        assert e.value.status() == "StatusCode.UNAVAILABLE" and "not ready" in e.value.message()
        c.close()
    finally:
        srv.stop()


@pytest.mark.parametrize("first", ["ours", "tritonclient"])
def test_either_import_order(first):
    """Our generated `inference` module and tritonclient's load in either order, and speak the same wire format."""
    ours = "from protos.inference import grpc_service_pb2 as pb"
    theirs = "from tritonclient.grpc import service_pb2 as tpb"
    script = "\n".join([ours, theirs] if first == "ours" else [theirs, ours]) + textwrap.dedent("""
        r = pb.ModelInferRequest(model_name="m", id="x")
        r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
        assert tpb.ModelInferRequest.FromString(r.SerializeToString()).inputs[0].name == "text_input"
        import server.kserve.grpc_binding
        print("ok")
    """)
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
