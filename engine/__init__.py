"""The torch-free decode engine: ONNX Runtime sessions, the KV cache, greedy and beam search.

Layers: ``session.Engine`` runs the two graphs; ``cache.DecodeBatch`` owns the cache arrays of
the running batch; ``logits`` applies each row's decoding options (``contract.decoding``) to the
logits in one pass; ``search`` picks tokens (greedy, sampled, forced, or beams with n-best);
``generator.Generator`` is the step loop that the server's scheduler drives (add sequences, step,
collect what happened).

In-process use, as CTranslate2's ``Translator``::

    import engine
    en_ja = engine.load("models/translate-en-ja/1")
    [r.text for r in en_ja.generate(["Save changes"], beam_size=4)]
    en_ja.generate(["Save changes"], beam_size=4, num_hypotheses=4, return_scores=True)[0].hypotheses

Export validation, the benchmarks, the tests and the server all use this package; it imports
neither torch nor grpc.
"""

from __future__ import annotations

from pathlib import Path

from engine.generator import Candidate, Generator, Result, Sequence, StepOutput, generate, generate_no_cache
from engine.search import Hypothesis
from engine.session import Engine, EngineOptions


def load(bundle_dir: str | Path, *, threads: int = 1, device: str = "auto", io_binding: str = "auto") -> Engine:
    """Load a bundle (``models/<name>/<version>/``), verified against its config.json hashes.

    ``threads``: ONNX Runtime intra-op threads (1 was fastest per core at these sizes; run several
    engines for parallelism). ``device``: ``auto`` (CUDA when it can load, else CPU), ``cpu`` or ``cuda``.
    """
    return Engine(Path(bundle_dir), EngineOptions(device=device, intra_op_threads=threads, io_binding=io_binding))


__all__ = ["Candidate", "Engine", "EngineOptions", "Generator", "Hypothesis", "Result", "Sequence", "StepOutput",
           "generate", "generate_no_cache", "load"]
