"""Benchmarks: engine/ (decoding speed and its variants), serving/ (the server under load), training/ (the
training loop); common/ holds what they share (results as JSON, ABBA turns, /proc CPU, CTranslate2). Each
benchmark writes its figures to docs/bench/<name>.json; ``python -m bench.render`` writes docs/BENCHMARKS.md."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
CACHE = (
    ROOT / ".cache" / "bench"
)  # conversions and exports the benchmarks reuse (rebuilt when the weights change)
