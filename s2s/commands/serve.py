"""`s2s serve`: the server's options (server/config.py), its event loop, a refused start as rc 2."""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="serve a model repository: HTTP :8000 (KServe v2 REST, LibreTranslate, playground), gRPC :8001 "
        "(seq2seq.v1, KServe v2), Prometheus /metrics :8002",
        description="Serve every model of the repository (latest version unless pinned with --models) on three "
        "ports: HTTP (--http-port, default 8000: KServe v2 REST, the LibreTranslate API, the playground page), "
        "gRPC (--port, default 8001: seq2seq.v1, KServe v2, health, reflection) and Prometheus /metrics "
        "(--metrics-port, default 8002).",
    )
    from server.config import add_arguments as add_serve_arguments

    add_serve_arguments(p)
    p.set_defaults(func=run)


def run_loop(main, kind: str) -> None:
    """``asyncio.run``, on uvloop unless ``kind`` says asyncio (or auto finds no uvloop)."""
    import asyncio

    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                main.close()  # never awaited: no "coroutine was never awaited" warning on the way out
                raise SystemExit(
                    "s2s serve: --event-loop uvloop, but uvloop is not installed (pip install uvloop)"
                ) from None
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


def run(args: argparse.Namespace) -> int:
    import logging

    from server.config import from_args
    from server.transport.ports import PortError, check_ports

    config = from_args(args)
    try:  # before the server's imports (seconds): a port in use is refused at once
        check_ports(config)
    except PortError as e:
        print(f"s2s serve: {e}", file=sys.stderr)
        return 2
    from contract.bundle import BundleError
    from server.app import serve
    from server.errors import ServingError

    logging.basicConfig(
        level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run_loop(serve(config), config.event_loop)
    except (BundleError, ServingError) as e:  # a model folder refused at start (a link outside, a bad name)
        print(f"s2s serve: cannot load the model repository: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"s2s serve: {e}", file=sys.stderr)
        return 2
    return 0
