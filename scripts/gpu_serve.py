"""The GPU check's load phase: `s2s serve --device DEVICE` under closed-loop gRPC load, its answers checked.

Callers (threads, one blocking seq2seq.v1 client each) send requests of 1-4 held-out inputs to both models
in turn until the time is up; every answer's latency is recorded and every error counted. Then the distinct
inputs are decoded by the in-process engine on the same device and compared with what the server answered.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def serve_under_load(args, models: tuple[str, ...], ja: str) -> dict:
    import engine
    from s2s.seq2seq_client import Seq2SeqClient

    inputs = {
        m: [
            line.split("\t")[0]
            for line in (args.checkpoints / m / "test.tsv").read_text(encoding="utf-8").splitlines()[:200]
        ]
        for m in models
    }
    from bench.harness.server import s2s_serve

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
        latencies: list[float] = []
        answers: dict[tuple[str, str], str] = {}
        errors: list[str] = []
        counts = [0, 0]  # answers, sequences
        lock = threading.Lock()
        t_end = time.monotonic() + args.serve_seconds

        def caller(k: int) -> None:
            i = k
            with Seq2SeqClient(server.address, timeout=60) as c:
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
                            errors.append(f"{type(e).__name__}: {str(e)[:200]}")
                    else:
                        with lock:
                            latencies.append(time.perf_counter() - t0)
                            counts[0] += 1
                            counts[1] += len(texts)
                            answers.update({(m, t): g for t, g in zip(texts, got)})
                    i += args.callers

        threads = [threading.Thread(target=caller, args=(k,)) for k in range(args.callers)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - t0
        metrics_text = _get(f"http://127.0.0.1:{server.metrics_port}/metrics")
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
    lat = sorted(latencies) or [float("nan")]
    provider = providers.get(ja, "?")
    expected = "CUDAExecutionProvider" if args.device == "cuda" else "CPUExecutionProvider"
    out = {
        "seconds": wall,
        "callers": args.callers,
        "provider": provider,
        "providers": providers,
        "answers": counts[0],
        "answers_per_s": counts[0] / wall,
        "sequences_per_s": counts[1] / wall,
        "errors": len(errors),
        "first_errors": errors[:5],
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "same_as_engine": same / max(total, 1),
        "distinct_inputs": total,
        "metrics_provider_label": f'provider="{expected}"' in metrics_text,
    }
    # On CUDA a row's kernels depend on its batch's shape, so a near-tie may flip a token against the engine alone.
    out["passed"] = (
        not errors
        and counts[0] > 0
        and all(p == expected for p in providers.values())
        and out["metrics_provider_label"]
        and out["same_as_engine"] >= (1.0 if args.device == "cpu" else 0.97)
    )
    return out


def _get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()
