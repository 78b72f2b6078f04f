"""The ClusterServingRuntime of deploy/kserve/ run for real, as KServe would run it for the `addition`
InferenceService: its container's args with KServe's template fields filled in, the InferenceService's storageUri
laid out read-only at a /mnt/models stand-in as KServe's storage initializer leaves it, the process started, the
declared readiness probe waited on, v2 requests from tritonclient over REST and gRPC on the declared ports, the
declared metrics port scraped; then the autoscaling query of the InferenceService (and of deploy/k8s's
ScaledObject) evaluated by a real Prometheus against that server, and a SIGTERM under load with the drain time the
manifests set. Only the ports differ: each declared one is mapped to a free one (tests share the machine).
"""

from __future__ import annotations

import concurrent.futures
import re
import shutil
import signal
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
import yaml
from conftest import ROOT, wait_for
from kserve_runtime import Container, Prometheus, inference_services, lay_out, start_container, writable_again
from tritonclient.utils import InferenceServerException

NAME = "addition"
ROWS = 64  # inputs per request: the server's max_inputs_per_request


def text_input(module, texts: list[str]):
    inp = module.InferInput("text_input", [len(texts)], "BYTES")
    inp.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object))
    return inp


def texts_of(result) -> list[str]:
    return [b.decode() for b in result.as_numpy("text_output").reshape(-1)]


def sums(n: int, offset: int = 0) -> tuple[list[str], list[str]]:
    pairs = [((i * 37 + offset) % 500, (i * 11 + offset) % 400) for i in range(n)]
    return [f"{a}+{b}" for a, b in pairs], [str(a + b) for a, b in pairs]


def start(tmp: Path) -> tuple[Container, Path]:
    isvc = inference_services()[NAME]
    mnt = lay_out(isvc["spec"]["predictor"]["model"]["storageUri"], tmp / "mnt" / "models")
    container = start_container(isvc, mnt, tmp / "container.log")
    try:
        container.wait_probe(container.spec["startupProbe"])
        container.wait_probe(container.spec["readinessProbe"])
    except BaseException:
        container.stop()
        writable_again(mnt)
        raise
    return container, mnt


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kserve-runtime")
    c, mnt = start(tmp)
    yield c
    assert c.stop() == 0, c.log()[-3000:]
    writable_again(mnt)


def http_port(c: Container) -> int:
    return c.port(c.spec["ports"][0]["containerPort"])


def grpc_port(c: Container) -> int:
    (h2c,) = [p for p in c.spec["ports"] if p["name"] == "h2c"]
    return c.port(h2c["containerPort"])


def test_the_mounted_model_is_served_under_the_inference_services_name_over_rest_and_grpc(container):
    texts, want = sums(8)
    with triton_http.InferenceServerClient(f"127.0.0.1:{http_port(container)}") as rest:
        assert rest.is_server_live() and rest.is_server_ready() and rest.is_model_ready(NAME)
        (model,) = rest.get_model_repository_index()
        assert (model["name"], model["state"]) == (NAME, "READY")
        assert texts_of(rest.infer(NAME, [text_input(triton_http, texts)])) == want
    with triton_grpc.InferenceServerClient(f"127.0.0.1:{grpc_port(container)}") as grpc_client:
        assert grpc_client.is_model_ready(NAME)
        assert texts_of(grpc_client.infer(NAME, [text_input(triton_grpc, texts)])) == want
        assert grpc_client.get_model_metadata(NAME).name == NAME
    # Read-only storage, as KServe mounts it: nothing was written there.
    assert "Traceback" not in container.log()


def test_the_declared_metrics_port_serves_the_models_metrics(container):
    ann = yaml.safe_load((ROOT / "deploy" / "kserve" / "servingruntime.yaml").read_text())["spec"][
        "annotations"
    ]
    url = f"http://127.0.0.1:{container.port(ann['prometheus.kserve.io/port'])}{ann['prometheus.kserve.io/path']}"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    assert re.search(rf'^s2s_model_info\{{[^}}]*model="{NAME}"[^}}]*\}} 1\.0$', text, re.M), text[:2000]
    assert re.search(rf'^s2s_queued_sequences\{{[^}}]*model="{NAME}"', text, re.M)


def autoscaling_queries() -> dict[str, str]:
    (metric,) = inference_services()[NAME]["spec"]["predictor"]["autoScaling"]["metrics"]
    (so,) = [d for d in yaml.safe_load_all((ROOT / "deploy" / "k8s" / "scaledobject.yaml").read_text()) if d]
    (prom,) = [t for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
    return {
        "InferenceService": metric["external"]["metric"]["query"],
        "ScaledObject": prom["metadata"]["query"],
    }


class Load:
    """Workers that keep ``ROWS``-input requests in flight over REST until stopped: more rows than one batch,
    so that some wait for a decode slot."""

    def __init__(self, port: int, workers: int = 12):
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.answered = 0
        self.pool = concurrent.futures.ThreadPoolExecutor(workers)
        self.futures = [self.pool.submit(self.work, port, i) for i in range(workers)]

    def work(self, port: int, seed: int) -> None:
        with triton_http.InferenceServerClient(f"127.0.0.1:{port}", network_timeout=120) as client:
            for k in range(10_000):  # bounded: the test stops it far sooner
                if self.stop.is_set():
                    return
                texts, want = sums(ROWS, seed * 1000 + k)
                got = texts_of(client.infer(NAME, [text_input(triton_http, texts)]))
                if got != want:
                    self.errors.append(f"wrong answers: {got[:3]} for {texts[:3]}")
                self.answered += 1

    def end(self) -> None:
        self.stop.set()
        for f in self.futures:
            f.result(120)
        self.pool.shutdown()


def test_the_autoscaling_query_is_above_0_under_queued_load_and_0_at_idle(container, tmp_path):
    """KEDA asks Prometheus this query and sets the replicas to ceil(value / target): the value must rise while
    requests wait, and be 0 when none does (else the model never scales down)."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("Debian package `prometheus` is missing: `make test` installs it (make system-deps)")
    ann = yaml.safe_load((ROOT / "deploy" / "kserve" / "servingruntime.yaml").read_text())["spec"][
        "annotations"
    ]
    target = f"127.0.0.1:{container.port(ann['prometheus.kserve.io/port'])}"
    prom = Prometheus(binary, tmp_path, [target], ann["prometheus.kserve.io/path"])
    queries = autoscaling_queries()
    try:
        # idle: scraped, and the queue is empty
        assert wait_for(lambda: all(prom.value(q) == 0 for q in queries.values()), 60), {
            k: prom.query(q) for k, q in queries.items()
        }
        idle_at = time.time()
        load = Load(http_port(container))
        try:
            assert wait_for(lambda: all((prom.value(q) or 0) > 0 for q in queries.values()), 60), {
                k: prom.query(q) for k, q in queries.items()
            }
        finally:
            load.end()
        assert not load.errors and load.answered > 0, load.errors[:3]
        # The same queries as KEDA would have evaluated them at that idle moment (the window looks back 1 minute:
        # the load has not left it yet now).
        for kind, q in queries.items():
            assert prom.value(q, at=idle_at) == 0, (kind, prom.query(q, at=idle_at))
    finally:
        prom.stop()


def outcome(call) -> str:
    """ok; shutdown (refused: the server said it is shutting down); closed (the port no longer takes
    connections); anything else is an error: an answer cut off, or lost."""
    try:
        call()
        return "ok"
    except InferenceServerException as e:
        text = str(e)
        if "shutting down" in text:
            return "shutdown"
        if re.search(r"Connection refused|failed to connect|connect\(\) failed", text, re.I):
            return "closed"
        return f"error: {text[:300]}"
    except ConnectionRefusedError:  # tritonclient.http: the port closed once the drain ended
        return "closed"
    except (ConnectionError, OSError) as e:
        return f"error: {type(e).__name__}: {e}"


def test_sigterm_under_load_answers_every_accepted_request_within_the_manifests_grace(tmp_path):
    """The runtime's container under REST and gRPC load gets SIGTERM (what the kubelet sends after the preStop
    sleep): each request gets exactly one answer, its result or a refusal saying the server is shutting down (or,
    once the drain is over, a closed port); none is cut off, those in flight at the signal are answered, and the
    process exits 0 within the drain time the manifest sets (S2S_GRACE_S)."""
    c, mnt = start(tmp_path)
    grace = float(c.env["S2S_GRACE_S"])
    results: list[tuple[float, float, str]] = []  # (sent, ended, how it ended)
    lock = threading.Lock()

    def worker(seed: int, over_grpc: bool) -> None:
        module = triton_grpc if over_grpc else triton_http
        port = grpc_port(c) if over_grpc else http_port(c)
        with module.InferenceServerClient(f"127.0.0.1:{port}") as client:
            for k in range(10_000):  # bounded: the server stops far sooner
                texts, want = sums(ROWS, seed * 1000 + k)

                def call(texts=texts, want=want):
                    got = texts_of(client.infer(NAME, [text_input(module, texts)]))
                    assert got == want, (got[:3], texts[:3])

                sent = time.monotonic()
                end = outcome(call)
                with lock:
                    results.append((sent, time.monotonic(), end))
                if end != "ok":
                    return

    pool = concurrent.futures.ThreadPoolExecutor(8)
    try:
        futures = [pool.submit(worker, i, i % 2 == 1) for i in range(8)]
        assert wait_for(lambda: sum(end == "ok" for *_, end in results) >= 8, 60), results[:5]
        signalled = time.monotonic()
        c.proc.send_signal(signal.SIGTERM)
        rc = c.proc.wait(grace + 10)
        stopped = time.monotonic()
        for f in futures:
            f.result(60)
    finally:
        pool.shutdown(cancel_futures=True)
        c.stop()
        writable_again(mnt)
    assert rc == 0, c.log()[-3000:]
    assert stopped - signalled < grace, "the drain ran into the end of the grace period"
    wrong = [end for *_, end in results if end not in ("ok", "shutdown", "closed")]
    assert not wrong, wrong[:5]
    drained = [end for sent, ended, end in results if sent < signalled < ended]
    assert drained and set(drained) <= {"ok", "shutdown"}, drained
    assert "ok" in drained, "no request in flight at the signal was answered: nothing was drained"
    log = c.log()
    assert "Traceback" not in log and "died" not in log, log[-3000:]
