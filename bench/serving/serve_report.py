"""The serving-under-load report of bench.serving.serve: its tables, headline and acceptance figures, and notes."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import sys
from pathlib import Path

import grpc

from bench import ROOT
from bench.common.machine import cpu_model, nproc
from bench.common.report import Report
from bench.serving.ceilings import Ceiling
from bench.serving.load import Cell, pct


def machine() -> str:
    return f"{os.cpu_count()} CPUs (nproc {nproc()}), {cpu_model()}, Python {platform.python_version()}"


def versions() -> str:
    import onnxruntime

    return f"onnxruntime {onnxruntime.__version__}, grpcio {grpc.__version__}"


def ms(x: float) -> str:
    return "n/a" if x != x else f"{1000 * x:.1f}"


def table(report: Report, cells: list[Cell]) -> None:
    """The windows, one row per (batching mode, engine cores, concurrency)."""

    def opt(x: float | None, scale: float = 1.0):  # "n/a" where the window had no such figure
        return "n/a" if x is None or x != x else scale * x

    t = report.table(
        "windows",
        "batching",
        ("C", "{}"),
        ("answers", "{}"),
        ("instances", "{}"),
        ("window s", "{:.1f}"),
        ("req/s", "{:.1f}"),
        ("tok/s", "{:.0f}"),
        ("p50 ms", "{:.1f}"),
        ("p95 ms", "{:.1f}"),
        ("p99 ms", "{:.1f}"),
        ("TTFT p50 ms", "{:.1f}"),
        ("rows/step", "{:.1f}"),
        ("step ms", "{:.2f}"),
        ("in steps", "{:.0%}"),
        ("CPU server / client", "", "r"),
        "errors",
    )
    for c in cells:
        err = ", ".join(f"{k} {v}" for k, v in sorted(c.errors.items())) or "0"
        t.row(
            c.mode,
            c.conc,
            c.answers,
            c.instances,
            c.window_s,
            c.rps,
            c.tps,
            opt(c.lat(50), 1000),
            opt(c.lat(95), 1000),
            opt(c.lat(99), 1000),
            opt(pct(c.ttfts, 50), 1000),
            opt(c.rows_per_step),
            opt(c.step_ms),
            opt(c.busy),
            f"{100 * c.server_cpu:.0f}% / {100 * c.client_cpu:.0f}%",
            err,
        )


def verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def inst(k: int) -> str:
    return f"{k} instance{'s' if k != 1 else ''}"


def headline(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    """The serving-core acceptance figures (continuous batching): instance scaling, server / own cores' ceiling,
    C=1 latency / single request, and the ratio to CTranslate2."""
    by = {(c.mode, c.instances, c.conc): c for c in cells}
    top = max((c.conc for c in cells), default=0)
    ks = sorted({c.instances for c in cells if c.mode == "continuous"})
    rows = ["| figure (continuous batching) | value | target | |", "|---|---|---|---|"]
    if not ks:
        return rows + ["| (needs the continuous mode) | | | |"]
    base = by.get(("continuous", ks[0], top))
    for k in ks[1:]:
        c = by.get(("continuous", k, top))
        if c and base:
            r, want = ratio(c.rps, base.rps), 0.85 * k / ks[0]
            rows.append(
                f"| throughput {inst(k)} / {inst(ks[0])} at C={top} | {c.rps:.1f} / {base.rps:.1f} req/s = **{r:.2f}×** "
                f"(tokens {ratio(c.tps, base.tps):.2f}×) | ≥ {want:.2f}× | {verdict(r >= want)} |"
            )
    for k in ks:
        c, cc = by.get(("continuous", k, top)), ceiling.cores.get(k) if ceiling else None
        if c and cc:
            r = ratio(c.rps, cc.sps)
            rows.append(
                f"| server at C={top} / own cores' ceiling ({inst(k)}; {k} in-process engine core{'s' if k > 1 else ''}, "
                f"{cc.callers} callers) | {c.rps:.1f} / {cc.sps:.1f} sequences/s = **{100 * r:.0f}%** "
                f"(tokens {100 * ratio(c.tps, cc.tps):.0f}%) | ≥ 90% | {verdict(r >= 0.9)} |"
            )
    for k in ks:
        c1 = by.get(("continuous", k, 1))
        if c1 and ceiling:
            r = ratio(1000 * c1.lat(50), ceiling.single_ms)
            rows.append(
                f"| C=1 p50 latency / engine single request ({inst(k)}) | {ms(c1.lat(50))} / {ceiling.single_ms:.1f} ms = "
                f"**{r:.2f}×** | ≤ 1.3× | {verdict(r <= 1.3)} |"
            )
    ct2 = ceiling.ct2 if ceiling else None
    for k in ks:
        c = by.get(("continuous", k, top))
        if c and ct2:
            bs, it = ct2.best
            rows.append(
                f"| server at C={top} / CTranslate2 in process ({inst(k)}; CTranslate2 max_batch_size {bs}, "
                f"inter_threads {it}) | {c.rps:.1f} / {ct2.sps:.1f} sequences/s = **{ratio(c.rps, ct2.sps):.2f}×** | "
                "none (printed) | |"
            )
    if ceiling and ct2 is None:
        rows.append(f"| server / CTranslate2 in process | {ceiling.ct2_note} | none (printed) | |")
    return rows


def acceptance(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    """The batching-mode figures, at the smallest instance count."""
    k0 = min((c.instances for c in cells), default=1)
    by = {(c.mode, c.conc): c for c in cells if c.instances == k0}
    top = max((c.conc for c in cells), default=0)
    rows = ["| figure | value | target | |", "|---|---|---|---|"]
    cont, none_, req = by.get(("continuous", top)), by.get(("none", top)), by.get(("request", top))
    if cont and none_:
        r = ratio(cont.rps, none_.rps)
        rows.append(
            f"| throughput continuous / none at C={top} | {cont.rps:.1f} / {none_.rps:.1f} req/s = **{r:.2f}×** "
            f"(tokens: {ratio(cont.tps, none_.tps):.2f}×) | ≥ 5× | {verdict(r >= 5)} |"
        )
    if cont and req:
        r = ratio(cont.lat(99), req.lat(99))
        rows.append(
            f"| p99 latency continuous / request at C={top} | {ms(cont.lat(99))} / {ms(req.lat(99))} ms = **{r:.2f}×** "
            f"(p50 {ratio(cont.lat(50), req.lat(50)):.2f}×) | none set (< 1×: continuous has the shorter tail) | "
            f"{'continuous lower' if r < 1 else 'continuous higher'} |"
        )
    conts = [c for (m, _), c in by.items() if m == "continuous"]
    if conts and ceiling and k0 == 1:
        sat = max(conts, key=lambda c: c.tps)
        r_t, r_s = ratio(sat.tps, ceiling.tps), ratio(sat.rps, ceiling.sps)
        rows.append(
            f"| saturation / one-core engine ceiling (continuous, 1 instance, best cell C={sat.conc}) | tokens "
            f"{sat.tps:.0f} / {ceiling.tps:.0f} tok/s = **{100 * r_t:.0f}%**; sequences {sat.rps:.1f} / {ceiling.sps:.1f} /s = "
            f"**{100 * r_s:.0f}%**"
            + (
                f" (at C={top}: {100 * ratio(cont.tps, ceiling.tps):.0f}% / {100 * ratio(cont.rps, ceiling.sps):.0f}%)"
                if cont and cont is not sat
                else ""
            )
            + f" | ≥ 70% | {verdict(r_t >= 0.7 and r_s >= 0.7)} |"
        )
    if ceiling:
        for mode in ("request", "none"):
            c = by.get((mode, 1))
            if c:
                rows.append(
                    f"| C=1 p50 latency / engine single request ({mode}) | {ms(c.lat(50))} / {ceiling.single_ms:.1f} ms = "
                    f"{ratio(1000 * c.lat(50), ceiling.single_ms):.2f}× | (reference) | |"
                )
    return rows


def notes(cells: list[Cell], ceiling: Ceiling | None) -> list[str]:
    """Computed facts that bound or explain the acceptance figures."""
    out = []
    k0 = min((c.instances for c in cells), default=1)
    by = {(c.mode, c.instances, c.conc): c for c in cells}
    top = max((c.conc for c in cells), default=0)
    if ceiling:
        out.append(
            f"- Mean generated tokens per input: {ceiling.tokens / ceiling.n:.1f} ({ceiling.tokens} / {ceiling.n})."
        )
        none_ = by.get(("none", k0, top))
        if none_ and none_.rps and k0 == 1:
            out.append(
                f"- Upper bound of continuous / none at C={top} (1 instance) if the server reached the one-core "
                f"engine ceiling: {ceiling.sps:.1f} / {none_.rps:.1f} = {ceiling.sps / none_.rps:.2f}×."
            )
        for k, cc in sorted(ceiling.cores.items()):
            c = by.get(("continuous", k, top))
            if c and c.rows_per_step and cc.rows_per_step:
                out.append(
                    f"- Rows per decode step at C={top}, {inst(k)}: server {c.rows_per_step:.1f}, in-process cores "
                    f"{cc.rows_per_step:.1f}; CPU of the server's processes (front end and cores) "
                    f"{100 * c.server_cpu:.0f}% and of the client {100 * c.client_cpu:.0f}% (100% = one CPU core; "
                    f"{nproc()} usable)."
                )
    per_row = [
        f"{inst(c.instances)} C={c.conc} {c.step_ms / c.rows_per_step:.3f}"
        for c in cells
        if c.mode == "continuous" and c.step_ms and c.rows_per_step
    ]
    if per_row:
        out.append(f"- Decode-step time per row, continuous (ms): {', '.join(per_row)}.")
    c1 = by.get(("continuous", k0, 1))
    if c1 and ceiling and c1.rtt_s and c1.server_s:
        lat, srv, rtt = 1000 * c1.lat(50), 1000 * pct(c1.server_s, 50), 1000 * pct(c1.rtt_s, 50)
        out.append(
            f"- Where the C=1 latency goes (continuous, {inst(k0)}, medians): client p50 {lat:.2f} ms = engine single "
            f"request {ceiling.single_ms:.2f} ms + {lat - ceiling.single_ms:.2f} ms. The server's own `total_seconds` "
            f"(servicer entry to answer: validation and tokenization, the pipe to the engine core and back, "
            f"decoding) is {srv:.2f} ms, {srv - ceiling.single_ms:.2f} ms above the engine; the other {lat - srv:.2f} ms "
            f"is gRPC and protobuf in both processes. A bare round trip that does no inference (ListModels, "
            f"{len(c1.rtt_s)} calls) takes {rtt:.2f} ms p50 on its own, i.e. {rtt / ceiling.single_ms:.2f}× of the "
            f"engine's single-request time before any work is done."
        )
    busy = [
        f"{inst(c.instances)} C={c.conc} {100 * c.busy:.0f}%"
        for c in cells
        if c.mode == "continuous" and c.busy is not None
    ]
    if busy:
        out.append(
            f"- Share of the window an engine core's step loop spent inside decode steps (mean of the cores), "
            f"continuous: {', '.join(busy)} (the rest: admission, i.e. encoder and cache growth, reporting over "
            "the pipe, plus waiting for work or for the GIL)."
        )
    return out


def ceiling_text(args, ceiling: Ceiling) -> list[str]:
    lines = [
        f"Ceilings, in process with no server running (same bundle and inputs, {args.intra_op_threads} intra-op thread per "
        f"engine). **Own cores' ceiling** (what \"server / own cores' ceiling\" divides by): the server's scheduler in "
        f"process, i.e. its `Scheduler` (continuous, max_batch_size {args.max_batch_size}, step loop and encoder thread) on "
        f"one `Runner` per process, K processes (multiprocessing spawn) for K instances, fed pre-tokenized inputs by "
        f"{ceiling.callers} closed-loop callers split over the K processes (one caller thread per process, fed by the "
        f"scheduler's sink: no gRPC, no pipe, no tokenization); all K over the same wall window ({args.ceiling_warmup_s:g} s "
        f"warm-up, then {args.ceiling_seconds:g} s), answers finished inside it summed, best of {args.ceiling_repeats}:",
        "",
        "| engine cores | callers | sequences/s | tokens/s | per core (answers) | rows/step |",
        "|---:|---:|---:|---:|---|---:|",
    ]
    for k, cc in sorted(ceiling.cores.items()):
        lines.append(
            f"| {k} | {cc.callers} | {cc.sps:.1f} | {cc.tps:.0f} | {', '.join(map(str, cc.per_core))} | "
            f"{'n/a' if cc.rows_per_step is None else f'{cc.rows_per_step:.1f}'} |"
            + (f" ({cc.errors} failed)" if cc.errors else "")
        )
    lines += [
        "",
        f"One core, `bench.baselines.generate(Translator(bundle), inputs, batch_size={args.max_batch_size})` on the {ceiling.n} inputs, "
        f"best of {args.ceiling_repeats}: {ceiling.seconds:.2f} s = **{ceiling.gen_sps:.1f} sequences/s, {ceiling.gen_tps:.0f} "
        f"tokens/s** ({ceiling.tokens} generated tokens); the 1-instance saturation row below uses the faster of this and the "
        f"1-core figure above ({ceiling.sps:.1f} sequences/s). Single request (batch 1, in process, timed after each "
        f"concurrency-1 round on the inputs that round sent), median of {ceiling.single_n} timings: "
        f"**{ceiling.single_ms:.1f} ms**.",
        "",
    ]
    ct2 = ceiling.ct2
    if ct2:
        bs, it = ct2.best
        lines += [
            f"CTranslate2 in process (reference): the checkpoint converted by `export/ctranslate2.py` "
            f"(`{os.path.relpath(ct2.model_dir, ROOT) if Path(ct2.model_dir).is_relative_to(ROOT) else ct2.model_dir}`, "
            f"float32), `translate_batch` of {ct2.n} inputs (the {ceiling.n} above, cycled; tokenized by the bundle's "
            f"tokenizer outside the timing), greedy, stopped at EOS, max_decoding_length {ct2.max_decoding_length} (the "
            f"engine's budget), intra_threads 1, batch_type examples (its own length sorting); best of "
            f"{args.ceiling_repeats} each. Outputs identical to the engine's on {ct2.identical} of {ct2.compared} inputs"
            + (f"; note: {ct2.note}" if ct2.note else "")
            + ".",
            "",
            "| max_batch_size | inter_threads | sequences/s |",
            "|---:|---:|---:|",
            *[
                f"| {b} | {i} | {'**' if (b, i) == ct2.best else ''}{ct2.n / s:.1f}{'**' if (b, i) == ct2.best else ''} |"
                for (b, i), s in sorted(ct2.runs.items())
            ],
            "",
            f"Best: max_batch_size {bs}, inter_threads {it}: **{ct2.sps:.1f} sequences/s, {ct2.tps:.0f} tokens/s**.",
            "",
        ]
    else:
        lines += [f"CTranslate2 in process: {ceiling.ct2_note}.", ""]
    return lines


def section(
    args,
    cells: list[Cell],
    ceiling: Ceiling | None,
    inputs: list[str],
    inputs_path: Path,
    bundle: Path,
    started: dt.datetime,
    load_before: str,
    elapsed: float,
) -> Report:
    cmd = " ".join(["python -m bench.serving.serve", *(shlex.quote(a) for a in sys.argv[1:])])
    k0 = min(args.instances)
    lines = [
        "## Serving under load (`bench/serving/serve.py`)",
        "",
        "Acceptance (serving core, engine cores as processes):",
        "",
        *headline(cells, ceiling),
        "",
        f"- Date: {started:%Y-%m-%d %H:%M} UTC; run took {elapsed / 60:.1f} min",
        f"- Machine: {machine()}; {versions()}; load average before the run: {load_before}",
        f"- Command: `{cmd}`",
        f"- Model: `{args.model}` (`{os.path.relpath(bundle, ROOT) if bundle.is_relative_to(ROOT) else bundle}`), "
        f"inputs: {len(inputs)} held-out sentences from `{os.path.relpath(inputs_path, ROOT) if inputs_path.is_relative_to(ROOT) else inputs_path}`, "
        "one per Generate request, cycled in file order; greedy, model default max_new_tokens",
        f"- Servers: a separate `s2s serve` process per variant, all started up front, on 127.0.0.1: continuous batching "
        f"with `--instances` {', '.join(map(str, args.instances))} (engine-core processes), "
        f"{' and '.join(m for m in args.modes if m != 'continuous') or 'no other mode'} with `--instances {k0}`; "
        f"`--max-batch-size {args.max_batch_size} --max-queue-size {args.max_queue_size} --intra-op-threads "
        f"{args.intra_op_threads}`, request mode `--max-queue-delay-ms {args.queue_delay_ms:g}`; client: grpc.aio in the "
        "bench process, one channel, C closed-loop workers",
        f"- Cell: {args.rounds} window(s) per variant and C, interleaved (round r runs the variants in an order rotated by r) "
        "and pooled, so that this VM's drift over minutes does not land on one variant. Window: warm-up of max(C, 8) "
        f"answers or {args.warmup_s:g} s, then max({args.requests_per_worker}·C, "
        f"{args.min_requests}) answers (but at least {args.min_seconds:g} s) or {args.seconds:g} s, whichever first. req/s and tok/s = answers (their "
        "`output_tokens`) inside the window / window length. Latency = client-side send→answer of every request sent "
        "inside the window (in-flight ones drained, not cancelled). TTFT = server-side "
        "`timings.time_to_first_token_seconds` of the unary Generate response (arrival at the servicer → first token). "
        "rows/step, step ms and in steps (share of the window a core spent inside decode steps, mean of the cores): the "
        "server's `s2s_batch_size` and `s2s_decode_step_duration_seconds` histograms (all cores) over the window. CPU: the "
        "server's processes' (front end and engine cores) and this (client) process's CPU time over the window (100% = one "
        "core).",
    ]
    report = Report("serve")
    report.add_markdown("\n".join(lines), ("acceptance",))
    table(report, cells)
    lines = ceiling_text(args, ceiling) if ceiling else []
    acc = acceptance(cells, ceiling)
    if len(acc) == 2:
        acc.append("| (needs the continuous, request and none modes) | | | |")
    lines += [f"Batching modes ({inst(k0)}; their acceptance figures):", "", *acc, ""]
    if nts := notes(cells, ceiling):
        lines += ["Notes:", "", *nts]
    report.add_markdown(
        "\n".join(lines),
        (("ceiling_cores", "ct2") if ceiling and ceiling.ct2 else ("ceiling_cores",) if ceiling else ())
        + ("batching_acceptance",),
    )
    return report
