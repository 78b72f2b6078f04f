"""The first server one writes around CTranslate2: a grpc.aio KServe v2 ModelInfer whose every request is one
``translate_batch`` of its own inputs in a thread pool; it tokenizes and detokenizes itself and answers
text_output as raw BYTES, with no parameters.

    python -m bench.peers.per_request --ct2 DIR --bundle DIR --port N [--beam 4]
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import grpc
from tritonclient.grpc import service_pb2 as kpb
from tritonclient.grpc import service_pb2_grpc as kpb_grpc

from bench.peers.codec import Codec, arguments, ct2_translator, pack_bytes, unpack_bytes


class Servicer(kpb_grpc.GRPCInferenceServiceServicer):
    """KServe v2 for one model: text_input BYTES [n] -> text_output BYTES [n]; ``decode``: tokens -> tokens."""

    def __init__(self, name: str, codec: Codec, decode):
        self.name, self.codec, self.decode = name, codec, decode

    async def ServerLive(self, request, context):
        return kpb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return kpb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        return kpb.ModelReadyResponse(ready=request.name == self.name)

    async def ModelInfer(self, request, context):
        if request.model_name != self.name:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no model {request.model_name!r}")
        if request.raw_input_contents:
            texts = unpack_bytes(request.raw_input_contents[0])
        else:
            texts = [b.decode() for b in request.inputs[0].contents.bytes_contents]
        out = self.codec.texts(await self.decode(self.codec.source_tokens(texts)))
        tensor = kpb.ModelInferResponse.InferOutputTensor(
            name="text_output", datatype="BYTES", shape=[len(out)]
        )
        return kpb.ModelInferResponse(
            model_name=self.name, id=request.id, outputs=[tensor], raw_output_contents=[pack_bytes(out)]
        )


def translate(args):
    """(codec, one blocking call: tokens in, the best hypothesis' tokens out; CTranslate2 releases the GIL inside)."""
    codec = Codec(args.bundle)
    translator, kw = ct2_translator(args.ct2, args.replicas), codec.search(args.beam)

    def run(tokens: list[list[str]]) -> list[list[str]]:
        res = translator.translate_batch(tokens, max_batch_size=args.max_batch, batch_type="examples", **kw)
        return [r.hypotheses[0] for r in res]

    return codec, run


async def serve(args, decode_with=None) -> None:
    """``decode_with(run)``: how requests reach CTranslate2 (default: each in the thread pool by itself)."""
    codec, run = translate(args)
    # enough threads that every replica has a call to run while others wait in CTranslate2's queue
    pool = ThreadPoolExecutor(max_workers=max(4, 2 * args.replicas))
    loop = asyncio.get_running_loop()
    loop.set_default_executor(pool)
    decode = decode_with(run) if decode_with else lambda tokens: loop.run_in_executor(pool, run, tokens)
    server = grpc.aio.server()
    kpb_grpc.add_GRPCInferenceServiceServicer_to_server(Servicer(args.model, codec, decode), server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    await server.wait_for_termination()


def main(coroutine=serve) -> None:
    args = arguments(f"python -m {__spec__.name}", __doc__).parse_args()
    try:
        import uvloop

        uvloop.run(coroutine(args))
    except ImportError:
        asyncio.run(coroutine(args))


if __name__ == "__main__":
    main()
