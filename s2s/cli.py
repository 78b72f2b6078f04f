"""`s2s` — one entry point, one subcommand per pipeline stage (s2s/commands/<stage>.py: its parser and its run).

Each subcommand imports its stage lazily, so `s2s serve` and `s2s client` never import torch.
"""

from __future__ import annotations

import argparse
import sys

from s2s.commands import client, evaluate, export, import_hf, serve, train


def cmd_check_po(args: argparse.Namespace) -> int:
    from s2s.check_po import run_cli

    return run_cli(args)


def cmd_translate(args: argparse.Namespace) -> int:
    from s2s.translate_catalog import run_cli

    return run_cli(args)


def cmd_models(args: argparse.Namespace) -> int:
    from s2s.models_command import run

    return run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="s2s",
        description="Train, export and serve encoder-decoder Transformers: corpus -> checkpoint (s2s train) "
        "-> ONNX bundle (s2s export) -> server (s2s serve: HTTP :8000, gRPC :8001, metrics :8002) -> answers "
        "(s2s client, s2s translate).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for command in (train, evaluate, export, import_hf, serve, client):
        command.add_parser(sub)

    from s2s import check_po, translate_catalog  # their parsers: no translate-toolkit needed for --help

    p = sub.add_parser("check-po", help=check_po.HELP, description=check_po.DESCRIPTION)
    check_po.add_arguments(p)
    p.set_defaults(func=cmd_check_po)

    p = sub.add_parser("translate", help=translate_catalog.HELP, description=translate_catalog.DESCRIPTION)
    translate_catalog.add_arguments(p)
    p.set_defaults(func=cmd_translate)

    p = sub.add_parser(
        "models",
        help="list, load or unload models of a running server (its model repository API)",
        description="The KServe/Triton model repository API over gRPC: `s2s models list`, `s2s models "
        "load NAME`, `s2s models unload NAME` (load and unload need the server's "
        "--model-control-mode explicit). Exit status 1 names the gRPC status on a failure.",
    )
    from s2s.models_command import add_arguments as add_models_arguments

    add_models_arguments(p)
    p.set_defaults(func=cmd_models)

    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
