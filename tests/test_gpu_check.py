"""The GPU check's CPU-checkable parts: its command line, a dry run of every phase on the CPU provider (the
same code a GPU host runs with --device cuda), and the fp16 bundle it exports and checks, on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import CHECKPOINTS, MODEL_REPO, ROOT, served_version


def test_help_says_what_it_checks():
    out = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert "--device {cuda,cpu}" in out.stdout and "make gpu-check" in out.stdout
    assert "gpu-check:" in (ROOT / "Makefile").read_text()


def test_without_cuda_the_cuda_check_refuses_with_the_reason(tmp_path: Path):
    from engine.device import cuda_probe

    if cuda_probe()[0]:
        pytest.skip("CUDA runs here")
    out = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--device", "cuda", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 1
    assert "CUDA cannot run here" in out.stderr and "make install-gpu" in out.stderr


@pytest.mark.slow
def test_dry_run_on_the_cpu_passes_every_phase(tmp_path: Path):
    out = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--device", "cpu", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["passed"] and not report["errors"]
    for phase in ("parity", "decode", "fp16", "serve"):
        assert report[phase]["passed"], (phase, report[phase])
    assert report["parity"]["models"]["translate-en-ja"]["beam4_identical"] == 1.0  # CPU vs CPU: exactly
    assert (
        report["serve"]["answers"] > 0
        and report["serve"]["errors"] == 0
        and report["serve"]["same_as_engine"] == 1.0
    )
    assert {r["batch"] for r in report["decode"]["rows"]} == {1, 16}
    assert "## GPU check" in (tmp_path / "REPORT.md").read_text()
    assert (
        tmp_path / "fp16" / "translate-en-ja" / served_version("translate-en-ja").name / "config.json"
    ).is_file()


def test_fp16_bundle_converted_without_torch_decodes_like_float32_on_the_cpu(tmp_path: Path):
    """ONNX Runtime's CPU provider runs the half-precision graphs: outputs stay those of float32 (addition exact)."""
    import engine
    from contract.bundle import read_bundle
    from export.quantize import convert_bundle

    for name, floor in (("addition", 1.0), ("translate-en-ja", 0.95)):
        cfg = convert_bundle(MODEL_REPO / name / "1", tmp_path / name / "1", "fp16")
        assert cfg.quantization == "fp16" and read_bundle(tmp_path / name / "1").files == cfg.files
        pairs = [
            line.split("\t") for line in (CHECKPOINTS / name / "test.tsv").read_text().splitlines()[:100]
        ]
        srcs = [s for s, _ in pairs]
        f32 = engine.load(MODEL_REPO / name / "1", device="cpu").generate(srcs, beam_size=1)
        f16 = engine.load(tmp_path / name / "1", device="cpu").generate(srcs, beam_size=1)
        assert np.mean([a.tokens == b.tokens for a, b in zip(f32, f16)]) >= floor
    with pytest.raises(ValueError, match="convert a float32 bundle"):
        convert_bundle(tmp_path / "addition" / "1", tmp_path / "again", "fp16")


@pytest.mark.slow
def test_fp16_export_from_a_checkpoint_is_validated(tmp_path: Path):
    from export.onnx_export import ExportOptions, export

    out = export(ExportOptions(CHECKPOINTS / "addition", tmp_path, "addition", 1, quantize="fp16"))
    import engine

    e = engine.load(out, device="cpu")
    assert e.config.quantization == "fp16" and e.config.validation["greedy_identical"] == "16/16"
    assert e.config.validation["decoder"]["empty_past"]["logits_max_abs_diff"] < 0.05
