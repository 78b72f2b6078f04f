"""What every Hugging Face family's loader (``export/hf_<family>.py``) shares with the import that calls it: the
refusal naming a file and a field, what a loader read, and the readers of the folder's JSON files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract.config import ModelConfig


class ImportRefused(Exception):
    """A checkpoint folder this import cannot take; the message names the file and the field."""


@dataclass
class Loaded:
    """What a family's ``load(folder, cfg, tok_cfg)`` read from the folder, before the weights."""

    config: ModelConfig
    source_tokenizer: Any  # tokenizers.Tokenizer
    target_tokenizer: Any = None  # where the sides differ (Marian's separate vocabularies)
    languages: Any = None  # a multilingual model's contract.languages.Languages
    source_start_id: int | None = None  # a token before every source (BART's <s>)


def read_json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ImportRefused(f"{path}: missing; {what}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ImportRefused(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ImportRefused(f"{path}: a JSON object was expected, not {type(d).__name__}")
    return d


def token_of(tok_cfg: dict, field: str, default: str) -> str:
    """tokenizer_config.json's name of a special token (a string, or an AddedToken's dict)."""
    v = tok_cfg.get(field)
    v = default if v is None else v.get("content") if isinstance(v, dict) else v
    if not isinstance(v, str) or not v:
        raise ImportRefused(
            f"tokenizer_config.json: field {field!r} is {tok_cfg.get(field)!r}; a token (a string, or an "
            "object with its 'content') was expected"
        )
    return v
