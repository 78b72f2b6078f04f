"""The server's ports checked before any model loads: one that is taken is one line naming it and its flag, at once,
not a traceback after the models have loaded.

Each port is bound the way its listener binds it (``SO_REUSEADDR`` on, ``SO_REUSEPORT`` off: gRPC's own default
turns it on, which let a second server share the first's gRPC port and split its clients at random;
``server/app.py`` turns it off), then let go: a port that another process listens on fails here as it would there.
"""

from __future__ import annotations

import errno
import socket

from server.config import ServerConfig


class PortError(OSError):
    """A port the server cannot bind: the message names the port, why, and the flag that moves it."""

    def __str__(self) -> str:
        return str(self.args[0])


def _check(host: str, port: int, what: str, flag: str) -> None:
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise PortError(f"{what} address {host!r} cannot be resolved ({e.strerror}); see --host") from None
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio binds it: the IPv4 side is its own address
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    raise PortError(
                        f"{what} port {where} is in use (another server?); choose another with {flag}"
                    ) from None
                raise PortError(f"cannot bind the {what} port {where} ({e.strerror}); see {flag}") from None


def check_ports(config: ServerConfig) -> None:
    """Raises ``PortError`` for the first of the server's ports that it could not bind now (0: off, or for gRPC
    any free port), or for two of them given the same number."""
    ports = [
        ("gRPC", config.host, config.port, "--port"),
        ("HTTP", config.host, config.http_port, "--http-port"),
        ("metrics", config.metrics_host or config.host, config.metrics_port, "--metrics-port"),
    ]
    named = [p for p in ports if p[2]]
    for i, (what, _, port, flag) in enumerate(named):
        for other, _, same, other_flag in named[:i]:
            if same == port:
                raise PortError(
                    f"the {what} port and the {other} port are both {port}; give them different ones "
                    f"({other_flag}, {flag})"
                )
    for what, host, port, flag in named:
        _check(host, port, what, flag)
