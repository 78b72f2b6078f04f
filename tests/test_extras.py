"""pyproject.toml's extras, resolved for each platform by their environment markers: ONNX Runtime's GPU build where
PyPI has it (Linux x86_64), its CPU build elsewhere, never both; the import extra without the training stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
PLATFORMS = {  # name: what packaging's markers read
    "linux-x86_64": {"sys_platform": "linux", "platform_machine": "x86_64"},
    "linux-aarch64": {"sys_platform": "linux", "platform_machine": "aarch64"},
    "macos-arm64": {"sys_platform": "darwin", "platform_machine": "arm64"},
    "macos-x86_64": {"sys_platform": "darwin", "platform_machine": "x86_64"},
}


def resolved(extras: tuple[str, ...], env: dict[str, str]) -> set[str]:
    """The distribution names the extras install on ``env`` (the project's own extras followed)."""
    names: set[str] = set()
    for extra in extras:
        for line in EXTRAS[extra]:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            if req.name == "s2s-serve":
                names |= resolved(tuple(req.extras), env)
            else:
                names.add(req.name)
    return names


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("extras", [("serve",), ("import",), ("serve", "gpu"), ("dev",)])
def test_one_onnx_runtime_per_platform(platform, extras):
    runtimes = resolved(extras, PLATFORMS[platform]) & {"onnxruntime", "onnxruntime-gpu"}
    assert runtimes == ({"onnxruntime-gpu"} if platform == "linux-x86_64" else {"onnxruntime"}), runtimes


def test_import_extra_holds_what_the_import_needs():
    names = resolved(("import",), PLATFORMS["linux-x86_64"])
    assert {"torch", "onnxscript", "transformers", "safetensors", "onnx", "onnxruntime-gpu"} <= names
    assert not names & {"sacrebleu", "matplotlib", "polib", "grpcio", "aiohttp"}, names
