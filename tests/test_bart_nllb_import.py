"""`s2s import` of BART, mBART-50 and NLLB checkpoints against transformers itself: tokenizer ids (the tokenizer.json
read as it is), every step's logits, and greedy and beam-4 outputs token-identical to
``generate(forced_bos_token_id=...)``, the multilingual ones decoding rows of several source and target languages in
one padded batch (``target_languages=``), BART with its forced ``<s>``.

The checkpoints are made here (tests/bart_models.py): tiny, trained a few hundred steps on tasks whose answer depends
on the target language, their LayerNorms and output bias perturbed.
"""

from __future__ import annotations

import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import bart_models as bm  # noqa: E402
import hf_parity as hp  # noqa: E402
import marian_models as mm  # noqa: E402

from contract import bundle  # noqa: E402
from contract.languages import LanguageError  # noqa: E402
from export.hf_import import ImportOptions, import_model  # noqa: E402

N_INPUTS = 200
FAMILIES = ("bart", "mbart", "nllb")


@pytest.fixture(scope="module", params=FAMILIES)
def imported(request, tmp_path_factory):
    """(family, HF model, its tokenizer loaded back from the folder, bundle folder, rows): one family at a time."""
    family = request.param
    root = tmp_path_factory.mktemp(family)
    model, tok, rows = bm.make(family, root / "ckpt")
    folder = import_model(ImportOptions(root / "ckpt", root / "repo", family))
    return family, model, tok, folder, rows


def test_bundle_knobs_and_languages(imported):
    family, _, tok, folder, _ = imported
    cfg = bundle.read_bundle(folder)
    m, task = cfg.model, cfg.task
    if family == "nllb":  # M2M100's architecture: nothing new, format 6
        assert cfg.format_version == bundle.FORMAT_LANGUAGES and m.positions == "sinusoid_fairseq"
    else:
        assert cfg.format_version == bundle.FORMAT_START_TOKENS
        assert (m.positions, m.position_offset, m.embedding_norm, m.activation) == (
            "learned",
            2,
            True,
            "gelu",
        )
        assert (m.norm, m.final_norm) == (("post", False) if family == "bart" else ("pre", True))
    assert m.special.bos == m.special.eos == 2  # decoding starts from </s>
    if family == "bart":
        assert cfg.languages is None and task.source_start_id == task.forced_bos_id == tok.bos_token_id == 0
        return
    assert task.source_start_id is None and task.forced_bos_id is None
    langs = cfg.languages
    assert (langs.target, langs.source) == ("forced_bos", "prefix")
    assert len(langs.tokens) == {"mbart": 52, "nllb": 202}[family]
    ja = bm.CODES[family]["ja"]
    assert langs.own("ja") == ja and langs.token("ja") == langs.token(ja) == tok.convert_tokens_to_ids(ja)
    with pytest.raises(LanguageError, match="target language 'xx' is not one this model knows; it knows "):
        langs.token("xx", "target language")


def test_tokenizer_ids_equal_transformers(imported):
    """The server's codec (only `tokenizers`, on the bundle's tokenizer.json) against transformers' tokenizer class
    loaded from the checkpoint folder, for every source language, on training lines and awkward text."""
    from contract.text import TextCodec

    family, _, tok, folder, _ = imported
    cfg = bundle.read_bundle(folder)
    codec = TextCodec.from_file(folder / bundle.TOKENIZER_FILE, cfg.task, cfg.model.special)
    texts = mm.lines(300, 99, japanese=True) + hp.AWKWARD
    for s in ("en", "fr") if family != "bart" else (None,):
        wrong = [
            t for t in texts if hp.source_ids(tok, family, s, t) != cfg.start(codec.source_ids(t), s, "de")[0]
        ]
        assert wrong == []
    ids = [
        hp.source_ids(tok, family, "en", t)[1:-1] for t in texts
    ]  # the text's own ids, as an output holds them
    assert [codec.decode(i) for i in ids] == [
        t.strip() for t in tok.batch_decode(ids, skip_special_tokens=True)
    ]


def test_every_step_logits_within_1e_4(imported):
    from engine import EngineOptions, Runner

    family, model, tok, folder, rows = imported
    worst, steps = hp.worst_step_logits(
        Runner(folder, EngineOptions(device="cpu")), model, tok, family, hp.inputs(rows, 24)
    )
    assert steps > 5 and worst < 1e-4


def test_greedy_and_beam4_token_identical_to_generate(imported):
    """200 mixed inputs (two source and three target languages for the multilingual ones) in one engine batch."""
    import engine

    family, model, tok, folder, rows = imported
    rows = hp.inputs(rows, N_INPUTS)
    if family != "bart":
        assert len({t for _, t, _ in rows}) == 3 and len({s for s, _, _ in rows}) == 2
    translator = engine.load(folder, threads=1)
    texts = [r[2] for r in rows]
    langs = {} if family == "bart" else {"source_languages": [r[0] for r in rows]}
    if family != "bart":  # conventional codes and the model's own, mixed
        langs["target_languages"] = [t if i % 2 else hp.own(family, t) for i, (_, t, _) in enumerate(rows)]
    for beam in (1, 4):
        want = hp.hf_generate(model, tok, family, rows, num_beams=beam)
        got = translator.generate(texts, beam_size=beam, max_batch_size=64, **langs)
        wrong = [(r, g.tokens, w) for r, g, w in zip(rows, got, want) if g.tokens != w]
        assert wrong == [], f"beam {beam}: {len(wrong)} of {len(rows)} differ; first: {wrong[0]}"
        assert sum(len(w) < 40 for w in want) > 0.75 * len(rows)  # they end by themselves
        assert [g.text for g in got] == [t.strip() for t in tok.batch_decode(want, skip_special_tokens=True)]
    assert len({tuple(w) for w in want}) > len(rows) // 2  # outputs depend on the input
    # the bundle's default is generation_config.json's: beam 4
    first = {k: v[:16] for k, v in langs.items()}
    assert [g.tokens for g in translator.generate(texts[:16], max_batch_size=64, **first)] == want[:16]
    if family == "bart":
        # CTranslate2's call: BART's <s> added to sources that lack it, the forced <s> not returned
        sources = [translator.source_tokens(t)[1:] for t in texts[:16]]
        got = translator.translate_batch(sources, beam_size=4)
        assert [r.hypotheses[0] for r in got] == [tok.convert_ids_to_tokens(w) for w in want[:16]]
    else:
        # the target language changes the answer: the task depends on it
        en = translator.generate(texts[:20], source_languages=["en"] * 20, target_languages=["en"] * 20)
        de = translator.generate(texts[:20], source_languages=["en"] * 20, target_languages=["de"] * 20)
        assert sum(a.tokens != b.tokens for a, b in zip(en, de)) > 10


def test_served_as_the_engine_decodes(imported, tmp_path):
    """Through the server (seq2seq.v1 gRPC, one request per input, all in flight so the core batches them): each
    answer equals transformers' ``generate``, BART's forced <s> and the target language's token left out."""
    from conftest import ServerThread, link_model, server_config

    from s2s.seq2seq_client import Seq2SeqClient

    family, model, tok, folder, rows = imported
    rows = hp.inputs(rows, 24)
    want = hp.hf_generate(model, tok, family, rows, num_beams=4)
    link_model(tmp_path / "models", family, folder)
    srv = ServerThread(server_config(model_repo=tmp_path / "models", instances=1))
    try:
        with Seq2SeqClient(srv.address) as c:
            langs = lambda s, t: {} if family == "bart" else {"source_language": s, "target_language": t}  # noqa: E731
            calls = [
                c.stub.Generate.future(
                    c.request(
                        family, [text], beam_size=4, protect_spans=False, split_long=False, **langs(s, t)
                    ),
                    timeout=60,
                )
                for s, t, text in rows
            ]
            got = [call.result().outputs[0] for call in calls]
    finally:
        srv.stop()
    texts = [t.strip() for t in tok.batch_decode(want, skip_special_tokens=True)]
    assert [(o.text, o.output_tokens) for o in got] == list(zip(texts, map(len, want)))
