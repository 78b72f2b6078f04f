"""Pegasus (model_type pegasus) as this project's model: the knobs it moves and the names of its weights.

Zhang et al. 2020's summarizer is the paper's Transformer made pre-norm, with a LayerNorm after each stack: sinusoidal
positions laid out sines first, then cosines (Marian's), embeddings scaled by sqrt(d_model) (``scale_embedding``, true in
the released checkpoints, false in PegasusConfig's defaults), one table for source,
target and output plus ``final_logits_bias``, decoding started from ``<pad>`` (``decoder_start_token_id`` 0). Its
tokenizer is SentencePiece's unigram with 103 reserved ids before the pieces, shipped as tokenizer.json or spiece.model
(converted as transformers' ``PegasusTokenizer`` does, ``export/hf_t5.py``). The layers are named as Marian's
(transformers' BART layout), so their table is reused.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from contract.config import ModelConfig
from export import hf_marian, hf_t5, hf_tokenizer
from export.hf_checkpoint import ImportRefused, Loaded

MODEL_TYPE = "pegasus"
ConfigError = hf_marian.ConfigError


def model_config(cfg: dict[str, Any], unk: int) -> ModelConfig:
    """config.json (a PegasusConfig) -> ModelConfig; ConfigError naming the field it cannot take."""
    # PegasusConfig's defaults where config.json omits them: scaled embeddings, decoding from <pad>
    c = hf_marian.model_config(
        {
            "scale_embedding": True,
            "decoder_start_token_id": 0,
            **cfg,
            "share_encoder_decoder_embeddings": True,
        },
        unk,
    )
    return dataclasses.replace(c, norm="pre", final_norm=True)


def weight_names(c: ModelConfig) -> dict[str, list[str]]:
    names = hf_marian.weight_names(c)
    for stack in ("encoder", "decoder"):
        for p in ("weight", "bias"):
            names[f"{stack}_norm.{p}"] = [f"model.{stack}.layer_norm.{p}"]
    return names


field_of = hf_marian.field_of


def load(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any]) -> Loaded:
    tok = hf_t5.tokenizer(folder, cfg, tok_cfg, "Pegasus")
    unk = hf_tokenizer.special_id(tok, folder, tok_cfg, "unk_token", "<unk>")
    try:
        return Loaded(model_config(cfg, unk), tok)
    except ConfigError as e:
        raise ImportRefused(f"{folder / 'config.json'}: {e}") from None
