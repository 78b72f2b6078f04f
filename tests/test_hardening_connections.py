"""The HTTP port's connections against one hostile client: TLS connections closed before their handshake,
one address opening many slow connections, and trickling clients on the /metrics port.

Real servers on loopback, real sockets: ``ssl`` for HTTPS, plain sockets for the slow clients, a client on a
second loopback address (127.0.0.2) for the one who must still get through.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
import urllib.request

import pytest
from conftest import ServerThread, self_signed, server_config, wait_for

ADD = "addition"


def https_get(port: int, ca, path: str = "/v2/health/ready") -> int:
    ctx = ssl.create_default_context(cafile=str(ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    finally:
        conn.close()


def test_tls_connections_closed_before_the_handshake_are_released(tmp_path, model_repo):
    cert, key = self_signed(tmp_path)
    cap = 20
    srv = ServerThread(
        server_config(models=(ADD,), instances=1, tls_cert=cert, tls_key=key, http_max_connections=cap)
    )
    try:
        port = srv.config.http_port
        for i in range(10 * cap):  # a load balancer's TCP probes, a port scan: connect, close, no TLS at all
            s = socket.create_connection(("127.0.0.1", port))
            if i % 3 == 0:
                s.sendall(b"GET / HTTP/1.1\r\n\r\n")  # plaintext to the TLS port: a handshake that fails
            s.close()
        assert wait_for(lambda: srv.running.web.connections.open == 0, 30), srv.running.web.connections.open
        answers = [https_get(port, cert) for _ in range(5)]
        assert answers == [200] * 5
        # A handshake that never comes ends at --tls-handshake-timeout-s (10 s), and its slot with it.
        stuck = [
            socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(3)
        ]  # never say anything
        assert all(s.recv(1) == b"" for s in stuck)  # closed by the server
        assert wait_for(lambda: srv.running.web.connections.open == 0, 30), srv.running.web.connections.open
        for s in stuck:
            s.close()
    finally:
        srv.stop()


def _slow(port: int, source: str = "127.0.0.1") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), source_address=(source, 0))
    s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n")  # the rest of the headers never comes
    return s


def test_one_client_address_cannot_take_the_http_port(model_repo):
    srv = ServerThread(
        server_config(models=(ADD,), instances=1)
    )  # the defaults: 512 connections, 64 per address
    try:
        port = srv.config.http_port
        hog = [_slow(port) for _ in range(600)]  # more than the port's cap (512), from one address
        last = hog[-1].recv(4096)
        # Someone else still gets in: a client on another address, its requests all answered.
        answered = 0
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=("127.0.0.2", 0))
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answered += s.recv(4096).startswith(b"HTTP/1.1 200")
            s.close()
        assert answered == 10
        assert last.startswith(b"HTTP/1.1 503") and b"--http-max-connections-per-peer" in last
        # Over its share of 64 only while more than a quarter of the port is free: the last 128 are for others.
        assert srv.running.web.connections.peers["127.0.0.1"] == 384
        assert wait_for(lambda: srv.running.web.connections.open == 384)  # the refused ones hold no slot
        for s in hog:
            s.close()
        assert wait_for(lambda: "127.0.0.1" not in srv.running.web.connections.peers)
    finally:
        srv.stop()


def test_trickling_clients_do_not_starve_the_metrics_port(model_repo):
    srv = ServerThread(server_config(models=(ADD,), instances=1))
    stop = threading.Event()
    tricklers = []
    try:
        port = srv.config.metrics_port
        for _ in range(40):  # more than the workers and more than the connections the port holds
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
            tricklers.append(s)

        def trickle():  # a byte a second each: never a whole request
            while not stop.wait(1.0):
                for s in tricklers:
                    try:
                        s.send(b"X")
                    except OSError:
                        pass

        threading.Thread(target=trickle, daemon=True).start()
        time.sleep(1.5)
        for _ in range(5):  # scrapes answered while the tricklers trickle (a liveness bound, not a timing)
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
            assert b"s2s_requests_total" in body
    finally:
        stop.set()
        for s in tricklers:
            s.close()
        srv.stop()


@pytest.mark.parametrize(
    "flag,value",
    [
        ("http_read_timeout_s", "-5"),
        ("http_max_connections", "-1"),
        ("http_max_connections_per_peer", "-2"),
        ("core_stall_s", "nan"),
    ],
)
def test_flag_values_out_of_range_stop_the_start(flag, value):
    import argparse

    from server.config import add_arguments, from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    cli = "--" + flag.replace("_", "-")
    with pytest.raises(SystemExit, match=f"^{cli} must be "):
        from_args(p.parse_args([cli, value]), env={})


def test_tls_probes_are_released_on_the_served_event_loop(tmp_path, model_repo):
    """The same through `s2s serve` on its default event loop (uvloop where installed), whose TLS layer is
    its own: 10 x the cap of connections closed before any handshake, then every HTTPS request answered."""
    import subprocess
    import sys

    from conftest import MODEL_REPO, ROOT, free_port

    cert, key = self_signed(tmp_path)
    port, log = free_port(), tmp_path / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "s2s.cli",
                "serve",
                "--model-repo",
                str(MODEL_REPO),
                "--models",
                ADD,
                "--instances",
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                str(free_port()),
                "--metrics-port",
                "0",
                "--http-port",
                str(port),
                "--tls-cert",
                str(cert),
                "--tls-key",
                str(key),
                "--http-max-connections",
                "20",
                "--tls-handshake-timeout-s",
                "2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def up() -> bool:
        try:
            return https_get(port, cert) == 200
        except OSError:
            return False

    try:
        assert wait_for(up, 60), log.read_text()
        for i in range(200):
            s = socket.create_connection(("127.0.0.1", port))
            if i % 3 == 0:
                s.sendall(b"GET / HTTP/1.1\r\n\r\n")
            s.close()
        stuck = [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(3)]
        assert all(s.recv(1) == b"" for s in stuck)  # closed at --tls-handshake-timeout-s
        answers = [https_get(port, cert) for _ in range(5)]
        assert answers == [200] * 5, log.read_text()
        assert "Traceback" not in log.read_text()
    finally:
        proc.terminate()
        proc.wait(30)
