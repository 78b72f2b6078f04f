"""The one harness every benchmark runs on: servers (server), the load driver (load), what they run on
(inputs), the results schema (results) and the renderer of docs/BENCHMARKS.md (render)."""
