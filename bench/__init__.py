"""Benchmarks: one command, ``python -m bench {engine,serve,peers,quality,profile,render}`` (bench/__main__.py),
each an axis grid on one harness (bench/harness/: servers, load, inputs, results, the renderer). Results go to
docs/bench/<name>.json; docs/BENCHMARKS.md is rendered from them. Answered studies live in docs/studies/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the repository
RESULTS = ROOT / "docs" / "bench"  # committed: the figures docs/BENCHMARKS.md is rendered from
CACHE = (
    ROOT / ".cache" / "bench"
)  # conversions and exports the benchmarks reuse (rebuilt when the weights change)
