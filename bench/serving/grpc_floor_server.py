"""A bare grpc.aio KServe v2 ModelInfer server with no model: what a Python front end costs with nothing behind it.

    python -m bench.serving.grpc_floor_server --port N --bundle DIR [--work fixed|tokenize] [--rate R]

Each ModelInfer reads its text_input (BYTES) and answers text_output: a fixed string (``fixed``), or the input
tokenized with the bundle's tokenizer.json and detokenized back (``tokenize``: the front end's own per-request
work in `s2s serve`). ``--rate`` 0 answers at once; otherwise answers are released by a timer every ``--tick-ms``,
as many as keep the rate at R a second, oldest first: a closed-loop client then sees R answers/s, and the server
wakes up for them in groups, as `s2s serve`'s front end does for its cores' reports (grouped by the report
hold). The same event loop (uvloop when installed) and gRPC server as the peers (bench/serving/peers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2 as kpb
from tritonclient.grpc import service_pb2_grpc as kpb_grpc

from bench.serving.peer_codec import pack_bytes, unpack_bytes

FIXED = "保存されていない変更があります。"  # an answer of a typical length (the served answers' median is ~20 chars)


class Pacer:
    """Futures released ``rate`` a second by a timer every ``tick_s``, oldest first; credit never exceeds what
    waits, so a lull does not turn into a burst above the rate."""

    def __init__(self, rate: float, tick_s: float):
        self.loop = asyncio.get_running_loop()
        self.rate, self.tick_s = rate, tick_s
        self.waiting: collections.deque[asyncio.Future] = collections.deque()
        self.credit, self.last = 0.0, self.loop.time()
        self.loop.call_later(tick_s, self._tick)

    def wait(self) -> asyncio.Future:
        fut = self.loop.create_future()
        self.waiting.append(fut)
        return fut

    def _tick(self) -> None:
        now = self.loop.time()
        self.credit = min(self.credit + (now - self.last) * self.rate, float(len(self.waiting)))
        self.last = now
        while self.waiting and self.credit >= 1.0:
            fut = self.waiting.popleft()
            self.credit -= 1.0
            if not fut.done():
                fut.set_result(None)
        self.loop.call_later(self.tick_s, self._tick)


class FloorServicer(kpb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, name: str, tokenizer, pacer: Pacer | None):
        self.name, self.tokenizer, self.pacer = name, tokenizer, pacer

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
        if self.tokenizer is not None:
            ids = [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]
            out = self.tokenizer.decode_batch(ids, skip_special_tokens=True)
        else:
            out = [FIXED] * len(texts)
        if self.pacer is not None:
            await self.pacer.wait()
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


async def serve(args: argparse.Namespace) -> None:
    tokenizer = None
    if args.work == "tokenize":
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(args.bundle / "tokenizer.json"))
    pacer = Pacer(args.rate, args.tick_ms / 1e3) if args.rate > 0 else None
    server = grpc.aio.server()
    kpb_grpc.add_GRPCInferenceServiceServicer_to_server(FloorServicer(args.model, tokenizer, pacer), server)
    server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.serving.grpc_floor_server", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--bundle", type=Path, required=True, help="the bundle whose tokenizer.json to use")
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--work", choices=("fixed", "tokenize"), default="fixed")
    p.add_argument("--rate", type=float, default=0.0, help="answers a second (0: each at once)")
    p.add_argument("--tick-ms", type=float, default=15.0, help="how often paced answers are released")
    args = p.parse_args(argv)
    try:
        import uvloop

        uvloop.run(serve(args))
    except ImportError:
        asyncio.run(serve(args))


if __name__ == "__main__":
    main()
