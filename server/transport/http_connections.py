"""The HTTP port's connections: how many may be open, how long a client may take to send a request, and
what the log says about clients that break the protocol.

aiohttp's connection handler (``web_protocol.RequestHandler``) has no cap on connections and no time
limit for a request's headers: 600 connections that each send a byte now and then hold 600 file
descriptors for as long as they like. ``Connections`` is the protocol factory the listening socket
uses instead of the runner's own; it wraps each of aiohttp's handlers in a ``_Guard`` that
- refuses a connection beyond ``--http-max-connections`` with 503 and closes it, and one beyond
  ``--http-max-connections-per-peer`` from the same client address once the port is three quarters
  full: the last quarter is kept for clients within their share, so one client that opens slow
  connections cannot take the port from everyone else (and one busy client, a load test, a proxy, may
  still use most of it);
- with TLS, counts a connection once its handshake is done (``connection_made``), not when it is
  accepted: the event loop's TLS layer never tells the protocol about a connection closed before its
  handshake finished (a load balancer's TCP probe, a port scan), and each such connection stayed
  counted against the cap for good, until the HTTPS port answered 503 to all. A handshake has
  ``--tls-handshake-timeout-s`` (the listening socket's own timeout, on asyncio's loop and uvloop alike);
  a connection is released exactly once, however it ends;
- closes a connection that has not delivered a request's headers within ``--http-read-timeout-s`` of
  opening or of its previous answer (idle keep-alive connections included); the body's own time
  limit is ``server.transport.http_body.read_body``'s.

``ProtocolLog`` is the logger aiohttp's handler writes to: a malformed request (``Content-Length: -1``,
a line too long, too many headers) or a broken connection is the client's doing and gets one
rate-limited WARNING line (``RefusalLog``) and a count, never a traceback; anything else stays an
ERROR with its traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import sys

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from server.telemetry.request_tracker import RequestTracker

log = logging.getLogger("s2s.http")


class ProtocolLog:
    """A stand-in for aiohttp's ``aiohttp.server`` logger (it calls debug and exception)."""

    def __init__(self, tracker: RequestTracker):
        self.tracker = tracker

    def debug(self, msg, *args, **kw) -> None:
        kw.pop("exc_info", None)  # aiohttp logs non-HTTP traffic (TLS to a plain port) here with a traceback
        log.debug(msg, *args, **kw)

    def info(self, msg, *args, **kw) -> None:
        log.info(msg, *args, **kw)

    def warning(self, msg, *args, **kw) -> None:
        log.warning(msg, *args, **kw)

    def error(self, msg, *args, **kw) -> None:
        log.error(msg, *args, **kw)

    def exception(self, msg, *args, exc_info=True, **kw) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError):
            reason = " ".join(str(getattr(exc, "message", exc) or type(exc).__name__).split())[:200]
            self.tracker.refused(
                "HTTP",
                "http",
                "INVALID_ARGUMENT",
                f"{msg % args if args else msg}: malformed HTTP request ({reason})",
                "HTTP_PROTOCOL",
            )
        elif isinstance(exc, (ConnectionError, asyncio.CancelledError)):
            self.tracker.refused(
                "HTTP",
                "http",
                "CANCELLED",
                f"{msg % args if args else msg}: the client hung up ({type(exc).__name__})",
                "HANGUP",
            )
        else:
            log.error(msg, *args, exc_info=exc_info, **kw)


def _refusal(status: str, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body


class Connections:
    """The listening socket's protocol factory: aiohttp's handler per connection, capped and timed."""

    def __init__(
        self,
        max_connections: int,
        read_timeout_s: float,
        tracker: RequestTracker,
        per_peer: int = 0,
        tls: ssl.SSLContext | None = None,
        handshake_timeout_s: float = 10.0,
    ):
        self.handlers: web.Server | None = None  # set once the runner is set up
        self.max, self.read_timeout_s = max_connections, read_timeout_s
        self.per_peer, self.tls, self.handshake_timeout_s = per_peer, tls, handshake_timeout_s
        self.tracker = tracker
        self.open = 0
        self.peers: dict[str, int] = {}  # client address -> its connections open
        self.guards: dict[
            object, _Guard
        ] = {}  # aiohttp's handler -> its guard (the middleware knows the handler)
        self.active = 0  # requests in a handler now
        self.idle = asyncio.Event()
        self.idle.set()

    def __call__(self) -> asyncio.Protocol:
        # Counted here, not in connection_made: asyncio accepts a burst of connections (and calls this for each)
        # before any of them is told it is connected. With TLS, in connection_made (after the handshake): a
        # connection that never finishes its handshake never reaches the protocol again, to be released.
        if self.tls:
            return _Guard(self, self.handlers())
        if self.max and self.open >= self.max:
            return _Refuse(self)
        self.open += 1
        return _Guard(self, self.handlers())

    def over_share(self, peer: str) -> bool:
        """A new connection of ``peer`` (counted already) goes over its share while the last quarter of the port
        is all that is free."""
        return bool(
            self.per_peer
            and self.max
            and self.peers.get(peer, 0) > self.per_peer
            and self.open > self.max * 3 // 4
        )

    # ---- called by the middleware around every request -------------------------------------------
    def started(self, protocol: object) -> None:
        self.active += 1
        self.idle.clear()
        guard = self.guards.get(protocol)
        if guard is not None:
            guard.requests += 1
            guard.disarm()

    def finished(self, protocol: object) -> None:
        self.active -= 1
        if not self.active:
            self.idle.set()
        guard = self.guards.get(protocol)
        if guard is not None:
            guard.requests -= 1
            if not guard.requests:
                guard.arm()


class _Refuse(asyncio.Protocol):
    """A connection over the cap: 503 at once, then closed."""

    def __init__(self, owner: Connections):
        self.owner = owner

    def connection_made(self, transport) -> None:
        self.owner.tracker.refused(
            "HTTP",
            "http",
            "RESOURCE_EXHAUSTED",
            f"HTTP: {self.owner.open} connections open, "
            f"the limit is {self.owner.max} (--http-max-connections): refused one",
        )
        transport.write(
            _refusal(
                "503 Service Unavailable",
                f"too many connections open ({self.owner.max}, --http-max-connections); retry",
            )
        )
        transport.close()


class _Guard(asyncio.Protocol):
    """aiohttp's handler for one connection, with a timer for the headers of its next request."""

    def __init__(self, owner: Connections, handler: asyncio.Protocol):
        self.owner, self.handler = owner, handler
        self.transport = None
        self.timer: asyncio.TimerHandle | None = None
        self.requests = 0  # requests of this connection in a handler now
        self.received = False  # bytes of a next request arrived while no request was in a handler
        self.peer: str | None = None
        self.released = False
        self.connected = False  # aiohttp's handler was told of the connection (after the handshake, with TLS)

    def connection_made(self, transport) -> None:
        owner = self.owner
        if owner.tls:  # counted now, its handshake done
            if owner.max and owner.open >= owner.max:
                self.released = True  # never counted
                _Refuse(owner).connection_made(transport)  # 503 over TLS, then closed
                return
            owner.open += 1
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        owner.peers[self.peer] = owner.peers.get(self.peer, 0) + 1
        if owner.over_share(self.peer):
            held = owner.peers[self.peer] - 1
            owner.tracker.refused(
                "HTTP",
                "http",
                "RESOURCE_EXHAUSTED",
                f"HTTP: {self.peer} holds {held} connections, "
                f"its share is {owner.per_peer} (--http-max-connections-per-peer) and the port is "
                "three quarters full: refused one",
                "HTTP_PEER_SHARE",
            )
            transport.write(
                _refusal(
                    "503 Service Unavailable",
                    f"this client address holds {held} connections, "
                    f"over its share of {owner.per_peer} (--http-max-connections-per-peer), "
                    "and the rest of the port is kept for other clients; retry",
                )
            )
            self._release()  # at once: a flood from one address must not fill the port's cap while it closes
            transport.close()
            return
        self._connected(transport)

    def _connected(self, transport) -> None:
        self.transport = transport
        self.connected = True
        self.owner.guards[self.handler] = self
        self.handler.connection_made(transport)
        self.arm()

    def _release(self) -> None:
        if self.released:
            return
        self.released = True
        owner = self.owner
        owner.open -= 1
        if self.peer is not None:
            left = owner.peers.get(self.peer, 1) - 1
            if left:
                owner.peers[self.peer] = left
            else:
                owner.peers.pop(self.peer, None)

    def connection_lost(self, exc) -> None:
        self._release()
        self.owner.guards.pop(self.handler, None)
        self.disarm()
        if self.connected:
            self.handler.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.connected:  # refused: nothing of it is read
            return
        if not self.requests:
            self.received = True
        self.handler.data_received(data)

    def eof_received(self):
        return self.handler.eof_received() if self.connected else None

    def pause_writing(self) -> None:
        self.handler.pause_writing()

    def resume_writing(self) -> None:
        self.handler.resume_writing()

    def arm(self) -> None:
        self.disarm()
        self.received = False
        if self.owner.read_timeout_s and self.transport is not None:
            self.timer = asyncio.get_running_loop().call_later(self.owner.read_timeout_s, self._expired)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        if self.requests or self.transport is None:
            return
        if self.received:  # part of a request came, not the whole of its headers: a slow or stuck client
            self.owner.tracker.refused(
                "HTTP",
                "http",
                "DEADLINE_EXCEEDED",
                f"HTTP: no whole request within "
                f"{self.owner.read_timeout_s:g} s (--http-read-timeout-s); connection closed",
                "HTTP_READ_TIMEOUT",
            )
            self.transport.write(
                _refusal(
                    "408 Request Timeout",
                    "the request's headers did not arrive within "
                    f"{self.owner.read_timeout_s:g} s (--http-read-timeout-s)",
                )
            )
        self.transport.close()  # an idle keep-alive connection: closed quietly, as keep-alive timeouts are
