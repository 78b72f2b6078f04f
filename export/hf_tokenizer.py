"""A tokenizer.json as a checkpoint ships it (NLLB, BART, mBART-50), read with ``tokenizers`` as it is.

Its post-processor is never run (``TextCodec`` encodes without special tokens): what the model reads around the text
(a source language's token, BART's ``<s>``, the ``</s>`` at the end) is the bundle's to add (``contract/text.py``,
``contract/languages.py``), so one tokenizer serves every language pair. Its special tokens are checked against
config.json's ids, its size against config.json's vocab_size, and its language tokens are found by their pattern.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from export.hf_checkpoint import ImportRefused, token_of
from export.hf_fields import FieldError, whole

FILE = "tokenizer.json"


def read(folder: Path, family: str) -> Tokenizer:
    path = folder / FILE
    if not path.is_file():
        raise ImportRefused(
            f"{path}: missing; a {family} tokenizer is its {FILE} (transformers writes one from the SentencePiece "
            "model: AutoTokenizer.from_pretrained(folder).save_pretrained(folder))"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers' own parse errors
        raise ImportRefused(f"{path}: cannot be read ({type(e).__name__}: {str(e)[:200]})") from None


def special_id(tok: Tokenizer, folder: Path, tok_cfg: dict[str, Any], field: str, default: str) -> int:
    """The id of tokenizer_config.json's ``field`` token (``unk_token``, ...) in tokenizer.json."""
    name = token_of(tok_cfg, field, default)
    i = tok.token_to_id(name)
    if i is None:
        raise ImportRefused(
            f"{folder / FILE}: no {name!r} token (tokenizer_config.json field {field!r} names it)"
        )
    return i


def check(tok: Tokenizer, folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any]) -> None:
    """config.json's pad and eos ids are the tokenizer's, and its vocab_size holds every id."""
    for id_field, field, default in (
        ("pad_token_id", "pad_token", "<pad>"),
        ("eos_token_id", "eos_token", "</s>"),
    ):
        i = special_id(tok, folder, tok_cfg, field, default)
        if id_field in cfg and cfg[id_field] != i:
            raise ImportRefused(
                f"{folder / 'config.json'}: field {id_field!r} is {cfg[id_field]!r}, but {folder / FILE} has "
                f"{token_of(tok_cfg, field, default)!r} at {i}"
            )
    top = tok.get_vocab_size(with_added_tokens=True) - 1
    try:
        size = whole(cfg, "vocab_size", 1, 1 << 40)
    except FieldError as e:
        raise ImportRefused(f"{folder / 'config.json'}: {e}") from None
    if top >= size:
        raise ImportRefused(
            f"{folder / FILE}: ids up to {top}, but {folder / 'config.json'} field 'vocab_size' is "
            f"{cfg.get('vocab_size')!r}"
        )


def language_tokens(tok: Tokenizer, pattern: re.Pattern) -> dict[str, int]:
    """The added tokens that are language codes of the family's pattern (``jpn_Jpan``, ``ja_XX``) -> their ids."""
    return {t.content: i for i, t in tok.get_added_tokens_decoder().items() if pattern.fullmatch(t.content)}
