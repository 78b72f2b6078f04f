"""What the benchmarks run on, made once and cached: held-out inputs, a repository's served version and the
checkpoint it was exported from, a checkpoint's bundle variants (exported once under .cache/bench/models/) and
its CTranslate2 conversion (.cache/bench/ct2-<checkpoint>/, export/ctranslate2.py)."""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

from bench import CACHE, ROOT

HELDOUT = ROOT / "data" / "en-ja" / "heldout-projects.tsv"  # strings of projects no training file draws on


def ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def words(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def model_arguments(p) -> None:
    """What a model's benchmark runs on: a model of a repository (its served version), the checkpoint CTranslate2
    converts, the held-out inputs."""
    p.add_argument(
        "--model", default="translate-en-ja", help="a model of --model-repo (default: %(default)s)"
    )
    p.add_argument("--model-repo", type=Path, default=ROOT / "models")
    p.add_argument(
        "--checkpoint", type=Path, help="what CTranslate2 converts (default: the served version's own)"
    )
    p.add_argument(
        "--data", type=Path, help="held-out TSV, source first (default: checkpoints/MODEL/test.tsv)"
    )
    p.add_argument("--limit-inputs", type=int, default=0, help="its first N inputs only (0: all)")


def data(args) -> Path:
    return args.data or ROOT / "checkpoints" / args.model / "test.tsv"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def latest(repo: Path, model: str) -> Path:
    """``repo``/``model``/<highest version>: the version `s2s serve` serves by default."""
    from server.models.disk import versions_on_disk

    versions = versions_on_disk(Path(repo) / model) if (Path(repo) / model).is_dir() else []
    if not versions:
        raise SystemExit(f"no version of {model} under {repo} (export one, or pass --model-repo)")
    return Path(repo) / model / str(versions[-1])


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


def pairs(path: Path, limit: int = 0) -> list[tuple[str, str]]:
    """(source, reference) rows of a TSV, in file order."""
    if not Path(path).is_file():
        raise SystemExit(f"no inputs at {path} (give --data FILE.tsv)")
    rows = [line.split("\t") for line in Path(path).read_text(encoding="utf-8").splitlines()]
    out = [(r[0], r[1] if len(r) > 1 else "") for r in rows if r and r[0].strip()]
    return out[:limit] if limit else out


def servable(engine, path: Path, limit: int = 0) -> list[str]:
    """The sources of ``path`` a server takes from ``engine``'s model (within its positions, known characters)."""
    from contract.text import UnknownCharactersError

    texts = []
    for src, _ in pairs(path):
        try:
            if len(engine.codec.source_ids(src)) <= engine.config.model.max_len:
                texts.append(src)
        except UnknownCharactersError:
            continue
    if not texts:
        raise SystemExit(f"no usable inputs in {path}")
    return texts[:limit] if limit else texts


def cached_bundle(checkpoint_dir: Path, name: str, quantize: str = "none", fused: bool = False) -> Path:
    """A bundle of the checkpoint under .cache/bench/models/, exported once per weights and variant (again when
    the export code changed since): ``quantize`` as `s2s export --quantize`, ``fused`` as --fused-attention."""
    from contract import bundle
    from export.quantize import resolve
    from training import checkpoint as ckpt_io

    quantize, repo = resolve(quantize), CACHE / "models"
    bname = "-".join([name] + ([quantize] if quantize != "none" else []) + (["fused"] if fused else []))
    folder, want = repo / bname / "1", bundle.FORMAT_CONTRIB_OPS if fused else bundle.FORMAT_VERSION
    recipe = max(p.stat().st_mtime for p in (ROOT / "export").glob("*.py"))
    if (folder / "config.json").is_file() and (folder / "config.json").stat().st_mtime > recipe:
        try:
            cfg = bundle.read_bundle(folder, verify_hashes=False)
            same = cfg.source_checkpoint_sha256 == ckpt_io.weights_sha256(checkpoint_dir)
            if same and cfg.quantization == quantize and cfg.format_version == want:
                return folder
        except Exception:  # stale or partial: exported again
            pass
    from export.onnx_export import ExportOptions, export

    logging.getLogger("s2s").setLevel(logging.WARNING)
    log(f"exporting {bname} from {checkpoint_dir} to {folder} ...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.onnx's dynamic-axis naming notes
        options = ExportOptions(
            checkpoint=checkpoint_dir, repo=repo, name=bname, version=1, quantize=quantize, fused=fused
        )
        return export(options)


def ct2_model(checkpoint: Path) -> Path:
    """The checkpoint converted for CTranslate2 (float32; it quantizes on load), once per weights."""
    from export.ctranslate2 import convert

    log(f"CTranslate2: {checkpoint} converted (cached in {CACHE})")
    return convert(checkpoint, CACHE / f"ct2-{Path(checkpoint).name}")


def rel(p: Path) -> str:
    """``p`` relative to the repository where it is inside it."""
    try:
        return str(Path(p).resolve().relative_to(ROOT))
    except ValueError:
        return str(p)
