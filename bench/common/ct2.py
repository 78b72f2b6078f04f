"""The checkpoint converted for CTranslate2 once and cached for the benchmarks (the conversion itself:
``export/ctranslate2.py``)."""

from __future__ import annotations

from pathlib import Path

from bench import CACHE
from bench.common.bundles import source_checkpoint
from export.ctranslate2 import convert, vocabulary


def ct2_model(ckpt: Path | None, model: str, engine, log) -> tuple[Path, list[str], str] | str:
    """The checkpoint converted for CTranslate2 (cached in .cache/bench/), the vocabulary in id order and a note
    (the bundle not exported from these weights); or why it cannot be had. ``ckpt`` None: the checkpoint the
    bundle was exported from (a published version names its weights, each version its own checkpoint)."""
    ckpt = ckpt or source_checkpoint(engine.folder, model)
    if not (ckpt / "config.json").is_file():
        return f"no checkpoint at {ckpt} to convert (give --checkpoint DIR)"
    try:
        import ctranslate2  # noqa: F401  (the bench extra)

        from training import checkpoint as ckpt_io
    except ImportError as e:
        return f"{e} (the bench extra: pip install -e '.[bench]')"
    note = ""
    if engine.config.source_checkpoint_sha256 != ckpt_io.weights_sha256(ckpt):
        note = f"the bundle was NOT exported from {ckpt}'s weights"
        log(f"  warning: {note}")
    log(f"  CTranslate2: converting {ckpt} (cached in {CACHE})")
    return convert(ckpt, CACHE / f"ct2-{ckpt.name}"), vocabulary(engine.codec.tokenizer), note
