"""What `s2s import` prints, run as a user runs it (a child process, its own logging): this project's lines, the
bundle's path last, and none of the libraries' routine chatter (onnxscript's INFO passes, torch.onnx's
torchvision notices and axis-name warnings, torch.export's deprecation warning)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import marian_models as mm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_import_prints_our_lines_only(tmp_path: Path):
    mm.make(tmp_path / "ckpt", steps=0, n_lines=120)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "s2s.cli", "import", str(tmp_path / "ckpt"), "--repo", str(tmp_path / "repo"), "--name", "m"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().splitlines() == [str(tmp_path / "repo" / "m" / "1")]
    lines = run.stderr.strip().splitlines()
    assert all(line.startswith(("INFO s2s.", "WARNING s2s.")) for line in lines), run.stderr
    assert any(line.startswith("INFO s2s.export: exported ") for line in lines), run.stderr
    assert len(lines) <= 8, run.stderr
