"""Another commit's server for a side-by-side run: its source tree with its gRPC stubs, and the models as a
server of that age reads them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def baseline_tree(root: Path, ref: str, into: Path) -> Path:
    """REF's source tree (tracked files only), with its gRPC stubs generated, under ``into``."""
    out = into / "baseline"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(root), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    protos = [str(p.relative_to(out)) for p in out.glob("protos/**/*.proto")]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            ".",
            "--python_out=.",
            "--grpc_python_out=.",
            *protos,
        ],
        cwd=out,
        check=True,
    )
    return out


def baseline_repo(repo: Path, model: str, into: Path) -> Path:
    """``model``'s versions for a server that reads bundle format 1: format 2 only added ``task.beam_size`` (the
    default beam), which the table never relies on (every request names its beam), so its config.json is
    written back as format 1 and the payload files are linked, not copied."""
    out = into / "baseline-models"
    for version in sorted(p for p in (repo / model).iterdir() if p.is_dir()):
        dst = out / model / version.name
        dst.mkdir(parents=True)
        for f in version.iterdir():
            if f.name == "config.json":
                cfg = json.loads(f.read_text(encoding="utf-8"))
                if cfg.get("format_version") == 2:
                    cfg["format_version"] = 1
                    cfg.get("task", {}).pop("beam_size", None)
                (dst / f.name).write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            else:
                (dst / f.name).symlink_to(f.resolve())
    return out
