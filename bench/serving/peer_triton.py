"""The Triton peer: PyTriton (its bundled Triton server, dynamic batcher) calling CTranslate2, KServe v2 gRPC.

    <pytriton venv>/bin/python -m bench.serving.peer_triton --ct2 DIR --bundle DIR --port N --beam 4

Runs from a virtual environment of its own (bench/serving/peers_bench.py makes it in .cache/bench/): PyTriton
pins a numpy older than the project's. ``--instances`` model instances share one CTranslate2 translator with that
many replicas (inter_threads), so that two batches decode at once, as Triton's ``instance_group { count: 2 }``.
Triton with max_batch_size > 0 takes text_input shaped [batch, 1].
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

from bench.serving.peer_codec import Codec, ct2_translator


def infer_function(translator, codec: Codec, beam: int, max_batch: int):
    kw = codec.search(beam).ct2_kwargs()

    @batch
    def infer(text_input: np.ndarray) -> dict[str, np.ndarray]:
        texts = [b.decode() for b in text_input[:, 0]]  # (batch, 1) of bytes
        res = translator.translate_batch(
            codec.source_tokens(texts), max_batch_size=max_batch, batch_type="examples", **kw
        )
        out = codec.texts([r.hypotheses[0] for r in res])
        return {"text_output": np.array([[t.encode()] for t in out], dtype=object)}

    return infer


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.serving.peer_triton", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--ct2", type=Path, required=True)
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--port", type=int, required=True, help="gRPC port (HTTP and metrics take the next two)")
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-delay-ms", type=float, default=5.0)
    args = p.parse_args(argv)
    codec = Codec(args.bundle)
    translator = ct2_translator(args.ct2, args.instances)
    infer = infer_function(translator, codec, args.beam, args.max_batch)
    config = TritonConfig(
        grpc_address="127.0.0.1",
        grpc_port=args.port,
        http_address="127.0.0.1",
        http_port=args.port + 1,
        metrics_port=args.port + 2,
        allow_metrics=False,
        log_verbose=0,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name=args.model,
            infer_func=[infer] * args.instances,
            inputs=[Tensor(name="text_input", dtype=bytes, shape=(1,))],
            outputs=[Tensor(name="text_output", dtype=bytes, shape=(1,))],
            config=ModelConfig(
                max_batch_size=args.max_batch,
                batcher=DynamicBatcher(max_queue_delay_microseconds=int(args.max_delay_ms * 1000)),
            ),
            strict=False,
        )
        triton.serve()


if __name__ == "__main__":
    main()
