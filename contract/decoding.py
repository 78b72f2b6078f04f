"""Decoding options of one request, named as CTranslate2's ``translate_batch`` names them, and their limits.

Defined once here: the engine applies them (``engine/search.py``, ``engine/logits.py``), the server
validates them (``server/models/prepare.py``) and every front door maps its protocol onto this dataclass.
docs/DECODING.md gives each option's default and how it maps to CTranslate2's and to the paper's beam.

Three length penalties (``length_penalty_type``):

* ``gnmt`` (the default of a model that names none; the paper's beam, Vaswani et al. §6.1: beam 4, alpha 0.6): hypotheses rank
  by log P(Y|X) / ((5 + |Y|) / 6)^alpha (Wu et al. 2016), and the search stops once no live
  hypothesis can still beat the n-th best finished one.
* ``ctranslate2``: log P(Y|X) / |Y|^alpha, and CTranslate2's stopping rule (patience 1): a beam of width
  k stops after k ended hypotheses, or, with alpha 0, as soon as its best beam ends. Same tokens as
  CTranslate2 with the same options (the oracle tests).
* ``transformers``: log P(Y|X) / |Y|^alpha (alpha 1 by default) and the stopping rule of transformers'
  ``generate()`` with ``early_stopping=False``: once k hypotheses ended, stop when the best live one,
  normalized at its present length, cannot beat the k-th best ended one; at the length limit the k best
  candidates end as they are. The default of imported models (``s2s import``): same tokens as ``generate()``.

|Y| counts the end token when there is one (as CTranslate2 does); log P excludes the target prefix,
which is forced, not chosen.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

LENGTH_PENALTY_TYPES = ("gnmt", "ctranslate2", "transformers")
# the paper's; CTranslate2's; generate()'s
DEFAULT_LENGTH_PENALTY = {
    "gnmt": 0.6,
    "ctranslate2": 1.0,
    "transformers": 1.0,
}

# Model-independent bounds (inclusive unless said). Model-dependent ones (beam width, token budgets, the
# vocabulary for top-k) come from the model and server config: ``ranges``.
MAX_LENGTH_PENALTY = 10.0
MAX_BEAM_SIZE = 1024  # the widest beam a server may allow (--max-beam-size) or a bundle name as its default
MAX_REPETITION_PENALTY = 10.0  # > 0 (CTranslate2's own bound); 1 = off
MAX_TEMPERATURE = 10.0
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class DecodingOptions:
    beam_size: int = 0  # 0 = the model's default (its bundle's task.beam_size), widened to num_hypotheses
    num_hypotheses: int = 1  # n-best, <= beam_size
    return_scores: bool = False
    length_penalty: float | None = None  # None: the type's default (gnmt 0.6, ctranslate2 1.0)
    length_penalty_type: str = (
        ""  # "": the model's default (its bundle's task.length_penalty_type, else gnmt)
    )
    repetition_penalty: float = (
        1.0  # CTranslate2's: a seen token's logit x penalty if < 0, / penalty otherwise
    )
    no_repeat_ngram_size: int = 0  # 0 = off
    min_new_tokens: int = 0  # CTranslate2's min_decoding_length, counted after the target prefix
    max_new_tokens: int = 0  # 0 = the model's default
    disable_unk: bool = False
    sampling_topk: int = 1  # 1 = greedy (no sampling); 0 = the whole vocabulary
    sampling_topp: float = 1.0
    sampling_temperature: float = 1.0  # 0 = greedy
    seed: int | None = None  # sampling: None = a fresh random seed per input
    # n-best of distinct texts (two token sequences can detokenize to one text): the server widens the beam
    # as needed and keeps the first hypothesis of each text. The engine never reads it.
    distinct_hypotheses: bool = False

    @property
    def alpha(self) -> float:
        kind = self.length_penalty_type or "gnmt"
        return DEFAULT_LENGTH_PENALTY[kind] if self.length_penalty is None else self.length_penalty

    @property
    def sampling(self) -> bool:
        return self.sampling_topk != 1 and self.sampling_temperature != 0

    @property
    def acts_on_logits(self) -> bool:
        """Anything beyond argmax / plain beam search: the step loop then runs the logits pass for these rows."""
        return (
            self.repetition_penalty != 1
            or self.no_repeat_ngram_size > 0
            or self.min_new_tokens > 0
            or self.disable_unk
            or self.sampling
            or (self.return_scores and self.beam_size == 1)
        )

    def replace(self, **changes) -> DecodingOptions:
        return dataclasses.replace(self, **changes)

    def resolved(
        self,
        default_beam: int,
        max_new_tokens: int,
        default_penalty: str = "gnmt",
        default_alpha: float | None = None,
        default_no_repeat: int = 0,
    ) -> DecodingOptions:
        """The options a core decodes with: beam_size 0 becomes the model's default (1 when sampling, at least
        num_hypotheses otherwise), max_new_tokens 0 the model's budget, length_penalty_type "" the model's rule;
        an imported model's own alpha (with its rule) and n-gram ban apply where the request names none."""
        beam = self.beam_size or (1 if self.sampling else max(default_beam, self.num_hypotheses))
        kind = self.length_penalty_type or default_penalty
        alpha = (
            default_alpha if self.length_penalty is None and kind == default_penalty else self.length_penalty
        )
        no_repeat = self.no_repeat_ngram_size or default_no_repeat
        if (
            beam == self.beam_size
            and (self.max_new_tokens or max_new_tokens) == self.max_new_tokens
            and kind == self.length_penalty_type
            and alpha == self.length_penalty
            and no_repeat == self.no_repeat_ngram_size
        ):
            return self
        return _resolved(self, beam, self.max_new_tokens or max_new_tokens, kind, alpha, no_repeat)

    def to_tuple(self) -> tuple:
        """The field values in order: how options cross a process boundary. A tuple pickles in a few
        microseconds, the dataclass in ~30 each way, paid on every request of the front end's hot path."""
        return tuple(self.__dict__.values())

    @staticmethod
    # requests mostly repeat a few option sets; sampled ones differ by seed
    @functools.lru_cache(maxsize=1024)
    def from_tuple(values: tuple) -> DecodingOptions:
        return DecodingOptions(*values)


# requests mostly repeat a few option sets: dataclasses.replace costs ~20 us
@functools.lru_cache(maxsize=256)
def _resolved(
    o: DecodingOptions, beam: int, max_new_tokens: int, kind: str, alpha: float | None, no_repeat: int
) -> DecodingOptions:
    return o.replace(
        beam_size=beam,
        max_new_tokens=max_new_tokens,
        length_penalty_type=kind,
        length_penalty=alpha,
        no_repeat_ngram_size=no_repeat,
    )


def length_penalty(kind: str, alpha: float, length: int) -> float:
    """The divisor of a hypothesis' log-probability; ``length`` counts its tokens, end token included."""
    if alpha == 0:
        return 1.0
    if kind == "gnmt":
        return ((5 + length) / 6) ** alpha
    return max(length, 1) ** alpha


@dataclass(frozen=True)
class Range:
    """One option's accepted values, advertised by ListModels and the KServe model config."""

    name: str
    min: float
    max: float
    default: float
    note: str = ""


def ranges(
    max_beam: int,
    max_new_tokens: int,
    vocab_size: int,
    max_prefix_tokens: int,
    default_beam: int = 1,
    default_penalty: str = "gnmt",
) -> list[Range]:
    return [
        Range("beam_size", 0, max_beam, default_beam, "0 = the model's default; 1 = greedy or sampling"),
        Range("num_hypotheses", 1, max_beam, 1, "n-best; at most beam_size"),
        Range(
            "length_penalty",
            0,
            MAX_LENGTH_PENALTY,
            DEFAULT_LENGTH_PENALTY[default_penalty],
            f"alpha; default 0.6 (gnmt) or 1.0 (ctranslate2); this model's rule: {default_penalty}",
        ),
        Range("repetition_penalty", 0, MAX_REPETITION_PENALTY, 1, "> 0; 1 = off"),
        Range("no_repeat_ngram_size", 0, max_new_tokens, 0, "0 = off"),
        Range("min_new_tokens", 0, max_new_tokens, 0, "at most max_new_tokens"),
        Range("max_new_tokens", 0, max_new_tokens, 0, "0 = the model's default"),
        Range("sampling_topk", 0, vocab_size, 1, "1 = greedy; 0 = the whole vocabulary"),
        Range("sampling_topp", 0, 1, 1, "> 0"),
        Range("sampling_temperature", 0, MAX_TEMPERATURE, 1, "0 = greedy"),
        Range("seed", 0, MAX_SEED, 0, "absent = random"),
        Range("target_prefix_tokens", 0, max_prefix_tokens, 0, "per input, tokenized as a target"),
    ]


def check(o: DecodingOptions, max_beam: int, max_new_tokens: int, vocab_size: int) -> None:
    """Raise ValueError naming the option and its limit for any out-of-range value (beam_size 0, the model's
    default, passes: ``DecodingOptions.resolved`` replaces it)."""

    def bad(name: str, value, limit: str) -> None:
        raise ValueError(f"{name}={value!r} is out of range: {limit}")

    if not 0 <= o.beam_size <= max_beam:
        bad("beam_size", o.beam_size, f"0 (the model's default) to {max_beam}")
    if not 1 <= o.num_hypotheses <= (o.beam_size or max_beam):  # beam 0 widens to num_hypotheses (resolved)
        bad(
            "num_hypotheses",
            o.num_hypotheses,
            f"1 to beam_size ({o.beam_size})" if o.beam_size else f"1 to {max_beam}",
        )
    if o.length_penalty_type and o.length_penalty_type not in LENGTH_PENALTY_TYPES:  # "": the model's default
        raise ValueError(
            f"length_penalty_type={o.length_penalty_type!r} is not one of {', '.join(LENGTH_PENALTY_TYPES)}"
        )
    if o.length_penalty is not None and not 0 <= o.length_penalty <= MAX_LENGTH_PENALTY:
        bad("length_penalty", o.length_penalty, f"0 to {MAX_LENGTH_PENALTY:g}")
    if not 0 < o.repetition_penalty <= MAX_REPETITION_PENALTY:
        bad(
            "repetition_penalty",
            o.repetition_penalty,
            f"above 0, at most {MAX_REPETITION_PENALTY:g} (1 = off)",
        )
    if not 0 <= o.no_repeat_ngram_size <= max_new_tokens:
        bad("no_repeat_ngram_size", o.no_repeat_ngram_size, f"0 (off) to {max_new_tokens}")
    if not 0 <= o.max_new_tokens <= max_new_tokens:
        bad("max_new_tokens", o.max_new_tokens, f"0 (model default) to {max_new_tokens}")
    top = o.max_new_tokens or max_new_tokens
    if not 0 <= o.min_new_tokens <= top:
        bad("min_new_tokens", o.min_new_tokens, f"0 to max_new_tokens ({top})")
    if not 0 <= o.sampling_topk <= vocab_size:
        bad("sampling_topk", o.sampling_topk, f"0 (whole vocabulary) to {vocab_size} (1 = greedy)")
    if not 0 < o.sampling_topp <= 1:
        bad("sampling_topp", o.sampling_topp, "above 0, at most 1")
    if not 0 <= o.sampling_temperature <= MAX_TEMPERATURE:
        bad("sampling_temperature", o.sampling_temperature, f"0 (greedy) to {MAX_TEMPERATURE:g}")
    if o.seed is not None and not 0 <= o.seed <= MAX_SEED:
        bad("seed", o.seed, f"0 to {MAX_SEED}")
    if o.distinct_hypotheses and o.sampling:
        raise ValueError(
            "distinct_hypotheses works with beam search; a sampled request draws each output on its own "
            "(send sampling_topk=1, or no sampling options)"
        )
    if o.sampling and o.beam_size > 1:
        raise ValueError(
            f"sampling (sampling_topk={o.sampling_topk}, sampling_temperature={o.sampling_temperature:g}) "
            f"needs beam_size=1, not {o.beam_size}: sampled n-best lists are not supported"
        )
