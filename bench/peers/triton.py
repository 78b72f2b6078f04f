"""PyTriton (its bundled Triton server, dynamic batcher) calling CTranslate2, KServe v2 gRPC; --replicas model
instances share one translator with that many replicas (inter_threads), as Triton's ``instance_group { count }``.
Triton with max_batch_size > 0 takes text_input shaped [batch, 1]. Runs from a virtual environment of its own
(bench/peers/__init__.py makes it under .cache/bench/): PyTriton pins a numpy older than the project's.

    <pytriton venv>/bin/python -m bench.peers.triton --ct2 DIR --bundle DIR --port N [--beam 4]
"""

from __future__ import annotations

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

from bench.peers.codec import Codec, arguments, ct2_translator


def main() -> None:
    args = arguments("python -m bench.peers.triton", __doc__).parse_args()
    codec = Codec(args.bundle)
    translator, kw = ct2_translator(args.ct2, args.replicas), codec.search(args.beam)

    @batch
    def infer(text_input: np.ndarray) -> dict[str, np.ndarray]:
        tokens = codec.source_tokens([b.decode() for b in text_input[:, 0]])  # (batch, 1) of bytes
        res = translator.translate_batch(tokens, max_batch_size=args.max_batch, batch_type="examples", **kw)
        return {
            "text_output": np.array(
                [[t.encode()] for t in codec.texts([r.hypotheses[0] for r in res])], dtype=object
            )
        }

    config = TritonConfig(grpc_address="127.0.0.1", grpc_port=args.port, http_address="127.0.0.1", http_port=args.port + 1,
                          metrics_port=args.port + 2, allow_metrics=False, log_verbose=0)  # fmt: skip
    model = ModelConfig(
        max_batch_size=args.max_batch,
        batcher=DynamicBatcher(max_queue_delay_microseconds=int(args.max_delay_ms * 1000)),
    )
    with Triton(config=config) as triton:
        triton.bind(model_name=args.model, infer_func=[infer] * args.replicas, inputs=[Tensor(name="text_input", dtype=bytes, shape=(1,))],
                    outputs=[Tensor(name="text_output", dtype=bytes, shape=(1,))], config=model, strict=False)  # fmt: skip
        triton.serve()


if __name__ == "__main__":
    main()
