"""`make help` and `s2s --help` name the server's three ports, as `s2s serve` opens them by default."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from s2s.cli import main
from server.config import ServerConfig

ROOT = Path(__file__).resolve().parents[1]


def ports() -> list[str]:
    c = ServerConfig(model_repo=Path("models"))
    return [f":{c.http_port}", f":{c.port}", f":{c.metrics_port}"]


def test_make_help_names_every_port():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    (serve,) = [line for line in out.splitlines() if line.startswith("serve\t")]
    assert all(p in serve for p in ports()) and "HTTP" in serve, serve


def test_s2s_help_names_every_port(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert all(f"{name} {p}" in text for name, p in zip(("HTTP", "gRPC", "metrics"), ports())), text
