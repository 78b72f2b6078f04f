"""python -m bench {engine,serve,peers,quality,profile,render} [--quick] [options]

The benchmarks behind docs/BENCHMARKS.md, each an axis grid on one harness (bench/harness/): one way to start a
server or a peer and read its CPU per process, one closed-loop load driver with sides taking turns (ABBA), cached
inputs and conversions, one results schema (docs/bench/<name>.json) and one renderer of docs/BENCHMARKS.md.

  engine   decode speed in process: the engine / CTranslate2 / PyTorch x greedy / beam x float32 / int8 x batch,
           on forced-length or real (EOS-stopped) inputs, a repository model or an imported checkpoint
           (--model-family); int8's accuracy                      -> decode-grid, decode-real, marian-ct2
  serve    `s2s serve` under closed-loop load: batching modes x engine cores x concurrency against the engine
           cores' in-process ceiling and CTranslate2; CPU per request by process; what each decoding-option
           family costs (and the no-option path against another commit's server)  -> serve, serve-cost, options;
           --only fairness: a small /translate's wait while clients send long inputs (printed only)
  peers    `s2s serve` beside the servers users would build instead (CTranslate2 behind grpc.aio per request
           or micro-batched, PyTriton + CTranslate2), same weights, inputs and client  -> serve-peers
  quality  protected spans and long inputs through the server; the addition model on all 10^6 pairs
                                                                  -> protected-spans, addition-exhaustive
  profile  one decoder step per operator and per node (ONNX Runtime's profiler), by cached length -> profile-step
  render   docs/BENCHMARKS.md from docs/bench/ (--check: exit 1 when it is not what they render to)

A run writes docs/bench/<name>.json and renders docs/BENCHMARKS.md again; --quick is a tiny run that checks the
benchmark works and writes nothing unless given --results DIR. Run full grids on an otherwise idle machine.
`python -m bench <command> --help` lists each command's axes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from bench import RESULTS

COMMANDS = ("engine", "serve", "peers", "quality", "profile")


def parser() -> argparse.ArgumentParser:
    top = __doc__.split("\n\n")
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="\n\n".join(top[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.commands = {}
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join((*COMMANDS, "render")) + "}")
    for name in COMMANDS:
        module = importlib.import_module(f"bench.{name}")
        doc = module.__doc__ or ""
        s = sub.add_parser(
            name,
            help=doc.split("\n")[0],
            description=doc,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(s)
        s.add_argument(
            "--quick", action="store_true", help="a tiny run that checks it works; writes only to --results"
        )
        s.add_argument(
            "--results", type=Path, help=f"results folder (default: {RESULTS}, rendered to the docs)"
        )
        s.set_defaults(module=module)
        p.commands[name] = s
    r = sub.add_parser(
        "render",
        help="docs/BENCHMARKS.md from docs/bench/",
        description="docs/BENCHMARKS.md from docs/bench/",
    )
    r.add_argument("--results", type=Path, default=RESULTS, help="folder of the results and notes")
    r.add_argument("--output", type=Path, default=None, help="the rendered file (default docs/BENCHMARKS.md)")
    r.add_argument(
        "--check", action="store_true", help="exit 1 when the results or the rendered file are wrong"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if getattr(args, "quick", False) and hasattr(args.module, "QUICK"):
        p.commands[args.command].set_defaults(**args.module.QUICK)  # smaller defaults; flags given still win
        args = p.parse_args(argv)
    from bench.harness import render

    if args.command == "render":
        output = args.output or render.DOC
        if args.check:
            problems = render.check(args.results, output)
            print("\n".join(problems) or "up to date", file=sys.stderr)
            return 1 if problems else 0
        print(f"wrote {render.write(args.results, output)}", file=sys.stderr)
        return 0
    results = args.results or (None if args.quick else RESULTS)
    reports = args.module.run(args)
    for report in reports:
        print(report.markdown())
        if results is not None:
            report.save(results)
    if results is not None and Path(results).resolve() == RESULTS.resolve():
        print(f"wrote {render.write()}", file=sys.stderr)
    return 0 if all(not r.figures.get("failed") for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
