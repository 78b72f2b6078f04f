"""Tiny M2M100 checkpoints made here, as a user's Hugging Face directory would hold them (never downloaded).

A SentencePiece model trained on generated lines, vocab.json in fairseq's layout (``<s>`` 0, ``<pad>`` 1, ``</s>``
2, ``<unk>`` 3, then the pieces), transformers' M2M100Tokenizer appending its 100 language tokens after it, and an
``M2M100ForConditionalGeneration`` at tester sizes trained a few hundred steps on a task whose answer depends on
the target language (so a wrong forced token shows), then its LayerNorms perturbed.
"""

from __future__ import annotations

import json
from pathlib import Path

import marian_models as mm

TARGETS = ("en", "de", "ja")  # what each target language does to the words
# the tester sizes of every fairseq-family model here (tests/bart_models.py's too), with fairseq's special ids
SIZES = dict(
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    max_position_embeddings=64,
    dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
    encoder_layerdrop=0.0,
    decoder_layerdrop=0.0,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)


def answer(line: str, lang: str) -> str:
    words = line.split()
    if lang == "de":
        return " ".join(reversed(words))
    if lang == "ja":
        return " ".join(w[::-1] for w in reversed(words))
    return " ".join(w[::-1] for w in words)


def rows(n: int, seed: int) -> list[tuple[str, str, str]]:
    """(source language, target language, text), languages mixed."""
    src = mm.lines(n, seed)
    return [(("en", "fr")[i % 2], TARGETS[i % 3], s) for i, s in enumerate(src)]


def make(folder: Path, *, steps: int = 300, seed: int = 0, n_lines: int = 400, spm_type: str = "unigram"):
    """A trained tiny M2M100 checkpoint in ``folder``; returns (model, tokenizer, rows). ``spm_type``: its
    SentencePiece model's (unigram, or bpe as the real M2M100's)."""
    import torch
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    data = rows(n_lines, seed)
    work = folder / "spm"
    work.mkdir(exist_ok=True)
    texts = [t for _, _, t in data] + [answer(t, lang) for _, lang, t in data]
    mm.train_spm(texts, work / "sentencepiece.bpe.model", 150, spm_type)
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(work / "sentencepiece.bpe.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for i in range(sp.get_piece_size()):
        if not (sp.is_control(i) or sp.is_unknown(i)):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (work / "vocab.json").write_text(json.dumps(vocab))
    tok = M2M100Tokenizer(vocab_file=str(work / "vocab.json"), spm_file=str(work / "sentencepiece.bpe.model"))
    cfg = M2M100Config(vocab_size=len(vocab) + 100 + 8, **SIZES)  # the pieces, the languages, 8 made-up words
    model = M2M100ForConditionalGeneration(cfg)
    src, labels = [], []
    for s, t, text in data:
        tok.src_lang, tok.tgt_lang = s, t
        enc = tok(text, text_target=answer(text, t))
        src.append(enc["input_ids"]), labels.append(enc["labels"])
    fit(model, src, labels, steps, seed)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, bos_token_id=0, num_beams=4, max_length=48
    )
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return model, tok, data


def fit(
    model, src: list[list[int]], labels: list[list[int]], steps: int, seed: int, lr: float = 1e-2
) -> None:
    """Adam on random batches of 32 (padding id 1, labels' padding ignored), then every LayerNorm perturbed."""
    import torch

    pad = lambda seqs, v: torch.tensor([x + [v] * (max(map(len, seqs)) - len(x)) for x in seqs])  # noqa: E731
    ids, lab = pad(src, 1), pad(labels, -100)
    mask = (ids != 1).long()
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
    with torch.no_grad():  # perturb what training barely moved, so a missing LayerNorm shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)


def hf_generate(model, tok, rows, **kw) -> list[list[int]]:
    """transformers' outputs of ``rows`` (source language, target language, text): tests/hf_parity.py's."""
    import hf_parity

    return hf_parity.hf_generate(model, tok, "m2m100", rows, **kw)
