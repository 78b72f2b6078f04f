"""The fields of a Hugging Face checkpoint folder read as what they must be, and its sizes held to what it holds.

A config.json, generation_config.json or vocab.json is a few bytes a user (or anyone who handed them the folder)
can get wrong: ``num_beams: "many"``, a vocabulary id ``1.5``, ``vocab_size: 1e9`` with one id near it. Every
number the import reads goes through ``whole`` / ``number`` / ``flag`` (a ``FieldError`` names the field and what
was expected; the caller adds the file), and the sizes that make the import allocate (a vocabulary's table, the
layers, the positions) are held to what the weights file actually holds (``held_sizes``: its header alone, no
tensor read) before anything is built from them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

# No checkpoint of the families imported has more than 1024 positions, and the exported graphs take sequences of at
# most 4096 tokens (export/onnx_export.py): a sinusoid table (computed, not stored) is refused past this.
MAX_POSITIONS = 1 << 16
REQUIRED = object()


class FieldError(ValueError):
    """A field that is not what it must be; the message names it (the caller names the file)."""


def whole(d: dict[str, Any], name: str, lo: int, hi: int, default: Any = REQUIRED) -> int:
    """``d[name]`` as a whole number from ``lo`` to ``hi`` (JSON's 1e3 counts: an integral float)."""
    if name not in d or d[name] is None:
        if default is REQUIRED:
            raise FieldError(f"field {name!r} is missing")
        return default
    v = d[name]
    integral = isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    if isinstance(v, bool) or not integral or not lo <= v <= hi:
        raise FieldError(f"field {name!r} is {_shown(v)}; a whole number from {lo} to {hi} was expected")
    return int(v)


def number(d: dict[str, Any], name: str, lo: float, hi: float, default: float) -> float:
    """``d[name]`` as a finite number from ``lo`` to ``hi``; ``default`` when absent or null."""
    v = d.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise FieldError(f"field {name!r} is {_shown(v)}; a number from {lo:g} to {hi:g} was expected")
    return float(v)


def flag(d: dict[str, Any], name: str, default: bool) -> bool:
    v = d.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise FieldError(f"field {name!r} is {_shown(v)}; true or false was expected")
    return v


def token_id(d: dict[str, Any], name: str, vocab_size: int, default: Any = REQUIRED) -> int:
    """A token id field: a whole number below ``vocab_size``."""
    return whole(d, name, 0, vocab_size - 1, default)


def vocabulary_ids(vocab: dict[str, Any], size: int, field: str) -> None:
    """Every id of a vocabulary file (the caller names it) a whole number below ``size`` (config.json's ``field``):
    a negative one would index from the end, a huge one size a table, a string or a fraction crash what reads it."""
    for piece, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < size:
            raise FieldError(
                f"entry {_shown(piece)} has id {_shown(i)}; ids are whole numbers from 0 to {size - 1} "
                f"(config.json field {field!r} is {size})"
            )


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape, from the file's header alone (safetensors) or its memory-mapped pickle (PyTorch)."""
    if path.name.endswith(".safetensors"):
        from safetensors import safe_open

        with safe_open(str(path), "np") as f:  # numpy: no torch imported for a refusal
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    return {k: tuple(v.shape) for k, v in state.items() if hasattr(v, "shape")}


# the embedding tables of transformers' layouts (BART's under model., T5's at the top), the shared one first
_TABLES = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
BART_LAYERS = "model.{stack}.layers.{i}."
STACKS = ("encoder", "decoder")


def held_sizes(
    cfg: dict[str, Any],
    shapes: dict[str, tuple[int, ...]],
    where: str,
    layer_prefix: str = BART_LAYERS,
    layer_fields: dict[str, str] | None = None,
) -> None:
    """The sizes config.json gives that the import allocates by are no larger than the weights hold: its vocabulary
    (the embedding table's rows), its layers (those stored under ``layer_prefix``, counted by ``layer_fields``), its
    positions (a stored table's rows, else ``MAX_POSITIONS``). FieldError naming the field and the tensor (``where``:
    the weights file). A size smaller than the weights' is left to the shape checks that follow, which name the
    tensor that disagrees."""
    tables = {t: shapes[p + t] for t in _TABLES for p in ("model.", "") if len(shapes.get(p + t, ())) == 2}
    if not tables:
        raise FieldError(f"{where}: no embedding table (one of {', '.join(_TABLES)}, under model. or not)")
    rows = next(iter(tables.values()))[0]
    for field, held in (("vocab_size", rows), ("decoder_vocab_size", tables.get(_TABLES[2], (rows,))[0])):
        if cfg.get(field) is not None and whole(cfg, field, 1, 1 << 40) > held:
            raise FieldError(
                f"field {field!r} is {cfg[field]!r}, but the embedding table in {where} has {held} rows"
            )
    layer = re.compile(
        re.escape(layer_prefix).replace(r"\{stack\}", "(encoder|decoder)").replace(r"\{i\}", r"(\d+)")
    )
    stored = [m.groups() for k in shapes if (m := layer.match(k))]
    for stack, field in (layer_fields or {s: f"{s}_layers" for s in STACKS}).items():
        held = 1 + max((int(i) for s, i in stored if s == stack), default=-1)
        if cfg.get(field) is not None and whole(cfg, field, 1, 1 << 40) > held:
            raise FieldError(
                f"field {field!r} is {cfg[field]!r}, but {where} holds {held} {stack} layers (no tensor under "
                f"{layer_prefix.format(stack=stack, i=held)!r})"
            )
    _held_positions(cfg, shapes, where)


def _held_positions(cfg: dict[str, Any], shapes: dict[str, tuple[int, ...]], where: str) -> None:
    field = next((f for f in ("max_position_embeddings", "n_positions") if cfg.get(f) is not None), None)
    if field is None:
        return
    positions = whole(cfg, field, 1, 1 << 40)
    stored = {k: v[0] for k, v in shapes.items() if k.endswith("embed_positions.weight") and len(v) == 2}
    for name, rows in stored.items():  # rows = positions + the family's offset (BART's 2): more is refused
        if positions > rows:
            raise FieldError(
                f"field {field!r} is {positions}, but the tensor {name!r} in {where} has {rows} rows"
            )
    if not stored and positions > MAX_POSITIONS:
        raise FieldError(
            f"field {field!r} is {positions}; at most {MAX_POSITIONS} are taken (the exported graphs read at most "
            "4096 tokens)"
        )


def _shown(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."
