"""`s2s import` of Marian checkpoints against transformers itself: tokenizer ids, encoder output and every
step's logits, greedy and beam-4 outputs of ``generate()``, and the same through the served doors (KServe, seq2seq.v1,
LibreTranslate), a multi-target model's ``>>xx<<`` codes as the target languages requests name.

The checkpoints are made here (tests/marian_models.py): one with a joint vocabulary and two ``>>xx<<``
target codes, one with separate source and target vocabularies; both trained so that their outputs depend
on the input and end by themselves, then their LayerNorms and output bias perturbed.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import onnx
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded, ever
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import hf_parity as hp  # noqa: E402
import marian_models as mm  # noqa: E402
from conftest import MODEL_REPO, ServerThread, server_config  # noqa: E402

from contract import names  # noqa: E402
from export.hf_import import ImportOptions, import_model  # noqa: E402

CODES = (">>up<<", ">>lo<<")
AWKWARD = hp.AWKWARD + [
    "水　水",
    "</s> the <unk>",
]  # a full-width space between ideographs; special tokens as text
N_INPUTS = 200


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """{name: (HF model, MarianTokenizer, bundle folder, source lines)}: made, saved and imported once."""
    root = tmp_path_factory.mktemp("marian")
    repo = root / "repo"
    out = {}
    for name, kw in (
        (
            "joint",
            {"codes": CODES, "langs": ("en", "de"), "heads": 2},
        ),  # GroupQueryAttention (export/fused.py)
        ("separate", {"separate_vocabs": True, "activation": "gelu", "seed": 1}),
    ):
        model, tok, src = mm.make(root / name, **kw)
        folder = import_model(ImportOptions(root / name, repo, name))
        ops = {n.op_type for n in onnx.load(str(folder / "decoder.onnx")).graph.node}
        assert ("GroupQueryAttention" in ops) == (name == "joint")  # heads of 4 take the standard nodes
        out[name] = (model, tok, folder, src)
    return out


def inputs(src: list[str], n: int = N_INPUTS) -> list[str]:
    """Mixed lengths: the training lines, pairs of them joined, and a few of one word."""
    joined = [f"{a} {b.split(' ', 1)[-1]}" for a, b in zip(src[::2], src[1::2])]
    return (
        src[: n // 2] + joined[: n // 4] + [s.split()[0] + " " + s.split()[-1] for s in src[-(n // 4) :]]
    )[:n]


def hf_generate(model, tok, texts: list[str], batch: int = 32, **kw) -> list[list[int]]:
    """transformers' own outputs in padded batches, without the start token, the EOS and the padding."""
    out = []
    for i in range(0, len(texts), batch):
        enc = tok(texts[i : i + batch], return_tensors="pt", padding=True)
        with torch.no_grad():
            rows = model.generate(**enc, **kw)[:, 1:].tolist()
        for r in rows:
            out.append(r[: r.index(0)] if 0 in r else r)  # EOS is 0; the padding after it goes too
    return [[t for t in r if t != model.config.pad_token_id] for r in out]


@pytest.mark.parametrize("name", ["joint", "separate"])
def test_tokenizer_ids_equal_marian_tokenizer(imported, name):
    """The server's codec (only `tokenizers`) against MarianTokenizer (sentencepiece + vocab.json)."""
    from contract import bundle
    from contract.text import TextCodec

    model, tok, folder, src = imported[name]
    cfg = bundle.read_bundle(folder)
    codec = TextCodec.from_file(
        folder / bundle.TOKENIZER_FILE, cfg.task, cfg.model.special, folder / bundle.TARGET_TOKENIZER_FILE
    )
    assert (folder / bundle.TARGET_TOKENIZER_FILE).is_file()  # Marian's sides differ: two spm models
    texts = (
        mm.lines(300, 99, japanese=True)
        + AWKWARD
        + ([f"{c} {t}" for c in CODES for t in AWKWARD[2:6]] if name == "joint" else [])
    )
    # A source's special-token strings are text (transformers' split_special_tokens); a prefix's are refused.
    assert [t for t in texts if tok(t, split_special_tokens=True)["input_ids"] != codec.source_ids(t)] == []
    assert [t for t in texts if tok(text_target=t)["input_ids"] != codec.target_ids(t) + [0]] == []
    ids = tok(text_target=[t for t in texts if "</s>" not in t])[
        "input_ids"
    ]  # a literal </s> ends our decoding
    assert [codec.decode(i) for i in ids] == tok.batch_decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("name", ["joint", "separate"])
def test_encoder_output_and_every_step_logits_within_1e_4(imported, name):
    from engine import EngineOptions, Runner

    model, tok, folder, src = imported[name]
    runner = Runner(folder, EngineOptions(device="cpu"))
    texts = inputs(src, 24)
    enc = tok(texts, return_tensors="pt", padding=True)
    ids, mask = enc["input_ids"].numpy().copy(), enc["attention_mask"].numpy().copy()
    with torch.no_grad():
        want_memory = model.get_encoder()(**enc).last_hidden_state.numpy()
        tgt = model.generate(**enc, num_beams=1)  # the steps to teacher-force: the model's own output
        want_logits = model(**enc, decoder_input_ids=tgt).logits.numpy()  # (B, T, V)
    memory = runner.encoder.run([names.MEMORY], {names.SRC_IDS: ids, names.SRC_MASK: mask})[0]
    real = mask.astype(bool)
    assert np.abs(memory - want_memory)[real].max() < 1e-4
    cross = runner.encode(ids, mask)
    b = len(texts)
    past = [np.zeros((b, runner.n_heads, 0, runner.d_head), np.float32)] * (2 * runner.n_layers)
    past_mask = np.zeros((b, 0), np.int64)
    worst = 0.0
    for t in range(tgt.shape[1]):
        logits, past = runner.decode(
            tgt[:, t : t + 1].numpy(), np.full((b, 1), t, np.int64), past_mask, past, cross, mask
        )
        past_mask = np.ones((b, t + 1), np.int64)
        live = (tgt[:, : t + 1] == 0).sum(1).numpy() == 0  # rows that have not ended before this step
        if live.any():  # the last step feeds the longest row's EOS: nothing is predicted after it
            worst = max(worst, float(np.abs(logits[:, 0] - want_logits[:, t])[live].max()))
    assert tgt.shape[1] > 5 and worst < 1e-4


@pytest.mark.parametrize("name", ["joint", "separate"])
def test_greedy_and_beam4_token_identical_to_generate(imported, name):
    import engine

    model, tok, folder, src = imported[name]
    texts = inputs(src)
    translator = engine.load(folder, threads=1)
    for beam in (1, 4):
        want = hf_generate(model, tok, texts, num_beams=beam)
        got = [r.tokens for r in translator.generate(texts, beam_size=beam, max_batch_size=32)]
        same = sum(g == w for g, w in zip(got, want))
        assert same == len(texts), f"beam {beam}: {same}/{len(texts)} identical; first differing: " + str(
            next((t, g, w) for t, g, w in zip(texts, got, want) if g != w)
        )
        ended = sum(len(w) < 47 for w in want)
        assert ended > 0.75 * len(texts)  # they end by themselves, not at the length limit
    assert len({tuple(w) for w in want}) > len(texts) // 2  # outputs depend on the input
    # The bundle's default is the model's: generation_config.json's num_beams=4 with transformers' rule.
    assert [r.tokens for r in translator.generate(texts[:32])] == want[:32]


@pytest.fixture(scope="module")
def served(imported, tmp_path_factory):
    """The real server on a repository of both imported models and the committed addition model."""
    repo = tmp_path_factory.mktemp("served") / "repo"
    repo.mkdir()
    for name, (_, _, folder, _) in imported.items():
        (repo / name).symlink_to(folder.parent)
    if (MODEL_REPO / "addition").is_dir():
        (repo / "addition").symlink_to(MODEL_REPO / "addition")
    srv = ServerThread(server_config(model_repo=repo, model_repo_links="any"))  # its folders link outside it
    yield srv, repo
    srv.stop()


def test_served_through_kserve_grpc_under_continuous_batching(imported, served):
    """200 single-input requests to both imported models at once, beside the committed addition model, over the
    real server's KServe gRPC door: each answer is transformers' beam-4 output, decoded by MarianTokenizer."""
    import tritonclient.grpc as triton
    import tritonclient.grpc.aio as triton_aio

    def text_input(texts: list[str]) -> triton.InferInput:
        inp = triton.InferInput("text_input", [len(texts)], "BYTES")
        inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
        return inp

    def outputs_of(result) -> list[str]:
        return [b.decode() for b in result.as_numpy("text_output").reshape(-1)]

    srv, repo = served
    expected = {}
    for name, (model, tok, _, src) in imported.items():
        texts = inputs(src, N_INPUTS // 2)
        want = hf_generate(model, tok, texts)  # generation_config.json's defaults: beam 4
        expected[name] = list(zip(texts, tok.batch_decode(want, skip_special_tokens=True)))

    async def main():
        async with triton_aio.InferenceServerClient(srv.address) as c:
            jobs = [
                (m, t, w, c.infer(m, [text_input([t])], client_timeout=120))
                for m in expected
                for t, w in expected[m]
            ]
            extra = (
                [c.infer("addition", [text_input(["12+30"])]) for _ in range(8)]
                if (repo / "addition").exists()
                else []
            )
            results = await asyncio.gather(*(j for *_, j in jobs), *extra)
            return [(m, t, w, outputs_of(r)[0]) for (m, t, w, _), r in zip(jobs, results)], results[
                len(jobs) :
            ]

    answered, sums = asyncio.run(main())
    wrong = [(m, t, w, g) for m, t, w, g in answered if g != w]
    assert len(answered) == N_INPUTS and wrong == []
    assert all(outputs_of(r) == ["42"] for r in sums)


def test_served_nbest_and_streaming(imported, served):
    """seq2seq.v1 n-best lists and streaming (the texts carry their >>xx<< codes, as MarianTokenizer reads them)."""
    from s2s.seq2seq_client import Seq2SeqClient

    srv, _ = served
    model, tok, _, src = imported["joint"]
    texts = inputs(src, 12)
    nbest = [
        tok.batch_decode(r, skip_special_tokens=True)
        for r in (lambda rows: [rows[i : i + 2] for i in range(0, len(rows), 2)])(
            hf_generate(model, tok, texts, num_beams=4, num_return_sequences=2)
        )
    ]
    greedy = tok.batch_decode(hf_generate(model, tok, texts, num_beams=1), skip_special_tokens=True)
    with Seq2SeqClient(srv.address) as c:
        full = c.generate_full("joint", texts, num_hypotheses=2)
        assert [[h.text for h in o.hypotheses] for o in full.outputs] == nbest
        streamed = [""] * len(texts)
        for r in c.stream("joint", texts, beam_size=1):
            streamed[r.index] += r.text_delta
        assert streamed == greedy


def libretranslate(srv, text: str, source: str, target: str) -> str:
    import json
    import urllib.request

    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.running.web.port}/translate",
        data=json.dumps({"q": text, "source": source, "target": target}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())["translatedText"]


def test_target_languages_per_request_in_one_continuous_batch(imported, served):
    """The joint model's >>up<< and >>lo<< as its languages: each request names its target (seq2seq.v1, by the
    conventional code or the model's own; LibreTranslate), requests of both targets all in flight at once decode
    in one continuous batch, and each answer is transformers' generate() of the text with the code before it (as
    MarianTokenizer reads it). A language the model does not know is refused, naming the ones it knows."""
    import grpc

    from s2s.seq2seq_client import Seq2SeqClient

    srv, _ = served
    model, tok, folder, src = imported["joint"]
    plain = [s.split(" ", 1)[1] for s in inputs(src, 48)]  # the code each line was made with, taken off
    targets = ["up", "lo", "lo", "up"] * (len(plain) // 4)
    coded = [f">>{t}<< {x}" for t, x in zip(targets, plain)]
    want = tok.batch_decode(hf_generate(model, tok, coded), skip_special_tokens=True)
    assert len(set(want)) > len(want) // 2 and want[0] != want[1]  # the answers depend on text and target
    with Seq2SeqClient(srv.address) as c:
        calls = [
            c.stub.Generate.future(
                c.request("joint", [x], target_language=t if i % 3 else f">>{t}<<"), timeout=120
            )
            for i, (t, x) in enumerate(zip(targets, plain))
        ]
        assert [call.result().outputs[0].text for call in calls] == want
        assert c.generate("joint", coded[:4]) == want[:4]  # no target named: read as sent, its code included
        with pytest.raises(grpc.RpcError) as e:
            c.generate("joint", plain[:1], target_language="fr")
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "it knows lo, up" in e.value.details()
    assert [libretranslate(srv, plain[i], "en", targets[i]) for i in range(4)] == want[:4]
