"""`s2s serve` beside the servers users would build instead, on the same weights, inputs and client.

    python -m bench.serving.peers_bench [--rounds 6] [--seconds 5] [--concurrency 64] [--serve 'LABEL=FLAGS']
        [--tree 'LABEL=REF']

Sides (every one a KServe v2 gRPC server on 127.0.0.1 that tokenizes and detokenizes itself): `s2s serve` with its
defaults (and any --serve variant: its flags added; any --tree side: another commit's server, with its defaults,
to measure a change of code in the same run), CTranslate2 behind grpc.aio per request, the same with a
micro-batcher (bench/serving/peers.py), PyTriton with CTranslate2 (bench/serving/peer_triton.py). Per search
(greedy; the served default) and concurrency, --rounds windows a side, the sides taking turns (ABBA), each
window's load one tritonclient aio closed loop in a process of its own (bench/serving/peer_load.py). The
figures: bench/serving/peers_report.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

from bench import ROOT
from bench.common.abba import abba
from bench.common.bundles import latest
from bench.common.report import RESULTS
from bench.serving.cost import searches
from bench.serving.peer_load import Target, Window, window
from bench.serving.peer_process import PeerProcess
from bench.serving.server_process import ServerProcess
from bench.serving.trees import baseline_tree
from server.models.in_process import served_texts

PEERS = {
    "per-request": "CTranslate2 behind grpc.aio, per request",
    "batcher": "CTranslate2 + asyncio micro-batcher (<= 64 inputs or 5 ms)",
    "triton": "PyTriton (Triton dynamic batcher, 2 instances) + CTranslate2",
}

ROUND_STRIDE = 4096  # round r's windows all start at input r x this: the sides of a round get the same inputs


@dataclass
class Side:
    label: str
    kind: str  # "ours" or a PEERS key
    windows: dict[tuple[str, int], list[Window]] = field(default_factory=dict)  # (search, C) -> rounds
    identical: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # = the reference
    bare_identical: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)  # = the bare engine
    # (search, C) -> (latency s, output tokens) of every answer: what the slowest answers were
    answered: dict[tuple[str, int], list[tuple[float, int]]] = field(default_factory=dict)


def ours(args, flags: str, root: Path = ROOT) -> ServerProcess:
    ns = SimpleNamespace(
        model_repo=args.model_repo,
        model=args.model,
        max_batch_size=0,
        max_queue_size=0,
        intra_op_threads=0,
        queue_delay_ms=0,
    )
    s = ServerProcess(ns, "continuous", 0, root=root, label="s2s serve", defaults=True)
    s.cmd += flags.split()
    return s


def target(server, kind: str, model: str, params: dict) -> Target:
    pid = server.proc.pid
    shape = (1, 1) if kind == "triton" else (1,)
    return Target(
        server.address,
        pid,
        model,
        shape,
        params if kind == "ours" else {},
        getattr(server, "ct2_threads", ()),
        timed=kind == "ours",
    )


def burst(t: Target, inputs: list[str], n: int) -> None:
    """A few requests, so that first runs (ONNX Runtime's, Triton's) are in no window."""
    import numpy as np
    import tritonclient.grpc.aio as aio
    from tritonclient.grpc import InferInput

    async def go():
        c = aio.InferenceServerClient(t.address)
        try:

            async def one(i):
                inp = InferInput("text_input", list(t.shape), "BYTES")
                inp.set_data_from_numpy(np.array([inputs[i].encode()], dtype=object).reshape(t.shape))
                await c.infer(t.model, [inp], parameters=t.params or None, client_timeout=120)

            await asyncio.gather(*(one(i % len(inputs)) for i in range(n)))
        finally:
            await c.close()

    asyncio.run(go())


def run(args, inputs: list[str], engine, log) -> tuple[list[Side], list]:
    from bench.common.ct2 import ct2_model

    got = ct2_model(args.checkpoint, args.model, engine, log)
    if isinstance(got, str):
        raise SystemExit(f"bench.serving.peers_bench: CTranslate2 not available: {got}")
    ct2_dir = got[0]
    bundle = latest(args.model_repo, args.model)  # the version `s2s serve` serves
    search_list = [s for s in searches(engine, log) if s.name.split(" ")[0] in args.searches]
    sides = [Side("s2s serve (defaults)", "ours")] + [
        Side(f"s2s serve {lab}", "ours") for lab, _ in args.serve
    ]
    sides += [Side(f"s2s serve @{lab}", "ours") for lab, _ in args.tree]
    sides += [Side(PEERS[k], k) for k in args.peers]
    flags = {sides[0].label: ""} | {f"s2s serve {lab}": f for lab, f in args.serve}
    with contextlib.ExitStack() as stack:
        mine = {lab: stack.enter_context(ours(args, f)) for lab, f in flags.items()}
        for lab, ref in args.tree:
            into = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"peers-tree-{lab}-")))
            log(f"  {lab}: the server of {ref}")
            mine[f"s2s serve @{lab}"] = stack.enter_context(ours(args, "", baseline_tree(ROOT, ref, into)))
        for search in search_list:
            with contextlib.ExitStack() as peers:
                servers = dict(mine)
                for side in sides:
                    if side.kind != "ours":
                        log(f"  starting {side.kind} (beam {search.beam})")
                        servers[side.label] = peers.enter_context(
                            PeerProcess(side.kind, ct2_dir, bundle, args.model, search.beam, log)
                        )
                targets = {
                    s.label: target(servers[s.label], s.kind, args.model, search.params) for s in sides
                }
                for t in targets.values():
                    burst(t, inputs, 64)
                for conc in args.concurrency:
                    for r in range(args.rounds):
                        for side in abba(sides, r):
                            w = window(
                                targets[side.label],
                                inputs,
                                conc,
                                args.seconds,
                                max(args.min_answers, 3 * conc),
                                max(2 * conc, 8),
                                r * ROUND_STRIDE,
                            )
                            side.windows.setdefault((search.name, conc), []).append(w)
                            log(
                                f"  {search.name} C={conc} round {r + 1} {side.label[:40]:40s} "
                                f"{w.answers / w.seconds:6.1f}/s p50 {statistics.median(w.latencies) * 1e3:6.1f} ms "
                                + " ".join(f"{k} {w.per(v):.2f}" for k, v in sorted(w.cpu_s.items()))
                                + f" client {w.per(w.client_s):.2f} ms/req"
                            )
    for search in search_list:  # outputs: every side's answers against the engine in process, same search
        idx = sorted(
            {
                i
                for s in sides
                for k, ws in s.windows.items()
                if k[0] == search.name
                for w in ws
                for i in w.texts
            }
        )
        texts, bs = [inputs[i] for i in idx], 64 * search.beam
        results = engine.generate(texts, max_batch_size=bs, **search.engine_kw)
        bare = dict(zip(idx, (r.text for r in results)))
        lengths = dict(zip(idx, (len(r.tokens) for r in results)))
        # `s2s serve` reads a translation's inputs through its text plan (spans protected), the peers as sent
        served = dict(zip(idx, served_texts(engine, texts, bs, **search.engine_kw)))
        for s in sides:
            expected = served if s.kind == "ours" else bare
            for key, ws in s.windows.items():
                if key[0] == search.name:
                    got = {i: t for w in ws for i, t in w.texts.items()}
                    s.identical[key] = (sum(expected[i] == t for i, t in got.items()), len(got))
                    s.bare_identical[key] = (sum(bare[i] == t for i, t in got.items()), len(got))
                    s.answered[key] = [
                        (lat, lengths[i]) for w in ws for lat, i in zip(w.latencies, w.indices)
                    ]
    return sides, search_list


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench.serving.peers_bench", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--model-repo", type=Path, default=ROOT / "models")
    p.add_argument(
        "--checkpoint",
        type=Path,
        default=None,
        help="default: the checkpoint the served version was exported from",
    )
    p.add_argument("--inputs", type=Path, default=None, help="default: checkpoints/<model>/test.tsv")
    p.add_argument("--limit-inputs", type=int, default=0)
    p.add_argument("--searches", default="greedy,beam", help="greedy and/or beam (the served default)")
    p.add_argument("--peers", default="per-request,batcher,triton")
    p.add_argument(
        "--serve",
        action="append",
        default=[],
        metavar="LABEL=FLAGS",
        help="another `s2s serve` side with these flags added, e.g. '--instances 2=--instances 2'",
    )
    p.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=REF",
        help="another `s2s serve` side, the server of git REF with its defaults, e.g. 'main=main'",
    )
    p.add_argument("--concurrency", default="64")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--seconds", type=float, default=5.0, help="a window lasts this long ...")
    p.add_argument("--min-answers", type=int, default=60, help="... and until max(this, 3*C) answers")
    p.add_argument("--quick", action="store_true", help="1 round of 1 s windows, C=8, nothing written")
    p.add_argument(
        "--results", type=Path, default=None, help=f"where the JSON goes (default {RESULTS}; --quick: none)"
    )
    args = p.parse_args(argv)
    args.searches = [s.strip() for s in args.searches.split(",") if s.strip()]
    args.peers = [s.strip() for s in args.peers.split(",") if s.strip()]
    args.serve = [tuple(x.split("=", 1)) for x in args.serve]
    args.tree = [tuple(x.split("=", 1)) for x in args.tree]
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.max_new_tokens = 0
    if args.quick:
        args.rounds, args.seconds, args.min_answers, args.concurrency = 1, 1.0, 16, [8]
    elif args.results is None:
        args.results = RESULTS
    return args


def main(argv: list[str] | None = None) -> int:
    import engine as engine_pkg
    from bench.serving import peers_report
    from bench.serving.load import load_inputs

    args = parse_args(argv)
    started, t0 = datetime.now(timezone.utc), time.perf_counter()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    eng = engine_pkg.load(latest(args.model_repo, args.model), threads=1, device="cpu")
    inputs, path = load_inputs(args, eng)
    log(f"{len(inputs)} inputs from {path}")
    sides, search_list = run(args, inputs, eng, log)
    meta = dict(
        started=started,
        seconds=time.perf_counter() - t0,
        inputs=len(inputs),
        path=path,
        argv=sys.argv[1:] if argv is None else argv,
    )
    peers_report.publish_report(sides, search_list, args, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
