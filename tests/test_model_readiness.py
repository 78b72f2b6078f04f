"""Per-model readiness: the ports open at once and each model answers as soon as its own engine cores are up, while
the others say they are loading (gRPC health under each model's name, KServe's per-model ready endpoint, the
repository index); `--readiness per-model` keeps a pod serving several models ready while one of them is down.
And `--model-name`: a repository that is one model, as KServe's storage initializer lays out /mnt/models.

A slow load is made real by freezing the engine core of translate-en-ja (SIGSTOP) the moment it is spawned, before
it has loaded anything: it then loads exactly as long as the test says.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.http as triton_http
from conftest import MODEL_REPO, ROOT, ServerThread, alive, free_port, serve_cmd, server_config, wait_for
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from s2s.seq2seq_client import Seq2SeqClient

ADD, JA = "addition", "translate-en-ja"
SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def core_of(server_pid: int, label: str, exclude: int = 0, timeout_s: float = 60) -> int:
    """The pid of the server's engine core ``label`` (model#index: its command line names it), found the moment it
    exists."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == exclude:
                continue
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
                argv = Path(f"/proc/{entry.name}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == server_pid and label.encode() in argv:
                return int(entry.name)
        time.sleep(0.002)
    raise AssertionError(f"no engine core {label} of pid {server_pid} within {timeout_s:.0f} s")


def health(address: str, service: str) -> int:
    with grpc.insecure_channel(address) as ch:
        return (
            health_pb2_grpc.HealthStub(ch)
            .Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            .status
        )


def get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def infer(http_port: int, model: str, text: str) -> str:
    with triton_http.InferenceServerClient(f"127.0.0.1:{http_port}") as client:
        inp = triton_http.InferInput("text_input", [1], "BYTES")
        inp.set_data_from_numpy(np.array([text.encode()], dtype=object))
        return client.infer(model, [inp]).as_numpy("text_output")[0].decode()


def answers(http_port: int) -> bool:
    try:
        return infer(http_port, ADD, "20+22") == "42"
    except (InferenceServerException, OSError):
        return False


def test_a_slow_loading_model_keeps_neither_a_fast_one_nor_the_pod_from_serving(tmp_path):
    """Explicit model control, two models loaded at start: translate-en-ja's core is held back."""
    port, http_port, metrics_port = free_port(), free_port(), free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            serve_cmd(
                MODEL_REPO,
                port,
                http_port,
                metrics_port,
                "--model-control-mode",
                "explicit",
                "--load-model",
                f"{ADD}@1,{JA}@1",
                "--readiness",
                "per-model",
                "--grace-s",
                "5",
            ),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    address, base = f"127.0.0.1:{port}", f"http://127.0.0.1:{http_port}"
    slow = core_of(proc.pid, f"{JA}#0")
    os.kill(slow, signal.SIGSTOP)  # translate-en-ja loads for as long as it stays stopped
    try:
        # addition answers while translate-en-ja loads, and health says which is which
        assert wait_for(lambda: answers(http_port), 60), log_path.read_text()[-3000:]
        assert health(address, ADD) == SERVING and health(address, JA) == NOT_SERVING
        assert health(address, "") == NOT_SERVING, "the server is ready once every model has loaded"
        assert get(f"{base}/v2/health/ready") == (503, {"ready": False, "loading": [JA]})
        assert get(f"{base}/v2/models/{JA}/ready") == (503, {"name": JA, "ready": False, "loading": True})
        assert get(f"{base}/v2/models/{ADD}/ready") == (200, {"name": ADD, "ready": True})
        with triton_http.InferenceServerClient(f"127.0.0.1:{http_port}") as client:
            index = {m["name"]: m for m in client.get_model_repository_index()}
            assert index[JA]["state"] == "LOADING" and index[ADD]["state"] == "READY", index
            # the repository API keeps its hands off a model the server is still loading at start
            for change in (client.load_model, client.unload_model):
                with pytest.raises(InferenceServerException, match="still loading"):
                    change(JA, headers={"Content-Type": "application/json"})
        with pytest.raises(InferenceServerException, match="loading"):
            infer(http_port, JA, "Hello.")
        with Seq2SeqClient(address) as c, pytest.raises(grpc.RpcError) as refused:
            c.generate(JA, ["Hello."])
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "loading" in refused.value.details()
    finally:
        os.kill(slow, signal.SIGCONT)
    try:
        assert wait_for(lambda: health(address, "") == SERVING, 60), log_path.read_text()[-3000:]
        assert infer(http_port, JA, "Hello.") and get(f"{base}/v2/health/ready") == (200, {"ready": True})

        # --readiness per-model: addition's only core dies and its restart is held up; the pod stays ready (for
        # translate-en-ja), addition says it is down.
        first = core_of(proc.pid, f"{ADD}#0")
        os.kill(first, signal.SIGKILL)
        again = core_of(proc.pid, f"{ADD}#0", exclude=first)
        os.kill(again, signal.SIGSTOP)
        try:
            assert wait_for(lambda: health(address, ADD) == NOT_SERVING, 30)
            assert health(address, "") == SERVING and health(address, JA) == SERVING
            assert infer(http_port, JA, "Hello.")
        finally:
            os.kill(again, signal.SIGCONT)
        assert wait_for(lambda: health(address, ADD) == SERVING, 60) and answers(http_port)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(30) == 0, log_path.read_text()[-3000:]
        finally:
            proc.kill()
    assert "Traceback" not in log_path.read_text()


def test_sigterm_while_a_model_loads_stops_at_once_and_leaves_no_core_behind(tmp_path):
    """A pod told to stop while a model still loads (a rollout replaced it): the model that serves drains, the one
    still loading is stopped where it is, and the server exits 0 without waiting for that load."""
    port, http_port = free_port(), free_port()
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            serve_cmd(MODEL_REPO, port, http_port, 0, "--models", f"{ADD}@1,{JA}@1", "--grace-s", "30"),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    slow = core_of(proc.pid, f"{JA}#0")
    os.kill(slow, signal.SIGSTOP)
    try:
        assert wait_for(lambda: answers(http_port), 60), log_path.read_text()[-3000:]
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, log_path.read_text()[-3000:]
        assert time.monotonic() - signalled < 20, "the stop waited for the load (or the whole grace period)"
        assert wait_for(lambda: not alive(slow), 10), "the loading engine core outlived the server"
    finally:
        proc.kill()
        if alive(slow):
            os.kill(slow, signal.SIGKILL)
    assert "Traceback" not in log_path.read_text()


# ---- --model-name -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["model-folder", "bundle"])
def test_model_name_serves_one_model_folder_or_one_bundle_under_that_name(layout):
    """KServe leaves a storageUri at /mnt/models either as the model's folder (<version>/config.json: a pvc:// path,
    or an s3:// prefix above the versions) or as the bundle itself (an s3:// prefix of one version folder)."""
    repo = MODEL_REPO / ADD if layout == "model-folder" else MODEL_REPO / ADD / "1"
    srv = ServerThread(server_config(model_repo=repo, model_name="sums"))
    try:
        assert list(srv.running.repo.models) == ["sums"] and list(srv.running.repo.models["sums"]) == ["1"]
        with Seq2SeqClient(srv.address) as c:
            assert c.generate("sums", ["2+2"]) == ["4"]
            with pytest.raises(grpc.RpcError) as e:
                c.generate(ADD, ["2+2"])
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
        status, body = get(f"http://127.0.0.1:{srv.config.http_port}/v2/models/sums/ready")
        assert (status, body) == (200, {"name": "sums", "ready": True})
    finally:
        srv.stop()


def test_a_folder_that_is_not_one_model_is_one_line_and_rc_2():
    """A repository of several models given --model-name: exit 2 naming both layouts the flag reads."""
    cmd = [sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(MODEL_REPO), "--model-name", "x"]
    got = subprocess.run(cmd + ["--port", "0", "--http-port", "0", "--metrics-port", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert f"{MODEL_REPO}/config.json or {MODEL_REPO}/<version>/config.json" in got.stderr, got.stderr


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--model-name", "a/b"], "--model-name 'a/b' is not a model name: it holds a path separator"),
        (["--model-name", ".."], "--model-name '..' is not a model name"),
        (["--readiness", "some"], "--readiness must be all or per-model, not 'some'"),
    ],
)
def test_a_bad_model_name_or_readiness_is_refused_by_name(flags, expected):
    import argparse

    from server.config import add_arguments, from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit) as e:
        from_args(parser.parse_args(flags), {})
    assert str(e.value) == expected or str(e.value).startswith(expected), e.value
