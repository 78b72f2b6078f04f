"""Benchmarks of `s2s serve` under load: batching modes, CPU per request, decoding options, server variants and
commits side by side, deadlines."""
