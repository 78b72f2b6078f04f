"""Tiny T5-family and Pegasus checkpoints made here, as a user's Hugging Face folder would hold them (never downloaded).

Four kinds, each a knob setting of the import:

* ``t5``: T5 v1.0, ReLU feed-forward, the table tied to the output and the output rescaled, 4 heads of 4 (the decoder
  self-attention as standard nodes), the tokenizer as spiece.model only;
* ``madlad``: T5 v1.1 as Flan-T5 and MADLAD-400 are (gated GELU, a separate ``lm_head``, config.json written as those
  checkpoints have it: ``tie_word_embeddings`` false), with ``<2xx>`` target-language tokens in the SentencePiece
  model, spiece.model only, a task whose answer depends on the target language;
* ``mt5``: model_type mt5, gated GELU, heads of ``d_kv`` 8 whose 4 make 32, not d_model 16, tokenizer.json (and
  spiece.model, which the import leaves unread);
* ``pegasus``: pre-norm, sinusoids, scaled embeddings, tokenizer.json (and spiece.model).

Each tokenizer is a SentencePiece unigram trained here on generated lines (pad 0, eos 1, unk 2, as T5's and Pegasus's
are), wrapped in transformers' class (``T5Tokenizer``, ``PegasusTokenizer``) from its pieces, as transformers' own
converter does; the models are trained a few hundred steps so that their outputs depend on the input (and on the
target language) and end at EOS by themselves, then every norm and bias is perturbed (an untrained model's are 1 and 0
and would hide a missing one). The relative position buckets are few (8, distances past 8 share the last) so that
the inputs here reach the logarithmic and the clamped ones.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import m2m100_models as m2m
import marian_models as mm

KINDS = ("t5", "madlad", "mt5", "pegasus")
LANGUAGES = (
    "en",
    "de",
    "ja",
)  # MADLAD's <2xx> targets here; the answer depends on them (m2m100_models.answer)
PAD, EOS, UNK = 0, 1, 2
T5_SIZES = dict(
    d_model=16,
    d_ff=32,
    num_layers=2,
    num_decoder_layers=2,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=8,
    dropout_rate=0.0,
    pad_token_id=PAD,
    eos_token_id=EOS,
    decoder_start_token_id=PAD,
)
HEADS = {"t5": (4, 4), "madlad": (2, 8), "mt5": (4, 8)}  # (num_heads, d_kv)


def rows(kind: str, n: int, seed: int) -> list[tuple[str | None, str]]:
    """(target language or None, text)."""
    texts = mm.lines(n, seed, japanese=True)
    if kind != "madlad":
        return [(None, t) for t in texts]
    return [(LANGUAGES[i % 3], t) for i, t in enumerate(texts)]


def answer(kind: str, target: str | None, text: str) -> str:
    return m2m.answer(text, target) if kind == "madlad" else mm.target_of(text)


def spm_pieces(texts: list[str], codes: list[str]):
    """A SentencePiece unigram model trained on ``texts``: its bytes, (piece, score, type) list and NFKC map."""
    import sentencepiece as spm
    from transformers.utils import sentencepiece_model_pb2_new as pb

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=out,
        vocab_size=150,
        model_type="unigram",
        character_coverage=1.0,
        pad_id=PAD,
        eos_id=EOS,
        unk_id=UNK,
        bos_id=-1,
        user_defined_symbols=codes,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    proto = pb.ModelProto()
    proto.ParseFromString(out.getvalue())
    return out.getvalue(), proto


def tokenizer(kind: str, texts: list[str], folder: Path):
    """transformers' tokenizer of the kind on a SentencePiece model trained here, and its spiece.model bytes, both in
    ``folder`` as the released folders hold them, but for the kinds shipped as spiece.model only (no tokenizer.json)."""
    from tokenizers import AddedToken
    from transformers import PegasusTokenizer, T5Tokenizer
    from transformers.convert_slow_tokenizer import PegasusConverter, T5Converter

    codes = [f"<2{c}>" for c in LANGUAGES] if kind == "madlad" else []
    model, proto = spm_pieces(texts, codes)
    kwargs = {
        "vocab": [(p.piece, p.score) for p in proto.pieces],
        "_spm_precompiled_charsmap": proto.normalizer_spec.precompiled_charsmap,
        "additional_special_tokens": [
            AddedToken(p.piece, normalized=False, special=p.type == 3)
            for p in proto.pieces
            if p.type in (3, 4)
        ],
    }
    if kind == "pegasus":
        tok = PegasusTokenizer(**PegasusConverter.convert_from_spm(**kwargs))
    else:
        tok = T5Tokenizer(**T5Converter.convert_from_spm(**kwargs, extra_ids=10))
    tok.save_pretrained(folder)
    (folder / "spiece.model").write_bytes(model)
    if kind in ("t5", "madlad"):
        (folder / "tokenizer.json").unlink()
    return tok, model


def _model(kind: str, vocab: int):
    import torch
    from transformers import (
        MT5Config,
        MT5ForConditionalGeneration,
        PegasusConfig,
        PegasusForConditionalGeneration,
        T5Config,
        T5ForConditionalGeneration,
    )

    if kind == "pegasus":
        sizes = {**m2m.SIZES, "pad_token_id": PAD, "eos_token_id": EOS, "decoder_start_token_id": PAD}
        sizes.pop("bos_token_id")
        config = PegasusConfig(
            vocab_size=vocab,
            **sizes,
            activation_function="relu",
            scale_embedding=True,  # as the released checkpoints (PegasusConfig's default is off)
        )
        return PegasusForConditionalGeneration(config)
    heads, d_kv = HEADS[kind]
    sizes = {
        **T5_SIZES,
        "vocab_size": vocab + 4,
        "num_heads": heads,
        "d_kv": d_kv,
    }  # T5's vocab_size > the tokenizer's
    if kind == "mt5":
        model = MT5ForConditionalGeneration(MT5Config(**sizes))
    elif kind == "madlad":
        model = T5ForConditionalGeneration(
            T5Config(**sizes, feed_forward_proj="gated-gelu", tie_word_embeddings=False)
        )
    else:
        model = T5ForConditionalGeneration(T5Config(**sizes, feed_forward_proj="relu"))
    if kind != "t5":  # v1.1's own lm_head (transformers 5 builds it tied, and keeps it apart once saved so)
        model.lm_head.weight = torch.nn.Parameter(torch.randn_like(model.shared.weight) * 0.5)
    return model


def make(kind: str, folder: Path, *, steps: int = 250, seed: int = 0, n_lines: int = 400):
    """A trained tiny checkpoint of ``kind`` in ``folder``; returns (model, tokenizer, rows): rows are (target
    language, text), the language None but for MADLAD."""
    import torch
    from transformers import GenerationConfig

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    data = rows(kind, n_lines, seed)
    targets = [answer(kind, t, text) for t, text in data]
    tok, _ = tokenizer(kind, [text for _, text in data] + targets, folder)
    src = [source_ids(tok, t, text) for t, text in data]
    labels = [tok(t)["input_ids"] for t in targets]
    model = _model(kind, len(tok))
    fit(model, src, labels, steps, seed)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=PAD, eos_token_id=EOS, pad_token_id=PAD, num_beams=4, max_length=48
    )
    model.save_pretrained(folder)
    if kind == "madlad":  # as Flan-T5's and MADLAD's config.json read (written before transformers 5)
        cfg = json.loads((folder / "config.json").read_text())
        cfg.pop("scale_decoder_outputs", None)
        cfg["tie_word_embeddings"] = False
        (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    return model, tok, data


def fit(
    model, src: list[list[int]], labels: list[list[int]], steps: int, seed: int, lr: float = 1e-2
) -> None:
    """Adam on random batches of 32 (padding id 0, labels' padding ignored), then every norm and bias perturbed."""
    import torch

    pad = lambda seqs, v: torch.tensor([x + [v] * (max(map(len, seqs)) - len(x)) for x in seqs])  # noqa: E731
    ids, lab = pad(src, PAD), pad(labels, -100)
    mask = (ids != PAD).long()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        r = torch.randint(0, len(src), (32,), generator=g)
        loss = model(input_ids=ids[r], attention_mask=mask[r], labels=lab[r]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():  # perturb what training barely moved, so a missing norm or bias shows
        for name, p in model.named_parameters():
            if "norm" in name or "final_logits_bias" in name:
                p.add_(torch.randn_like(p) * 0.1)


def source_ids(tok, target: str | None, text: str) -> list[int]:
    """What the model reads: MADLAD's ``<2xx>`` first where a target is named, the text, </s>."""
    return tok(f"<2{target}> {text}" if target else text)["input_ids"]


def encode(tok, rows):
    import torch

    ids = [source_ids(tok, t, text) for t, text in rows]
    width = max(map(len, ids))
    return (
        torch.tensor([x + [PAD] * (width - len(x)) for x in ids]),
        torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
    )


def inputs(rows, n: int):
    """Mixed lengths: the training rows, and rows of two lines joined (longer than the buckets' max distance)."""
    joined = [(t, f"{a} {b}") for (t, a), (_, b) in zip(rows[::2], rows[1::2])]
    return (rows[: n // 2] + joined[: n - n // 2])[:n]


def hf_generate(model, tok, rows, batch: int = 100, **kw) -> list[list[int]]:
    """transformers' outputs in padded batches, in input order, without the start token, the EOS and the padding."""
    import torch

    out = []
    for at in range(0, len(rows), batch):
        ids, mask = encode(tok, rows[at : at + batch])
        with torch.no_grad():
            got = model.generate(input_ids=ids, attention_mask=mask, **kw)
        for r in got[:, 1:].tolist():
            r = r[: r.index(EOS)] if EOS in r else r
            out.append([t for t in r if t != PAD])
    return out


def worst_step_logits(runner, model, tok, rows) -> tuple[float, int]:
    """The largest |logit difference| over every step of transformers' own greedy output fed back (teacher forcing)
    through the engine's decoder one step at a time, the rows in one padded batch; and the steps."""
    import numpy as np
    import torch

    ids, mask = encode(tok, rows)
    with torch.no_grad():
        tgt = model.generate(input_ids=ids, attention_mask=mask, num_beams=1)  # starts with <pad>
        want = model(input_ids=ids, attention_mask=mask, decoder_input_ids=tgt).logits.numpy()
    cross = runner.encode(ids.numpy(), mask.numpy())
    b = len(rows)
    past = [np.zeros((b, runner.n_heads, 0, runner.d_head), np.float32)] * (2 * runner.n_layers)
    worst = 0.0
    for t in range(tgt.shape[1]):
        logits, past = runner.decode(
            tgt[:, t : t + 1].numpy(),
            np.full((b, 1), t, np.int64),
            np.ones((b, t), np.int64),
            past,
            cross,
            mask.numpy(),
        )
        live = (tgt[:, 1 : t + 1] == EOS).sum(1).numpy() == 0  # nothing is predicted after a row's EOS
        if live.any():
            worst = max(worst, float(np.abs(logits[:, 0] - want[:, t])[live].max()))
    return worst, tgt.shape[1]
