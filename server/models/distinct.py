"""n-best lists of distinct texts (``DecodingOptions.distinct_hypotheses``; LibreTranslate's ``alternatives``).

A beam's hypotheses are distinct token sequences, but two sequences can detokenize to the same text
("▁New▁York" and "▁New▁Y" "ork"; a space the detokenizer drops). A person shown alternatives wants
different texts. So the model API keeps the whole beam of the request's own width, keeps the first
(best-ranked) hypothesis of each text, and, for the inputs still short of ``num_hypotheses`` texts,
decodes again at the widest beam this request may use and appends the texts it adds. The best text is
thus the one the same request without the option gets. Fewer than asked come back only when even the
widest beam holds fewer different texts (a tiny vocabulary, a one-token answer).
"""

from __future__ import annotations

from contract.decoding import DecodingOptions
from server.models.prepare import Limits


def wanted(options: DecodingOptions) -> bool:
    return options.distinct_hypotheses and options.num_hypotheses > 1


def widths(options: DecodingOptions, lim: Limits, inputs: int) -> list[int]:
    """The beams to try: the request's own (so the best text is the one a plain request gets), then, for the
    inputs still short, the widest one (the model's max beam, within the rows one request may hold)."""
    widest = max(options.beam_size, min(lim.max_beam, lim.max_rows // max(1, inputs)))
    return [options.beam_size] if options.beam_size >= widest else [options.beam_size, widest]


def widened(options: DecodingOptions, beam: int) -> DecodingOptions:
    """Decode ``beam`` wide and return the whole beam: the texts are picked from all of it."""
    return options.replace(beam_size=beam, num_hypotheses=beam)


def pick(hypotheses: tuple, n: int) -> tuple:
    """The first hypothesis of each text, best first, at most n."""
    seen: set[str] = set()
    out = []
    for h in hypotheses:
        if h.text not in seen:
            seen.add(h.text)
            out.append(h)
            if len(out) == n:
                break
    return tuple(out)
