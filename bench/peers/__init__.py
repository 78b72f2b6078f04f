"""peers: `s2s serve` beside the servers users would build instead, on the same weights, inputs and client.

Sides, each a KServe v2 gRPC server on 127.0.0.1 that tokenizes and detokenizes itself: `s2s serve` with its
defaults (--serve 'LABEL=FLAGS': flags added; --tree 'LABEL=REF': another commit's server), and the peers, one file
each: CTranslate2 behind grpc.aio per request (bench/peers/per_request.py), with an asyncio micro-batcher
(batcher.py), PyTriton with CTranslate2 (triton.py, from a virtual environment of its own). Per search (greedy;
the served default) and concurrency, --rounds windows a side, the sides taking turns (ABBA), round r of every side
starting at input 4096 r; each window's load one tritonclient aio closed loop in a process of its own. Every
side's answers are compared with the engine in process (`s2s serve`'s through its text plan). Writes
serve-peers.json.
"""

from __future__ import annotations

# Imported by the PyTriton peer's own environment too (python -m bench.peers.triton): only the standard library here.
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PEERS = {
    "per-request": "CTranslate2 behind grpc.aio, per request",
    "batcher": "CTranslate2 + asyncio micro-batcher (<= 64 inputs or 5 ms)",
    "triton": "PyTriton (Triton dynamic batcher, 2 instances) + CTranslate2",
}
# What the PyTriton peer's environment installs: the bench-triton extra's pins (pyproject.toml).
TRITON_PACKAGES = ("nvidia-pytriton==0.7.0", "ctranslate2==4.8.5", "tokenizers==0.23.3")
QUICK = dict(rounds=1, seconds=1.0, min_answers=8, concurrency=[4], limit_inputs=64)
STRIDE = 4096  # round r's windows all start at input r x this: the sides of a round get the same inputs


def add_arguments(p) -> None:
    from bench.harness.inputs import model_arguments, words

    a = p.add_argument
    model_arguments(p)
    a("--searches", type=words, default=["greedy", "beam"], help="greedy and/or beam (the served default)")
    a("--peers", type=words, default=list(PEERS), help="; ".join(f"{k}: {v}" for k, v in PEERS.items()))
    a("--serve", action="append", default=[], metavar="LABEL=FLAGS", help="an `s2s serve` side, flags added")
    a(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=REF",
        help="an `s2s serve` side: git REF's server",
    )
    a("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[64])
    a("--rounds", type=int, default=6)
    a(
        "--seconds",
        type=float,
        default=5.0,
        help="a window: at least this long and max(--min-answers, 3C) answers",
    )
    a("--min-answers", type=int, default=60)


@dataclass
class Side:
    label: str
    kind: str  # "ours" or a PEERS key
    windows: dict = field(default_factory=dict)  # (search, C) -> [Window] by round
    identical: dict = field(default_factory=dict)  # (search, C) -> "k of n"
    answered: dict = field(default_factory=dict)  # (search, C) -> [(latency s, output tokens)]


def triton_python() -> Path:
    """The PyTriton virtual environment's python, made on first use (PyTriton pins numpy < 2)."""
    from bench import CACHE

    py = CACHE / "pytriton-venv" / "bin" / "python"
    if not py.exists():
        subprocess.run(
            [str(Path(sys.base_prefix) / "bin" / "python3"), "-m", "venv", str(py.parent.parent)], check=True
        )
        subprocess.run([str(py), "-m", "pip", "install", "-q", *TRITON_PACKAGES], check=True)
    return py


def peer(kind: str, ct2: Path, bundle: Path, model: str, beam: int):
    """A peer as a harness Server."""
    from bench import ROOT
    from bench.harness.server import Server, free_port

    port, env = free_port(), {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [
        "--ct2",
        str(ct2),
        "--bundle",
        str(bundle),
        "--model",
        model,
        "--port",
        str(port),
        "--beam",
        str(beam),
    ]
    if kind == "triton":
        py = triton_python()
        # the bundled Triton's Python backend stub links against libpython: the venv's base one first
        env["LD_LIBRARY_PATH"] = (
            f"{Path(os.path.realpath(py)).parent.parent / 'lib'}:{os.environ.get('LD_LIBRARY_PATH', '')}"
        )
        return Server([str(py), "-m", "bench.peers.triton", *args], port, model, PEERS[kind], env=env)
    module = "bench.peers.batcher" if kind == "batcher" else "bench.peers.per_request"
    return Server([sys.executable, "-m", module, *args], port, model, PEERS[kind], env=env)


def run(args) -> list:
    import engine as engine_pkg
    from bench.harness.inputs import ct2_model, data, latest, log, servable, source_checkpoint
    from bench.peers.report import report
    from bench.serve.cost import searches

    started = time.time()
    bundle = latest(args.model_repo, args.model)
    engine = engine_pkg.load(bundle, threads=1, device="cpu")
    inputs = servable(engine, data(args), args.limit_inputs)
    ct2_dir = ct2_model(args.checkpoint or source_checkpoint(bundle, args.model))
    found = [s for s in searches(engine) if s.name.split(" ")[0] in args.searches]
    serve = [("s2s serve (defaults)", "")] + [
        (f"s2s serve {x.split('=', 1)[0]}", x.split("=", 1)[1]) for x in args.serve
    ]
    trees = [x.split("=", 1) for x in args.tree]
    sides = [Side(label, "ours") for label, _ in serve] + [
        Side(f"s2s serve @{lab}", "ours") for lab, _ in trees
    ]
    sides += [Side(PEERS[k], k) for k in args.peers]
    with contextlib.ExitStack() as stack:
        servers = our_servers(args, serve, trees, stack)
        for s in found:
            with contextlib.ExitStack() as per_search:
                for side in sides:
                    if side.kind != "ours":
                        log(f"  starting {side.kind} (beam {s.beam})")
                        servers[side.label] = per_search.enter_context(
                            peer(side.kind, ct2_dir, bundle, args.model, s.beam)
                        )
                search_windows(args, s, sides, servers, inputs)
    for s in found:
        compare(engine, inputs, sides, s)
    return [report(args, sides, found, len(inputs), started)]


def our_servers(
    args, serve: list[tuple[str, str]], trees: list[list[str]], stack: contextlib.ExitStack
) -> dict:
    """label -> the `s2s serve` sides' servers (--serve's flags, --tree's commits), started under ``stack``."""
    from bench.harness.server import s2s_serve, source_tree

    servers = {
        label: stack.enter_context(s2s_serve(args.model_repo, *f.split(), model=args.model, label=label))
        for label, f in serve
    }
    for lab, ref in trees:
        tree = source_tree(ref, Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-tree-"))))
        servers[f"s2s serve @{lab}"] = stack.enter_context(
            s2s_serve(args.model_repo, root=tree, model=args.model)
        )
    return servers


def search_windows(args, s, sides: list[Side], servers: dict, inputs: list[str]) -> None:
    """One search's windows: per concurrency and round, every side in turn (ABBA), into ``side.windows``."""
    from bench.harness.inputs import log
    from bench.harness.load import Target, abba, pct, window

    for c in args.concurrency:
        for r in range(args.rounds):
            for side in abba(sides, r):
                srv = servers[side.label]
                t = Target(srv.address, srv.pid, args.model, params=s.params if side.kind == "ours" else {},
                           shape=(1, 1) if side.kind == "triton" else (1,), ct2_threads=srv.ct2_threads)  # fmt: skip
                w = window(
                    t, inputs, c, args.seconds, max(args.min_answers, 3 * c), max(2 * c, 8), r * STRIDE, decode_cost=True
                )  # fmt: skip
                side.windows.setdefault((s.name, c), []).append(w)
                log(
                    f"  {s.name} C={c} round {r + 1} {side.label[:40]:40s} {w.rps:6.1f}/s p50 {pct(w.latencies, 50) * 1e3:6.1f} ms"
                )


def compare(engine, inputs: list[str], sides: list[Side], s) -> None:
    """Every side's answers of search ``s`` against the engine in process, the same search (`s2s serve`'s through its
    text plan): ``side.identical``, and each answer's latency with its output length in ``side.answered``."""
    from server.models.in_process import served_texts

    idx = sorted(
        {i for side in sides for k, ws in side.windows.items() if k[0] == s.name for w in ws for i in w.texts}
    )
    texts, kw = [inputs[i] for i in idx], dict(max_batch_size=64 * s.beam, beam_size=s.beam)
    results = engine.generate(texts, **kw)
    bare, lengths = (
        dict(zip(idx, (r.text for r in results))),
        dict(zip(idx, (len(r.tokens) for r in results))),
    )
    served = dict(zip(idx, served_texts(engine, texts, **kw)))
    for side in sides:
        want = served if side.kind == "ours" else bare
        for key, ws in side.windows.items():
            if key[0] == s.name:
                got = {i: t for w in ws for i, t in w.texts.items()}
                side.identical[key] = f"{sum(want[i] == t for i, t in got.items())} of {len(got)}"
                side.answered[key] = [(x, lengths[i]) for w in ws for x, i in zip(w.latencies, w.indices)]
