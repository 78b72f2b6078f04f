"""The model repository on disk: ``models/<name>/<version>/``, one bundle per version folder; or, with
``--model-name``, the repository folder as that one model, laid out as KServe's storage initializer leaves a
``storageUri`` at /mnt/models: the model's folder (``<version>/config.json``) or one bundle (``config.json``).

At start each model serves its newest *whole* version (``contract.bundle.incomplete``: config.json and every file it
lists, each with its recorded sha256): a version cut short (an export killed while copying, by a version of s2s
that wrote in place) is logged and passed over, so it neither stops the start nor takes the other models down.
An export's staging folder (``contract/repository.py``) is not a version and is passed over without a word.
"""

from __future__ import annotations

import logging
from pathlib import Path

from contract.bundle import CONFIG_FILE, BundleError, incomplete
from contract.config import read_json
from contract.repository import is_staging
from server.errors import ModelNotFound, clip
from server.models.names import check_name, inside, is_version, name_problem, warn_ignored, within

log = logging.getLogger("s2s.repository")


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
        elif p.is_dir() and not is_staging(p.name):
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


class Repository:
    """Where each model's versions are. ``single``: the root is that one model, as a model folder or as one bundle
    (its version: the one its config.json records)."""

    def __init__(self, root: Path, single: str | None = None, follow_any: bool = False):
        self.root, self.single, self.follow_any = root, single, follow_any

    @property
    def expected(self) -> str:
        if self.single:
            return f"{self.root}/{CONFIG_FILE} or {self.root}/<version>/{CONFIG_FILE}"
        return f"{self.root}/<name>/<version>/{CONFIG_FILE}"

    def _bundle_version(self) -> int | None:
        """With --model-name: the version of the bundle at the root itself (None: the root is no bundle)."""
        if not self.single or not (self.root / CONFIG_FILE).is_file():
            return None
        try:
            version = int(read_json(self.root / CONFIG_FILE)["version"])
        except (OSError, ValueError, KeyError, TypeError):
            return 1  # the load names what is wrong with config.json
        return version if version >= 0 else 1

    def names(self) -> list[str]:
        """The models on disk."""
        if self.single:
            return [self.single] if self.versions(self.single) else []
        return model_folders(self.root)

    def model_dir(self, name: str) -> Path:
        """A model's folder (InvalidInput for a name that cannot be one; ModelNotFound for one that links out)."""
        if self.single:
            check_name(name)
            if name != self.single:
                raise ModelNotFound(
                    f"model {clip(name)} is not in the repository: {self.root} is the one model "
                    f"{self.single!r} (--model-name)"
                )
            return self.root
        return inside(self.root, name, follow_any=self.follow_any)

    def versions(self, name: str) -> list[int]:
        if self.single and name == self.single and (version := self._bundle_version()) is not None:
            return [version]
        folder = self.model_dir(name)  # ModelNotFound: a folder that links out of the repository
        return versions_on_disk(folder) if folder.is_dir() else []

    def version_dir(self, name: str, version: str) -> Path:
        if self.single and self._bundle_version() is not None:
            return self.root
        if not self.single:
            return inside(self.root, name, version, follow_any=self.follow_any)
        folder = self.model_dir(name) / version
        return folder if self.follow_any else within(self.root, folder, f"model {name!r} version {version}")

    def newest_whole(self, name: str) -> int | None:
        """The newest version of a model that is a whole bundle; each newer one is logged with what it lacks. None
        when none is whole (logged too)."""
        versions = self.versions(name)
        for v in reversed(versions):
            why = incomplete(self.version_dir(name, str(v)))
            if not why:
                return v
            log.warning("model %s: version %d is not served, it is incomplete: %s", name, v, why)
        if versions:
            log.error("model %s: no version is whole; the model is not served", name)
        return None

    def select(self, wanted: tuple[str, ...]) -> list[tuple[str, int, int | None]]:
        """(name, version, cores) to serve: every model at its newest whole version, or NAME[:VERSION][@CORES] as
        asked (a pinned version as it is: its load names what is wrong with it)."""
        if not self.root.is_dir():
            raise BundleError(f"{self.root}: model repository not found (expected {self.expected})")
        if wanted:
            out = []
            for item in wanted:
                name, ver, cores = parse_model(item)
                on_disk = self.versions(name)
                d = self.root if self.single else self.root / name
                if not on_disk:
                    raise BundleError(
                        f"{d}: model {name!r} not found in the repository (expected {self.expected})"
                    )
                if ver and int(ver) not in on_disk:
                    have = ", ".join(map(str, on_disk))
                    raise BundleError(
                        f"{d / ver}: model {name!r} has no version {ver} (versions on disk: {have})"
                    )
                newest = int(ver) if ver else self.newest_whole(name)
                if newest is None:
                    why = incomplete(self.version_dir(name, str(on_disk[-1])))
                    raise BundleError(f"{d}: model {name!r} has no whole version ({why})")
                out.append((name, newest, cores))
            return out
        found = self.names()
        out = [(name, v, None) for name in found if (v := self.newest_whole(name)) is not None]
        if not out and found:  # every model incomplete: the start fails, naming what the newest one lacks
            name = found[0]
            why = incomplete(self.version_dir(name, str(self.versions(name)[-1])))
            raise BundleError(f"{self.root}: no model has a whole version; {why}")
        if not out:
            raise BundleError(f"{self.root}: no models (expected {self.expected})")
        return out
