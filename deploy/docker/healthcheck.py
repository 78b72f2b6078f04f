#!/usr/bin/env python3
"""Container health check: exit 0 only if the server's gRPC health service answers SERVING.

Used by the server image's HEALTHCHECK and by docker-compose. Kubernetes does not need it: its
native `grpc:` probes call the same grpc.health.v1.Health/Check.

    python healthcheck.py [--addr HOST:PORT] [--service NAME] [--timeout SECONDS]

The address defaults to 127.0.0.1:$S2S_PORT (8001); the service to "" (the server as a whole).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--addr", default=f"127.0.0.1:{os.environ.get('S2S_PORT', '8001')}")
    p.add_argument("--service", default="", help='health service name; "" = overall server health')
    p.add_argument("--timeout", type=float, default=3.0, help="seconds for the whole check")
    args = p.parse_args(argv)

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        with grpc.insecure_channel(args.addr) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
    except grpc.RpcError as e:
        print(f"unhealthy: {args.addr}: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        print(f"unhealthy: {args.addr}: {status}", file=sys.stderr)
        return 1
    print(f"healthy: {args.addr}: {status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
