"""serve: `s2s serve` under closed-loop load, against what its engine cores reach in process and CTranslate2.

Axes: batching mode (--modes: continuous, request-level, none) x engine cores (--instances; continuous at each,
the others at the smallest) x concurrency (--concurrency: C closed-loop seq2seq.v1 workers, one held-out input a
request, greedy). One server per variant, all started up front; each cell's --rounds windows interleave with the
other variants' (the order rotated per round) and are pooled. The ceilings (bench/serve/ceilings.py) are measured
after every server has exited. Then CPU per request by process (greedy and the served default, over KServe v2) and
what each decoding-option family costs (bench/serve/cost.py). --only picks parts. Writes serve.json,
serve-cost.json, options.json (options-ab.json for `--option-families none --baseline REF`). The fairness part, only
when asked for (`--only fairness`, bench/serve/fairness.py): how long a small `/translate` waits while clients send
long inputs, against this tree's server with other flags (--fairness-serve) or another commit's (--fairness-tree);
writes fairness.json.
"""

from __future__ import annotations

import contextlib
import os
import time

from bench.harness.inputs import data, ints, latest, log, model_arguments, servable, source_checkpoint, words
from bench.harness.load import Target, Window, pct, window
from bench.harness.results import Report, bound, nproc, provenance
from bench.harness.server import s2s_serve
from bench.serve import fairness

MODES = ("continuous", "request", "none")
QUICK = dict(concurrency=[1, 4], instances=[1], rounds=1, seconds=1.0, ceiling_repeats=1, ceiling_seconds=1.0, ceiling_warmup_s=0.5,
             limit_inputs=48, cost_concurrency=[1, 4], cost_rounds=1, cost_seconds=1.0,
             cost_min_requests=8, cost_single_inputs=8, option_concurrency=4, option_families=["no option", "beam 4 (the"],
             fairness_clients=1, fairness_chars=512, fairness_probes=3)  # fmt: skip


def add_arguments(p) -> None:
    a = p.add_argument
    model_arguments(p)
    a("--no-ct2", dest="ct2", action="store_false", help="no CTranslate2 references")
    a(
        "--only",
        type=words,
        default=["grid", "cost", "options"],
        help="parts: grid (and ceilings), cost, options, fairness (only when named)",
    )
    a("--modes", type=words, default=list(MODES), help="batching modes")
    a("--instances", type=ints, default=[1, 2], help="engine cores per server (0: one per usable CPU)")
    a("--concurrency", type=ints, default=[1, 8, 32, 64], help="closed-loop workers per cell")
    a("--rounds", type=int, default=2, help="windows per cell (and per option family), interleaved, pooled")
    a("--seconds", type=float, default=5.0, help="a window lasts at least this long and max(3C, 40) answers")
    a("--max-batch-size", type=int, default=64, help="the servers' --max-batch-size and the ceilings'")
    a("--max-queue-size", type=int, default=4096)
    a("--queue-delay-ms", type=float, default=5.0, help="request mode's --max-queue-delay-ms")
    a("--max-new-tokens", type=int, default=0, help="0: the model's default")
    a("--ceiling-repeats", type=int, default=2, help="windows of each ceiling (the best counts)")
    a("--ceiling-seconds", type=float, default=6.0)
    a("--ceiling-warmup-s", type=float, default=2.0)
    a("--ceiling-callers", type=int, default=0, help="callers of the in-process cores (0: the largest C)")
    a("--cost-concurrency", type=ints, default=[1, 64])
    a(
        "--cost-instances",
        type=int,
        default=0,
        help="engine cores of the cost table's server (0: its default)",
    )
    a("--cost-rounds", type=int, default=2)
    a("--cost-seconds", type=float, default=6.0)
    a("--cost-min-requests", type=int, default=60)
    a("--cost-single-inputs", type=int, default=120, help="inputs the engine times alone (C=1's reference)")
    a("--option-concurrency", type=int, default=16)
    a("--option-families", type=words, default=[], help="families by name prefix ('none': no option alone)")
    a("--baseline", default="", help="git commit whose server the no-option row is compared with")
    fairness.add_arguments(a)


def run(args) -> list[Report]:
    reports = measured(args) if {"grid", "cost", "options"} & set(args.only) else []
    if "fairness" in args.only:
        reports.append(fairness.fairness(args))
    return reports


def measured(args) -> list[Report]:
    """The parts on --model's served version and held-out inputs: cost, grid (and ceilings), options."""
    import engine as engine_pkg

    started = time.time()
    auto = nproc()  # as `s2s serve --instances 0` on a CPU
    args.instances = sorted({k or auto for k in args.instances})
    bundle = latest(args.model_repo, args.model)
    engine = engine_pkg.load(bundle, threads=1, device="cpu")
    inputs = servable(engine, data(args), args.limit_inputs)
    log(f"{args.model} from {bundle}, {len(inputs)} inputs")
    reports = []
    if "cost" in args.only:
        from bench.serve.cost import cost

        reports.append(cost(args, inputs, engine, source_checkpoint(bundle, args.model)))
        reports[-1].text(provenance(started))
    if "grid" in args.only:
        reports.append(grid(args, inputs, engine, time.time()))
    if "options" in args.only:
        from bench.serve.cost import options

        t = time.time()
        reports.append(options(args, inputs, lambda mode, k: flags(args, mode, k)))
        reports[-1].text(provenance(t))
    return reports


def flags(args, mode: str, k: int) -> list[str]:
    out = ["--models", args.model, "--batching", mode, "--instances", str(k), "--max-batch-size", str(args.max_batch_size),
           "--max-queue-size", str(args.max_queue_size), "--intra-op-threads", "1", "--grace-s", "2", "--log-level", "WARNING"]  # fmt: skip
    return out + (["--max-queue-delay-ms", str(args.queue_delay_ms)] if mode == "request" else [])


def grid(args, inputs: list[str], engine, started: float) -> Report:
    from bench.serve import ceilings

    variants = [
        (m, k) for m in args.modes for k in (args.instances if m == "continuous" else args.instances[:1])
    ]
    budget = min(args.max_new_tokens or engine.config.task.max_new_tokens, engine.config.model.max_len - 1)
    cells: dict[tuple, list[Window]] = {}
    single: list[float] = []
    with contextlib.ExitStack() as stack:
        servers = {}
        for mode, k in variants:
            log(f"{mode} x{k}: starting the server")
            servers[(mode, k)] = stack.enter_context(
                s2s_serve(args.model_repo, *flags(args, mode, k), metrics=True, model=args.model)
            )
        params = {"beam_size": 1, "max_new_tokens": args.max_new_tokens}
        for c in args.concurrency:
            for r in range(args.rounds):
                for j in range(len(variants)):
                    v = variants[(j + r) % len(variants)]
                    s = servers[v]
                    t = Target(s.address, s.pid, args.model, "seq2seq", params, metrics_port=s.metrics_port)
                    w = window(
                        t,
                        inputs,
                        c,
                        args.seconds,
                        max(40, 3 * c),
                        max(2 * c, 8),
                    )
                    cells.setdefault((*v, c), []).append(w)
                    log(
                        f"  {v[0]} x{v[1]} C={c} round {r + 1}: {w.rps:.1f} req/s, p50 {pct(w.latencies, 50) * 1e3:.1f} ms"
                    )
                if c == 1:  # the engine alone on the inputs this round sent, in the same minutes
                    sent = sorted({i for v in variants for i in cells[(*v, 1)][-1].indices})
                    single += ceilings.single_ms(engine, [inputs[i] for i in sent], budget)
    log("ceilings (in process, no server running)")
    ceiling = ceilings.measure(engine, args, inputs, single)
    pooled = {key: Window.pooled(ws) for key, ws in cells.items()}
    return report(args, pooled, ceiling, len(inputs), started)


def report(args, cells: dict, ceiling, n_inputs: int, started: float) -> Report:
    r = Report("serve")
    r.heading("Serving under load")
    r.text(
        provenance(started)
        + f"\n- {args.model}, {n_inputs} held-out inputs, one per seq2seq.v1 Generate request, greedy; a server per variant on 127.0.0.1 (`--max-batch-size {args.max_batch_size} --intra-op-threads 1`, request mode `--max-queue-delay-ms {args.queue_delay_ms:g}`); C closed-loop grpc.aio workers in a process of their own; {args.rounds} window(s) per cell, rotated across variants and pooled; a window: at least {args.seconds:g} s and max(3C, 40) answers after max(2C, 8). Latency: every request sent inside the window (drained). TTFT: the server's `time_to_first_token_seconds`. rows/step, step ms, in steps: the server's decode-step histograms over the window. CPU: the server's processes and the client's, over the window (100% = one core)."
    )
    r.acceptance(acceptance(cells, ceiling))
    t = r.table("windows", "batching", ("C", "{}"), ("answers", "{}"), ("instances", "{}"), ("window s", "{:.1f}"), ("req/s", "{:.1f}"), ("tok/s", "{:.0f}"),
                ("p50 ms", "{:.1f}"), ("p95 ms", "{:.1f}"), ("p99 ms", "{:.1f}"), ("TTFT p50 ms", "{:.1f}"), ("rows/step", "{:.1f}"), ("step ms", "{:.2f}"),
                ("in steps", "{:.0%}"), ("CPU server / client", "", "r"), "errors")  # fmt: skip
    for (mode, k, c), w in sorted(cells.items(), key=lambda x: (MODES.index(x[0][0]), x[0][1], x[0][2])):
        steps, m = w.metrics.get("s2s_batch_size_count", 0), w.metrics
        rows = m["s2s_batch_size_sum"] / steps if steps else None
        step_ms = 1000 * m["s2s_decode_step_duration_seconds_sum"] / steps if steps else None
        busy = m["s2s_decode_step_duration_seconds_sum"] / (w.seconds * k) if steps else None
        cpu = f"{100 * sum(w.cpu_s.values()) / w.seconds:.0f}% / {100 * w.client_s / w.seconds:.0f}%"
        errors = ", ".join(f"{e} {n}" for e, n in sorted(w.errors.items())) or "0"
        lat = [pct(w.latencies, q) * 1e3 for q in (50, 95, 99)]
        t.row(
            mode,
            c,
            w.answers,
            k,
            w.seconds,
            w.rps,
            w.tps,
            *lat,
            pct(w.ttfts, 50) * 1e3,
            rows,
            step_ms,
            busy,
            cpu,
            errors,
        )
    r.text(
        f"Ceilings in process, no server running: the server's Scheduler (continuous, max_batch_size {args.max_batch_size}) on one Runner per process, K processes for K engine cores, fed pre-tokenized inputs by {args.ceiling_callers or max(args.concurrency)} closed-loop callers split over them, one wall window ({args.ceiling_seconds:g} s after {args.ceiling_warmup_s:g} s), best of {args.ceiling_repeats}; `engine.generate` on one core: {ceiling.n / ceiling.seconds:.1f} sequences/s ({ceiling.tokens} tokens for {ceiling.n} inputs); each input alone, median: **{ceiling.single_ms:.1f} ms**."
    )
    t = r.table(
        "ceiling_cores",
        ("engine cores", "{}"),
        ("callers", "{}"),
        ("sequences/s", "{:.1f}"),
        ("tokens/s", "{:.0f}"),
        "per core (answers)",
        ("rows/step", "{:.1f}"),
    )
    for k, cc in sorted(ceiling.cores.items()):
        t.row(
            k,
            cc.callers,
            cc.sps,
            cc.tps,
            ", ".join(map(str, cc.per_core)),
            cc.rows / cc.steps if cc.steps else None,
        )
    r.text("Notes:\n\n" + "\n".join(notes(cells, ceiling)))
    return r


def acceptance(cells: dict, ceiling) -> list[tuple]:
    top, out = max(c for _, _, c in cells), []
    ks = sorted({k for m, k, _ in cells if m == "continuous"}) or [1]
    at = lambda m, k, c: cells.get((m, k, c))  # noqa: E731
    base = at("continuous", ks[0], top)
    for k in ks[1:]:
        if (a := at("continuous", k, top)) and base:
            out.append(
                bound(
                    f"throughput {k} engine cores / {ks[0]} at C={top}",
                    a.rps / base.rps,
                    ">=",
                    0.85 * k / ks[0],
                )
            )
    for k in ks:
        if (c := at("continuous", k, top)) and (cc := ceiling.cores.get(k)):
            out.append(
                bound(f"server at C={top} / its {k} cores' in-process ceiling", c.rps / cc.sps, ">=", 0.9)
            )
        if c1 := at("continuous", k, 1):
            q = pct(c1.latencies, 50) * 1e3 / ceiling.single_ms
            out.append(bound(f"C=1 p50 / the engine's single request ({k} engine cores)", q, "<=", 1.3))
    if base and (none_ := at("none", ks[0], top)):
        out.append(bound(f"throughput continuous / none at C={top}", base.rps / none_.rps, ">=", 5))
    if conts := [w.rps for (m, k, _), w in cells.items() if m == "continuous" and k == 1]:
        out.append(
            bound(
                "saturation (best cell) / the one-core engine ceiling, sequences/s",
                max(conts) / ceiling.sps,
                ">=",
                0.7,
            )
        )
    return out


def notes(cells: dict, ceiling) -> list[str]:
    """Computed facts that bound or explain the figures."""
    out = [f"- Mean generated tokens per input: {ceiling.tokens / ceiling.n:.1f}."]
    c1 = next((w for (m, _, c), w in cells.items() if m == "continuous" and c == 1), None)
    if c1 and c1.server_s:
        lat, srv = (pct(x, 50) * 1e3 for x in (c1.latencies, c1.server_s))
        out.append(
            f"- Where the C=1 latency goes (continuous, medians): client p50 {lat:.2f} ms = the engine's single request {ceiling.single_ms:.2f} ms + {lat - ceiling.single_ms:.2f} ms; the server's own `total_seconds` (servicer entry to answer) is {srv:.2f} ms, the other {lat - srv:.2f} ms gRPC and protobuf in both processes."
        )
    busy = [
        f"{k} cores C={c} {100 * w.metrics['s2s_decode_step_duration_seconds_sum'] / (w.seconds * k):.0f}%"
        for (m, k, c), w in cells.items()
        if m == "continuous" and w.metrics
    ]
    out.append(
        f"- Share of the window an engine core spent inside decode steps, continuous: {', '.join(busy)}; {nproc()} usable CPUs, {os.cpu_count()} in all."
    )
    return out
