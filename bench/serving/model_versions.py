"""What a new version of a model costs against the version it replaces: the engine's CPU per sentence in process,
and `s2s serve`'s throughput, latency, CPU per request and memory, each version at the server's defaults.

    python -m bench.serving.model_versions                       # translate-en-ja, versions 1 and 2
    python -m bench.serving.model_versions --quick               # checks that it runs; writes nothing

Inputs: the unseen projects' English strings (``data/en-ja/heldout-projects.tsv``, software no training file
draws on), as sent, one a request, each stopping at EOS. Per search (greedy, and the served default: the bundle's
own beam and length rule) and per round, the versions take turns (ABBA); on each side one `s2s serve` per
version (its defaults, the version pinned with ``--models NAME:V``) is loaded by C closed-loop tritonclient workers
over KServe v2 gRPC (``bench.serving.cost.load_window``, C = 1 and 64), then the engine decodes every input in
process on one thread (``max_batch_size`` 64 rows x beam): its CPU per sentence. Figures are medians of the
rounds; RSS is each server's front end and engine cores after the last window. Writes
docs/bench/model-versions.json and renders docs/BENCHMARKS.md. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench import ROOT
from bench.common.abba import abba
from bench.common.machine import loadavg_text, machine
from bench.common.proc_cpu import children
from bench.common.report import RESULTS, Report, publish
from bench.serving.cost import Search, engine_batch, served_window
from bench.serving.load import pct
from bench.serving.server_process import ServerProcess

NAME = "model-versions"
PROG = "python -m bench.serving.model_versions"
HELDOUT = ROOT / "data" / "en-ja" / "heldout-projects.tsv"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model-repo", type=Path, default=ROOT / "models", help="the model repository")
    p.add_argument("--model", default="translate-en-ja", help="the model whose versions are compared")
    p.add_argument("--versions", default="1,2", help="the versions, the old one first (comma-separated)")
    p.add_argument("--inputs", type=Path, default=HELDOUT, help="TSV whose first column is the inputs")
    p.add_argument("--limit-inputs", type=int, default=640, help="the first N usable inputs")
    p.add_argument("--rounds", type=int, default=2, help="rounds; the versions' order reverses every round")
    p.add_argument("--seconds", type=float, default=8.0, help="a served window's length")
    p.add_argument(
        "--concurrency", default="1,64", help="closed-loop workers per served window (comma-separated)"
    )
    p.add_argument(
        "--quick", action="store_true", help="few inputs, one round, short windows; writes nothing"
    )
    p.add_argument("--results", type=Path, default=None, help=f"write results here (default: {RESULTS})")
    args = p.parse_args(argv)
    if args.quick:
        args.limit_inputs, args.rounds, args.seconds, args.concurrency = (
            48,
            1,
            1.5,
            "1,8",
        )  # writes only where told
    elif args.results is None:
        args.results = RESULTS
    # what ServerProcess reads (its defaults=True keeps the server's own values for the rest)
    args.max_batch_size, args.max_queue_size, args.intra_op_threads, args.queue_delay_ms = 64, 1024, 1, 5
    return args


def read_inputs(path: Path, engines: list, limit: int) -> list[str]:
    """The first ``limit`` sources every version accepts as they are (no version's server would refuse one)."""
    from contract.text import UnknownCharactersError

    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        src = line.split("\t", 1)[0]
        if not src.strip():
            continue
        try:
            if all(len(e.codec.source_ids(src)) <= e.config.model.max_len for e in engines):
                out.append(src)
        except UnknownCharactersError:
            continue
        if len(out) >= limit:
            break
    return out


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def bundle_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


def run(args: argparse.Namespace, log=print) -> Report:
    import engine as engine_pkg

    versions = [v.strip() for v in args.versions.split(",")]
    concs = [int(c) for c in args.concurrency.split(",")]
    folders = {v: args.model_repo / args.model / v for v in versions}
    engines = {v: engine_pkg.load(folders[v], threads=1, device="cpu") for v in versions}
    inputs = read_inputs(args.inputs, list(engines.values()), args.limit_inputs)
    beams = {engines[v].config.task.beam_size for v in versions}
    searches = [Search("greedy", 1, {"beam_size": 1}, dict(beam_size=1), {})]
    if beams != {1}:
        searches.append(
            Search(f"served default (beam {'/'.join(map(str, sorted(beams)))})", max(beams), {}, {}, {})
        )
    log(
        f"{len(inputs)} inputs from {args.inputs.relative_to(ROOT)}; versions {versions}; load {loadavg_text()}"
    )
    served: dict[tuple, list] = {}
    in_proc: dict[tuple, list] = {}
    rss: dict[str, tuple[float, float]] = {}
    servers = {}
    try:
        for v in versions:
            ns = argparse.Namespace(**{**vars(args), "model": f"{args.model}:{v}"})
            servers[v] = ServerProcess(ns, "continuous", 0, label=f"v{v}", defaults=True).__enter__()
        for r in range(args.rounds):
            for search in searches:
                for v in abba(versions, r):
                    srv = servers[v]
                    for c in concs:
                        s = served_window(
                            srv, args.model, inputs, c, search, args.seconds, 3 * c, max(2 * c, 8)
                        )
                        served.setdefault((v, search.name, c), []).append(s)
                        log(
                            f"  v{v} {search.name} C={c}: {s.answers / s.seconds:.1f}/s, "
                            f"server {s.per(s.front_s + s.cores_s) / 1e3:.2f} ms CPU a request, "
                            f"p50 {statistics.median(s.latencies) * 1e3:.1f} ms"
                        )
                    e, _ = engine_batch(engines[v], inputs, search)
                    in_proc.setdefault((v, search.name), []).append(e)
                    log(f"  v{v} {search.name} in process: {e.cpu_us / 1e3:.2f} ms CPU a sentence")
        for v, srv in servers.items():
            cores = children(srv.proc.pid)
            rss[v] = (rss_mb(srv.proc.pid), sum(rss_mb(p) for p in cores))
    finally:
        for srv in servers.values():
            srv.__exit__(None, None, None)
    return report(args, versions, folders, engines, searches, concs, inputs, served, in_proc, rss)


def report(args, versions, folders, engines, searches, concs, inputs, served, in_proc, rss) -> Report:
    rep = Report(NAME)
    rep.heading("A model's versions side by side: what the new one costs")
    m = machine()
    rep.text(
        f"`{PROG}`: {args.model} versions {', '.join(versions)} at the server's defaults (each version its own "
        f"`s2s serve`), {len(inputs)} inputs of the unseen projects as sent, EOS-stopped; {args.rounds} rounds, "
        f"the versions taking turns (ABBA), {args.seconds:.0f} s windows, medians of the rounds; {m['nproc']} "
        f"cores ({m['cpu']}). Engine CPU: in process, one thread, batches of 64 inputs. Server CPU: front end and "
        "engine cores together, from /proc, per answer."
    )
    t = rep.table(
        "versions",
        "version",
        "layers (encoder+decoder)",
        ("d_model", "{}"),
        ("heads", "{}"),
        ("d_ff", "{}"),
        ("bundle MB", "{:.0f}"),
        ("RSS MB (front end + cores)", ""),
    )
    for v in versions:
        cfg = engines[v].config.model
        front, cores = rss[v]
        t.row(
            v,
            f"{cfg.n_encoder_layers}+{cfg.n_decoder_layers}",
            cfg.d_model,
            cfg.n_heads,
            cfg.d_ff,
            bundle_mb(folders[v]),
            f"{front:.0f} + {cores:.0f}",
        )
    old = versions[0]
    figures: dict = {}
    for search in searches:
        cols = ["version", ("engine CPU ms / sentence", "{:.2f}"), ("vs v" + old, "{:.2f}x")]
        for c in concs:
            cols += [(f"C={c} answers/s", "{:.1f}"), (f"C={c} p50 ms", "{:.1f}")]
            if c == max(concs):
                cols += [(f"C={c} p99 ms", "{:.1f}"), (f"C={c} server CPU ms / request", "{:.2f}")]
        rep.text(f"**{search.name}**")
        t = rep.table(f"cost-{search.beam}", *cols)
        base = statistics.median(e.cpu_us for e in in_proc[(old, search.name)])
        for v in versions:
            cpu = statistics.median(e.cpu_us for e in in_proc[(v, search.name)])
            row = [v, cpu / 1e3, cpu / base]
            for c in concs:
                ws = served[(v, search.name, c)]
                lat = [x for w in ws for x in w.latencies]
                row += [statistics.median(w.answers / w.seconds for w in ws), pct(lat, 50) * 1e3]
                if c == max(concs):
                    row += [
                        pct(lat, 99) * 1e3,
                        statistics.median(w.per(w.front_s + w.cores_s) for w in ws) / 1e3,
                    ]
            t.row(*row)
            figures[f"v{v} {search.name}"] = dict(zip((c if isinstance(c, str) else c[0] for c in cols), row))
    rep.figures.update(figures)
    return rep


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rep = run(args)
    print(rep.markdown())
    publish(rep, args.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
