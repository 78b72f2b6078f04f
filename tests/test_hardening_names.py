"""Model names are names: what a client sends as a model name never reaches outside the repository, never
loads one folder twice under two names, never comes back whole in an error, and never grows the server.
Version folders are ASCII digits; anything else in a model folder is ignored with one warning.

Real servers on loopback (explicit and poll model control), tritonclient over gRPC, urllib over HTTP.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import tritonclient.grpc as triton
from conftest import MODEL_REPO, ROOT, ServerThread, server_config, wait_for
from tritonclient.utils import InferenceServerException

ADD = "addition"


def bundle(at) -> None:
    shutil.copytree(MODEL_REPO / ADD / "1", at)


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    repo = root / "models"
    bundle(repo / ADD / "1")
    bundle(root / "outside" / "evil" / "1")  # a bundle that is not in the repository
    (repo / "linked").symlink_to(root / "outside" / "evil", target_is_directory=True)
    srv = ServerThread(
        server_config(model_repo=repo, model_control_mode="explicit", load_model=(ADD,), instances=1)
    )
    srv.root, srv.client = root, triton.InferenceServerClient(srv.address)
    yield srv
    srv.client.close()
    srv.stop()


def load_grpc(srv, name: str) -> tuple[str, str]:
    """(status, message) of RepositoryModelLoad; ("OK", "") when it loaded."""
    try:
        srv.client.load_model(name)
        return "OK", ""
    except InferenceServerException as e:
        return str(e.status()), e.message() or ""


def load_http(srv, quoted: str) -> tuple[int, str]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{srv.config.http_port}/v2/repository/models/{quoted}/load",
        data=b"",
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, ""
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())["error"]


def served(srv) -> list[str]:
    return sorted(srv.running.repo.models)


def test_names_that_are_paths_load_nothing(explicit):
    outside = explicit.root / "outside" / "evil"
    for name in ("../outside/evil", "../../" + str(outside).lstrip("/"), str(outside), "/proc", "..", "."):
        status, message = load_grpc(explicit, name)
        assert status == "StatusCode.INVALID_ARGUMENT" and "is not valid" in message, (name, status, message)
        assert "pid" not in message.lower()
    for quoted in ("..%2Foutside%2Fevil", "%2Fproc", "%2E%2E"):
        status, message = load_http(explicit, quoted)
        assert status == 400 and "is not valid" in message, (quoted, status, message)
    # A folder of the repository that links outside it: refused unless --model-repo-links any.
    status, message = load_grpc(explicit, "linked")
    assert status == "StatusCode.NOT_FOUND" and "links outside the repository" in message, message
    assert served(explicit) == [ADD]


def test_aliases_of_a_model_are_not_new_models(explicit):
    cores = [c.state.pid for api in explicit.running.repo.all() for c in api.cores]
    for name in ("addition/", "./addition", "addition/.", "addition//", "addition\\"):
        status, message = load_grpc(explicit, name)
        assert status == "StatusCode.INVALID_ARGUMENT", (name, status, message)
    assert served(explicit) == [ADD]
    assert [c.state.pid for api in explicit.running.repo.all() for c in api.cores] == cores


def test_long_and_odd_names_get_a_short_clear_error_and_cost_nothing(explicit, caplog):
    status, message = load_grpc(explicit, "a" * 300)
    assert (
        status == "StatusCode.INVALID_ARGUMENT" and "longer than 128 bytes" in message and len(message) < 400
    )
    status, message = load_http(explicit, "b" * 300)
    assert status == 400 and "longer than 128 bytes" in message
    status, message = load_grpc(explicit, "x" * 100_000)
    assert status == "StatusCode.INVALID_ARGUMENT" and "(100000 characters)" in message and len(message) < 400
    status, message = load_grpc(explicit, "bad\nname\x00")
    assert status == "StatusCode.INVALID_ARGUMENT" and "not printable" in message and "\n" not in message
    with caplog.at_level(logging.WARNING, logger="s2s"):
        for i in range(200):  # names that are not in the repository: nothing kept per name, nothing at ERROR
            assert load_grpc(explicit, f"nope-{i}-" + "z" * 100)[0] == "StatusCode.NOT_FOUND"
    assert explicit.running.control._locks == {}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_failed_loads_are_logged_at_a_rate(explicit, caplog):
    broken = explicit.running.repo.config.model_repo / "broken" / "1"
    bundle(broken)
    (broken / "decoder.onnx").write_bytes(b"tampered")
    with caplog.at_level(logging.ERROR, logger="s2s"):
        for _ in range(20):
            status, message = load_grpc(explicit, "broken")
            assert status == "StatusCode.FAILED_PRECONDITION" and "decoder.onnx" in message
    lines = [r for r in caplog.records if r.levelno >= logging.ERROR and "broken" in r.getMessage()]
    assert 1 <= len(lines) <= 2, [r.getMessage() for r in lines]


def test_odd_version_folders_are_ignored_not_fatal(tmp_path, caplog):
    repo = tmp_path / "models"
    bundle(repo / ADD / "1")
    for odd in ("²", "01", "1.5", "v2"):
        (repo / ADD / odd).mkdir()
    (repo / "bad name\t").mkdir()
    with caplog.at_level(logging.WARNING, logger="s2s"):
        srv = ServerThread(
            server_config(model_repo=repo, model_control_mode="poll", repository_poll_secs=0.2, instances=1)
        )
        try:
            assert served(srv) == [ADD] and srv.running.repo.get(ADD).version == "1"
            bundle(repo / ADD / ".2")
            (repo / ADD / ".2").rename(repo / ADD / "2")
            assert wait_for(lambda: srv.running.repo.get(ADD).version == "2", 60)  # polling goes on
        finally:
            srv.stop()
    ignored = [r.getMessage() for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == 5, ignored  # one warning each, however many scans saw them
    assert not [r for r in caplog.records if r.exc_info]


def test_a_refused_model_folder_at_start_is_one_line_not_a_traceback(tmp_path):
    """`s2s serve` whose repository holds a version linked outside it, or a --models pin to a version not on
    disk: exit 2 with one line naming the folder and what to do, before any port is bound."""
    repo = tmp_path / "models"
    bundle(tmp_path / "outside" / "1")
    (repo / ADD).mkdir(parents=True)
    (repo / ADD / "1").symlink_to(tmp_path / "outside" / "1", target_is_directory=True)
    bundle(repo / ADD / "2")
    for pin, expected in (
        (f"{ADD}:1", "links outside the repository"),
        (f"{ADD}:7", f"model '{ADD}' has no version 7 (versions on disk: 1, 2)"),
    ):
        cmd = [sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(repo), "--models", pin]
        cmd += ["--port", "0", "--http-port", "0", "--metrics-port", "0"]
        got = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
        assert expected in got.stderr and "cannot load the model repository" in got.stderr, got.stderr
