"""What the model-control tests share: the two models of their temporary repository, the control token, a
new version folder published into the repository, and one addition asked of a tritonclient (gRPC or HTTP).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import tritonclient.grpc as triton
from conftest import MODEL_REPO

ADD, JA = "addition", "translate-en-ja"
TOKEN = "control-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


def add_version(repo: Path, version: int, model: str = ADD) -> Path:
    """A new version folder, published as `s2s export` or an operator should: written aside, renamed in."""
    staging = repo / f".staging-{model}-{version}"
    shutil.copytree(MODEL_REPO / ADD / "1", staging)
    (repo / model).mkdir(exist_ok=True)
    staging.rename(repo / model / str(version))
    return repo / model / str(version)


def text_input(texts: list[str], module=triton):
    inp = module.InferInput("text_input", [len(texts)], "BYTES")
    inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
    return inp


def add(client, a: int, b: int, module=triton) -> tuple[str, str]:
    """(answer, version) of one addition."""
    r = client.infer(
        ADD, [text_input([f"{a}+{b}"], module)], headers=dict(AUTH)
    )  # tritonclient.http adds to it
    return r.as_numpy("text_output")[0].decode(), (
        r.get_response().model_version if module is triton else r.get_response()["model_version"]
    )
