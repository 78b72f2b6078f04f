"""Benchmarks of the engine in process: decode tables against PyTorch and CTranslate2, export variants, threads,
one decoder step; the reference decoders they time the engine against (baselines)."""
