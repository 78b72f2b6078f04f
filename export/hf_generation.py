"""generation_config.json -> a bundle's decoding defaults (``TaskConfig``), every field read as generate() takes it.

The beam, the length budget, the length penalty, the n-gram ban, the tokens never generated, the forced first and
last tokens, the minimum length and the beam's stopping rule become the bundle's, so that the engine's outputs are
``generate()``'s token for token; a field the bundle does not apply is logged with what a user gets instead, and
recorded in config.json's origin (``not_applied``). A field that is not what generate() takes is a ``FieldError``
naming it (the import adds the file).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from contract.config import TaskConfig
from contract.decoding import MAX_BEAM_SIZE, MAX_LENGTH_PENALTY
from export import hf_fields
from export.hf_checkpoint import ImportRefused, Loaded
from export.hf_fields import FieldError

log = logging.getLogger("s2s.import")
# Decoding fields that config.json held before generation_config.json did (older checkpoints, read only without one)
GENERATION_FIELDS = (
    "num_beams",
    "max_length",
    "min_length",
    "bad_words_ids",
    "length_penalty",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "early_stopping",
)


# generation_config.json's fields the bundle does not apply, and what a user gets instead of generate()'s tokens
NOT_APPLIED = {
    "repetition_penalty": "generate() scales the logits of tokens already in a row by {0}; here none are "
    "(a request can ask for repetition_penalty, the same rule)",
}


# each field's values that change nothing
NO_OP = {"repetition_penalty": (None, 1.0)}


def not_applied(gen: dict[str, Any]) -> dict[str, Any]:
    """The fields of NOT_APPLIED that generation_config.json sets to something other than a no-op."""
    return {
        k: gen[k]
        for k in NOT_APPLIED
        if not any(gen.get(k) is v or gen.get(k) == v for v in NO_OP.get(k, (None, False)))
    }


def task_config(gen: dict[str, Any], loaded: Loaded, gen_file: Path) -> TaskConfig:
    """generation_config.json's decoding -> the bundle's defaults; ImportRefused naming a field that is not what
    generate() takes (``gen_file``: generation_config.json, or config.json where an older checkpoint keeps them)."""
    try:
        return _task_config(gen, loaded, gen_file)
    except FieldError as e:
        raise ImportRefused(f"{gen_file}: {e}") from None


def _token_ids(gen: dict[str, Any], field: str, vocab_size: int, nested: bool) -> list[int]:
    """A list of token ids (``nested``: of one-token lists, as bad_words_ids) below ``vocab_size``."""
    value = gen.get(field) or []
    if not isinstance(value, list):
        raise FieldError(f"field {field!r} is {value!r}; a list of token ids was expected")
    if nested and any(not isinstance(w, list) or len(w) != 1 for w in value):
        raise FieldError(
            f"field {field!r} holds sequences of several tokens; only single tokens (such as Marian's [[<pad>]]) "
            "are supported"
        )
    return [hf_fields.token_id({field: w[0] if nested else w}, field, vocab_size) for w in value]


def _task_config(gen: dict[str, Any], loaded: Loaded, gen_file: Path) -> TaskConfig:
    c = loaded.config
    v = c.tgt_vocab_size
    bad = _token_ids(gen, "bad_words_ids", v, nested=True)
    suppressed = sorted(set(bad) | set(_token_ids(gen, "suppress_tokens", v, nested=False)))
    for name, value in not_applied(gen).items():
        log.warning("%s: %s=%r is not applied: %s", gen_file, name, value, NOT_APPLIED[name].format(value))
    beam = hf_fields.whole(gen, "num_beams", 1, MAX_BEAM_SIZE, 1)
    max_length = hf_fields.whole(gen, "max_length", 1, 1 << 62, c.max_len)
    if max_length > c.max_len:  # as generate() does where max_length runs past the positions the model has
        log.info(
            "%s: max_length=%d is past the model's %d positions (config.json max_position_embeddings): outputs "
            "end at %d tokens",
            gen_file,
            max_length,
            c.max_len,
            c.max_len - 1,
        )
    alpha = hf_fields.number(gen, "length_penalty", 0.0, MAX_LENGTH_PENALTY, 1.0)
    # A multilingual model's forced first token is the target language a request names, not this constant.
    forced = None if loaded.languages is not None else hf_fields.token_id(gen, "forced_bos_token_id", v, None)
    early = gen.get("early_stopping", False)
    if early not in (False, True, "never"):
        raise FieldError(f"field 'early_stopping' is {early!r}; true, false or \"never\" was expected")
    return TaskConfig(
        "translation",
        unknown="unk",
        max_new_tokens=max(1, min(max_length - 1, c.max_len - 1)),
        beam_size=beam,
        length_penalty_type="transformers",
        length_penalty=None if alpha == 1.0 else alpha,
        no_repeat_ngram_size=hf_fields.whole(gen, "no_repeat_ngram_size", 0, c.max_len - 1, 0),
        suppressed_ids=tuple(suppressed),
        source_start_id=loaded.source_start_id,
        forced_bos_id=forced,
        forced_eos_id=_forced_eos(gen, v),
        min_length=hf_fields.whole(gen, "min_length", 0, c.max_len, 0),
        early_stopping=early,
    )


def _forced_eos(gen: dict[str, Any], vocab_size: int) -> int | None:
    """forced_eos_token_id: one token id (transformers also takes a list; of one token here)."""
    value = gen.get("forced_eos_token_id")
    if isinstance(value, list):
        if len(value) != 1:
            raise FieldError(f"field 'forced_eos_token_id' is {value!r}; one token is supported")
        value = value[0]
    return hf_fields.token_id({"forced_eos_token_id": value}, "forced_eos_token_id", vocab_size, None)
