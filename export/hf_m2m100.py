"""M2M100 and NLLB (model_type m2m_100) as this project's model: the knobs they move and the names of their weights.

fairseq's multilingual Transformer: pre-norm with a LayerNorm after each stack, ReLU, embeddings scaled by
sqrt(d), fairseq's sinusoids from row pad + 1, the output projection tied to the one shared table and no output
bias, decoding started from ``</s>`` with the target language's token forced as the first generated one.
The layers are named as Marian's (both are transformers' BART layout), so their table is reused.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from contract.config import ModelConfig
from contract.languages import Languages
from export import hf_fields, hf_marian, hf_tokenizer
from export.hf_checkpoint import ImportRefused, Loaded, read_json, token_of

MODEL_TYPE = "m2m_100"
ConfigError = hf_marian.ConfigError


def model_config(cfg: dict[str, Any], unk: int) -> ModelConfig:
    """config.json (an M2M100Config) -> ModelConfig; ConfigError naming the field it cannot take."""
    if hf_fields.whole(cfg, "d_model", 1, hf_marian.BIG) % 2 or cfg["d_model"] < 4:
        raise ConfigError(
            f"field 'd_model' is {cfg.get('d_model')!r}; fairseq's sinusoids need an even size of 4 or more"
        )
    c = hf_marian.model_config({"share_encoder_decoder_embeddings": True, **cfg}, unk)
    return dataclasses.replace(
        c,
        positions="sinusoid_fairseq",
        position_offset=c.special.pad + 1,
        norm="pre",
        final_norm=True,
        output_bias=False,
    )


def weight_names(c: ModelConfig) -> dict[str, list[str]]:
    names = {k: v for k, v in hf_marian.weight_names(c).items() if k != "output_projection.bias"}
    for stack in ("encoder", "decoder"):
        for p in ("weight", "bias"):
            names[f"{stack}_norm.{p}"] = [f"model.{stack}.layer_norm.{p}"]
    return names


field_of = hf_marian.field_of


SPM_FILE = "sentencepiece.bpe.model"  # M2M100Tokenizer's name for it, whatever the model type inside
NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")  # FLORES-200: eng_Latn
M2M_CODE = re.compile(r"__[a-z]{2,3}__")
# the language tokens a tokenizer.json may add
ADDED_CODE = re.compile(f"{NLLB_CODE.pattern}|{M2M_CODE.pattern}")


def tokenizer(folder: Path, tok_cfg: dict[str, Any], cfg: dict[str, Any]) -> tuple[Tokenizer, Languages]:
    """The one tokenizer of both sides and the languages: NLLB's tokenizer.json as it is (``export/hf_tokenizer.py``:
    the source language's token and </s> are the bundle's to add), or M2M100's SentencePiece model re-indexed by
    vocab.json with the language tokens transformers appends after it (tokenizer_config.json's language_codes)."""
    from export.spm_tokenizer import TokenizerError, convert

    vocab_size = hf_fields.whole(cfg, "vocab_size", 1, hf_marian.BIG)  # model_config read it already
    if (folder / hf_tokenizer.FILE).is_file():
        if tok_cfg.get("legacy_behaviour"):
            raise ImportRefused(
                f"{folder / 'tokenizer_config.json'}: field 'legacy_behaviour' is true (source X </s> src_lang); "
                "only the prefix layout (src_lang X </s>, NllbTokenizer's default) is supported"
            )
        tok = hf_tokenizer.read(folder, "NLLB")
        hf_tokenizer.check(tok, folder, cfg, tok_cfg)
        langs = hf_tokenizer.language_tokens(tok, ADDED_CODE)
        where = folder / hf_tokenizer.FILE
    else:
        for f in ("vocab.json", SPM_FILE):
            if not (folder / f).is_file():
                raise ImportRefused(
                    f"{folder / f}: missing; an M2M100 tokenizer needs vocab.json and {SPM_FILE} (or NLLB's "
                    "tokenizer.json)"
                )
        vocab = read_json(folder / "vocab.json", "")
        hf_marian.check_ids(folder / "vocab.json", vocab, vocab_size, "vocab_size")
        where = folder / "tokenizer_config.json"
        # M2M100Tokenizer appends the language tokens of its named list right after vocab.json (then made-up words
        # that no text produces); the list is transformers' own copy of fairseq's.
        from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES

        listed = tok_cfg.get("language_codes", "m2m100")
        if not isinstance(listed, str) or listed not in FAIRSEQ_LANGUAGE_CODES:
            raise ImportRefused(
                f"{where}: field 'language_codes' is {listed!r}; known: {', '.join(FAIRSEQ_LANGUAGE_CODES)}"
            )
        langs = {f"__{code}__": len(vocab) + i for i, code in enumerate(FAIRSEQ_LANGUAGE_CODES[listed])}
        specials = {t: vocab[t] for t in ("<s>", "<pad>", "</s>", "<unk>") if t in vocab} | langs
        if "<unk>" not in specials:
            raise ImportRefused(f"{folder / 'vocab.json'}: no '<unk>' entry")
        try:
            tok = convert(folder / SPM_FILE, {**vocab, **langs}, specials, decodes=True)
        except TokenizerError as e:
            raise ImportRefused(str(e)) from None
        if (top := tok.get_vocab_size(with_added_tokens=True)) > vocab_size:
            raise ImportRefused(
                f"{where}: ids up to {top - 1}, but config.json field 'vocab_size' is {vocab_size}"
            )
    if not langs:
        raise ImportRefused(
            f"{where}: no language tokens (__xx__ or xxx_Xxxx added tokens); a multilingual model needs them"
        )
    return tok, Languages.of_tokens(langs, target="forced_bos", source="prefix")


def load(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any]) -> Loaded:
    try:
        c = model_config(cfg, 3)  # unk: replaced below by the tokenizer's own
    except ConfigError as e:
        raise ImportRefused(f"{folder / 'config.json'}: {e}") from None
    tok, languages = tokenizer(folder, tok_cfg, cfg)
    unk = tok.token_to_id(token_of(tok_cfg, "unk_token", "<unk>"))
    if unk is None:
        raise ImportRefused(
            f"{folder}: the tokenizer has no {token_of(tok_cfg, 'unk_token', '<unk>')!r} token "
            "(tokenizer_config.json's unk_token)"
        )
    return Loaded(
        dataclasses.replace(c, special=dataclasses.replace(c.special, unk=unk)), tok, languages=languages
    )
