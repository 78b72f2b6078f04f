"""Protected spans and long inputs on an imported model (`s2s import` of a Marian checkpoint made here,
tests/marian_models.py: a SentencePiece tokenizer of its own and 64 source tokens): every span kept, long inputs
split, through the real server."""

from __future__ import annotations

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded, ever
pytest.importorskip("torch")
pytest.importorskip("transformers")

import marian_models as mm  # noqa: E402
from conftest import ServerThread, server_config  # noqa: E402
from span_cases import SOURCES  # noqa: E402

from contract.spans import check  # noqa: E402
from export.hf_import import ImportOptions, import_model  # noqa: E402
from s2s.seq2seq_client import Seq2SeqClient  # noqa: E402


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("marian-spans")
    _, _, src = mm.make(root / "ckpt", separate_vocabs=True, seed=1)
    folder = import_model(ImportOptions(root / "ckpt", root / "repo", "imported"))
    srv = ServerThread(server_config(model_repo=folder.parents[1], instances=1))
    yield srv, src
    srv.stop()


def test_an_imported_model_keeps_every_span_and_splits_long_inputs(served):
    srv, src = served
    long = " ".join(s.rstrip(".") + "." for s in src[:80])
    with Seq2SeqClient(srv.address, timeout=120) as c:
        outs = c.generate_full("imported", SOURCES + [long]).outputs
    for source, o in zip(SOURCES, outs):
        assert check(source, o.text).ok, (source, o.text)
    assert outs[-1].pieces > 1 and outs[-1].text
