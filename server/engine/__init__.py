"""The torch-free decode engine: ONNX Runtime sessions, the KV cache, greedy and beam search.

Layers: ``session.Engine`` runs the two graphs; ``cache.DecodeBatch`` owns the cache arrays of
the running batch; ``search`` picks tokens; ``generator.Generator`` is the step loop that the
scheduler drives (add sequences, step, collect the finished).
"""

from server.engine.generator import Generator, Sequence, generate, generate_no_cache
from server.engine.session import Engine, EngineOptions

__all__ = ["Engine", "EngineOptions", "Generator", "Sequence", "generate", "generate_no_cache"]
