"""A source is text: the strings of a tokenizer's special tokens in it (``</s>``, ``<pad>``, ``<eos>``, M2M100's
``__de__``) are read as characters, never as end of sequence, padding or a language the text picks, on the real
server (tests/conftest.py's ``multilingual_server``: the committed translate-en-ja and an imported tiny M2M100).
The oracles tokenize on their own: ``tokenizers`` with its special tokens split as text (``encode_special_tokens``)
for translate-en-ja, whose output the engine's CTranslate2-style ``translate_batch`` gives on those tokens, and
transformers' M2M100Tokenizer with ``split_special_tokens`` and its ``generate`` for the M2M100.
"""

from __future__ import annotations

import pytest
from conftest import MODEL_REPO

pytest.importorskip("torch")

from s2s.seq2seq_client import Seq2SeqClient  # noqa: E402

M2M, JA = "m2m", "translate-en-ja"
AS_SENT = dict(protect_spans=False, split_long=False)  # markup-like strings reach the model as sent
TEXTS = ["Save </s> changes", "<pad> Open the file", "Close <eos> the window", "<unk> Print", "__de__ Save"]


def answers(srv, model: str, texts: list[str], **kw) -> list:
    with Seq2SeqClient(srv.address) as c:
        return list(c.generate_full(model, texts, beam_size=1, **AS_SENT, **kw).outputs)


def test_default_model_reads_special_token_strings_as_text(multilingual_server):
    from tokenizers import Tokenizer

    from contract import bundle
    from engine import EngineOptions
    from engine.translator import Translator

    folder = MODEL_REPO / JA / "1"
    tok = Tokenizer.from_file(str(folder / bundle.TOKENIZER_FILE))
    tok.encode_special_tokens = True
    pieces = [tok.encode(t, add_special_tokens=False) for t in TEXTS]
    local = Translator(folder, EngineOptions(device="cpu"))
    special = set(vars(local.config.model.special).values())
    assert all(not special & set(p.ids) for p in pieces)  # the oracle itself reads them as text
    results = local.translate_batch([p.tokens for p in pieces], beam_size=1)
    target = local.codec.target_tokenizer
    want = [local.codec.decode([target.token_to_id(t) for t in r.hypotheses[0]]) for r in results]
    got = answers(multilingual_server, JA, TEXTS)
    assert [o.input_tokens for o in got] == [len(p.ids) + 1 for p in pieces]  # and the EOS the plan adds
    assert [o.text for o in got] == want


def test_m2m100_reads_special_and_language_token_strings_as_text(multilingual_server, m2m100):
    import torch

    model, tok, _, _ = m2m100
    tok.src_lang = "en"
    ids = [tok(t, split_special_tokens=True)["input_ids"] for t in TEXTS]
    assert all(set(i[1:-1]).isdisjoint({0, 1, 2, tok.get_lang_id("de")}) for i in ids)
    want = []
    for i in ids:
        with torch.no_grad():
            out = model.generate(
                input_ids=torch.tensor([i]), forced_bos_token_id=tok.get_lang_id("ja"), num_beams=1
            )[0, 2:].tolist()
        out = out[: out.index(2)] if 2 in out else out
        want.append((tok.decode(out, skip_special_tokens=True), len(out), len(i)))
    got = answers(multilingual_server, M2M, TEXTS, source_language="en", target_language="ja")
    assert [(o.text, o.output_tokens, o.input_tokens) for o in got] == want
