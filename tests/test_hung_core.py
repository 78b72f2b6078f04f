"""A hung engine core (SIGSTOP: no EOF, no answer, nothing) on both HTTP doors.

The front end keeps every deadline itself: requests with a 1 s deadline are answered 504 by its own timer,
before the watchdog steps in. The watchdog (--core-stall-s) marks the silent core down: health says
NOT_SERVING and s2s_engine_cores_up 0 while it is down, and the core is killed and restarted. The requests
it never started (they waited in its pipe) wait for the restart and are answered then.
"""

from __future__ import annotations

import collections
import concurrent.futures
import http.client
import json
import os
import signal
import threading
import time
import urllib.request

import grpc
from conftest import ServerThread, alive, server_config, wait_for
from grpc_health.v1 import health_pb2, health_pb2_grpc

JA = "translate-en-ja"
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def post(srv, path: str, body: dict, deadline: str | None = None) -> tuple[int, str, float]:
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", srv.config.http_port, timeout=60)
    headers = {"Content-Type": "application/json", **({"X-Timeout-Seconds": deadline} if deadline else {})}
    try:
        conn.request("POST", path, json.dumps(body), headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read()).get("error", ""), time.monotonic() - t0
    finally:
        conn.close()


def cores_up(srv) -> float:
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{srv.config.metrics_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    line = next(ln for ln in text.splitlines() if ln.startswith(f's2s_engine_cores_up{{model="{JA}"}}'))
    return float(line.rsplit(" ", 1)[1])


def test_a_hung_core_is_timed_out_marked_down_killed_and_restarted(model_repo):
    srv = ServerThread(server_config(instances=1, core_stall_s=2.0))
    model = srv.running.repo.get(JA)
    pid = model.cores[0].state.pid
    seen: list[tuple[int, float]] = []
    done = threading.Event()

    def watch():  # what a load balancer and Prometheus see, every 20 ms
        with grpc.insecure_channel(srv.address) as ch:
            health = health_pb2_grpc.HealthStub(ch)
            while not done.is_set():
                seen.append(
                    (health.Check(health_pb2.HealthCheckRequest(service=JA), timeout=5).status, cores_up(srv))
                )
                time.sleep(0.02)

    infer = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [1], "data": ["Good morning."]}]}
    translate = {"q": "Good morning.", "source": "en", "target": "ja"}
    try:
        os.kill(pid, signal.SIGSTOP)
        with concurrent.futures.ThreadPoolExecutor(5) as pool:
            watcher = pool.submit(watch)
            timed = [
                pool.submit(post, srv, f"/v2/models/{JA}/infer", infer, "1"),
                pool.submit(post, srv, "/translate", translate, "1"),
            ]
            waiting = [
                pool.submit(post, srv, f"/v2/models/{JA}/infer", infer),
                pool.submit(post, srv, "/translate", translate),
            ]
            for f in timed:
                status, error, took = f.result()
                assert status == 504 and "deadline" in error, (status, error)
                print(f"hung core: a 1 s deadline answered {status} after {took:.3f} s")
                # 504 "deadline", not the watchdog's 503: the front end's own timer answered while the core, stopped,
                # said nothing (the watchdog fails what is left only after --core-stall-s).
            for f in waiting:  # sent to the stopped core, never started by it: answered by its successor
                status, error, _ = f.result()
                assert status == 200, (status, error)
            assert wait_for(lambda: model.cores[0].state.up and model.cores[0].state.pid != pid, 60)
            assert wait_for(lambda: (NOT_SERVING, 0.0) in seen and seen[-1] == (SERVING, 1.0))
            done.set()
            watcher.result()
        down = seen.index((NOT_SERVING, 0.0))  # down while it was being replaced, serving before and after
        assert seen[0] == (SERVING, 1.0) and (SERVING, 1.0) in seen[down:], seen
        assert not alive(pid)  # killed and reaped, SIGSTOP or not
        assert model.cores[0].state.restarts == 1
        assert post(srv, "/translate", translate, "30")[0] == 200
    finally:
        done.set()
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        srv.stop()


def test_a_flood_into_a_hung_core_does_not_stop_the_event_loop(model_repo):
    """A hung core stops reading its pipe: enough requests fill the pipe's buffer. The front end never blocks
    writing to it (a blocking write stopped the whole event loop, health checks included, until the core was
    killed): health answers while the pipe is full, and every request gets one answer once the watchdog kills
    the core: none had started, so each goes to its successor (200, or 429 where its queue is full), none is
    lost with the core."""
    import asyncio

    import aiohttp

    srv = ServerThread(server_config(instances=1, core_stall_s=3.0, models=("addition",)))
    model = srv.running.repo.get("addition")
    core, pid = model.cores[0], model.cores[0].state.pid
    texts = [f"{i}+{i + 7}" for i in range(10_000, 10_064)]  # 64 inputs: ~2.5 KB a request in the pipe
    body = {"inputs": [{"name": "text_input", "datatype": "BYTES", "shape": [64], "data": texts}]}
    base = f"http://127.0.0.1:{srv.config.http_port}"

    async def flood():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def one():
                async with session.post(
                    f"{base}/v2/models/addition/infer", json=body, timeout=aiohttp.ClientTimeout(total=120)
                ) as r:
                    return r.status, (await r.json()).get("error", "")

            calls = [asyncio.ensure_future(one()) for _ in range(500)]
            # until the pipe is full (or the core replaced)
            while not core._writer.unsent and core.state.pid == pid:
                await asyncio.sleep(0.01)
            full = bool(core._writer.unsent)
            # The probe from another address, as a load balancer's: this one holds most of the port, more than
            # its share (--http-max-connections-per-peer), and the rest is kept for the others.
            probe = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
            async with (
                aiohttp.ClientSession(connector=probe) as other,
                other.get(f"{base}/v2/health/live", timeout=aiohttp.ClientTimeout(total=10)) as r,
            ):
                health = r.status
            return full, health, await asyncio.gather(*calls)

    try:
        os.kill(pid, signal.SIGSTOP)
        full, health, statuses = asyncio.run(flood())
        assert full and health == 200
        codes = collections.Counter(status for status, _ in statuses)
        assert len(statuses) == 500 and set(codes) <= {200, 429, 503} and codes[200], codes
        # 503s are connections over the client's share (--http-max-connections-per-peer), never the hung core's.
        assert not [e for _, e in statuses if "engine core" in e], codes
        assert not alive(pid)
        assert wait_for(lambda: core.state.up, 60)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
        srv.stop()
