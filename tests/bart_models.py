"""Tiny BART, mBART-50 and NLLB checkpoints made here, as a user's Hugging Face folder would hold them (never
downloaded), with the tokenizer each ships as tokenizer.json: byte-level BPE for BART, a Unigram with the 52
``xx_XX`` language tokens for mBART-50, a BPE with the 202 ``xxx_Xxxx`` tokens for NLLB, each trained here with HF
``tokenizers`` on generated lines and wrapped in transformers' own tokenizer class (``BartTokenizer``,
``MBart50Tokenizer``, ``NllbTokenizer``), then saved with ``save_pretrained``.

The models (``BartForConditionalGeneration``, ``MBartForConditionalGeneration``, NLLB's
``M2M100ForConditionalGeneration``) are trained a few hundred steps so that their outputs depend on the input (and,
for the multilingual ones, on the target language) and end at EOS by themselves, then every LayerNorm and the output
bias are perturbed (an untrained model's are exactly 1, 0 and 0, and would hide a missing one).
"""

from __future__ import annotations

import json
from pathlib import Path

import m2m100_models as m2m
import marian_models as mm

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's first four ids, in every family here
# the conventional codes the tests ask for -> each family's own
CODES = {
    "mbart": {"en": "en_XX", "fr": "fr_XX", "de": "de_DE", "ja": "ja_XX"},
    "nllb": {"en": "eng_Latn", "fr": "fra_Latn", "de": "deu_Latn", "ja": "jpn_Jpan"},
}


def _trained(model_kind: str, texts: list[str], size: int):
    """A ``tokenizers`` model trained on ``texts``: its vocabulary (and merges, for BPE) as the class takes them."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if model_kind == "unigram":
        # SentencePiece's, as mBART-50's was made (HF's Unigram trainer stops at ~80 pieces on these lines)
        return _sentencepiece(texts, size)
    if model_kind == "bytelevel":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(
            vocab_size=size,
            special_tokens=[*SPECIALS, "<mask>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
        trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=list(SPECIALS), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]


def _sentencepiece(texts: list[str], size: int):
    """A SentencePiece unigram model's (piece, score) list in its own order (<unk>, <s>, </s>, pieces: what
    MBart50Tokenizer re-indexes into fairseq's), and its precompiled NFKC map for the tokenizer's normalizer."""
    import io

    import sentencepiece as spm
    from transformers.utils import sentencepiece_model_pb2_new as pb

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=out,
        vocab_size=size,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
        num_threads=1,
    )
    proto = pb.ModelProto()
    proto.ParseFromString(out.getvalue())
    return [(p.piece, p.score) for p in proto.pieces], proto.normalizer_spec.precompiled_charsmap


def tokenizer(family: str, texts: list[str], folder: Path):
    """transformers' tokenizer of the family, built on a vocabulary trained here, saved and loaded back from
    ``folder`` as a user's folder would give it."""
    from transformers import AutoTokenizer, BartTokenizer, MBart50Tokenizer, NllbTokenizer

    if family == "bart":
        vocab, merges = _trained("bytelevel", texts, 400)
        tok = BartTokenizer(vocab=vocab, merges=merges)
    elif family == "mbart":
        vocab, charsmap = _trained("unigram", texts, 150)
        tok = MBart50Tokenizer(
            vocab=vocab, _spm_precompiled_charsmap=charsmap, src_lang="en_XX", tgt_lang="ja_XX"
        )
    else:
        vocab, merges = _trained("bpe", texts, 150)
        tok = NllbTokenizer(vocab=vocab, merges=merges, src_lang="eng_Latn", tgt_lang="jpn_Jpan")
    tok.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def make(family: str, folder: Path, *, steps: int = 250, seed: int = 0, n_lines: int = 400):
    """A trained tiny checkpoint of ``family`` (bart, mbart, nllb) in ``folder``; returns (model, tokenizer, rows):
    rows are (source language, target language, text), in conventional codes (None for BART, which has none)."""
    import torch
    from transformers import (
        BartConfig,
        BartForConditionalGeneration,
        GenerationConfig,
        M2M100Config,
        M2M100ForConditionalGeneration,
        MBartConfig,
        MBartForConditionalGeneration,
    )

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    folder.mkdir(parents=True, exist_ok=True)
    if family == "bart":
        rows = [(None, None, s) for s in mm.lines(n_lines, seed, japanese=True)]
        targets = [mm.target_of(t) for _, _, t in rows]
    else:
        rows = m2m.rows(n_lines, seed)
        targets = [m2m.answer(t, lang) for _, lang, t in rows]
    tok = tokenizer(family, [t for _, _, t in rows] + targets, folder)
    src, labels = [], []
    for (s, t, text), target in zip(rows, targets):
        if family != "bart":
            tok.src_lang, tok.tgt_lang = CODES[family][s], CODES[family][t]
        enc = tok(text, text_target=target)
        src.append(enc["input_ids"]), labels.append(enc["labels"])
    sizes = {**m2m.SIZES, "vocab_size": len(tok)}
    if family == "bart":
        model = BartForConditionalGeneration(BartConfig(**sizes))
    elif family == "mbart":
        model = MBartForConditionalGeneration(MBartConfig(**sizes, scale_embedding=False))
    else:
        model = M2M100ForConditionalGeneration(M2M100Config(**sizes))
    m2m.fit(model, src, labels, steps, seed)
    with torch.no_grad():
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.add_(torch.randn_like(model.final_logits_bias) * 0.2)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=2,
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        num_beams=4,
        max_length=48,
        **({"forced_bos_token_id": 0} if family == "bart" else {}),
    )
    model.save_pretrained(folder)
    return model, tok, rows
