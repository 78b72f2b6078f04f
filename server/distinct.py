"""n-best lists of distinct texts (``DecodingOptions.distinct_hypotheses``; LibreTranslate's ``alternatives``).

A beam's hypotheses are distinct token sequences, but two sequences can detokenize to the same text
("▁New▁York" and "▁New▁Y" "ork"; a space the detokenizer drops). A person shown alternatives wants
different texts. So the model API decodes with a wider n-best, keeps the first (best-ranked)
hypothesis of each text, and, for the inputs still short of ``num_hypotheses`` texts, decodes again at
the widest beam this request may use. Fewer than asked come back only when even that beam holds fewer
different texts (a tiny vocabulary, a one-token answer).
"""

from __future__ import annotations

from contract.decoding import DecodingOptions
from server.requests import Limits


def wanted(options: DecodingOptions) -> bool:
    return options.distinct_hypotheses and options.num_hypotheses > 1


def widths(options: DecodingOptions, lim: Limits, inputs: int) -> list[int]:
    """The beams to try, narrowest first: twice the texts asked for (at least the request's own beam),
    then the widest one (the model's max beam, within the rows one request may hold)."""
    widest = max(options.beam_size, min(lim.max_beam, lim.max_rows // max(1, inputs)))
    first = min(widest, max(options.beam_size, 2 * options.num_hypotheses))
    return [first] if first == widest else [first, widest]


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
