"""The servers a user would build instead of `s2s serve`: CTranslate2 behind a grpc.aio KServe v2 server.

    python -m bench.serving.peers --ct2 DIR --bundle DIR --port N --beam 4 [--batcher]

``per-request`` (no --batcher): each ModelInfer is one ``translate_batch`` of its own inputs in a thread pool, as
the first server one writes. ``--batcher``: a small asyncio micro-batcher gathers requests into one call of at
most ``--max-batch`` inputs or ``--max-delay-ms`` after the first, with at most ``--inter-threads`` calls in
flight (one per CTranslate2 replica). Both tokenize and detokenize themselves (bench/serving/peer_codec.py) and
answer text_output as raw BYTES, with no parameters. The PyTriton peer is bench/serving/peer_triton.py.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2 as kpb
from tritonclient.grpc import service_pb2_grpc as kpb_grpc

from bench.serving.peer_codec import Codec, Search, ct2_translator, pack_bytes, unpack_bytes


class Batcher:
    """Requests' inputs gathered into one translate_batch: a call starts once ``max_batch`` inputs wait or
    ``max_delay_s`` after the first of them, and while fewer than ``slots`` calls run."""

    def __init__(self, run, max_batch: int, max_delay_s: float, slots: int):
        self.run, self.max_batch, self.max_delay_s = run, max_batch, max_delay_s
        self.slots = asyncio.Semaphore(slots)
        self.waiting: list[tuple[list, asyncio.Future]] = []
        self.wake = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, tokens: list) -> list:
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append((tokens, fut))
        self.wake.set()
        return await fut

    def _count(self) -> int:
        return sum(len(t) for t, _ in self.waiting)

    async def _loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if not self.waiting:
                continue
            until = time.monotonic() + self.max_delay_s
            while self._count() < self.max_batch and (left := until - time.monotonic()) > 0:
                try:
                    await asyncio.wait_for(self.wake.wait(), left)
                except asyncio.TimeoutError:
                    break
                self.wake.clear()
            await self.slots.acquire()
            take, n = [], 0
            while self.waiting and n + len(self.waiting[0][0]) <= self.max_batch or not take and self.waiting:
                take.append(self.waiting.pop(0))
                n += len(take[-1][0])
            if self.waiting:
                self.wake.set()
            asyncio.get_running_loop().create_task(self._call(take))

    async def _call(self, take: list[tuple[list, asyncio.Future]]) -> None:
        try:
            flat = [t for tokens, _ in take for t in tokens]
            hyps = await asyncio.get_running_loop().run_in_executor(None, self.run, flat)
            k = 0
            for tokens, fut in take:
                fut.set_result(hyps[k : k + len(tokens)])
                k += len(tokens)
        except Exception as e:  # every waiting request gets the failure
            for _, fut in take:
                if not fut.done():
                    fut.set_exception(e)
        finally:
            self.slots.release()


class Servicer(kpb_grpc.GRPCInferenceServiceServicer):
    """KServe v2 ModelInfer for one model: text_input BYTES [n] -> text_output BYTES [n]."""

    def __init__(self, name: str, codec: Codec, translate, batcher: Batcher | None, pool: ThreadPoolExecutor):
        self.name, self.codec, self.translate, self.batcher, self.pool = name, codec, translate, batcher, pool

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
        tokens = self.codec.source_tokens(texts)
        if self.batcher is not None:
            hyps = await self.batcher.submit(tokens)
        else:
            hyps = await asyncio.get_running_loop().run_in_executor(self.pool, self.translate, tokens)
        out = self.codec.texts(hyps)
        return kpb.ModelInferResponse(
            model_name=self.name,
            id=request.id,
            outputs=[
                kpb.ModelInferResponse.InferOutputTensor(
                    name="text_output", datatype="BYTES", shape=[len(out)]
                )
            ],
            raw_output_contents=[pack_bytes(out)],
        )


def translator_call(translator, search: Search, max_batch: int):
    """One blocking call: tokens in, the best hypothesis' tokens out (CTranslate2 releases the GIL inside)."""
    kw = search.ct2_kwargs()

    def run(tokens: list[list[str]]) -> list[list[str]]:
        res = translator.translate_batch(tokens, max_batch_size=max_batch, batch_type="examples", **kw)
        return [r.hypotheses[0] for r in res]

    return run


async def serve(args: argparse.Namespace) -> None:
    codec = Codec(args.bundle)
    translator = ct2_translator(args.ct2, args.inter_threads)
    run = translator_call(translator, codec.search(args.beam), args.max_batch)
    # per request: enough threads that every replica has a call to run while others wait in CTranslate2's queue
    pool = ThreadPoolExecutor(max_workers=max(4, 2 * args.inter_threads))
    asyncio.get_running_loop().set_default_executor(pool)
    batcher = (
        Batcher(run, args.max_batch, args.max_delay_ms / 1e3, args.inter_threads) if args.batcher else None
    )
    server = grpc.aio.server()
    kpb_grpc.add_GRPCInferenceServiceServicer_to_server(
        Servicer(args.model, codec, run, batcher, pool), server
    )
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.serving.peers", description=__doc__.split("\n\n")[0])
    p.add_argument("--ct2", type=Path, required=True, help="the CTranslate2 model directory")
    p.add_argument("--bundle", type=Path, required=True, help="the bundle whose tokenizer and config to use")
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--batcher", action="store_true")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-delay-ms", type=float, default=5.0)
    p.add_argument("--inter-threads", type=int, default=2)
    args = p.parse_args(argv)
    try:
        import uvloop

        uvloop.run(serve(args))
    except ImportError:
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()
