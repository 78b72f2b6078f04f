"""The torch-free decode engine, three roles in three layers, each importing only the ones below it:

- ``runner.Runner`` runs a bundle's two ONNX graphs on ids and arrays (ONNX Runtime sessions, CPU or CUDA:
  ``device``); ``cache.DecodeBatch`` owns the running batch's KV cache;
- ``step_loop.StepLoop`` is the step loop the server's scheduler drives (add sequences, step, collect what
  happened; ``drive.run`` drives it to completion in process); ``logits`` applies each row's decoding options
  (``contract.decoding``), ``search`` picks tokens (greedy, sampled, forced, or beams with n-best);
- ``translator.Translator`` is the in-process text API, CTranslate2's shape::

    import engine
    en_ja = engine.load("models/translate-en-ja/1")
    [r.text for r in en_ja.generate(["Save changes"], beam_size=4)]
    en_ja.generate(["Save changes"], beam_size=4, num_hypotheses=4, return_scores=True)[0].hypotheses
    en_ja.translate_batch([en_ja.source_tokens("Save changes")], beam_size=4)[0].hypotheses

Export validation, the benchmarks, the tests and the server all use this package; it imports
neither torch nor grpc.
"""

from __future__ import annotations

from pathlib import Path

from engine.runner import EngineOptions, Runner
from engine.search import Hypothesis, TextHypothesis
from engine.sequence import Sequence, StepOutput
from engine.step_loop import StepLoop
from engine.translator import Result, TranslationResult, Translator


def load(
    bundle_dir: str | Path,
    *,
    threads: int = 1,
    device: str = "auto",
    io_binding: str = "auto",
    greedy_screen: bool | str = "auto",
) -> Translator:
    """Load a bundle (``models/<name>/<version>/``), verified against its config.json hashes.

    ``threads``: ONNX Runtime intra-op threads (1 was fastest per core at these sizes; run several
    engines for parallelism). ``device``: ``auto`` (CUDA when it can load, else CPU), ``cpu`` or ``cuda``.
    ``greedy_screen``: greedy rows' tokens from an int8 screen of the output projection, each proven to be the
    argmax or computed in full (``engine.screen``; float32 bundles on the CPU): ``auto`` where the projection is
    large enough to pay, ``on`` (True) or ``off`` (False).
    """
    options = EngineOptions(
        device=device, intra_op_threads=threads, io_binding=io_binding, greedy_screen=greedy_screen
    )
    return Translator(Path(bundle_dir), options)


__all__ = [
    "EngineOptions",
    "StepLoop",
    "Hypothesis",
    "Result",
    "Runner",
    "Sequence",
    "StepOutput",
    "TextHypothesis",
    "TranslationResult",
    "Translator",
    "load",
]
