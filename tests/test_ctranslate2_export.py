"""export/ctranslate2.py, the conversion every CTranslate2 comparison rests on: CTranslate2 greedy equals PyTorch
greedy on the same weights, a forced length is exactly that long, and the check notices a wrong positional layout."""

from __future__ import annotations

import pytest
from conftest import CHECKPOINTS

ADDITION = CHECKPOINTS / "addition"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    pytest.importorskip("ctranslate2", reason="ctranslate2 is the bench extra: pip install -e '.[bench]'")
    if not (ADDITION / "test.tsv").is_file():
        pytest.skip(f"no addition checkpoint with test.tsv at {ADDITION} (run `make models`)")
    import torch

    from export.ctranslate2 import CT2Translator, convert, vocabulary
    from training import checkpoint
    from training.tasks import read_tsv

    torch.set_num_threads(1)
    out = convert(ADDITION, tmp_path_factory.mktemp("ct2") / "addition", force=True)
    ck = checkpoint.load(ADDITION)
    tokens = vocabulary(ck.codec.tokenizer)
    sources = [s for s, _ in read_tsv(ADDITION / "test.tsv")[:20]]
    budget = min(ck.task.max_new_tokens, ck.config.max_len - 1)
    return ck, tokens, CT2Translator(out, tokens, "float32", 1), sources, budget


def test_ct2_greedy_equals_pytorch_greedy(setup):
    from export.ctranslate2 import verify

    ck, _, translator, sources, budget = setup
    report = verify(ck.model, ck.codec, translator, sources, budget)
    assert report["n"] == len(sources) == 20
    assert report["identical"] == report["n"], report["first_mismatch"]
    assert report["max_abs_logprob_diff"] < 1e-3, report


def test_ct2_forced_length(setup):
    """min = max decoding length forces exactly N tokens, as the forced-length grid times."""
    ck, _, translator, sources, budget = setup
    out = translator.greedy([ck.codec.source_ids(s) for s in sources[:4]], budget, force=True)
    assert [len(r) for r in out] == [budget] * 4


def test_check_detects_wrong_positional_layout(setup, tmp_path):
    """Negative control: CTranslate2's built-in sinusoids (concatenated sin|cos) instead of the model's interleaved
    table must change the log-probabilities, else the check above proves nothing."""
    from ctranslate2.specs import model_spec

    from export.ctranslate2 import CT2Translator, build_spec, save, verify

    ck, tokens, _, sources, budget = setup
    spec = build_spec(ck.model, tokens)
    spec.encoder.position_encodings.encodings = model_spec.OPTIONAL
    spec.decoder.position_encodings.encodings = model_spec.OPTIONAL
    wrong = CT2Translator(save(spec, tmp_path / "builtin-pe"), tokens, "float32", 1)
    report = verify(ck.model, ck.codec, wrong, sources, budget)
    assert report["max_abs_logprob_diff"] > 1e-2, report
