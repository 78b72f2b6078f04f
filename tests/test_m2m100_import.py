"""`s2s import` of an M2M100 checkpoint against transformers itself: tokenizer ids with the language tokens, every
step's logits, and greedy and beam-4 outputs token-identical to ``generate(forced_bos_token_id=...)`` while this
engine decodes rows of several source and target languages in one padded batch.

The checkpoint is made here (tests/m2m100_models.py, once a session: tests/conftest.py's ``m2m100``): its answer
depends on the target language.
"""

from __future__ import annotations

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_parity as hp  # noqa: E402
import m2m100_models as mm  # noqa: E402

from contract import bundle  # noqa: E402
from contract.languages import LanguageError  # noqa: E402

N_INPUTS = 200


@pytest.fixture(scope="module")
def imported(m2m100):
    return m2m100  # made once a session (tests/conftest.py), shared with the server's tests


def inputs(rows, n: int = N_INPUTS):
    return hp.inputs(rows, n)


def test_bundle_languages_and_tokenizer_ids(imported):
    from contract.text import TextCodec

    model, tok, folder, rows = imported
    cfg = bundle.read_bundle(folder)
    assert cfg.format_version == bundle.FORMAT_LANGUAGES and cfg.model.positions == "sinusoid_fairseq"
    langs = cfg.languages
    assert langs.target == "forced_bos" and langs.source == "prefix" and len(langs.tokens) == 100
    assert langs.own("ja") == "__ja__" and langs.token("__ja__") == tok.get_lang_id("ja") == langs.token("ja")
    with pytest.raises(LanguageError, match="'xx' is not one this model knows; it knows af, am"):
        langs.token("xx", "target language")
    codec = TextCodec.from_file(folder / bundle.TOKENIZER_FILE, cfg.task, cfg.model.special)
    texts = mm.mm.lines(300, 99, japanese=True) + ["", "  the   cat ", "ＡＢＣ ①"]
    for s in ("en", "fr"):
        tok.src_lang = s
        assert [t for t in texts if tok(t)["input_ids"] != langs.apply(codec.source_ids(t), s, "de")[0]] == []
    ids = [tok(t)["input_ids"][1:] for t in texts]
    assert [codec.decode(i) for i in ids] == tok.batch_decode(ids, skip_special_tokens=True)


def test_every_step_logits_within_1e_4(imported):
    from engine import EngineOptions, Runner

    model, tok, folder, rows = imported
    runner = Runner(folder, EngineOptions(device="cpu"))
    worst, steps = hp.worst_step_logits(runner, model, tok, "m2m100", inputs(rows, 24))
    assert steps > 5 and worst < 1e-4


def test_greedy_and_beam4_with_mixed_target_languages_in_one_batch(imported):
    import engine

    model, tok, folder, rows = imported
    rows = inputs(rows)
    assert len({t for _, t, _ in rows}) == 3 and len({s for s, _, _ in rows}) == 2
    translator = engine.load(folder, threads=1)
    texts = [r[2] for r in rows]
    for beam in (1, 4):
        want = mm.hf_generate(model, tok, rows, num_beams=beam)
        got = translator.generate(
            texts,
            source_languages=[r[0] for r in rows],
            target_languages=[r[1] for r in rows],
            beam_size=beam,
            max_batch_size=64,
        )
        wrong = [(r, g.tokens, w) for r, g, w in zip(rows, got, want) if g.tokens != w]
        assert wrong == [], f"beam {beam}: {len(wrong)} of {len(rows)} differ; first: {wrong[0]}"
        assert sum(len(w) < 40 for w in want) > 0.75 * len(rows)  # they end by themselves
        # A language token the model emits inside its answer is dropped from the text, as the forced one is (and as
        # NLLB's tokenizer does); M2M100Tokenizer's decode keeps it, so the oracle's text goes without those ids.
        langs = set(tok.lang_token_to_id.values())
        plain = [[t for t in w if t not in langs] for w in want]
        assert [g.text for g in got] == tok.batch_decode(plain, skip_special_tokens=True)
    # the target language changes the answer: the task depends on it
    en = translator.generate(texts[:20], source_languages=["en"] * 20, target_languages=["en"] * 20)
    de = translator.generate(texts[:20], source_languages=["en"] * 20, target_languages=["de"] * 20)
    assert sum(a.tokens != b.tokens for a, b in zip(en, de)) > 10
    with pytest.raises(LanguageError, match="target language 'xx'"):
        translator.generate(texts[:1], source_languages=["en"], target_languages=["xx"])


def test_the_server_serves_a_multilingual_bundle(imported, multilingual_server):
    """The server takes a target language per request (every door: tests/test_multilingual_serving.py) and answers
    as generate() does with that language's token forced, the token itself left out."""
    from s2s.seq2seq_client import Seq2SeqClient

    model, tok, _, rows = imported
    rows = [("en", "de", t) for _, _, t in rows[:6]]
    want = mm.hf_generate(model, tok, rows, num_beams=4)
    with Seq2SeqClient(multilingual_server.address) as c:
        got = c.generate_full(
            "m2m", [t for _, _, t in rows], source_language="en", target_language="de", protect_spans=False
        ).outputs
    assert [(o.text, o.output_tokens) for o in got] == [
        (t, len(w)) for t, w in zip(tok.batch_decode(want, skip_special_tokens=True), want)
    ]
