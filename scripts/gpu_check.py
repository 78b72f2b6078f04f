"""The GPU check: on a host with an NVIDIA GPU, everything the CPU-only CI cannot check, in one command.

    make gpu-check          # installs the GPU extra (CUDA 13 + cuDNN 9 wheels), then runs this with --device cuda

Phases, each timed, each with a pass/fail verdict (exit status 1 if any fails), the whole under ten minutes:

1. parity: both default models (models/*/1) on the device against the CPU, float32: encoder output and one
   decoder step's logits (max |diff|), greedy and beam-4 outputs on held-out inputs (share identical), addition's
   exact match (must not drop);
2. decode table: translate-en-ja on held-out inputs, greedy and beam 4 at batch 1 / 16 / 64, the device with
   IOBinding on (the KV cache stays in device memory) and off, and the CPU, sides taking turns, median seq/s;
3. fp16: both bundles converted to half precision (``export.quantize.convert_bundle``), checked on the device
   against float32 (outputs identical share, addition exact match), and timed (greedy, batch 64);
4. serve: ``s2s serve --device DEVICE`` under load for --serve-seconds (both models, closed-loop gRPC callers):
   answers, errors, latency, the provider the server reports, answers equal to the in-process engine's.

``--device cpu`` runs the same phases on the CPU provider (the tests run it with --quick): it checks the script,
not a GPU. The report goes to --out (REPORT.md, report.json) and, with --write, to docs/bench/gpu-check.json (rendered into docs/BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness.inputs import latest  # noqa: E402
from scripts.gpu_serve import serve_under_load  # noqa: E402

MODELS = ("addition", "translate-en-ja")
JA = "translate-en-ja"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="make gpu-check runs: scripts/gpu_check.py --device cuda --out .cache/gpu-check --write",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="where the checked side runs (cpu: a dry run of the script on the CPU provider)",
    )
    p.add_argument("--model-repo", type=Path, default=ROOT / "models", help="the default bundles (NAME/1)")
    p.add_argument(
        "--checkpoints", type=Path, default=ROOT / "checkpoints", help="NAME/test.tsv: held-out inputs"
    )
    p.add_argument("--inputs", type=int, default=640, help="held-out inputs for parity and the decode table")
    p.add_argument("--passes", type=int, default=3, help="timed passes per decode-table cell (median)")
    p.add_argument("--serve-seconds", type=float, default=60.0, help="how long the server is kept under load")
    p.add_argument("--callers", type=int, default=32, help="closed-loop gRPC callers during the load phase")
    p.add_argument(
        "--quick", action="store_true", help="small sizes (the tests' dry run): 16 inputs, 1 pass, 3 s load"
    )
    p.add_argument(
        "--out", type=Path, default=ROOT / ".cache" / "gpu-check", help="REPORT.md, report.json, fp16 bundles"
    )
    p.add_argument(
        "--write",
        action="store_true",
        help="also write the report to docs/bench/gpu-check.json and render docs/BENCHMARKS.md",
    )
    a = p.parse_args(argv)
    if a.quick:
        a.inputs, a.passes, a.serve_seconds, a.callers = (
            min(a.inputs, 16),
            1,
            min(a.serve_seconds, 3.0),
            min(a.callers, 8),
        )
    return a


def held_out(args, name: str, n: int) -> list[tuple[str, str]]:
    lines = (args.checkpoints / name / "test.tsv").read_text(encoding="utf-8").splitlines()
    pairs = [tuple(line.split("\t")[:2]) for line in lines if "\t" in line]
    return pairs[:n]


def load(args, folder: Path, device: str, io_binding: str = "auto"):
    import engine
    from engine import EngineOptions

    return engine.Translator(folder, EngineOptions(device=device, io_binding=io_binding))


def environment(args) -> dict:
    import onnxruntime as ort

    from engine.device import cuda_probe

    usable, why = cuda_probe()
    env = {
        "device": args.device,
        "onnxruntime": ort.__version__,
        "providers": ort.get_available_providers(),
        "cuda_usable": usable,
        "cuda_reason": why,
    }
    try:
        import subprocess

        env["gpu"] = (
            subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
            or "n/a"
        )
    except (OSError, subprocess.SubprocessError):
        env["gpu"] = "n/a (no nvidia-smi)"
    env["passed"] = usable or args.device == "cpu"
    return env


def parity(args) -> dict:
    """The device against the CPU, float32, both models."""
    import numpy as np

    from engine.step_loop import pad_batch

    out: dict = {"models": {}}
    for name in MODELS:
        folder = latest(args.model_repo, name)  # the version s2s serve serves
        cpu, dev = load(args, folder, "cpu", "off"), load(args, folder, args.device, "on")
        pairs = held_out(args, name, args.inputs)
        srcs = [s for s, _ in pairs]
        r = {"provider": dev.runner.provider}
        ids, mask = pad_batch([cpu.codec.source_ids(s) for s in srcs[:32]], cpu.runner.special.pad)
        c_cross, d_cross = cpu.runner.encode(ids, mask), dev.runner.encode(ids, mask)
        r["encoder_max_abs_diff"] = max(float(np.abs(a - b).max()) for a, b in zip(c_cross, d_cross))
        rn = cpu.runner
        b = ids.shape[0]
        tgt = np.full((b, 1), rn.special.bos, np.int64)
        empty = [np.zeros((b, rn.n_heads, 0, rn.d_head), np.float32)] * (2 * rn.n_layers)
        args_ = (tgt, np.zeros((b, 1), np.int64), np.zeros((b, 0), np.int64), empty)
        lc, _ = cpu.runner.decode(*args_, c_cross, mask)
        ld, _ = dev.runner.decode(*args_, [np.asarray(x) for x in d_cross], mask)
        r["logits_max_abs_diff"] = float(np.abs(lc - ld).max())
        for beam in (1, 4):
            a = cpu.generate(srcs, beam_size=beam, max_batch_size=64 * beam)
            d = dev.generate(srcs, beam_size=beam, max_batch_size=64 * beam)
            r[f"beam{beam}_identical"] = sum(x.tokens == y.tokens for x, y in zip(a, d)) / len(srcs)
            if name == "addition":
                r[f"beam{beam}_exact_cpu"] = sum(x.text == t for x, (_, t) in zip(a, pairs)) / len(pairs)
                r[f"beam{beam}_exact_device"] = sum(x.text == t for x, (_, t) in zip(d, pairs)) / len(pairs)
        # The device runs other kernels (TF32/cuBLAS on CUDA): near-ties may flip a token, nothing more.
        r["passed"] = (
            r["logits_max_abs_diff"] < 0.05
            and r["beam1_identical"] >= 0.97
            and r["beam4_identical"] >= 0.95
            and (name != "addition" or r["beam1_exact_device"] >= r["beam1_exact_cpu"])
        )
        out["models"][name] = r
    out["passed"] = all(m["passed"] for m in out["models"].values())
    return out


def decode_table(args) -> dict:
    """seq/s of translate-en-ja, the sides taking turns pass by pass (order reversed every other pass)."""
    folder = latest(args.model_repo, JA)
    sides = {
        f"{args.device} IOBinding on": load(args, folder, args.device, "on"),
        f"{args.device} IOBinding off": load(args, folder, args.device, "off"),
    }
    if args.device != "cpu":
        sides["cpu"] = load(args, folder, "cpu", "off")
    srcs = [s for s, _ in held_out(args, JA, args.inputs)]
    rows = []
    for beam in (1, 4):
        for batch in (1, 16) if args.quick else (1, 16, 64):
            texts = srcs[: min(len(srcs), 128)] if batch == 1 else srcs
            times: dict[str, list[float]] = {k: [] for k in sides}
            for t in sides.values():  # warm-up: allocators, cuDNN/cuBLAS algorithm choice
                t.generate(texts[: 2 * batch], beam_size=beam, max_batch_size=batch * beam)
            for p in range(args.passes):
                order = list(sides) if p % 2 == 0 else list(reversed(sides))
                for k in order:
                    t0 = time.perf_counter()
                    sides[k].generate(texts, beam_size=beam, max_batch_size=batch * beam)
                    times[k].append(time.perf_counter() - t0)
            rows.append(
                {
                    "search": "greedy" if beam == 1 else f"beam {beam}",
                    "batch": batch,
                    "inputs": len(texts),
                    **{k: len(texts) / statistics.median(v) for k, v in times.items()},
                }
            )
    return {"sides": list(sides), "rows": rows, "passed": True}


def fp16(args) -> dict:
    from export.quantize import convert_bundle

    out: dict = {"models": {}}
    for name in MODELS:
        src = latest(args.model_repo, name)
        dst = args.out / "fp16" / name / src.name
        t0 = time.perf_counter()
        convert_bundle(src, dst, "fp16")
        r: dict = {"convert_s": time.perf_counter() - t0}
        f32, f16 = load(args, src, args.device, "on"), load(args, dst, args.device, "on")
        pairs = held_out(args, name, args.inputs)
        srcs = [s for s, _ in pairs]
        a, b = f32.generate(srcs, beam_size=1), f16.generate(srcs, beam_size=1)
        r["greedy_identical"] = sum(x.tokens == y.tokens for x, y in zip(a, b)) / len(srcs)
        if name == "addition":
            r["exact_float32"] = sum(x.text == t for x, (_, t) in zip(a, pairs)) / len(pairs)
            r["exact_fp16"] = sum(x.text == t for x, (_, t) in zip(b, pairs)) / len(pairs)
        times = {"float32": [], "fp16": []}
        for p in range(max(args.passes, 1)):
            for k, t in (
                (("float32", f32), ("fp16", f16)) if p % 2 == 0 else (("fp16", f16), ("float32", f32))
            ):
                t0 = time.perf_counter()
                t.generate(srcs, beam_size=1, max_batch_size=64)
                times[k].append(time.perf_counter() - t0)
        r["fp16_speedup_greedy_b64"] = statistics.median(times["float32"]) / statistics.median(times["fp16"])
        r["passed"] = r["greedy_identical"] >= 0.9 and (
            name != "addition" or r["exact_fp16"] >= r["exact_float32"]
        )
        out["models"][name] = r
    out["passed"] = all(m["passed"] for m in out["models"].values())
    return out


def report_markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        "## GPU check (`scripts/gpu_check.py`, `make gpu-check`)",
        "",
        f"- date: {report['date']}; device `{env['device']}`; GPU: {env['gpu']}; onnxruntime {env['onnxruntime']}; "
        f"CUDA: {env['cuda_reason']}; took {report['seconds']:.0f} s; verdict: "
        f"**{'passed' if report['passed'] else 'FAILED'}**",
        "",
    ]
    if "parity" in report:
        lines += [
            "| model | provider | encoder max abs diff | logits max abs diff | greedy identical | beam 4 identical | |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        for name, r in report["parity"]["models"].items():
            lines.append(
                f"| {name} | {r['provider']} | {r['encoder_max_abs_diff']:.1e} | {r['logits_max_abs_diff']:.1e} | "
                f"{r['beam1_identical']:.1%} | {r['beam4_identical']:.1%} | {'ok' if r['passed'] else 'FAILED'} |"
            )
        lines.append("")
    if "decode" in report:
        sides = report["decode"]["sides"]
        lines += [
            f"Decode, {JA}, held-out inputs, sequences/s (median of passes, sides taking turns):",
            "",
            "| search | batch | inputs | " + " | ".join(sides) + " |",
            "|---|---:|---:|" + "---:|" * len(sides),
        ]
        for r in report["decode"]["rows"]:
            lines.append(
                f"| {r['search']} | {r['batch']} | {r['inputs']} | "
                + " | ".join(f"{r[s]:.1f}" for s in sides)
                + " |"
            )
        lines.append("")
    if "fp16" in report:
        lines += [
            "| fp16 bundle | greedy identical to float32 | exact match float32 / fp16 | speed-up greedy batch 64 | |",
            "|---|---:|---|---:|---|",
        ]
        for name, r in report["fp16"]["models"].items():
            exact = f"{r['exact_float32']:.1%} / {r['exact_fp16']:.1%}" if "exact_fp16" in r else ""
            lines.append(
                f"| {name} | {r['greedy_identical']:.1%} | {exact} | {r['fp16_speedup_greedy_b64']:.2f}x | "
                f"{'ok' if r['passed'] else 'FAILED'} |"
            )
        lines.append("")
    if "serve" in report:
        s = report["serve"]
        lines += [
            f"Serving under load: {s['seconds']:.0f} s, {s['callers']} callers, provider {s['provider']}: "
            f"{s['answers']} answers ({s['answers_per_s']:.1f}/s, {s['sequences_per_s']:.1f} sequences/s), "
            f"{s['errors']} errors, latency p50 {s['p50_ms']:.1f} ms / p99 {s['p99_ms']:.1f} ms, answers equal to "
            f"the in-process engine {s['same_as_engine']:.1%}: {'ok' if s['passed'] else 'FAILED'}",
            "",
        ]
    for name, e in report.get("errors", {}).items():
        lines.append(f"- {name} failed: `{e}`")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import datetime as dt
    import traceback

    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    report: dict = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "errors": {}}
    report["environment"] = env = environment(args)
    print(f"gpu-check: {env}", file=sys.stderr, flush=True)
    if not env["passed"]:
        print(
            f"gpu-check: --device cuda, but CUDA cannot run here: {env['cuda_reason']} "
            "(run `make install-gpu` on a host with the NVIDIA driver, or --device cpu for a dry run)",
            file=sys.stderr,
        )
        return 1
    phases = (
        ("parity", parity),
        ("decode", decode_table),
        ("fp16", fp16),
        ("serve", lambda a: serve_under_load(a, MODELS, JA)),
    )
    for name, fn in phases:
        t0 = time.perf_counter()
        try:
            report[name] = fn(args)
            report[name]["seconds"] = time.perf_counter() - t0
        except Exception as e:  # one failing phase is reported, the others still run
            traceback.print_exc()
            report["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
        print(
            f"gpu-check: {name} {'passed' if report.get(name, {}).get('passed') else 'FAILED'} "
            f"in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    report["seconds"] = time.perf_counter() - t_all
    report["passed"] = not report["errors"] and all(report[n]["passed"] for n, _ in phases)
    md = report_markdown(report)
    (args.out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    (args.out / "REPORT.md").write_text(md)
    print(md)
    if args.write:
        from bench.harness import render
        from bench.harness.results import Report

        results = Report("gpu-check")
        results.add_markdown(md)
        results.save()  # docs/bench/gpu-check.json
        render.write()  # docs/BENCHMARKS.md
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
