"""Model control without a restart (server/models/control.py) in explicit mode, on one server for the
module: Triton's repository API with the real tritonclient over gRPC and HTTP, new versions loaded under
traffic, unloads and reloads that finish what they accepted, broken bundles, `s2s models`, and docs/KSERVE.md's
example.

The server serves a temporary repository: a copy of the committed ``addition`` bundle (version folders
are added and removed by the tests) and a link to ``translate-en-ja`` (the other model, which must not notice).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import grpc
import pytest
import tritonclient.grpc as triton
import tritonclient.http as triton_http
from conftest import ROOT, ServerThread, make_repo, server_config, wait_for
from grpc_health.v1 import health_pb2, health_pb2_grpc
from model_control_repo import ADD, AUTH, JA, TOKEN, add, add_version, text_input
from tritonclient.utils import InferenceServerException

from protos.seq2seq.v1 import seq2seq_pb2 as s2s_pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as s2s_grpc


def metrics_text(srv) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.config.metrics_port}/metrics", timeout=10) as r:
        return r.read().decode()


def series_of(text: str, model: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("#") and f'model="{model}"' in line]


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("explicit"))
    srv = ServerThread(
        server_config(
            model_repo=repo,
            model_control_mode="explicit",
            load_model=(ADD, JA),
            instances=1,
            auth_token=TOKEN,
        )
    )
    srv.repo = repo
    srv.grpc = triton.InferenceServerClient(srv.address)
    srv.http = triton_http.InferenceServerClient(f"127.0.0.1:{srv.running.web.port}", concurrency=4)
    yield srv
    srv.grpc.close()
    srv.http.close()
    srv.stop()


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_index_unload_and_load_with_tritonclient(explicit, transport):
    """Index, unload (not ready, requests refused with a clear status, the other model unaffected; ListModels,
    health and metrics follow), load again, through tritonclient unchanged, with the same bearer token as any call."""
    c = explicit.grpc if transport == "grpc" else explicit.http
    module = triton if transport == "grpc" else triton_http
    headers = AUTH if transport == "grpc" else {"Authorization": AUTH["authorization"]}
    index = c.get_model_repository_index(headers=headers)
    entries = index.models if transport == "grpc" else index
    state = {(e.name, e.state) if transport == "grpc" else (e["name"], e["state"]) for e in entries}
    assert state == {(ADD, "READY"), (JA, "READY")}
    with pytest.raises(InferenceServerException):  # no token: refused like every other call
        c.unload_model(ADD)
    assert c.is_model_ready(ADD, headers=headers)
    pids = [core.state.pid for core in explicit.running.repo.get(ADD).cores]

    c.unload_model(ADD, headers=headers)  # returns once in-flight work finished and its processes stopped
    assert not c.is_model_ready(ADD, headers=headers) and c.is_model_ready(JA, headers=headers)
    assert c.is_server_ready(headers=headers)  # every loaded model is ready
    with pytest.raises(InferenceServerException) as e:
        add(c, 1, 2, module)
    assert "unloaded" in str(e.value) and ("UNAVAILABLE" in str(e.value) or "503" in str(e.value))
    ja = c.infer(JA, [text_input(["Save"], module)], headers=dict(headers))
    assert ja.as_numpy("text_output")[0].decode()
    index = explicit.grpc.get_model_repository_index(headers=AUTH, as_json=True)["models"]
    assert {"name": ADD, "state": "UNAVAILABLE", "reason": "unloaded"} in index
    with grpc.insecure_channel(explicit.address) as ch:
        listed = s2s_grpc.Seq2SeqStub(ch).ListModels(
            s2s_pb.ListModelsRequest(), metadata=tuple(AUTH.items()), timeout=10
        )
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=ADD), timeout=10)
    assert [m.name for m in listed.models] == [JA]
    assert health.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert series_of(metrics_text(explicit), ADD) == []  # an unloaded model's series are no longer exported
    assert pids and not [p for p in pids if _alive(p)]  # its processes are gone

    c.load_model(ADD, headers=headers)
    assert c.is_model_ready(ADD, headers=headers)
    assert add(c, 12, 30, module)[0] == "42"
    assert c.get_model_config(ADD, headers=headers)
    assert 's2s_model_info{model="addition"' in metrics_text(explicit)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_version_2_loaded_under_traffic_200_requests_one_correct_answer_each(explicit):
    """200 requests through a reload to version 2: each gets exactly one answer, the right one; the first
    ones were answered by version 1, the last ones (sent after the load returned) by version 2; version 1's
    engine cores exited and its s2s_model_info line is gone."""
    c = explicit.grpc
    old_version = add(c, 1, 1)[1]
    old_pids = [core.state.pid for core in explicit.running.repo.get(ADD).cores]
    new_version = str(int(old_version) + 1)
    n, before, after = 200, 20, 20
    answers: dict[int, list[tuple[str, str]]] = {i: [] for i in range(n)}
    errors: list[str] = []
    started_load, loaded = threading.Event(), threading.Event()
    next_id = iter(range(n))
    lock = threading.Lock()
    done = [0]

    def worker() -> None:
        client = triton.InferenceServerClient(explicit.address)
        try:
            while True:
                with lock:
                    i = next(next_id, None)
                if i is None:
                    return
                if i >= before:
                    started_load.wait(60)
                if i >= n - after:
                    loaded.wait(120)
                try:
                    answers[i].append(add(client, i, 500 + i))  # the committed model gets all 200 right
                except Exception as e:  # noqa: BLE001 (any failure is what this test counts)
                    errors.append(f"request {i}: {e}")
                with lock:
                    done[0] += 1
        finally:
            client.close()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    assert wait_for(lambda: done[0] >= before, 60)
    add_version(explicit.repo, int(new_version))
    started_load.set()
    c.load_model(ADD, headers=AUTH)
    loaded.set()
    for t in threads:
        t.join(180)
    assert errors == []
    assert all(len(a) == 1 for a in answers.values()), {i: a for i, a in answers.items() if len(a) != 1}
    assert all(a[0][0] == str(2 * i + 500) for i, a in answers.items())
    versions = [answers[i][0][1] for i in range(n)]
    assert set(versions[:before]) == {old_version} and set(versions[-after:]) == {new_version}
    assert add(c, 2, 2) == ("4", new_version)
    assert c.get_model_config(ADD, headers=AUTH).config.parameters["version"].string_value == new_version
    assert c.get_model_metadata(ADD, headers=AUTH).versions == [new_version]
    index = c.get_model_repository_index(headers=AUTH, as_json=True)["models"]
    assert {"name": ADD, "version": new_version, "state": "READY"} in index
    assert not [p for p in old_pids if _alive(p)]
    text = metrics_text(explicit)
    info = [line for line in series_of(text, ADD) if line.startswith("s2s_model_info")]
    assert len(info) == 1 and f'version="{new_version}"' in info[0]
    assert 's2s_engine_cores_up{model="addition"} 1.0' in text  # the new version's one core, not the old's 0


def test_the_old_version_finishes_what_it_accepted(explicit):
    """The switch does not wait for the old version, and the old version's requests in flight are not lost:
    with the old engine core frozen (SIGSTOP) holding a request, the new version takes traffic; the load call
    returns once the old core, resumed, has answered that request (from the old version) and exited."""
    c = explicit.grpc
    old_api = explicit.running.repo.get(ADD)
    [core] = old_api.cores
    pid = core.state.pid
    new_version = str(int(old_api.version) + 1)
    add_version(explicit.repo, int(new_version))
    held: list = []
    os.kill(pid, signal.SIGSTOP)
    try:

        def send() -> None:
            with triton.InferenceServerClient(explicit.address) as client:
                held.append(add(client, 20, 22))

        request = threading.Thread(target=send)
        request.start()
        assert wait_for(lambda: core.inflight, 30)  # accepted by the old version, which cannot answer yet
        loader = threading.Thread(target=lambda: c.load_model(ADD, headers=AUTH))
        loader.start()
        assert wait_for(lambda: explicit.running.repo.get(ADD) is not old_api, 60)
        assert add(c, 1, 2) == ("3", new_version)  # new requests: the new version, at once
        assert loader.is_alive() and request.is_alive()  # the load waits for the old version to drain
    finally:
        os.kill(pid, signal.SIGCONT)
    request.join(60)
    loader.join(60)
    assert held == [("42", old_api.version)]
    assert not _alive(pid)


def test_unload_finishes_what_is_in_flight(explicit):
    """With the engine core frozen (SIGSTOP) holding a request, an unload refuses new requests at once and
    returns only after the resumed core answered the held one and exited; then the model loads again."""
    c = explicit.grpc
    api = explicit.running.repo.get(ADD)
    [core] = api.cores
    pid = core.state.pid
    held: list = []

    def send() -> None:
        with triton.InferenceServerClient(explicit.address) as client:
            held.append(add(client, 30, 12))

    os.kill(pid, signal.SIGSTOP)
    try:
        request = threading.Thread(target=send)
        request.start()
        assert wait_for(lambda: core.inflight, 30)
        unloader = threading.Thread(target=lambda: c.unload_model(ADD, headers=AUTH))
        unloader.start()
        assert wait_for(lambda: not c.is_model_ready(ADD, headers=AUTH), 30)
        with pytest.raises(InferenceServerException) as e:
            add(c, 1, 2)
        assert "unloaded" in str(e.value)
        assert unloader.is_alive() and request.is_alive()  # the unload waits for the request in flight
    finally:
        os.kill(pid, signal.SIGCONT)
    request.join(60)
    unloader.join(60)
    assert held == [("42", api.version)] and not _alive(pid)
    c.load_model(ADD, headers=AUTH)
    assert add(c, 30, 12)[0] == "42"


def test_reload_under_streaming_traffic_loses_nothing(explicit):
    """load_model of the version already serving (a reload) while ModelStreamInfer requests keep coming over
    HTTP/2 and REST requests too: every request answered, none failed."""
    c = triton.InferenceServerClient(explicit.address)
    results: list = []
    got = threading.Semaphore(0)
    c.start_stream(
        callback=lambda result, error: (results.append((result, error)), got.release()), headers=AUTH
    )
    http_errors: list[str] = []
    stop = threading.Event()
    port = explicit.running.web.port
    rest_answers = [0]

    def rest_traffic() -> None:
        client = triton_http.InferenceServerClient(f"127.0.0.1:{port}")
        while not stop.is_set():
            try:
                assert add(client, 3, 4, triton_http)[0] == "7"
                rest_answers[0] += 1
            except Exception as e:  # noqa: BLE001
                http_errors.append(str(e))
        client.close()

    def load() -> None:
        client = triton_http.InferenceServerClient(f"127.0.0.1:{port}")
        client.load_model(ADD, headers={"Authorization": AUTH["authorization"]})
        client.close()

    rest = threading.Thread(target=rest_traffic)
    rest.start()
    sent = acquired = 0
    try:
        for _ in range(10):
            c.async_stream_infer(ADD, [text_input(["5+6"])], request_id=str(sent))
            sent += 1
        assert got.acquire(timeout=60)
        acquired += 1
        loader = threading.Thread(target=load)
        loader.start()
        while loader.is_alive():
            c.async_stream_infer(ADD, [text_input(["5+6"])], request_id=str(sent))
            sent += 1
            assert got.acquire(timeout=60)
            acquired += 1
        loader.join()
        for _ in range(sent - acquired):
            assert got.acquire(timeout=60)
    finally:
        stop.set()
        rest.join(60)
        c.stop_stream()
        c.close()
    assert len(results) == sent and rest_answers[0] > 0
    assert [e for _, e in results if e is not None] == [] and http_errors == []
    assert {r.as_numpy("text_output")[0] for r, _ in results} == {b"11"}


@pytest.mark.parametrize(
    "breakage, file",
    [
        ("corrupt", "decoder.onnx"),
        ("corrupt", "tokenizer.json"),
        ("bad-json", "config.json"),
        ("missing", "tokenizer.json"),
        ("disagrees", "config.json"),
    ],
)
def test_broken_bundle_leaves_the_serving_version_and_names_the_file(explicit, breakage, file):
    serving = add(explicit.grpc, 1, 1)[1]
    folder = add_version(explicit.repo, int(serving) + 1)
    path = folder / file
    if breakage == "corrupt":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    elif breakage == "bad-json":
        path.write_text("{ not json")
    elif (
        breakage == "disagrees"
    ):  # every file intact, but the config's heads do not fit the graphs: the warm-up fails
        config = json.loads(path.read_text())
        config["model"]["n_heads"] *= 2
        path.write_text(json.dumps(config))
        path = folder  # named, with what failed
    else:
        path.unlink()
    try:
        for c, headers in ((explicit.grpc, AUTH), (explicit.http, {"Authorization": AUTH["authorization"]})):
            with pytest.raises(InferenceServerException) as e:
                c.load_model(ADD, headers=headers)
            assert str(path) in str(e.value) and f"version {serving} goes on serving" in str(e.value)
            assert breakage != "disagrees" or "warm-up request failed" in str(e.value)
        assert add(explicit.grpc, 20, 22) == ("42", serving)
        index = explicit.grpc.get_model_repository_index(headers=AUTH, as_json=True)["models"]
        assert {"name": ADD, "version": serving, "state": "READY"} in index
    finally:
        shutil.rmtree(folder)


def test_s2s_models_cli(explicit):
    def s2s(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "s2s.cli",
                "models",
                *args,
                "--server",
                explicit.address,
                "--token",
                TOKEN,
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )

    listed = s2s("list")
    assert listed.returncode == 0, listed.stderr
    assert any(line.split("\t")[:1] == [JA] and "READY" in line for line in listed.stdout.splitlines())
    assert s2s("unload", ADD).returncode == 0
    assert f"{ADD}\t-\tUNAVAILABLE\tunloaded" in s2s("list").stdout
    assert ADD not in s2s("list", "--ready").stdout
    loaded = s2s("load", ADD)
    assert loaded.returncode == 0 and "loaded" in loaded.stdout
    missing = s2s("load", "no-such-model")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr and "no-such-model" in missing.stderr


def test_kserve_doc_example(explicit):
    """docs/KSERVE.md's tritonclient example of the model repository runs as written (address and token aside)."""
    text = (ROOT / "docs" / "KSERVE.md").read_text(encoding="utf-8")
    section = text.split("## Model repository", 1)[1].split("\n## ", 1)[0]
    [code] = re.findall(r"```python\n(.*?)```", section, re.S)
    code = code.replace("localhost:8001", explicit.address).replace("Bearer TOKEN", f"Bearer {TOKEN}")
    exec(compile(code, "docs/KSERVE.md", "exec"), {})
    assert explicit.grpc.is_model_ready(ADD, headers=AUTH) and explicit.grpc.is_model_ready(JA, headers=AUTH)
