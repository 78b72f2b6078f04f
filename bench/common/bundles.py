"""Bundles the benchmarks run: a repository's latest version, and variants of a checkpoint exported once."""

from __future__ import annotations

import sys
from pathlib import Path

from bench import CACHE, ROOT


def latest(repo: Path, model: str) -> Path | None:
    """``repo``/``model``/<highest version>, or None when there is none."""
    versions = sorted(
        (int(d.name) for d in (Path(repo) / model).glob("*") if d.is_dir() and d.name.isdigit()), reverse=True
    )
    return Path(repo) / model / str(versions[0]) if versions else None


def source_checkpoint(bundle_dir: Path, model: str) -> Path:
    """The folder under checkpoints/ whose weights the bundle was exported from (its config.json's
    source_checkpoint_sha256; each published version has its own checkpoint), else checkpoints/<model>."""
    from contract import bundle
    from training import checkpoint as ckpt_io

    want = bundle.read_bundle(Path(bundle_dir), verify_hashes=False).source_checkpoint_sha256
    for folder in sorted((ROOT / "checkpoints").glob("*/")):
        if (folder / "config.json").is_file() and any(folder.glob("*.safetensors")):
            if ckpt_io.weights_sha256(folder) == want:
                return folder
    return ROOT / "checkpoints" / model


def cached_bundle(checkpoint_dir: Path, name: str, quantize: str = "none", fused: bool = False) -> Path:
    """A bundle of the checkpoint under .cache/bench/models/, exported once per weights and variant:
    ``quantize`` as `s2s export --quantize` ("int8" = the default variant), ``fused`` as --fused-attention."""
    from contract import bundle
    from export.quantize import resolve
    from training import checkpoint as ckpt_io

    quantize = resolve(quantize)
    repo = CACHE / "models"
    bname = "-".join([name] + ([quantize] if quantize != "none" else []) + (["fused"] if fused else []))
    folder = repo / bname / "1"
    want = bundle.FORMAT_CONTRIB_OPS if fused else bundle.FORMAT_VERSION
    # Exported again when the weights, the variant or the export code (export/*.py) changed since.
    recipe = max(p.stat().st_mtime for p in (ROOT / "export").glob("*.py"))
    if (folder / "config.json").is_file() and (folder / "config.json").stat().st_mtime > recipe:
        try:
            cfg = bundle.read_bundle(folder, verify_hashes=False)
            if (
                cfg.source_checkpoint_sha256 == ckpt_io.weights_sha256(checkpoint_dir)
                and cfg.quantization == quantize
                and cfg.format_version == want
            ):
                return folder
        except Exception:  # stale or partial: re-export
            pass
    import logging
    import warnings

    from export.onnx_export import ExportOptions, export

    logging.getLogger("s2s").setLevel(logging.WARNING)
    print(f"exporting {bname} from {checkpoint_dir} to {folder} ...", file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.onnx's dynamic-axis naming notes
        return export(
            ExportOptions(
                checkpoint=checkpoint_dir, repo=repo, name=bname, version=1, quantize=quantize, fused=fused
            )
        )


def rel(p: Path) -> str:
    """``p`` relative to the repository where it is inside it."""
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)
