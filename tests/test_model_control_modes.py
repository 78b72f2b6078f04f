"""Model control's other modes and its documented commands: poll mode following the repository, none mode
refusing load and unload, and docs/DEPLOYMENT.md's "New versions without a restart" commands run as written.

Each server here serves a temporary repository (conftest.make_repo): a copy of the committed ``addition`` bundle,
whose version folders the tests add and remove, and in none mode a link to ``translate-en-ja`` as well.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import tritonclient.grpc as triton
import tritonclient.http as triton_http
from conftest import ROOT, ServerThread, make_repo, server_config, shell_examples, wait_for
from model_control_repo import ADD, JA, add, add_version
from tritonclient.utils import InferenceServerException


def test_poll_mode_follows_the_repository(tmp_path):
    """No call: a new version folder is served, a removed one falls back to the one before, a broken one is
    logged and left while the serving version goes on, and a new model folder is loaded."""
    repo = make_repo(tmp_path, other=False)
    srv = ServerThread(
        server_config(model_repo=repo, model_control_mode="poll", repository_poll_secs=0.2, instances=1)
    )
    c = triton.InferenceServerClient(srv.address)
    try:
        assert add(c, 1, 2) == ("3", "1")
        add_version(repo, 2)
        assert wait_for(lambda: add(c, 1, 2)[1] == "2", 60)
        with pytest.raises(InferenceServerException) as e:
            c.load_model(ADD)  # the disk decides in poll mode
        assert "explicit" in str(e.value)
        broken = add_version(repo, 3)
        (broken / "encoder.onnx").write_bytes(b"not a model")
        assert wait_for(lambda: "encoder.onnx" in srv.running.control.failure(ADD), 60)
        assert add(c, 1, 2) == ("3", "2")
        shutil.rmtree(broken)
        shutil.rmtree(repo / ADD / "2")
        assert wait_for(lambda: add(c, 1, 2)[1] == "1", 60)
        add_version(repo, 1, "addition-copy")
        assert wait_for(lambda: c.is_model_ready("addition-copy"), 60)
        shutil.rmtree(repo / "addition-copy")
        assert wait_for(lambda: not c.is_model_ready("addition-copy"), 60)
    finally:
        c.close()
        srv.stop()


def test_none_mode_refuses_load_and_unload(tmp_path):
    repo = make_repo(tmp_path)
    srv = ServerThread(server_config(model_repo=repo, models=(ADD,), instances=1))
    c = triton_http.InferenceServerClient(f"127.0.0.1:{srv.running.web.port}")
    try:
        for call in (c.load_model, c.unload_model):
            with pytest.raises(InferenceServerException) as e:
                call(ADD)
            assert "--model-control-mode explicit" in str(e.value) and e.value.status() == "400"
        assert c.is_model_ready(ADD)
        assert {m["name"]: m["state"] for m in c.get_model_repository_index()} == {
            ADD: "READY",
            JA: "UNAVAILABLE",
        }
    finally:
        c.close()
        srv.stop()


def deployment_examples() -> list[tuple[str, str]]:
    """The ```sh commands of docs/DEPLOYMENT.md's "New versions without a restart", each with the text its
    `# -> ` line says its output holds."""
    text = (ROOT / "docs" / "DEPLOYMENT.md").read_text(encoding="utf-8")
    section = text.split("## New versions without a restart", 1)[1].split("\n## ", 1)[0]
    return shell_examples(section, "docs/DEPLOYMENT.md")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_deployment_examples(tmp_path):
    examples = deployment_examples()
    assert len(examples) >= 8
    repo = make_repo(tmp_path, other=False)
    srv = ServerThread(
        server_config(model_repo=repo, model_control_mode="explicit", load_model=(ADD,), instances=1)
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    s2s = f"{sys.executable} -m s2s.cli models --server {srv.address}"
    try:
        for command, expected in examples:
            command = command.replace("localhost:8000", f"127.0.0.1:{srv.running.web.port}").replace(
                "s2s models", s2s
            )
            run = subprocess.run(
                ["bash", "-c", "set -o pipefail; " + command],
                capture_output=True,
                text=True,
                timeout=120,
                cwd=tmp_path,
                env=env,
            )
            assert run.returncode == 0, f"{command}\n{run.stderr}"
            assert expected in run.stdout, f"{command}\n-> {run.stdout}"
    finally:
        srv.stop()
