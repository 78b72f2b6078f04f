"""Benchmarks: bench/decode.py (decode speed vs PyTorch and CTranslate2) and its CTranslate2 converter."""
