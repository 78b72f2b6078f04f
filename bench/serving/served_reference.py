"""What `s2s serve` answers for a text, computed in process: the engine's ``generate`` on the rows the server's
text plan reads (server/models/text_plan.py: protected spans and numbers masked, long inputs and lines split),
joined and restored as the model API does, spans the model made up dropped. The reference the serving benchmarks
compare served answers with: the same search in process, so that a difference is the serving stack's (batching,
cores, pipes), not the text options a translation model is served with by default; the bare engine (inputs as
sent) is counted beside it."""

from __future__ import annotations

from server.models.results import Output
from server.models.text_plan import TextOptions, plan, without_made_up


def served_texts(engine, texts: list[str], max_batch_size: int, **options) -> list[str]:
    """One answer per text, as the server's default text options make it (a non-translation model: as sent)."""
    if engine.config.task.name != "translation":
        return [r.text for r in engine.generate(texts, max_batch_size=max_batch_size, **options)]
    p = plan("reference", engine.codec, texts, None, TextOptions(), engine.config.model.max_len)
    results = engine.generate(p.texts, max_batch_size=max_batch_size, **options) if p.texts else []
    outputs = [Output(r.text, r.input_tokens, len(r.tokens), tuple(r.hypotheses)) for r in results]
    if not p.changed:
        return [o.text for o in without_made_up(outputs)]
    return [o.text for o in p.answer(outputs, Output)]
