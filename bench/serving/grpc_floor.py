"""The floor of a Python grpc.aio front end: a KServe v2 server with no model (bench/serving/grpc_floor_server.py)
under the load bench.serving.peers_bench puts on `s2s serve`, its CPU per request from /proc.

    python -m bench.serving.grpc_floor [--rounds 3] [--seconds 4] [--concurrency 64] [--rates greedy=R,beam=R]

Sides: the server answering a fixed string, or tokenizing and detokenizing each input with the bundle's
tokenizer.json; each paced to the answers/s `s2s serve` reached at C=64 greedy and at its served beam (read from
docs/bench/serve-peers.json unless --rates gives them: per-wake-up costs depend on the rate), and unpaced. The load:
bench/serving/peer_load.py's window (one tritonclient aio closed loop in a process of its own, the same inputs),
the sides taking turns (ABBA). What no cut of `s2s serve`'s own front-end code can go under.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench import ROOT
from bench.common.abba import abba
from bench.common.bundles import latest
from bench.common.machine import cpu_model
from bench.common.report import RESULTS, Report, publish
from bench.serving.load import pct
from bench.serving.peer_load import Target, window
from bench.serving.peer_process import PeerProcess
from bench.serving.server_process import free_port

SEARCHES = {"greedy": "greedy-c64", "beam": "beam-c64"}  # a search -> its table in serve-peers.json


class FloorProcess(PeerProcess):
    """bench/serving/grpc_floor_server.py on loopback (PeerProcess's start, readiness and stop)."""

    def __init__(self, bundle: Path, model: str, work: str, rate: float, tick_ms: float):
        self.kind, self.model = f"floor {work} {rate:g}/s", model
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.cmd = [
            sys.executable,
            "-m",
            "bench.serving.grpc_floor_server",
            "--port",
            str(self.port),
            "--bundle",
            str(bundle),
            "--model",
            model,
            "--work",
            work,
            "--rate",
            str(rate),
            "--tick-ms",
            str(tick_ms),
        ]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="bench-floor-", suffix=".log", delete=False)
        self.proc = None
        self.ct2_threads = ()


def served(peers: Path) -> dict[str, dict]:
    """`s2s serve (defaults)`'s C=64 row of each search in the peers results: its answers/s and front end."""
    out = {}
    if not peers.is_file():
        return out
    blocks = {b.get("table"): b for b in json.loads(peers.read_text(encoding="utf-8"))["blocks"]}
    for search, table in SEARCHES.items():
        if table in blocks and blocks[table]["rows"]:
            row = blocks[table]["rows"][0]
            parts = dict(p.rsplit(" ", 1) for p in row["by_process_ms_request"].split(", "))
            out[search] = dict(rate=row["answers_s"], front=float(parts.get("front end", "nan")))
    return out


def med(xs) -> float:
    return statistics.median(xs) if xs else float("nan")


def run(args, inputs: list[str], log) -> list[dict]:
    sides = [
        dict(work=w, pace=name, rate=rate)
        for w in ("fixed", "tokenize")
        for name, rate in [*args.rates.items(), ("unpaced", 0.0)]
    ]
    bundle = latest(args.model_repo, args.model)  # the version `s2s serve` serves
    with contextlib.ExitStack() as stack:
        for s in sides:
            p = stack.enter_context(FloorProcess(bundle, args.model, s["work"], s["rate"], args.tick_ms))
            # ct2_threads=(pid,): peer_load splits the process's CPU into its main thread ("ct2") and the rest
            s["target"] = Target(p.address, p.proc.pid, args.model, (1,), {}, (p.proc.pid,))
            s["windows"] = {}
        for conc in args.concurrency:
            for r in range(args.rounds):
                for s in abba(sides, r):
                    w = window(
                        s["target"],
                        inputs,
                        conc,
                        args.seconds,
                        max(args.min_answers, 3 * conc),
                        max(2 * conc, 8),
                        r * 4096,
                    )
                    s["windows"].setdefault(conc, []).append(w)
                    cpu = sum(w.cpu_s.values())
                    log(
                        f"  C={conc} round {r + 1} {s['work']:8s} {s['pace']:8s} {w.answers / w.seconds:7.1f}/s "
                        f"front {w.per(cpu):.3f} ms/req client {w.per(w.client_s):.3f} ms/req"
                    )
    return sides


def publish_report(sides: list[dict], args, meta: dict) -> None:
    report = Report("grpc-floor")
    report.heading("The floor of a Python grpc.aio front end (`bench/serving/grpc_floor.py`)")
    report.text(
        "A KServe v2 ModelInfer server in Python with no model behind it (bench/serving/grpc_floor_server.py: "
        "grpc.aio on uvloop, as the peers and `s2s serve`), under the load of the peers benchmark: what a Python "
        "front end cannot go under, against `s2s serve`'s front end at the same answers/s."
    )
    for conc in args.concurrency:
        t = report.table(
            f"floor-c{conc}",
            "answer",
            "paced to",
            ("answers/s", "{:.1f}"),
            ("p50 ms", "{:.1f}"),
            ("CPU ms/request", "{:.3f}"),
            ("main thread", "{:.3f}"),
            ("gRPC threads", "{:.3f}"),
            ("load client ms/request", "{:.3f}"),
            ("s2s serve front end ms/request at that rate", "{:.2f}"),
        )
        for s in sides:
            ws = s["windows"][conc]
            lat = [x for w in ws for x in w.latencies]
            ours = meta["served"].get(s["pace"], {}).get("front", float("nan"))
            t.row(
                "fixed string" if s["work"] == "fixed" else "tokenized + detokenized",
                f"s2s serve's {s['pace']} ({s['rate']:.0f}/s)" if s["rate"] else "unpaced (at once)",
                med([w.answers / w.seconds for w in ws]),
                pct(lat, 50) * 1e3,
                med([w.per(sum(w.cpu_s.values())) for w in ws]),
                med([w.per(w.cpu_s.get("ct2", 0.0)) for w in ws]),
                med([w.per(w.cpu_s.get("front", 0.0)) for w in ws]),
                med([w.per(w.client_s) for w in ws]),
                ours,
            )
    src = meta["rates_from"]
    report.text(f"""
- server: one process, `grpc.aio.server()` with its defaults, uvloop; ModelInfer reads text_input (BYTES [1]) and
  answers text_output: a fixed string of 16 characters, or the input tokenized (`encode_batch`) and detokenized
  (`decode_batch`) with the bundle's tokenizer.json (HF `tokenizers`, as `s2s serve`'s front end does per
  request). Paced: answers wait for a timer every {args.tick_ms:g} ms (the report hold's length) that releases as
  many as keep the rate, oldest first, so they leave in groups as `s2s serve`'s do; rates {src}.
- load: bench/serving/peer_load.py's window, as in the peers benchmark: one `tritonclient.grpc.aio` client in a
  process of its own, C closed-loop workers, one held-out input a request ({meta["inputs"]} inputs), a warm-up of
  max(2C, 8) answers, then at least {args.seconds:g} s and max({args.min_answers}, 3C) answers; {args.rounds}
  rounds, the sides taking turns (ABBA); figures are medians over the rounds, p50 pools them.
- CPU: the server process's user + system time from /proc over the window / answers, its main thread (the event
  loop: grpc.aio's Python, the servicer) apart from its other threads (gRPC's C core pollers).
- date: {meta["started"]:%Y-%m-%d %H:%M} UTC; CPU: {cpu_model()}; command: `python -m bench.serving.grpc_floor
  {" ".join(meta["argv"])}`; {meta["seconds"]:.0f} s
""")
    figures = {}
    for s in sides:
        ws = s["windows"][max(args.concurrency)]
        figures[f"{s['work']} {s['pace']}: CPU ms/request"] = round(
            med([w.per(sum(w.cpu_s.values())) for w in ws]), 4
        )
    publish(report, args.results, figures=figures)


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m bench.serving.grpc_floor", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument("--model-repo", type=Path, default=ROOT / "models")
    p.add_argument("--inputs", type=Path, default=None, help="default: checkpoints/<model>/test.tsv")
    p.add_argument("--limit-inputs", type=int, default=0)
    p.add_argument("--rates", default="", help="greedy=R,beam=R answers/s (default: serve-peers.json's C=64)")
    p.add_argument("--tick-ms", type=float, default=15.0)
    p.add_argument("--concurrency", default="64")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--min-answers", type=int, default=60)
    p.add_argument("--quick", action="store_true", help="1 round of 1 s windows, C=8, nothing written")
    p.add_argument("--results", type=Path, default=None, help=f"where the JSON goes (default {RESULTS})")
    args = p.parse_args(argv)
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    if args.quick:
        args.rounds, args.seconds, args.min_answers, args.concurrency = 1, 1.0, 16, [8]
    elif args.results is None:
        args.results = RESULTS
    return args


def main(argv: list[str] | None = None) -> int:
    import engine as engine_pkg
    from bench.serving.load import load_inputs

    args = parse_args(argv)
    started, t0 = datetime.now(timezone.utc), time.perf_counter()

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    known = served(RESULTS / "serve-peers.json")
    if args.rates:
        try:
            args.rates = {k: float(v) for k, v in (x.split("=", 1) for x in args.rates.split(","))}
        except ValueError:
            raise SystemExit(
                f"--rates: give search=answers/s pairs, e.g. greedy=430,beam=190, not {args.rates!r}"
            ) from None
        src = "as given (`--rates`)"
    else:
        args.rates = {k: v["rate"] for k, v in known.items()}
        src = "`s2s serve (defaults)`'s at C=64 in docs/bench/serve-peers.json"
    eng = engine_pkg.load(latest(args.model_repo, args.model), threads=1, device="cpu")
    inputs, path = load_inputs(args, eng)
    del eng
    log(f"{len(inputs)} inputs from {path}; paced to {args.rates}")
    sides = run(args, inputs, log)
    meta = dict(
        started=started,
        seconds=time.perf_counter() - t0,
        inputs=len(inputs),
        served=known,
        rates_from=src,
        argv=sys.argv[1:] if argv is None else argv,
    )
    publish_report(sides, args, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
