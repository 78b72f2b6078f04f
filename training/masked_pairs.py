"""Training pairs read the way the server makes the model read them (``contract.masking``).

The server masks the spans a model is known to break (named placeholders, URLs, tags, entities) as ``{0}``,
``{1}``, ... and restores them after decoding. A model that saw the masked form in training learns to carry
``{N}`` through; one trained on raw strings sees ``{0}`` only where a catalog happened to use it. So each
training pair is masked with the server's own rule, and its target gets the same stand-ins: the span's text
replaced, once per occurrence in the source, by the source's mark. A pair whose target does not hold every
masked span verbatim (the translator rewrote a URL, dropped a tag) is kept as it came: guessing which part of
the target stands for the span would teach the model a wrong alignment.
"""

from __future__ import annotations

from contract.masking import mask

Pair = tuple[str, str]


def mask_pair(source: str, target: str) -> tuple[Pair, bool]:
    """(the pair as the model should read it, whether it changed)."""
    m = mask(source)
    if not m.changed or not m.text:
        # Nothing masked, or nothing to translate (the server answers such a source as sent).
        return (source, target), False
    tgt = target.strip()
    head, tail = m.head.strip(), m.tail.strip()
    if head or tail:
        # A tag pair around the whole source never reaches the model: it must frame the target too.
        if not (tgt.startswith(head) and tgt.endswith(tail) and len(tgt) >= len(head) + len(tail)):
            return (source, target), False
        tgt = tgt[len(head) : len(tgt) - len(tail)].strip()
    for span, mark in zip(m.spans, m.marks):
        if mark == span.text:
            continue  # kept as it is (numbers, %s, {0}): the model copies those already
        at = tgt.find(span.text)
        if at < 0:
            return (source, target), False
        tgt = tgt[:at] + mark + tgt[at + len(span.text) :]
    # Spans kept as they are (numbers, %s) leave the pair as it came: not counted as changed.
    return (m.text, tgt), m.text != source or tgt != target


def mask_pairs(pairs: list[Pair]) -> tuple[list[Pair], int]:
    """Every pair through ``mask_pair``; also how many changed."""
    out, changed = [], 0
    for src, tgt in pairs:
        pair, did = mask_pair(src, tgt)
        out.append(pair)
        changed += did
    return out, changed
