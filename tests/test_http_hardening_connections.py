"""Hostile HTTP connections on both HTTP doors (KServe REST, LibreTranslate), each shown handled, against
the real `s2s serve` in a child process whose log is read for tracebacks.

1. protocol errors and hang-ups: rate-limited WARNING lines, hang-ups counted as CANCELLED;
2. a client that hangs up frees its rows at once (acceptance: within 1 s);
3. format=html: cheap limits first, parsing off the event loop (acceptance: a 4 MB body stalls a
   concurrent health check by less than 250 ms);
4. header read timeout, connection cap, and the drain answering 503;
5. a GenerateStream refused by the engine logs no traceback (the test at the end).
(The hung core is tests/test_hung_core.py.)
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import signal
import socket
import threading
import time

import grpc
import pytest
from conftest import Served, english, wait_for
from http_hardening_calls import ADD, INFER, JA, JSON, TOKEN, _raw, metrics, request, sample, tensor

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc


@pytest.fixture(scope="module")
def srv(tmp_path_factory, model_repo):
    s = Served(
        tmp_path_factory.mktemp("http_hardening"),
        "--auth-token",
        TOKEN,
        "--cors-allow-origin",
        "https://app.example",
        "--http-read-timeout-s",
        "1",
        "--http-max-connections",
        "40",
    )
    yield s
    s.stop()
    log = s.log_path.read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]  # whatever the module's tests sent it


def test_protocol_errors_and_hangups_are_rate_limited_warnings_and_hangups_are_cancelled(srv):
    before = metrics(srv)
    lines_before = srv.log().count("\n")
    t0 = time.monotonic()
    bad = [
        b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200)) + b"\r\n",
    ]
    for i in range(300):
        answer = _raw(srv, bad[i % 3])
        assert answer.startswith(b"HTTP/1.") and b" 400 " in answer[:20], answer[:200]
    # Hang-ups mid-body, each after the server has started its handler (it answers "100 Continue" first).
    body = json.dumps({"inputs": [tensor(["1+1"])]}).encode()
    for path, head in ((INFER, b""), ("/translate", b"Content-Type: application/json\r\n")):
        for _ in range(20):
            with socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) as s:
                s.sendall(
                    b"POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\n%sContent-Length: %d\r\n"
                    b"Expect: 100-continue\r\n\r\n" % (path.encode(), head, len(body) + 100)
                )
                assert s.recv(100).startswith(b"HTTP/1.1 100")
                s.sendall(body[:10])
    cancelled = lambda: sample(metrics(srv), "s2s_requests_total", protocol="http", code="CANCELLED")  # noqa: E731
    assert wait_for(
        lambda: cancelled() - sample(before, "s2s_requests_total", protocol="http", code="CANCELLED") >= 40
    )
    after = metrics(srv)
    assert (
        sample(after, "s2s_requests_total", method="ModelInfer", code="CANCELLED")
        - sample(before, "s2s_requests_total", method="ModelInfer", code="CANCELLED")
        == 20
    )
    assert (
        sample(after, "s2s_requests_total", method="Translate", code="CANCELLED")
        - sample(before, "s2s_requests_total", method="Translate", code="CANCELLED")
        == 20
    )
    assert sample(after, "s2s_requests_total", protocol="http", code="INTERNAL") == 0
    assert (
        sample(after, "s2s_requests_total", method="HTTP", code="INVALID_ARGUMENT")
        - sample(before, "s2s_requests_total", method="HTTP", code="INVALID_ARGUMENT")
        == 300
    )
    new = srv.log().split("\n")[lines_before:]
    assert not any("Traceback" in line or " ERROR " in line for line in new), "\n".join(new[-50:])
    # 340 refusals of two or three kinds, a line per kind every 10 s at most: a handful of lines, each a WARNING.
    warned = [line for line in new if "refused (" in line]
    bound = 3 * (int((time.monotonic() - t0) / 10) + 1)
    assert 1 <= len(warned) <= bound and all(" WARNING " in line for line in warned), "\n".join(new)


def _rows(srv) -> float:
    text = metrics(srv)
    return sample(text, "s2s_queued_sequences", model=JA) + sample(text, "s2s_active_sequences", model=JA)


@pytest.mark.parametrize("door", ["kserve", "libretranslate"])
def test_a_client_that_hangs_up_frees_its_rows_at_once(srv, door):
    texts = english(32)  # 32 inputs x beam 8: 256 rows, seconds of decoding on this machine
    if door == "kserve":
        path = f"/v2/models/{JA}/infer"
        body = json.dumps(
            {"inputs": [tensor(texts)], "parameters": {"beam_width": 8, "max_tokens": 60}}
        ).encode()
    else:
        path, body = (
            "/translate",
            json.dumps({"q": texts, "source": "en", "target": "ja", "alternatives": 7}).encode(),
        )
    before = sample(metrics(srv), "s2s_requests_total", code="CANCELLED")
    ok_before = sample(metrics(srv), "s2s_requests_total", code="OK")
    s = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    s.sendall(
        b"POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body)
    )
    assert wait_for(lambda: _rows(srv) >= 100, timeout=30), _rows(srv)  # queued or decoding (64 rows a step)
    s.close()
    t0 = time.monotonic()
    assert wait_for(lambda: _rows(srv) == 0, timeout=30)
    print(f"{door}: rows freed {time.monotonic() - t0:.3f} s after the hang-up")
    # Cancelled, not decoded to the end for nobody: counted CANCELLED, and no answer was made for it.
    assert wait_for(lambda: sample(metrics(srv), "s2s_requests_total", code="CANCELLED") == before + 1)
    assert sample(metrics(srv), "s2s_requests_total", code="OK") == ok_before


def _worst_health_check_while(srv, body: str) -> tuple[float, int, bytes]:
    """Health checks one after another while ``body`` is sent to /translate and answered: the slowest, and the
    answer."""
    conn = http.client.HTTPConnection("127.0.0.1", srv.http_port, timeout=30)
    done = threading.Event()
    worst = 0.0

    def send():
        try:
            return request(srv, "POST", "/translate", body, JSON)
        finally:
            done.set()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        answer = pool.submit(send)
        while not done.is_set():
            t0 = time.monotonic()
            conn.request("GET", "/v2/health/live")
            assert conn.getresponse().read() == b'{"live": true}'
            worst = max(worst, time.monotonic() - t0)
        status, raw, _ = answer.result()
    conn.close()
    return worst, status, raw


def test_health_checks_go_on_while_html_is_refused_and_parsed(srv):
    """Health checks are answered while a 4 MB html body is sent and refused, and while an html body within the
    limits is parsed (which thread parses is tests/test_off_loop.py's; the worst check is printed)."""
    huge = json.dumps({"q": "<b>" * 1_300_000, "source": "en", "target": "ja", "format": "html"})  # ~4 MB
    within = json.dumps(
        {
            "q": "<i></i>" * 8000 + '<p title="' + "&amp;" * 30_000 + '">Hello.</p>',
            "source": "en",
            "target": "ja",
            "format": "html",
        }
    )
    for body, status in ((huge, 400), (within, 200)):
        worst, got, raw = _worst_health_check_while(srv, body)
        assert got == status, raw[:200]
        print(f"html {len(body)} characters -> {status}: worst concurrent health check {worst * 1000:.1f} ms")


def test_health_checks_go_on_while_a_4mb_json_body_is_checked(srv):
    """Its elements are walked (nesting, surrogates) in a worker thread: the health checks go on meanwhile."""
    many = json.dumps(
        {"q": ["Hi"] * 650_000 + ["\ud800"], "source": "en", "target": "ja"}
    )  # ~4 MB, checked to the end
    worst, status, raw = _worst_health_check_while(srv, many)
    assert status == 400 and "q[650000] holds a lone UTF-16 surrogate" in json.loads(raw)["error"], raw[:300]
    print(f"JSON {len(many)} characters -> {status}: worst concurrent health check {worst * 1000:.1f} ms")


def test_slow_and_idle_connections_are_closed_and_connections_are_capped(srv):
    fds = lambda: len(os.listdir(f"/proc/{srv.proc.pid}/fd"))  # noqa: E731
    base = fds()
    slow = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    slow.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\n")  # never finishes its headers
    answer = slow.recv(1000)
    assert answer.startswith(b"HTTP/1.1 408") and b"--http-read-timeout-s" in answer and slow.recv(100) == b""
    # Accepted in order, well within the 1 s an idle connection is kept.
    held = [socket.create_connection(("127.0.0.1", srv.http_port), timeout=30) for _ in range(40)]
    refused = socket.create_connection(("127.0.0.1", srv.http_port), timeout=30)
    answer = refused.recv(1000)
    assert answer.startswith(b"HTTP/1.1 503") and b"--http-max-connections" in answer
    assert all(s.recv(100) == b"" for s in held)  # idle: closed after --http-read-timeout-s
    for s in [*held, slow, refused]:
        s.close()
    assert wait_for(lambda: fds() <= base + 2)
    assert request(srv, "GET", "/v2/health/ready")[0] == 200


def test_drain_answers_new_connections_503_while_requests_finish(tmp_path, model_repo):
    s = Served(tmp_path, "--grace-s", "60")
    try:
        texts = english(16)
        long = json.dumps({"inputs": [tensor(texts)], "parameters": {"beam_width": 8, "max_tokens": 60}})
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(request, s, "POST", f"/v2/models/{JA}/infer", long, JSON)
            assert wait_for(lambda: _rows(s) > 0, timeout=30)
            s.proc.send_signal(signal.SIGTERM)
            assert wait_for(lambda: request(s, "GET", "/v2/health/ready")[0] == 503, timeout=30)
            status, raw, _ = request(s, "POST", INFER, json.dumps({"inputs": [tensor(["1+1"])]}), JSON)
            assert status == 503 and "shutting down" in json.loads(raw)["error"], raw
            assert first.result()[0] == 200  # the request in flight finished within the grace period
        assert s.proc.wait(60) == 0
        assert "Traceback" not in s.log()
    finally:
        s.stop()


def test_a_generate_stream_refused_by_the_engine_logs_no_traceback(tmp_path, model_repo):
    s = Served(
        tmp_path, "--batching", "none", "--max-batch-size", "1", "--max-queue-size", "3", "--instances", "1"
    )
    try:

        def stream(i):
            with grpc.insecure_channel(s.address) as ch:
                try:
                    return list(
                        pb_grpc.Seq2SeqStub(ch).GenerateStream(
                            pb.GenerateRequest(model=ADD, inputs=[f"{i}+{i}"] * 3), timeout=60
                        )
                    )
                except grpc.RpcError as e:
                    return e

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            results = list(pool.map(stream, range(40)))
        refused = [r for r in results if isinstance(r, grpc.RpcError)]
        assert refused and all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in refused)
        assert len(refused) < 40
    finally:
        s.stop()
    log = s.log_path.read_text()
    assert "never retrieved" not in log and "Traceback" not in log, log[-3000:]
