"""Quality benchmarks: what the server's text handling keeps (protected spans, long inputs) and costs in chrF."""
