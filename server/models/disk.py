"""The model repository on disk: ``models/<name>/<version>/``, one bundle per version folder."""

from __future__ import annotations

from pathlib import Path

from contract.bundle import BundleError


def versions_on_disk(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def parse_model(item: str) -> tuple[str, str, int | None]:
    """NAME, NAME:VERSION, NAME@CORES or NAME:VERSION@CORES -> (name, version or "", cores or None)."""
    spec, _, cores = item.partition("@")
    name, _, version = spec.partition(":")
    if cores and not (cores.isdigit() and int(cores) > 0):
        raise BundleError(f"--models {item!r}: the number of engine cores after '@' must be a positive integer")
    if version and not version.isdigit():
        raise BundleError(f"--models {item!r}: the version after ':' must be a number")
    return name, version, int(cores) if cores else None


def select(repo: Path, wanted: tuple[str, ...]) -> list[tuple[str, int, int | None]]:
    """(name, version, cores) to serve: every model at its latest version, or NAME[:VERSION][@CORES] as asked."""
    if not repo.is_dir():
        raise BundleError(f"{repo}: model repository not found (expected {repo}/<name>/<version>/config.json)")
    if wanted:
        out = []
        for item in wanted:
            name, ver, cores = parse_model(item)
            d = repo / name
            if not d.is_dir() or not versions_on_disk(d):
                raise BundleError(f"{d}: model {name!r} not found in the repository")
            out.append((name, int(ver) if ver else versions_on_disk(d)[-1], cores))
        return out
    out = [(d.name, versions_on_disk(d)[-1], None) for d in sorted(repo.iterdir()) if d.is_dir() and versions_on_disk(d)]
    if not out:
        raise BundleError(f"{repo}: no models (expected {repo}/<name>/<version>/config.json)")
    return out


def model_folders(repo: Path) -> list[str]:
    """Models in the repository: folders with at least one version folder."""
    if not repo.is_dir():
        return []
    return [d.name for d in sorted(repo.iterdir()) if d.is_dir() and versions_on_disk(d)]
