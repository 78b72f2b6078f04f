"""``s2s models list|load|unload``: the model repository API (KServe/Triton gRPC, ``RepositoryIndex``,
``RepositoryModelLoad``, ``RepositoryModelUnload``) for people without tritonclient."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("list", "load", "unload"),
        help="list: every model of the repository and its state; load: load (or reload: the latest or pinned "
        "version takes over once it answers) a model; unload: stop serving it (needs "
        "--model-control-mode explicit on the server)",
    )
    p.add_argument("name", nargs="?", help="model name (load, unload)")
    p.add_argument("--server", default="localhost:8001", help="HOST:PORT of the gRPC port")
    p.add_argument("--ready", action="store_true", help="list: only the versions ready to serve")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait (a load starts processes)")
    p.add_argument("--token", default=None, help="bearer token, if the server requires one")
    p.add_argument("--tls-ca", default=None, help="PEM CA to verify a TLS server")


def run(args: argparse.Namespace) -> int:
    import grpc  # here, not at the top: `s2s --help` and the other commands build this parser too

    from protos.inference import grpc_service_pb2 as pb
    from protos.inference import grpc_service_pb2_grpc as pb_grpc

    if args.action != "list" and not args.name:
        print(f"s2s models {args.action}: name the model", file=sys.stderr)
        return 2
    if args.tls_ca:
        channel = grpc.secure_channel(
            args.server, grpc.ssl_channel_credentials(Path(args.tls_ca).read_bytes())
        )
    else:
        channel = grpc.insecure_channel(args.server)
    metadata = (("authorization", f"Bearer {args.token}"),) if args.token else ()
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    try:
        if args.action == "list":
            index = stub.RepositoryIndex(
                pb.RepositoryIndexRequest(ready=args.ready), timeout=args.timeout, metadata=metadata
            )
            for m in index.models:
                print("\t".join((m.name, m.version or "-", m.state, m.reason)).rstrip())
        elif args.action == "load":
            stub.RepositoryModelLoad(
                pb.RepositoryModelLoadRequest(model_name=args.name), timeout=args.timeout, metadata=metadata
            )
            print(f"{args.name}: loaded")
        else:
            stub.RepositoryModelUnload(
                pb.RepositoryModelUnloadRequest(model_name=args.name), timeout=args.timeout, metadata=metadata
            )
            print(f"{args.name}: unloaded")
    except grpc.RpcError as e:
        print(f"s2s models {args.action}: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    finally:
        channel.close()
    return 0
