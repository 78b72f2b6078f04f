"""What the KServe v2 / Triton gRPC tests share: sample inputs of each default model present, and requests
built and answers read with tritonclient, with our generated stubs and with the Seq2Seq client.
"""

from __future__ import annotations

import numpy as np
import tritonclient.grpc as triton
from conftest import MODEL_REPO

from protos.inference import grpc_service_pb2 as pb
from s2s.seq2seq_client import Seq2SeqClient

# Inputs each default model can tokenize; only models present in the repository are tested.
SAMPLES = {
    "addition": ["12+30", "7+5", "100+23", "0+0", "999+1"],
    "translate-en-ja": [
        "Save",
        "Open File",
        "Settings",
        "Cancel",
        "Delete",
    ],  # from data/en-ja/ui-strings.tsv
}
MODELS = [m for m in SAMPLES if (MODEL_REPO / m).is_dir()]
TIMEOUT = 60


def text_input(texts: list[str], shape: list[int] | None = None) -> triton.InferInput:
    inp = triton.InferInput("text_input", shape or [len(texts)], "BYTES")
    inp.set_data_from_numpy(
        np.array([t.encode() for t in texts], dtype=object).reshape(shape or [len(texts)])
    )
    return inp


def outputs_of(result) -> list[str]:
    return [b.decode() for b in result.as_numpy("text_output").reshape(-1)]


def contents_request(model: str, texts: list[bytes], shape=None, **kw) -> pb.ModelInferRequest:
    t = pb.ModelInferRequest.InferInputTensor(
        name="text_input", datatype="BYTES", shape=shape or [len(texts)]
    )
    t.contents.bytes_contents.extend(texts)
    return pb.ModelInferRequest(model_name=model, inputs=[t], **kw)


def seq2seq(server, model: str, texts: list[str], **kw) -> list[str]:
    with Seq2SeqClient(server.address) as c:
        return c.generate(model, texts, **kw)
