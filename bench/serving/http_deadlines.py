"""How late a short HTTP deadline is answered under load, against one `s2s serve`.

A load of --load concurrent en->ja requests (16 inputs, beam 4, no deadline) keeps the engine cores
busy while --probes requests, one after another, ask with `X-Timeout-Seconds: --deadline-s` (and the
same over gRPC with a client deadline). Prints the median and worst time to the answer of each, and
the status codes. --tree runs the server from another checkout (e.g. the main branch), for a
before/after on one machine in one sitting.

    python -m bench.serving.http_deadlines [--tree /work/main] [--load 32] [--probes 40] [--deadline-s 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import aiohttp
import grpc

from bench import ROOT
from bench.common.local_serve import free_port, serve_cmd
from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

JA = "translate-en-ja"


def texts(n: int) -> list[str]:
    rows = (ROOT / "checkpoints" / JA / "test.tsv").read_text(encoding="utf-8").splitlines()
    return [r.split("\t")[0] for r in rows[:n]]


async def run(args) -> None:
    port, http = free_port(), free_port()
    tree = Path(args.tree).resolve()
    proc = subprocess.Popen(
        serve_cmd(ROOT / "models", port, http, 0, "--models", JA),
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{http}"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            for _ in range(600):
                try:
                    async with session.get(url + "/v2/health/ready") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            body = {
                "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [16], "data": texts(16)}],
                "parameters": {"beam_width": 4},
            }
            stop = asyncio.Event()

            async def load():
                while not stop.is_set():
                    async with session.post(f"{url}/v2/models/{JA}/infer", json=body) as r:
                        await r.read()

            loaders = [asyncio.ensure_future(load()) for _ in range(args.load)]
            await asyncio.sleep(2)  # the load is on
            probe = {
                "inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [4], "data": texts(4)}],
                "parameters": {"beam_width": 4},
            }
            http_t, http_codes = [], Counter()
            for _ in range(args.probes):
                t0 = time.perf_counter()
                async with session.post(
                    f"{url}/v2/models/{JA}/infer",
                    json=probe,
                    headers={"X-Timeout-Seconds": str(args.deadline_s)},
                ) as r:
                    await r.read()
                    http_codes[r.status] += 1
                http_t.append(time.perf_counter() - t0)
            grpc_t, grpc_codes = [], Counter()
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                stub = pb_grpc.Seq2SeqStub(ch)
                for _ in range(args.probes):
                    t0 = time.perf_counter()
                    try:
                        await stub.Generate(
                            pb.GenerateRequest(
                                model=JA, inputs=texts(4), options=pb.GenerateOptions(beam_size=4)
                            ),
                            timeout=args.deadline_s,
                        )
                        grpc_codes["OK"] += 1
                    except grpc.aio.AioRpcError as e:
                        grpc_codes[e.code().name] += 1
                    grpc_t.append(time.perf_counter() - t0)
            stop.set()
            for t in loaders:
                t.cancel()
            await asyncio.gather(*loaders, return_exceptions=True)
    finally:
        proc.terminate()
        proc.wait(60)
    ms = lambda xs: f"median {statistics.median(xs) * 1000:.0f} ms, worst {max(xs) * 1000:.0f} ms"  # noqa: E731
    print(json.dumps({"tree": str(tree), "load": args.load, "deadline_s": args.deadline_s}))
    print(f"HTTP  X-Timeout-Seconds {args.deadline_s}: {ms(http_t)}  {dict(http_codes)}")
    print(f"gRPC  deadline {args.deadline_s}:            {ms(grpc_t)}  {dict(grpc_codes)}")
    if args.write:
        import datetime as dt
        import shlex

        from bench.common.report import RESULTS, publish

        cmd = "python -m bench.serving.http_deadlines " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        body = "\n".join(
            [
                "## A short HTTP deadline under load (`bench/serving/http_deadlines.py`)",
                "",
                f"`{cmd}`, {dt.date.today().isoformat()}: {args.load} concurrent en->ja requests (16 inputs, beam 4) keep the "
                f"engine cores busy while {args.probes} probes, one after another, ask with a {args.deadline_s * 1000:g} ms "
                "deadline. Time from sending to the answer (the front end enforces the deadline itself; gRPC's figure is "
                "the client's own deadline, shown for scale):",
                "",
                "| door | answered after | statuses |",
                "|---|---|---|",
                f"| KServe REST, `X-Timeout-Seconds` | {ms(http_t)} | {dict(http_codes)} |",
                f"| gRPC (client deadline) | {ms(grpc_t)} | {dict(grpc_codes)} |",
            ]
        )
        publish(body, RESULTS, "http-deadlines", names=("deadlines",))


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.serving.http_deadlines",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--tree", default=str(ROOT), help="checkout whose server to run (default: this one)")
    p.add_argument("--load", type=int, default=32, help="concurrent loading requests")
    p.add_argument("--probes", type=int, default=40, help="deadline probes per protocol")
    p.add_argument("--deadline-s", type=float, default=0.05)
    p.add_argument(
        "--write",
        action="store_true",
        help="also write the figures to docs/bench/http-deadlines.json (and render docs/BENCHMARKS.md)",
    )
    asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    main()
