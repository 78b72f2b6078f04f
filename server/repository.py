"""The model repository on disk (``models/<name>/<version>/``) and the models loaded from it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from contract.bundle import BundleError
from server.config import ServerConfig
from server.engine import Engine, EngineOptions
from server.errors import ModelNotFound, clip
from server.metrics import Metrics
from server.scheduler import Scheduler

log = logging.getLogger("s2s.repository")


@dataclass
class ModelVersion:
    name: str
    version: str
    engine: Engine
    scheduler: Scheduler


def versions_on_disk(model_dir: Path) -> list[int]:
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def select(repo: Path, wanted: tuple[str, ...]) -> list[tuple[str, int]]:
    """(name, version) pairs to load: every model at its latest version, or NAME / NAME:VERSION as asked."""
    if not repo.is_dir():
        raise BundleError(f"{repo}: model repository not found (expected {repo}/<name>/<version>/config.json)")
    if wanted:
        out = []
        for item in wanted:
            name, _, ver = item.partition(":")
            d = repo / name
            if not d.is_dir() or not versions_on_disk(d):
                raise BundleError(f"{d}: model {name!r} not found in the repository")
            out.append((name, int(ver) if ver else versions_on_disk(d)[-1]))
        return out
    out = [(d.name, versions_on_disk(d)[-1]) for d in sorted(repo.iterdir()) if d.is_dir() and versions_on_disk(d)]
    if not out:
        raise BundleError(f"{repo}: no models (expected {repo}/<name>/<version>/config.json)")
    return out


class Repository:
    """Loaded models by name and version. Loading fails fast, naming the broken file."""

    def __init__(self, config: ServerConfig, metrics: Metrics):
        self.models: dict[str, dict[str, ModelVersion]] = {}
        opts = EngineOptions(device=config.device, intra_op_threads=config.intra_op_threads, io_binding=config.io_binding)
        for name, version in select(config.model_repo, config.models):
            engine = Engine(config.model_repo / name / str(version), opts)
            mv = ModelVersion(name, str(version), engine, Scheduler(name, engine, config.scheduler, metrics))
            self.models.setdefault(name, {})[str(version)] = mv
            metrics.model_info.labels(name, str(version), engine.provider, engine.config.quantization).set(1)
            log.info("serving %s version %s (%s, %s)", name, version, engine.config.task.name, engine.provider)

    def get(self, name: str, version: str = "") -> ModelVersion:
        versions = self.models.get(name)
        if not versions:
            known = ", ".join(sorted(self.models)) or "none"
            raise ModelNotFound(f"model {clip(name)} is not served here (served: {known})")
        if not version:
            return versions[max(versions, key=int)]
        if version not in versions:
            raise ModelNotFound(f"model {clip(name)} has no version {clip(version)} loaded (loaded: {', '.join(sorted(versions))})")
        return versions[version]

    def all(self) -> list[ModelVersion]:
        return [mv for versions in self.models.values() for mv in versions.values()]
