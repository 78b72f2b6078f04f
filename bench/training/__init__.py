"""Benchmarks of the training loop."""
