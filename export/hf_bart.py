"""BART (model_type bart) as this project's model: the knobs it moves, its tokenizer, the names of its weights.

fairseq's BART as transformers has it: post-norm like the paper, with a LayerNorm on each stack's embeddings
(``layernorm_embedding``), GELU, learned positions of its own per stack whose rows start at 2, embeddings scaled
only where ``scale_embedding`` says, one table for source, target and output plus ``final_logits_bias``. A source
reads ``<s> X </s>``; decoding starts from ``</s>`` (``decoder_start_token_id``) and many checkpoints force ``<s>``
as the first token (``forced_bos_token_id``, which the import reads from generation_config.json or config.json).
The byte-level BPE tokenizer.json is taken as it is. The layers are named as Marian's (transformers' BART layout
is theirs), so their table is reused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from contract.config import ModelConfig
from export import hf_marian, hf_tokenizer
from export.hf_checkpoint import ImportRefused, Loaded

MODEL_TYPE = "bart"
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding: fairseq kept rows 0 and 1 for padding
ConfigError = hf_marian.ConfigError


def model_config(cfg: dict[str, Any], unk: int) -> ModelConfig:
    """config.json (a BartConfig) -> ModelConfig; ConfigError naming the field it cannot take."""
    # decoder_start_token_id 2 where config.json omits it: BartConfig's default
    c = hf_marian.model_config(
        {"decoder_start_token_id": 2, **cfg, "share_encoder_decoder_embeddings": True}, unk
    )
    return dataclasses.replace(
        c, positions="learned", position_offset=POSITION_OFFSET, embedding_norm=True, output_bias=True
    )


def weight_names(c: ModelConfig) -> dict[str, list[str]]:
    names = hf_marian.weight_names(c)
    names["pos.table.weight"] = ["model.encoder.embed_positions.weight"]
    names["decoder_pos.table.weight"] = ["model.decoder.embed_positions.weight"]
    for stack in ("encoder", "decoder"):
        for p in ("weight", "bias"):
            names[f"{stack}_embed_norm.{p}"] = [f"model.{stack}.layernorm_embedding.{p}"]
    return names


_FIELD_OF = {"embed_positions": "max_position_embeddings / d_model", "layernorm_embedding": "d_model"}


def field_of(name: str) -> str:
    return next((f for key, f in _FIELD_OF.items() if key in name), None) or hf_marian.field_of(name)


def read(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any], family: str, model_config=model_config):
    """(ModelConfig, tokenizer) of a folder in BART's layout: config.json and tokenizer.json, their ids checked
    against each other (mBART's loader shares it, with its own ``model_config``)."""
    tok = hf_tokenizer.read(folder, family)
    hf_tokenizer.check(tok, folder, cfg, tok_cfg)
    unk = hf_tokenizer.special_id(tok, folder, tok_cfg, "unk_token", "<unk>")
    try:
        return model_config(cfg, unk), tok
    except ConfigError as e:
        raise ImportRefused(f"{folder / 'config.json'}: {e}") from None


def load(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any]) -> Loaded:
    c, tok = read(folder, cfg, tok_cfg, "BART")
    # BartTokenizer reads a source as <s> X </s> (RobertaProcessing: its cls token, the text, its sep token)
    return Loaded(c, tok, source_start_id=hf_tokenizer.special_id(tok, folder, tok_cfg, "cls_token", "<s>"))
