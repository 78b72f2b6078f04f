"""The GPU check's load phase: `s2s serve --device DEVICE` under closed-loop gRPC load, its answers checked.

Callers (threads, one blocking seq2seq.v1 client each) send requests of 1-4 held-out inputs to both models
in turn until the time is up; every answer's latency is recorded and every error counted. Then the distinct
inputs are decoded by the in-process engine on the same device and compared with what the server answered.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Load:
    """What the callers got: every answer's latency and text, the errors, answers and sequences counted."""

    latencies: list[float] = field(default_factory=list)
    answers: dict[tuple[str, str], str] = field(default_factory=dict)  # (model, input) -> its answer
    errors: list[str] = field(default_factory=list)
    answered: int = 0
    sequences: int = 0
    wall: float = 0.0


def serve_under_load(args, models: tuple[str, ...], ja: str) -> dict:
    from bench.harness.server import s2s_serve
    from s2s.seq2seq_client import Seq2SeqClient

    inputs = {
        m: [
            line.split("\t")[0]
            for line in (args.checkpoints / m / "test.tsv").read_text(encoding="utf-8").splitlines()[:200]
        ]
        for m in models
    }
    server = s2s_serve(
        args.model_repo,
        "--device",
        args.device,
        "--instances",
        "1",
        metrics=True,
        log=args.out / "serve.log",
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    with server:  # ready once it is entered; stopped (SIGTERM, then killed) on the way out
        with Seq2SeqClient(server.address, timeout=60) as c:
            providers = {m.name: m.provider for m in c.models()}
        load = closed_loop(server.address, models, inputs, args.callers, args.serve_seconds)
        metrics_text = _get(f"http://127.0.0.1:{server.metrics_port}/metrics")
    same, total = same_as_engine(args, models, load.answers)
    lat = sorted(load.latencies) or [float("nan")]
    expected = "CUDAExecutionProvider" if args.device == "cuda" else "CPUExecutionProvider"
    out = {
        "seconds": load.wall,
        "callers": args.callers,
        "provider": providers.get(ja, "?"),
        "providers": providers,
        "answers": load.answered,
        "answers_per_s": load.answered / load.wall,
        "sequences_per_s": load.sequences / load.wall,
        "errors": len(load.errors),
        "first_errors": load.errors[:5],
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "same_as_engine": same / max(total, 1),
        "distinct_inputs": total,
        "metrics_provider_label": f'provider="{expected}"' in metrics_text,
    }
    # On CUDA a row's kernels depend on its batch's shape, so a near-tie may flip a token against the engine alone.
    out["passed"] = (
        not load.errors
        and load.answered > 0
        and all(p == expected for p in providers.values())
        and out["metrics_provider_label"]
        and out["same_as_engine"] >= (1.0 if args.device == "cpu" else 0.97)
    )
    return out


def closed_loop(address: str, models: tuple[str, ...], inputs: dict, callers: int, seconds: float) -> Load:
    """``callers`` threads, one blocking seq2seq.v1 client each, sending 1-4 inputs a request to the models in turn
    until ``seconds`` are up; errors counted, the load goes on."""
    from s2s.seq2seq_client import Seq2SeqClient

    load, lock = Load(), threading.Lock()
    t_end = time.monotonic() + seconds

    def caller(k: int) -> None:
        i = k
        with Seq2SeqClient(address, timeout=60) as c:
            while time.monotonic() < t_end:
                m = models[i % len(models)]
                texts = [inputs[m][(i * 7 + j) % len(inputs[m])] for j in range(1 + i % 4)]
                t0 = time.perf_counter()
                try:
                    got = c.generate(
                        m, texts, protect_spans=False
                    )  # the model's own text, as the engine in process writes it
                except Exception as e:  # grpc.RpcError mostly: counted, the load goes on
                    with lock:
                        load.errors.append(f"{type(e).__name__}: {str(e)[:200]}")
                else:
                    with lock:
                        load.latencies.append(time.perf_counter() - t0)
                        load.answered += 1
                        load.sequences += len(texts)
                        load.answers.update({(m, t): g for t, g in zip(texts, got)})
                i += callers

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(callers)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    load.wall = time.monotonic() - t0
    return load


def same_as_engine(args, models: tuple[str, ...], answers: dict[tuple[str, str], str]) -> tuple[int, int]:
    """How many distinct inputs the server answered as the in-process engine on the same device does (the version
    served, its default search): (the same, of all)."""
    import engine
    from bench.harness.inputs import latest

    same = total = 0
    for m in models:
        mine = [(t, a) for (mm, t), a in answers.items() if mm == m]
        if not mine:
            continue
        local = engine.load(latest(args.model_repo, m), device=args.device)  # the version served
        want = local.generate([t for t, _ in mine])  # the model's default search, as the server answers
        same += sum(w.text == a for w, (_, a) in zip(want, mine))
        total += len(mine)
    return same, total


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()
