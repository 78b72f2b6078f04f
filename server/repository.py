"""The model repository on disk (``models/<name>/<version>/``) and the models served from it."""

from __future__ import annotations

import asyncio
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path

from contract.bundle import BundleError
from engine.device import cuda_probe, provider_reason
from server.config import ServerConfig
from server.cores import CoreLoadError
from server.errors import ModelNotFound, clip
from server.metrics import Metrics
from server.model_api import ModelAPI

log = logging.getLogger("s2s.repository")


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


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """CPUs this process may use: its affinity, capped by a cgroup CPU quota (a container's --cpus or a
    Kubernetes CPU limit, which affinity does not show)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = None
    try:  # cgroup v2: "max 100000" or "<quota> <period>"
        q, period = (cgroup / "cpu.max").read_text().split()
        if q != "max":
            quota = int(q) / int(period)
    except (OSError, ValueError):
        try:  # cgroup v1
            q = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
            if q > 0:
                quota = q / int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            pass
    if quota is not None and math.ceil(quota) < cpus:
        return max(1, math.ceil(quota)), f"cgroup CPU quota {quota:g}"
    return cpus, f"{cpus} usable CPU cores"


def default_cores(config: ServerConfig) -> tuple[int, str]:
    """Engine cores per model when neither --instances nor NAME@CORES says: sized to the machine it starts on.

    bench/serve.py measured one single-threaded engine core per CPU core as the fastest way to use a
    CPU (one intra-op thread beat two per session; parallelism comes from separate decode loops). A
    GPU batches inside one core: one."""
    cpus, where = usable_cpus()
    if config.device != "cpu" and cuda_probe()[0]:
        return 1, "CUDA: one core per model batches on the GPU"
    per_core = max(1, config.intra_op_threads)
    n = max(1, cpus // per_core)
    return n, f"{where} / {per_core} intra-op thread(s) per engine core"


class Repository:
    """Served models by name and version. Loading fails fast, naming the broken file."""

    def __init__(self, config: ServerConfig, metrics: Metrics, on_change: Callable[[], None] = lambda: None):
        self.models: dict[str, dict[str, ModelAPI]] = {}
        self.device = config.device
        auto, why = default_cores(config)
        for name, version, cores in select(config.model_repo, config.models):
            n = cores or config.instances or auto
            reason = ("--models @" if cores else "--instances") if (cores or config.instances) else why
            api = ModelAPI(name, str(version), config.model_repo / name / str(version), config, metrics, n, on_change)
            self.models.setdefault(name, {})[str(version)] = api
            log.info("model %s version %s: %d engine core(s) (%s)", name, version, n, reason)

    async def start(self, loop: asyncio.AbstractEventLoop, metrics: Metrics) -> None:
        """Start every engine core at once; raises BundleError if a model cannot load."""
        apis = self.all()
        results = await asyncio.gather(*(api.start(loop) for api in apis), return_exceptions=True)
        logged = set()
        for api, result in zip(apis, results):
            if isinstance(result, CoreLoadError):
                raise BundleError(str(result))
            if isinstance(result, BaseException):
                raise result
            if api.provider not in logged:  # one line per provider, not one per core
                logged.add(api.provider)
                log.info("ONNX Runtime runs %s (--device %s: %s)", api.provider, self.device, provider_reason(self.device))
            metrics.model_info.labels(api.name, api.version, api.provider, api.bundle.quantization).set(1)
            log.info("serving %s version %s (%s, %s)", api.name, api.version, api.bundle.task.name, api.provider)

    def get(self, name: str, version: str = "") -> ModelAPI:
        versions = self.models.get(name)
        if not versions:
            known = ", ".join(sorted(self.models)) or "none"
            raise ModelNotFound(f"model {clip(name)} is not served here (served: {known})")
        if not version:
            return versions[max(versions, key=int)]
        if version not in versions:
            raise ModelNotFound(f"model {clip(name)} has no version {clip(version)} loaded (loaded: {', '.join(sorted(versions))})")
        return versions[version]

    def all(self) -> list[ModelAPI]:
        return [api for versions in self.models.values() for api in versions.values()]
