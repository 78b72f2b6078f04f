"""What `s2s serve` answers for a text, computed in process: the engine's ``generate`` on the rows the model API's
text plan reads (``text_plan``: protected spans and numbers masked, long inputs and lines split), joined and
restored as the model API does, spans the model made up dropped. For the evaluation scripts and the benchmarks
that compare served answers with the engine's: a difference is then the serving stack's (batching, cores,
pipes), not the text options a translation model is served with by default. Tested equal to the served answers
(tests/test_protected_spans.py)."""

from __future__ import annotations

from server.models.results import Output
from server.models.text_plan import TextOptions, plan, without_made_up


def served_texts(engine, texts: list[str], max_batch_size: int, **options) -> list[str]:
    """One answer per text, as the server's default text options make it (a non-translation model: as sent)."""
    return [o.text for o in served_outputs(engine, texts, max_batch_size=max_batch_size, **options)]


def served_outputs(engine, texts: list[str], prefixes: list[str] | None = None, **options) -> list[Output]:
    """One ``results.Output`` per text (its n-best hypotheses and scores), as the server's default text options
    make it; ``engine``: an ``engine.Translator``; ``options``: its ``generate``'s (``max_batch_size`` among them)."""
    if engine.config.task.name != "translation":
        results = engine.generate(texts, target_prefixes=prefixes, **options)
        return [Output(r.text, r.input_tokens, len(r.tokens), tuple(r.hypotheses)) for r in results]
    p = plan("reference", engine.codec, texts, prefixes, TextOptions(), engine.config.model.max_len)
    results = engine.generate(p.texts, target_prefixes=p.prefixes, **options) if p.texts else []
    outputs = [Output(r.text, r.input_tokens, len(r.tokens), tuple(r.hypotheses)) for r in results]
    if not p.changed:
        return without_made_up(outputs)
    return p.answer(outputs, Output)
