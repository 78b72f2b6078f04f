"""Every curl example in docs/HTTP.md, run against a live server: each ```sh block is a series of
commands, each followed by a `# -> TEXT` line naming text its output contains."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from conftest import ROOT, shell_examples

DOC = ROOT / "docs" / "HTTP.md"


def examples() -> list[tuple[str, str]]:
    return shell_examples(DOC.read_text(encoding="utf-8"), "docs/HTTP.md")


def test_the_doc_has_examples_for_every_endpoint():
    text = "\n".join(cmd for cmd, _ in examples())
    for path in (
        "/v2/health/ready",
        "/v2/models/addition/infer",
        "/v2/repository/index",
        "/config",
        "/translate",
        "/languages",
        "/detect",
    ):
        assert path in text, f"docs/HTTP.md has no curl example for {path}"


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
@pytest.mark.parametrize(
    "command, expected", examples(), ids=lambda x: x.splitlines()[0][:60] if "\n" in x or len(x) > 30 else x
)
def test_curl_example(server, command, expected):
    port = server.running.web.port
    run = subprocess.run(
        ["bash", "-c", "set -o pipefail; " + command.replace("localhost:8000", f"127.0.0.1:{port}")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert expected in run.stdout, f"{command}\n-> {run.stdout}"
