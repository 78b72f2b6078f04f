"""The model repository on disk: ``models/<name>/<version>/``, one bundle per version folder."""

from __future__ import annotations

from pathlib import Path

from contract.bundle import BundleError
from server.models.names import is_version, name_problem, warn_ignored


def versions_on_disk(model_dir: Path) -> list[int]:
    """The version folders of a model folder; anything else in it is ignored, with one warning."""
    out = []
    try:
        entries = list(model_dir.iterdir())
    except OSError:
        return []
    for p in entries:
        if is_version(p.name) and p.is_dir():
            out.append(int(p.name))
        elif p.is_dir():
            warn_ignored(p, "not a version folder (a version is ASCII digits with no leading zero, e.g. 1)")
    return sorted(out)


def parse_model(item: str) -> tuple[str, str, int | None]:
    """NAME, NAME:VERSION, NAME@CORES or NAME:VERSION@CORES -> (name, version or "", cores or None)."""
    spec, _, cores = item.partition("@")
    name, _, version = spec.partition(":")
    if cores and not (cores.isdigit() and int(cores) > 0):
        raise BundleError(
            f"--models {item!r}: the number of engine cores after '@' must be a positive integer"
        )
    if version and not is_version(version):
        raise BundleError(f"--models {item!r}: the version after ':' must be a number (ASCII digits, e.g. 1)")
    if why := name_problem(name):
        raise BundleError(f"--models {item!r}: {name!r} is not a model name: {why}")
    return name, version, int(cores) if cores else None


def select(repo: Path, wanted: tuple[str, ...]) -> list[tuple[str, int, int | None]]:
    """(name, version, cores) to serve: every model at its latest version, or NAME[:VERSION][@CORES] as asked."""
    if not repo.is_dir():
        raise BundleError(
            f"{repo}: model repository not found (expected {repo}/<name>/<version>/config.json)"
        )
    if wanted:
        out = []
        for item in wanted:
            name, ver, cores = parse_model(item)
            d = repo / name
            if not d.is_dir() or not versions_on_disk(d):
                raise BundleError(f"{d}: model {name!r} not found in the repository")
            if ver and not (d / ver).is_dir():
                have = ", ".join(map(str, versions_on_disk(d)))
                raise BundleError(
                    f"{d / ver}: model {name!r} has no version {ver} (versions on disk: {have})"
                )
            out.append((name, int(ver) if ver else versions_on_disk(d)[-1], cores))
        return out
    out = [(name, versions_on_disk(repo / name)[-1], None) for name in model_folders(repo)]
    if not out:
        raise BundleError(f"{repo}: no models (expected {repo}/<name>/<version>/config.json)")
    return out


def model_folders(repo: Path) -> list[str]:
    """Models in the repository: folders with at least one version folder (and a name that is a model name)."""
    if not repo.is_dir():
        return []
    out = []
    for d in sorted(repo.iterdir()):
        if not d.is_dir():
            continue
        if why := name_problem(d.name):
            warn_ignored(d, f"not a model name: {why}")
        elif versions_on_disk(d):
            out.append(d.name)
    return out
