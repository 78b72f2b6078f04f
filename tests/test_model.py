"""The PyTorch model: masks, padding, KV cache, and that it learns."""

from __future__ import annotations

import unicodedata

import pytest
import torch

from contract.config import ModelConfig, TaskConfig
from contract.text import TextCodec, UnknownCharactersError
from training import tasks
from training.batching import bucketed_batches, collate, encode_pairs
from training.decoding import greedy, greedy_uncached
from training.model import Transformer
from training.vocab import bpe_tokenizer, char_tokenizer


def tiny(vocab: int = 20, **kw) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        src_vocab_size=vocab,
        tgt_vocab_size=vocab,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_len=32,
        **kw,
    )
    return Transformer(cfg).eval()


def test_future_target_tokens_cannot_change_earlier_logits():
    model = tiny()
    src = torch.randint(4, 20, (2, 6))
    mask = torch.ones_like(src)
    tgt = torch.randint(4, 20, (2, 7))
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(4, 20, (2, 3))
    a, b = model(src, mask, tgt), model(src, mask, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_source_padding_does_not_change_results():
    model = tiny()
    src = torch.randint(4, 20, (1, 5))
    tgt = torch.randint(4, 20, (1, 4))
    alone = model(src, torch.ones_like(src), tgt)
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], 1)
    torch.testing.assert_close(model(padded, (padded != 0).long(), tgt), alone)


def test_kv_cached_greedy_equals_uncached_token_for_token():
    model = tiny(vocab=30)
    src = torch.randint(4, 30, (6, 9))
    lengths = torch.tensor([9, 3, 5, 1, 7, 2])
    mask = (torch.arange(9)[None] < lengths[:, None]).long()
    src = src * mask
    cached, uncached = greedy(model, src, mask, 20), greedy_uncached(model, src, mask, 20)
    assert cached == uncached
    assert sum(map(len, cached)) > 0


BART = dict(
    positions="learned", position_offset=2, embedding_norm=True, activation="gelu", scale_embedding=False
)
MBART = {**BART, "norm": "pre", "final_norm": True}
T5 = dict(  # T5 v1.0's output rescaling with v1.1's gated GELU, heads of 4 whose 4 make 16, not d_model 32
    positions="relative",
    relative_attention_num_buckets=8,
    relative_attention_max_distance=8,
    rms_norm=True,
    norm_eps=1e-6,
    ffn_glu=True,
    activation="gelu_tanh",
    projection_bias=False,
    scale_attention=False,
    scale_output=True,
    norm="pre",
    final_norm=True,
    output_bias=False,
    scale_embedding=False,
    d_kv=4,
)


def test_knobs_default_to_the_paper_and_add_only_their_own_tensors():
    """A config that moves no knob is the model (and the config.json) it always was; BART's knobs add their tables."""
    paper = set(tiny().state_dict())
    assert "embedding_norm" not in ModelConfig(20, 20).to_dict() and ModelConfig(20, 20).is_paper
    added = {"pos.table.weight", "decoder_pos.table.weight"} | {
        f"{s}_embed_norm.{p}" for s in ("encoder", "decoder") for p in ("weight", "bias")
    }
    assert set(tiny(**BART).state_dict()) - paper == added and paper - set(tiny(**BART).state_dict()) == set()
    assert ModelConfig.from_dict(ModelConfig(20, 20, **MBART).to_dict()) == ModelConfig(20, 20, **MBART)
    t5 = set(tiny(**T5).state_dict())
    assert {
        "encoder_position_bias.bias.weight",
        "decoder_position_bias.bias.weight",
        "encoder.0.ffn.v.weight",
    } <= t5
    assert not any(k.endswith(".bias") for k in t5) and tiny(**T5).config.moves_later_knobs
    assert ModelConfig.from_dict(ModelConfig(20, 20, **T5).to_dict()) == ModelConfig(20, 20, **T5)


@pytest.mark.parametrize("knobs", [BART, MBART, T5], ids=["bart", "mbart", "t5"])
def test_kv_cached_greedy_equals_uncached_with_the_imported_knobs(knobs):
    model = tiny(vocab=30, **knobs)
    src = torch.randint(4, 30, (4, 7))
    mask = (torch.arange(7)[None] < torch.tensor([7, 2, 5, 1])[:, None]).long()
    src = src * mask
    cached, uncached = greedy(model, src, mask, 20), greedy_uncached(model, src, mask, 20)
    assert cached == uncached and sum(map(len, cached)) > 0


@pytest.mark.parametrize("knobs", [{}, T5], ids=["paper", "t5"])
def test_decode_step_with_cache_holes_matches_a_row_alone(knobs):
    """A row whose cache has holes (it joined a running batch late) decodes as it would alone: T5's relative position
    bias counts a row's own positions, past the buckets' max distance."""
    model = tiny(**knobs)
    src = torch.randint(4, 20, (1, 5))
    smask = torch.ones_like(src)
    cross = model.cross_kv(model.encode(src, smask))
    past, pmask = model.empty_past(1)
    tok, outs = torch.tensor([[1]]), []
    for step in range(12):
        logits, past = model.decode_step(tok, torch.tensor([[step]]), past, pmask, cross, smask)
        pmask = torch.cat([pmask, torch.ones(1, 1, dtype=torch.long)], 1)
        outs.append(logits)
        tok = logits[:, -1].argmax(-1, keepdim=True)
    # Same row, with 3 hole columns in front of its cache.
    d = model.config.d_head
    past_h = [(torch.randn(1, 4, 3, d), torch.randn(1, 4, 3, d)) for _ in range(2)]
    pmask_h = torch.zeros(1, 3, dtype=torch.long)
    tok = torch.tensor([[1]])
    for step in range(12):
        logits, past_h = model.decode_step(tok, torch.tensor([[step]]), past_h, pmask_h, cross, smask)
        pmask_h = torch.cat([pmask_h, torch.ones(1, 1, dtype=torch.long)], 1)
        torch.testing.assert_close(logits, outs[step], atol=1e-5, rtol=1e-5)
        tok = logits[:, -1].argmax(-1, keepdim=True)


def test_model_overfits_a_tiny_copy_task():
    splits = tasks.symbols("copy", 2, 5, 32, 0, 0, seed=1)
    tok = char_tokenizer(tasks.SYMBOLS)
    task = TaskConfig("copy")
    model = tiny(vocab=tok.get_vocab_size()).train()
    codec = TextCodec(tok, task, model.config.special)
    ex = encode_pairs(splits.train, codec, 32)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    batch = collate(ex, model.config)
    for _ in range(200):
        logits = model(batch.src, batch.src_mask, batch.tgt_in)
        loss = torch.nn.functional.cross_entropy(
            logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = greedy(model, batch.src, batch.src_mask, 8)
    acc = sum(codec.decode(o) == t for o, (_, t) in zip(out, splits.train)) / len(out)
    assert loss.item() < 0.05 and acc == 1.0, (loss.item(), acc)


def test_tokenizers_round_trip():
    from contract.tokens import SPECIAL_TOKENS

    char = char_tokenizer("0123456789+")
    assert [char.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2, 3]
    codec = TextCodec(char, TaskConfig("addition", reverse_source=True), ModelConfig(16, 16).special)
    ids = codec.source_ids("123+45")
    assert ids[-1] == 2 and codec.decode(ids) == "54+321"  # reversed on the way in, EOS stops decoding
    with pytest.raises(UnknownCharactersError, match="'x'"):
        codec.source_ids("1x+2")
    texts = ["Open file", "ファイルを開く", "Save as…", "設定を保存しました", "Error: %s"] * 20
    bpe = bpe_tokenizer(texts, vocab_size=300)
    bcodec = TextCodec(bpe, TaskConfig("translation", unknown="unk"), ModelConfig(300, 300).special)
    for t in set(texts):  # NFKC is part of the tokenizer: "…" comes back as "..."
        assert bcodec.decode(bcodec.target_ids(t)) == unicodedata.normalize("NFKC", t)


def test_length_bucketed_batches_cover_every_example_once():
    ex = [([4] * n + [2], [5] * (n % 3 + 1)) for n in range(1, 40)]
    cfg = ModelConfig(10, 10)
    seen = []
    for b in bucketed_batches(ex, 8, cfg, seed=3):
        seen += [int(r.sum()) for r in b.src_mask]
        assert b.src.shape[0] <= 8
    assert sorted(seen) == sorted(len(s) for s, _ in ex)


def test_addition_splits_are_disjoint_and_deterministic():
    a = tasks.addition(3, 500, 100, 100, seed=7)
    b = tasks.addition(3, 500, 100, 100, seed=7)
    assert a == b
    train = {s for s, _ in a.train}
    assert not train & {s for s, _ in a.test} and not train & {s for s, _ in a.valid}
    for s, t in a.test:
        x, y = s.split("+")
        assert int(x) + int(y) == int(t) and str(int(x)) == x and str(int(y)) == y


def test_token_batches_respect_the_budget_and_cover_every_example_once():
    ex = [([4] * (n % 17 + 1), [5] * (n % 5 + 1)) for n in range(300)]
    cfg = ModelConfig(10, 10)
    seen, sizes = [], set()
    for b in bucketed_batches(ex, 8, cfg, seed=3, max_tokens=60):
        # padded cost: rows x the longest side (+1: BOS on the input, EOS on the output)
        assert b.src.shape[0] * max(b.src.shape[1], b.tgt_in.shape[1]) <= 60
        seen += [int(r.sum()) for r in b.src_mask]
        sizes.add(b.src.shape[0])
    assert sorted(seen) == sorted(len(s) for s, _ in ex)
    assert len(sizes) > 2  # short rows come in larger batches than long ones


def test_fused_training_attention_equals_the_exported_attention():
    """Training runs PyTorch's fused attention, inference the written-out ops the export traces:
    with dropout off they are the same function (ragged padding included)."""
    torch.manual_seed(0)
    c = ModelConfig(
        50,
        50,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_len=16,
    )
    m = Transformer(c)
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 6))
    mask = torch.ones(3, 7, dtype=torch.long)
    mask[0, 4:] = 0
    m.eval()
    exported = m(src, mask, tgt)
    m.train()
    fused = m(src, mask, tgt)
    assert torch.allclose(exported, fused, atol=1e-5)
