"""CTranslate2 behind grpc.aio with a micro-batcher, as a user who read about batching would write it: requests'
inputs gathered into one ``translate_batch`` of at most --max-batch inputs or --max-delay-ms after the first, at most
--replicas calls in flight (one per CTranslate2 replica). The servicer is bench/peers/per_request.py's.

    python -m bench.peers.batcher --ct2 DIR --bundle DIR --port N [--beam 4]
"""

from __future__ import annotations

import asyncio
import time

from bench.peers import per_request


class Batcher:
    def __init__(self, run, max_batch: int, max_delay_s: float, slots: int):
        self.run, self.max_batch, self.max_delay_s = run, max_batch, max_delay_s
        self.slots, self.waiting, self.wake = asyncio.Semaphore(slots), [], asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, tokens: list) -> list:
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append((tokens, fut))
        self.wake.set()
        return await fut

    async def _loop(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            if not self.waiting:
                continue
            until = time.monotonic() + self.max_delay_s
            while (
                sum(len(t) for t, _ in self.waiting) < self.max_batch
                and (left := until - time.monotonic()) > 0
            ):
                try:
                    await asyncio.wait_for(self.wake.wait(), left)
                except asyncio.TimeoutError:
                    break
                self.wake.clear()
            await self.slots.acquire()
            take, n = [], 0
            while self.waiting and (n + len(self.waiting[0][0]) <= self.max_batch or not take):
                take.append(self.waiting.pop(0))
                n += len(take[-1][0])
            if self.waiting:
                self.wake.set()
            asyncio.get_running_loop().create_task(self._call(take))

    async def _call(self, take: list) -> None:
        try:
            hyps = await asyncio.get_running_loop().run_in_executor(
                None, self.run, [t for tokens, _ in take for t in tokens]
            )
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


async def serve(args) -> None:
    def decode_with(run):
        return Batcher(run, args.max_batch, args.max_delay_ms / 1e3, args.replicas).submit

    await per_request.serve(args, decode_with)


if __name__ == "__main__":
    per_request.main(serve)
