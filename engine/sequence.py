"""One input's generation as the step loop runs it (``Sequence``), and what a decoder step reports (``StepOutput``).

``engine.step_loop`` owns the batch these live in; the scheduler and ``engine.drive`` make and read them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from contract.decoding import DecodingOptions
from engine.search import Beam, Greedy, Hypothesis

_ids = itertools.count()


@dataclass(eq=False)
class Sequence:
    """One input text's generation. ``stream``: report each one-row token in ``StepOutput.tokens``.

    ``options`` (``contract.decoding``) say how tokens are chosen; without them ``beam`` alone does (the
    paper's beam, or greedy). ``prefix``: target ids forced first, then continued (part of the output).
    """

    src_ids: list[int]
    max_new_tokens: int
    beam: int = 1
    id: int = field(default_factory=lambda: next(_ids))
    stream: bool = False
    search: Greedy | Beam | None = None
    row: int = -1  # first of its rows in the running batch
    result: list[int] | None = None
    hypotheses: list[Hypothesis] | None = None  # n-best, best first (result is hypotheses[0].tokens)
    # Encoder output waiting to join a batch: per-layer cross K/V (H, S, Dh) and source mask (S,).
    encoded: tuple[list[np.ndarray], np.ndarray] | None = None
    error: BaseException | None = None
    options: DecodingOptions | None = None
    prefix: list[int] = field(default_factory=list)
    rng: np.random.Generator | None = None  # sampling: this input's own generator

    def __post_init__(self) -> None:
        if self.options is None:
            self.options = DecodingOptions(beam_size=self.beam)
        if self.options.beam_size < 1:
            raise ValueError(
                "Sequence options need a resolved beam_size (0 means the model's default): "
                "pass options.resolved(engine.config.task.beam_size, budget)"
            )
        if not self.options.length_penalty_type:  # unresolved: the rule of a model that names none
            self.options = self.options.replace(length_penalty_type="gnmt")
        self.beam = self.options.beam_size
        if self.options.sampling and self.rng is None:
            self.rng = np.random.Generator(np.random.PCG64(self.options.seed))

    @property
    def n_rows(self) -> int:
        return self.beam

    @property
    def needs_pass(self) -> bool:
        """Its rows go through the logits pass (``engine.logits``): options beyond plain greedy/beam, or a
        one-row prefix to force (a beam forces its own)."""
        return self.options.acts_on_logits or (bool(self.prefix) and self.beam == 1)


@dataclass
class StepOutput:
    """What one decoder step did: sequences that finished (``result`` set, already removed from the
    batch) and, for streaming sequences, the token each got (EOS included)."""

    finished: list[Sequence]
    tokens: list[tuple[Sequence, int]]
