"""bench/quality/protected_spans.py runs (--quick) and its results hold the guarantee: every string kept when
protected, through the server and in process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import MODEL_REPO, ROOT


@pytest.mark.skipif(not (MODEL_REPO / "translate-en-ja").is_dir(), reason="no translate-en-ja model")
def test_quick_run(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.quality.protected_spans", "--quick", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((tmp_path / "protected-spans.json").read_text(encoding="utf-8"))
    served = next(b for b in results["blocks"] if b.get("table") == "served")["rows"]
    protected = [r for r in served if r["protection"] == "on (default)"]
    assert protected and all(r["kept"] == r["strings"] and r["refused"] == 0 for r in protected)
    assert any(r["refused"] for r in served if r["protection"] == "off")  # the long input, not split
    reads = next(b for b in results["blocks"] if b.get("table") == "reads")["rows"]
    assert all(r["kept"] == reads[1]["kept"] for r in reads[1:])
