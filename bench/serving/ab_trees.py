"""Closed-loop gRPC throughput of two checkouts' servers, side by side, taking turns (ABAB...).

For a change on the serving path (e.g. how the front end writes to the engine cores' pipes): each round
starts `s2s serve` from tree A, then from tree B (same models, same flags), drives --concurrency
workers of en->ja Generate calls (held-out texts, 4 inputs a call, greedy) for
--seconds, and prints answers per second; then the ratio B/A per round and the median ratio.

    python -m bench.serving.ab_trees --a /work/main --b . [--rounds 3] [--concurrency 64] [--seconds 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import grpc

from bench import ROOT
from bench.serving.server_process import free_port
from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

JA = "translate-en-ja"
GREEDY = pb.GenerateOptions(beam_size=1)  # 64 workers x 4 inputs x beam 1 = the 256-row queue, never over


async def window(tree: Path, texts: list[str], concurrency: int, seconds: float) -> float:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(ROOT / "models"),
                             "--host", "127.0.0.1", "--port", str(port), "--http-port", "0", "--metrics-port", "0",
                             "--models", JA], cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            await asyncio.wait_for(ch.channel_ready(), 120)
            stub = pb_grpc.Seq2SeqStub(ch)
            await stub.Generate(pb.GenerateRequest(model=JA, inputs=texts[:4]), timeout=120, wait_for_ready=True)
            done, end = 0, time.monotonic() + seconds

            async def worker(i: int):
                nonlocal done
                k = i
                while time.monotonic() < end:
                    batch = [texts[(k + j) % len(texts)] for j in range(4)]
                    await stub.Generate(pb.GenerateRequest(model=JA, inputs=batch, options=GREEDY), timeout=120)
                    done += 1
                    k += concurrency

            t0 = time.monotonic()
            await asyncio.gather(*(worker(i) for i in range(concurrency)))
            return done / (time.monotonic() - t0)
    finally:
        proc.terminate()
        proc.wait(60)


async def run(args) -> None:
    rows = (ROOT / "checkpoints" / JA / "test.tsv").read_text(encoding="utf-8").splitlines()
    texts = [r.split("\t")[0] for r in rows[:512]]
    a, b = Path(args.a).resolve(), Path(args.b).resolve()
    ratios = []
    for r in range(args.rounds):
        ra = await window(a, texts, args.concurrency, args.seconds)
        rb = await window(b, texts, args.concurrency, args.seconds)
        ratios.append(rb / ra)
        print(f"round {r + 1}: A {ra:.1f} calls/s, B {rb:.1f} calls/s, B/A {rb / ra:.3f}", flush=True)
    print(f"A = {a}, B = {b}, C = {args.concurrency}: median B/A {statistics.median(ratios):.3f}")


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.serving.ab_trees", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--a", required=True, help="checkout A (the baseline)")
    p.add_argument("--b", default=str(ROOT), help="checkout B (default: this one)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--seconds", type=float, default=15.0)
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
