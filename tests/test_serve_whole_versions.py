"""`s2s serve` over a repository where a version was cut short (what an export killed while it copied left, before
bundles were published whole): the start serves each model's newest whole version, logs the broken one with the file
it lacks, and serves the other models as ever; a repository where nothing is whole fails the start with one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import MODEL_REPO, ROOT, Served, assert_no_traceback

from contract import bundle
from s2s.seq2seq_client import Seq2SeqClient

ADD = "addition"


def cut_short(good: Path, broken: Path, version: int) -> None:
    """A copy of ``good`` as version ``version`` whose decoder stops half-way: the copy killed mid-file."""
    shutil.copytree(good, broken)
    cfg = json.loads((broken / bundle.CONFIG_FILE).read_text())
    (broken / bundle.CONFIG_FILE).write_text(json.dumps({**cfg, "version": version}))
    data = (broken / bundle.DECODER_FILE).read_bytes()
    (broken / bundle.DECODER_FILE).write_bytes(data[: len(data) // 2])


def test_the_newest_whole_version_is_served_and_the_cut_one_logged(tmp_path):
    repo = tmp_path / "models"
    shutil.copytree(MODEL_REPO / ADD / "1", repo / "m" / "1")
    cut_short(repo / "m" / "1", repo / "m" / "2", 2)
    shutil.copytree(MODEL_REPO / ADD / "1", repo / ADD / "1")
    srv = Served(tmp_path, "--model-repo", str(repo), "--instances", "1")
    try:
        with Seq2SeqClient(srv.address) as c:
            assert c.generate("m", ["12+30"]) == ["42"]
            assert c.generate(ADD, ["7+8"]) == ["15"]
        log = srv.log()
    finally:
        assert srv.stop() == 0
    assert "serving m version 1" in log and "serving m version 2" not in log, log[-3000:]
    assert f"serving {ADD} version 1" in log
    said = [line for line in log.splitlines() if "version 2 is not served, it is incomplete" in line]
    assert len(said) == 1 and "decoder.onnx: sha256" in said[0] and "WARNING" in said[0], log[-3000:]
    assert_no_traceback(log)


def test_a_repository_with_nothing_whole_fails_the_start_in_one_line(tmp_path):
    repo = tmp_path / "models"
    cut_short(MODEL_REPO / ADD / "1", repo / ADD / "1", 1)
    cmd = [sys.executable, "-m", "s2s.cli", "serve", "--model-repo", str(repo)]
    got = subprocess.run(
        cmd + ["--port", "0", "--http-port", "0", "--metrics-port", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert "no model has a whole version" in got.stderr and "decoder.onnx: sha256" in got.stderr
