"""The /metrics port: Prometheus text for scrapers, on threads of its own, that slow clients cannot starve.

prometheus_client's ``start_http_server`` starts a thread per connection with no cap. A pool of workers
that each read a request and answer it is bounded, but four connections that trickle a byte every few
seconds held all four workers (and a scrape waited 10 s). Here one thread reads every connection's request
head with a selector, without blocking on any; only a whole head goes to a worker, which renders and sends
the answer (milliseconds). A connection has ``timeout_s`` in all to send its head; when ``max_connections``
are waiting, a new one takes the place of the one that has waited longest, so connections that never finish
cannot keep a scraper out.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

log = logging.getLogger("s2s.metrics")

MAX_HEAD_BYTES = 16 * 1024


class MetricsServer:
    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        *,
        workers: int = 4,
        max_connections: int = 32,
        timeout_s: float = 10.0,
    ):
        self.registry, self.max, self.timeout_s = registry, max_connections, timeout_s
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(128)
        self.sock.setblocking(False)
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="metrics")
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ, None)
        self.pending: dict[socket.socket, tuple[float, bytearray]] = {}  # insertion order: oldest first
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="metrics-accept", daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _serve(self) -> None:
        while not self.stopped.is_set():
            for key, _ in self.selector.select(0.5):
                try:
                    if key.fileobj is self.sock:
                        self._accept()
                    else:
                        self._read(key.fileobj)
                except Exception:  # one connection's trouble must never stop the port
                    log.warning("metrics: a connection failed", exc_info=True)
            now = time.monotonic()
            for conn, (since, _) in list(self.pending.items()):
                if now - since > self.timeout_s:
                    self._drop(conn)

    def _accept(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        if len(self.pending) >= self.max:
            self._drop(next(iter(self.pending)))  # the one that has waited longest makes room
        conn.setblocking(False)
        self.pending[conn] = (time.monotonic(), bytearray())
        self.selector.register(conn, selectors.EVENT_READ, None)

    def _read(self, conn: socket.socket) -> None:
        if conn not in self.pending:  # dropped earlier in this round (made room for a newer one)
            return
        try:
            data = conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        since, head = self.pending[conn]
        head += data
        if not data or len(head) > MAX_HEAD_BYTES:
            self._drop(conn)
        elif b"\r\n\r\n" in head or b"\n\n" in head:
            self.selector.unregister(conn)
            del self.pending[conn]
            self.pool.submit(self._answer, conn, bytes(head))

    def _drop(self, conn: socket.socket) -> None:
        self.pending.pop(conn, None)
        try:
            self.selector.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()

    def _answer(self, conn: socket.socket, head: bytes) -> None:
        try:
            lines = head.decode("latin-1").split("\n")
            method = lines[0].split(" ", 1)[0]
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:]) if v
            }
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"GET /metrics\n"
            else:
                encoder, ctype = choose_encoder(headers.get("accept", ""))
                status, body = "200 OK", encoder(self.registry)
            reply = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode() + (body if method != "HEAD" else b"")
            conn.setblocking(True)
            conn.settimeout(self.timeout_s)
            conn.sendall(reply)
        except OSError:  # the scraper went away or timed out: nothing to report
            pass
        except Exception:
            log.warning("a metrics request failed", exc_info=True)
        finally:
            conn.close()

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        for conn in list(self.pending):
            self._drop(conn)
        self.selector.close()
        self.sock.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
