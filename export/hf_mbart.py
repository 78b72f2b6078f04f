"""mBART (model_type mbart) as this project's model: BART's layout (``export/hf_bart.py``) made pre-norm, with a
final LayerNorm after each stack (``layer_norm``) and the embedding LayerNorm kept, and languages as tokens of its
vocabulary (``ja_XX``).

Languages follow mBART-50's convention (``MBart50Tokenizer``, the many-to-many translation checkpoints): a source
reads ``[src_lang_code] X </s>``, decoding starts from ``</s>`` and the target language's token is forced as the
first generated one (``forced_bos_token_id``), as NLLB does. mBART-cc25's ``MBartTokenizer`` (``X </s>
[src_lang_code]``, decoding started from the target language's token) is refused by name.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from contract.config import ModelConfig
from contract.languages import Languages
from export import hf_bart, hf_tokenizer
from export.hf_checkpoint import ImportRefused, Loaded

MODEL_TYPE = "mbart"
CODE = re.compile(r"[a-z]{2}_[A-Z]{2}")  # mBART's language codes: en_XX, ja_XX
TOKENIZER_CLASSES = ("MBart50Tokenizer", "MBart50TokenizerFast")
ConfigError = hf_bart.ConfigError


def model_config(cfg: dict[str, Any], unk: int) -> ModelConfig:
    """config.json (an MBartConfig) -> ModelConfig; ConfigError naming the field it cannot take."""
    start, eos = cfg.get("decoder_start_token_id"), cfg.get("eos_token_id")
    if start is None or start != eos:
        raise ConfigError(
            f"field 'decoder_start_token_id' is {start!r}, not eos_token_id ({eos!r}); mBART-50 decodes from </s> "
            "with the target language forced after it (mBART-cc25's start from a language token is not supported)"
        )
    return dataclasses.replace(hf_bart.model_config(cfg, unk), norm="pre", final_norm=True)


def weight_names(c: ModelConfig) -> dict[str, list[str]]:
    names = hf_bart.weight_names(c)
    for stack in ("encoder", "decoder"):
        for p in ("weight", "bias"):
            names[f"{stack}_norm.{p}"] = [f"model.{stack}.layer_norm.{p}"]
    return names


field_of = hf_bart.field_of


def load(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any]) -> Loaded:
    cls = tok_cfg.get("tokenizer_class")
    if cls is not None and cls not in TOKENIZER_CLASSES:
        raise ImportRefused(
            f"{folder / 'tokenizer_config.json'}: field 'tokenizer_class' is {cls!r}; only {TOKENIZER_CLASSES[0]}'s "
            "layout ([src_lang_code] X </s>, the target language forced first) is supported"
        )
    c, tok = hf_bart.read(folder, cfg, tok_cfg, "mBART-50", model_config)
    langs = hf_tokenizer.language_tokens(tok, CODE)
    if not langs:
        raise ImportRefused(
            f"{folder / hf_tokenizer.FILE}: no language tokens (xx_XX added tokens); mBART-50 needs them"
        )
    return Loaded(c, tok, languages=Languages.of_tokens(langs, target="forced_bos", source="prefix"))
