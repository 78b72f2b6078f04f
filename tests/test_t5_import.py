"""`s2s import` of T5 (v1.0: ReLU, tied and rescaled), MADLAD-400 / Flan-T5 (gated GELU, untied, target languages as
``<2xx>`` source tokens), mT5 (heads of d_kv) and Pegasus checkpoints against transformers itself: tokenizer ids,
the encoder's output and every step's logits within 1e-4, greedy and beam-4 outputs token-identical to
``generate()`` on 200 inputs of mixed lengths in padded batches, and the same through the server with rows of different
lengths decoded together.

The checkpoints are made here (tests/t5_models.py): tiny, trained a few hundred steps, their norms perturbed.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_parity as hp  # noqa: E402
import marian_models as mm  # noqa: E402
import t5_models as tm  # noqa: E402

from contract import bundle, names  # noqa: E402
from export.hf_import import ImportOptions, import_model  # noqa: E402

N_INPUTS = 200


@pytest.fixture(scope="module", params=tm.KINDS)
def imported(request, tmp_path_factory):
    """(kind, HF model, its tokenizer, bundle folder, rows): one kind at a time."""
    kind = request.param
    root = tmp_path_factory.mktemp(kind)
    model, tok, rows = tm.make(kind, root / "ckpt")
    folder = import_model(ImportOptions(root / "ckpt", root / "repo", kind))
    return kind, model, tok, folder, rows


def targets(rows) -> dict:
    """MADLAD's target languages, conventional codes and the model's own <2xx> mixed; none for the others."""
    if rows[0][0] is None:
        return {}
    return {"target_languages": [t if i % 2 else f"<2{t}>" for i, (t, _) in enumerate(rows)]}


def test_bundle_records_the_knobs(imported):
    kind, model, tok, folder, _ = imported
    cfg = bundle.read_bundle(folder)
    m = cfg.model
    assert (m.special.pad, m.special.bos, m.special.eos) == (0, 0, 1)  # decoding starts from <pad>
    assert cfg.origin["model_type"] == ("t5" if kind in ("t5", "madlad") else kind)
    if kind == "pegasus":
        assert cfg.format_version == bundle.FORMAT_IMPORTED and not m.moves_later_knobs
        assert (m.positions, m.norm, m.final_norm, m.scale_embedding) == ("sinusoid_half", "pre", True, True)
        assert cfg.languages is None
        return
    assert cfg.format_version == bundle.FORMAT_T5_KNOBS
    assert (m.positions, m.relative_attention_num_buckets, m.relative_attention_max_distance) == (
        "relative",
        8,
        8,
    )
    assert m.rms_norm and m.norm_eps == 1e-6 and not (m.scale_attention or m.projection_bias or m.output_bias)
    assert (m.ffn_glu, m.activation) == ((False, "relu") if kind == "t5" else (True, "gelu_tanh"))
    assert (m.tie_output, m.scale_output) == ((True, True) if kind == "t5" else (False, False))
    assert (m.n_heads, m.d_head) == tm.HEADS[kind] and m.src_vocab_size == len(tok) + 4
    if kind != "madlad":  # Flan-T5's, mT5's inputs are the user's text: nothing added but </s>
        assert cfg.languages is None and cfg.task.source_start_id is None
        return
    langs = cfg.languages
    assert (langs.target, langs.source) == ("source_prefix", "any")
    assert {c: langs.token(c) for c in tm.LANGUAGES} == {
        c: tok.convert_tokens_to_ids(f"<2{c}>") for c in tm.LANGUAGES
    }
    assert cfg.start([5, 1], None, "de") == ([tok.convert_tokens_to_ids("<2de>"), 5, 1], [])


def test_tokenizer_ids_equal_transformers(imported):
    """The server's codec (only ``tokenizers``, on the bundle's tokenizer.json) against transformers' tokenizer class on
    training lines and awkward text; the folder's spiece.model as the import converts it (where tokenizer.json is
    missing) too, and against SentencePiece itself where the ids are its own (Pegasus's are offset)."""
    import json

    import sentencepiece as spm

    from contract.text import TextCodec
    from export.hf_t5 import spiece_tokenizer

    kind, _, tok, folder, _ = imported
    cfg = bundle.read_bundle(folder)
    codec = TextCodec.from_file(folder / bundle.TOKENIZER_FILE, cfg.task, cfg.model.special)
    texts = mm.lines(300, 99, japanese=True) + hp.AWKWARD
    assert [t for t in texts if codec.source_ids(t) != tok(t)["input_ids"]] == []
    ckpt = folder.parents[2] / "ckpt"
    tok_cfg = json.loads((ckpt / "tokenizer_config.json").read_text())
    converted = spiece_tokenizer(ckpt, tok_cfg, "Pegasus" if kind == "pegasus" else "T5")
    assert [
        t
        for t in texts
        if converted.encode(t, add_special_tokens=False).ids + [tm.EOS] != tok(t)["input_ids"]
    ] == []
    if kind != "pegasus":
        sp = spm.SentencePieceProcessor(model_file=str(ckpt / "spiece.model"))
        plain = [t for t in texts if t.strip() and "\t" not in t and "\n" not in t]
        assert [t for t in plain if codec.source_ids(t) != sp.encode(t) + [tm.EOS]] == []
    if kind == "madlad":  # a text that carries its <2xx> itself is read as MADLAD's tokenizer reads it
        assert (
            cfg.start(codec.source_ids("<2ja> the cat"), None, None)[0] == tok("<2ja> the cat")["input_ids"]
        )
    ids = [tok(t)["input_ids"][:-1] for t in texts]
    assert [codec.decode(i) for i in ids] == [
        t.strip() for t in tok.batch_decode(ids, skip_special_tokens=True)
    ]


def test_encoder_output_and_every_step_logits_within_1e_4(imported):
    """Rows of mixed lengths (past the buckets' max distance) in one padded batch: the encoder's output at every real
    position, then transformers' own greedy output fed back through the engine's decoder one step at a time."""
    from engine import EngineOptions, Runner

    kind, model, tok, folder, rows = imported
    runner = Runner(folder, EngineOptions(device="cpu"))
    rows = tm.inputs(rows, 24)
    ids, mask = tm.encode(tok, rows)
    assert int(mask.sum(1).max()) > 8
    with torch.no_grad():
        want = model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
    (memory,) = runner.encoder.run([names.MEMORY], {names.SRC_IDS: ids.numpy(), names.SRC_MASK: mask.numpy()})
    real = mask.numpy().astype(bool)
    assert float(np.abs(memory - want)[real].max()) < 1e-4
    worst, steps = tm.worst_step_logits(runner, model, tok, rows)
    assert steps > 8 and worst < 1e-4


def test_greedy_and_beam4_token_identical_to_generate(imported):
    """200 mixed inputs (MADLAD's of three target languages) decoded 64 rows at a time, refilled as rows finish."""
    import engine

    kind, model, tok, folder, rows = imported
    rows = tm.inputs(rows, N_INPUTS)
    translator = engine.load(folder, threads=1)
    texts = [text for _, text in rows]
    for beam in (1, 4):
        want = tm.hf_generate(model, tok, rows, num_beams=beam)
        got = translator.generate(texts, beam_size=beam, max_batch_size=64, **targets(rows))
        wrong = [(r, g.tokens, w) for r, g, w in zip(rows, got, want) if g.tokens != w]
        assert wrong == [], f"beam {beam}: {len(wrong)} of {len(rows)} differ; first: {wrong[0]}"
        assert sum(len(w) < 40 for w in want) > 0.75 * len(rows)  # they end by themselves
        assert [g.text for g in got] == [t.strip() for t in tok.batch_decode(want, skip_special_tokens=True)]
    assert len({tuple(w) for w in want}) > len(rows) // 2  # outputs depend on the input
    if kind == "madlad":  # the target language changes the answer
        en = translator.generate(texts[:20], target_languages=["en"] * 20)
        de = translator.generate(texts[:20], target_languages=["de"] * 20)
        assert sum(a.tokens != b.tokens for a, b in zip(en, de)) > 10


def post(srv, path: str, body: dict) -> tuple[int, dict]:
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.running.web.port}/{path}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_served_rows_of_different_lengths_decode_as_alone(imported, tmp_path):
    """Through the server (seq2seq.v1 gRPC): one request per input, short and long ones all in flight so that the core
    decodes them in one continuous batch, rows joining as others leave; each answer equals ``generate()``'s. MADLAD's
    target language by ISO code on the KServe and LibreTranslate doors too, any of its languages as the source."""
    from conftest import ServerThread, link_model, server_config

    from s2s.seq2seq_client import Seq2SeqClient

    kind, model, tok, folder, rows = imported
    rows = tm.inputs(rows, 48)[::-1]  # long ones first: short ones join the batch as they finish
    want = {beam: tm.hf_generate(model, tok, rows, num_beams=beam) for beam in (1, 4)}
    text = lambda ids: tok.decode(ids, skip_special_tokens=True).strip()  # noqa: E731
    plain = [x for _, x in rows if not any(c.isdigit() for c in x)][:6]  # no spans to protect: read as sent
    de = [text(w) for w in tm.hf_generate(model, tok, [("de", x) for x in plain], num_beams=4)]
    link_model(tmp_path / "models", kind, folder)
    srv = ServerThread(server_config(model_repo=tmp_path / "models", instances=1))
    try:
        with Seq2SeqClient(srv.address) as c:
            calls = [
                c.stub.Generate.future(
                    c.request(
                        kind,
                        [x],
                        beam_size=beam,
                        protect_spans=False,
                        split_long=False,
                        **({"target_language": t} if t else {}),
                    ),
                    timeout=120,
                )
                for beam in (1, 4)
                for t, x in rows
            ]
            got = [call.result().outputs[0] for call in calls]
        if kind == "madlad":
            body = {"target_language": "de", "protect_spans": False, "split_long": False}
            inputs = [{"name": "text_input", "datatype": "BYTES", "shape": [len(plain)], "data": plain}]
            status, answer = post(srv, f"v2/models/{kind}/infer", {"inputs": inputs, "parameters": body})
            assert status == 200 and answer["outputs"][0]["data"] == de, answer
            for source in ("en", "ja"):
                translated = [
                    post(srv, "translate", {"q": x, "source": source, "target": "de"}) for x in plain
                ]
                assert translated == [(200, {"translatedText": w}) for w in de]
            status, answer = post(srv, "translate", {"q": "dog", "source": "en", "target": "xx"})
            assert status == 400 and "'en' -> 'xx' is not served" in answer["error"], answer
    finally:
        srv.stop()
    expected = [(text(w), len(w)) for beam in (1, 4) for w in want[beam]]
    assert [(o.text, o.output_tokens) for o in got] == expected


@pytest.mark.parametrize("buckets,distance", [(32, 128), (8, 8), (32, 17), (6, 20)])
def test_relative_buckets_equal_transformers_at_every_distance(buckets, distance):
    """The bucket table and its clamp against T5's own bucket function, both directions, distances past the table."""
    from transformers.models.t5.modeling_t5 import T5Attention

    from training.positions import RelativePositionBias

    d = torch.arange(-3 * distance, 3 * distance + 1)
    for bidirectional in (True, False):
        rpb = RelativePositionBias(1, buckets, distance, bidirectional)
        rpb.bias.weight.data = torch.arange(buckets, dtype=torch.float32)[:, None]  # bias = the bucket
        ours = rpb(torch.zeros(1, 1, dtype=torch.long), d[None])[0, 0, 0].long()
        want = T5Attention._relative_position_bucket(d, bidirectional, buckets, distance)
        assert torch.equal(ours, want)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A MADLAD-shaped T5 folder, untrained (these tests read files, they do not compare outputs)."""
    folder = tmp_path_factory.mktemp("t5-refusals") / "ok"
    tm.make("madlad", folder, steps=0, n_lines=60)
    return folder


def refused(capsys, folder, repo, *needles: str) -> None:
    from s2s.cli import main

    code = main(["import", str(folder), "--repo", str(repo), "--name", "m"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("s2s import: ") and "Traceback" not in err
    for n in needles:
        assert n in err, err
    assert not repo.exists() or not any(repo.iterdir())  # nothing written to the repository


def edited(untrained, tmp_path, **config):
    import json
    import shutil

    folder = tmp_path / "ckpt"
    shutil.copytree(untrained, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **config}))
    return folder


@pytest.mark.parametrize("proj", ["gated-silu", "gelu", "swiglu"])
def test_unsupported_feed_forward_refused_by_name(capsys, untrained, tmp_path, proj):
    folder = edited(untrained, tmp_path, feed_forward_proj=proj)
    refused(
        capsys, folder, tmp_path / "repo", "config.json", f"'feed_forward_proj' is {proj!r}", "gated-gelu"
    )


def test_missing_tokenizer_refused_by_name(capsys, untrained, tmp_path):
    folder = edited(untrained, tmp_path)
    (folder / "spiece.model").unlink()
    refused(capsys, folder, tmp_path / "repo", "no tokenizer", "tokenizer.json or spiece.model")


@pytest.mark.parametrize(
    "config,needles",
    [
        ({"d_kv": 4}, ("SelfAttention.q.weight", "has shape", "'num_heads / d_kv / d_model'")),
        ({"d_ff": 40}, ("DenseReluDense.wi_0.weight", "'d_ff / d_model'")),
        ({"vocab_size": 100}, ("ids up to", "'vocab_size' is 100")),
        ({"num_layers": 1, "num_decoder_layers": 2}, ("has encoder layer 1", "'num_layers' is 1")),
        (
            {"relative_attention_num_buckets": 6},
            ("relative_attention_bias", "relative_attention_num_buckets"),
        ),
        ({"relative_attention_max_distance": 2}, ("relative_attention_max_distance=2",)),
        ({"num_heads": 3}, ("num_heads",)),
    ],
)
def test_sizes_that_disagree_refused_by_name(capsys, untrained, tmp_path, config, needles):
    refused(capsys, edited(untrained, tmp_path, **config), tmp_path / "repo", "config.json", *needles)
