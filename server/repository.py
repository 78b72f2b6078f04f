"""The model repository on disk (``models/<name>/<version>/``) and the models served from it."""

from __future__ import annotations

import asyncio
import logging
import math
import os
from pathlib import Path

from contract.bundle import BundleError
from engine.device import cuda_probe, provider_reason
from server.config import ServerConfig
from server.core_client import CoreLoadError
from server.errors import ModelNotFound, ModelNotReady, clip
from server.metrics import Metrics
from server.telemetry import Telemetry
from server.model_api import ModelAPI
from server.model_names import check_name, inside, is_version, name_problem, warn_ignored

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
        elif p.is_dir():
            warn_ignored(p, "not a version folder (a version is ASCII digits with no leading zero, e.g. 1)")
    return sorted(out)


def parse_model(item: str) -> tuple[str, str, int | None]:
    """NAME, NAME:VERSION, NAME@CORES or NAME:VERSION@CORES -> (name, version or "", cores or None)."""
    spec, _, cores = item.partition("@")
    name, _, version = spec.partition(":")
    if cores and not (cores.isdigit() and int(cores) > 0):
        raise BundleError(f"--models {item!r}: the number of engine cores after '@' must be a positive integer")
    if version and not is_version(version):
        raise BundleError(f"--models {item!r}: the version after ':' must be a number (ASCII digits, e.g. 1)")
    if why := name_problem(name):
        raise BundleError(f"--models {item!r}: {name!r} is not a model name: {why}")
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
            if not d.is_dir() or not versions_on_disk(d) or (ver and not (d / ver).is_dir()):
                raise BundleError(f"{d}: model {name!r} not found in the repository")
            out.append((name, int(ver) if ver else versions_on_disk(d)[-1], cores))
        return out
    out = [(name, versions_on_disk(repo / name)[-1], None) for name in model_folders(repo)]
    if not out:
        raise BundleError(f"{repo}: no models (expected {repo}/<name>/<version>/config.json)")
    return out


# CPU the front end spends per CPU an engine core spends, at full load (C=64 greedy on translate-en-ja: ~600 us
# against ~1,500 us per request; bench/serve.py's CPU-per-request table).
FRONT_END_SHARE = 0.4


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

    One single-threaded engine core per CPU core is the fastest way to use a CPU for decoding (one intra-op
    thread beat two per session; parallelism comes from separate decode loops), but the front end (gRPC,
    HTTP, tokenizing) needs CPU too: about ``FRONT_END_SHARE`` of a busy engine core's (bench/serve.py's
    CPU-per-request table). So the cores get what is left after the front end's share, never fewer than one.
    On 2 CPUs that is one core, the least server CPU per request (2 cores: 2-16% more in bench/serve_variants.py),
    though 2 cores gave 1.07-1.08x its answers/s at C=64 (``--instances 2`` where throughput matters more).
    A GPU batches inside one core: one."""
    cpus, where = usable_cpus()
    if config.device != "cpu" and cuda_probe()[0]:
        return 1, "CUDA: one core per model batches on the GPU"
    per_core = max(1, config.intra_op_threads)
    n = max(1, int(cpus / (1 + FRONT_END_SHARE)) // per_core)
    return n, (f"{where}, less the front end's share (~{FRONT_END_SHARE:g} CPU per busy engine core), "
               f"/ {per_core} intra-op thread(s) per engine core")


def encoder_thread(config: ServerConfig, n_cores: int) -> tuple[bool, str]:
    """Whether each engine core of a model runs a second thread that encodes queued requests while it decodes.

    It overlaps the encoder with the decode loop, which pays where a CPU is not busy already: on 2 CPUs (one core,
    the front end beside it), C=64 greedy on the whole held-out set, it gave 1.08x the answers/s for 7% more
    engine-core CPU per request (bench/serve_variants.py); on the 640 shortest-sentence inputs, where the two CPUs
    were saturated without it, it cost 8% of the throughput. Auto: on with one core and at least 2 usable CPUs, or
    on CUDA (the encoder runs on the GPU)."""
    if config.encoder_thread != "auto":
        return config.encoder_thread == "on", f"--encoder-thread {config.encoder_thread}"
    if n_cores != 1:
        return False, f"auto: {n_cores} engine cores share the CPUs already"
    if config.device != "cpu" and cuda_probe()[0]:
        return True, "auto: CUDA"
    cpus, where = usable_cpus()
    if cpus >= 2:
        return True, f"auto: one engine core, {where}"
    return False, f"auto: {where}: it would only compete with the decode loop"


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
    """Served models by name and version: what every front door reads. ``server/model_control.py`` changes it
    (load, unload, poll); loading fails fast, naming the broken file."""

    def __init__(self, config: ServerConfig, telemetry: Telemetry):
        self.models: dict[str, dict[str, ModelAPI]] = {}
        self.unloaded: set[str] = set()  # unloaded through the API (or their folder removed, in poll mode)
        self.languages: dict[str, tuple[str, str]] = {}  # model -> (source, target) its last serving version declared
        self.config, self.telemetry, self.metrics = config, telemetry, telemetry.metrics
        self.device = config.device
        self._logged: set[str] = set()  # providers already logged
        self.mode = config.model_control_mode
        self.follow_links = config.model_repo_links == "any"
        self.auto_cores = default_cores(config)
        # NAME[:VERSION][@CORES] as configured (--models, --load-model): a pinned version and a core count that
        # every later load of that model keeps.
        self.pins: dict[str, str] = {}
        self.cores_of: dict[str, int | None] = {}
        if self.mode == "explicit":
            wanted = tuple(config.load_model)
            for item in wanted:  # checked at start, so that a typo fails the start, not the first load
                name, version, cores = parse_model(item)
                self._remember(name, version, cores)
            chosen = select(config.model_repo, wanted) if wanted else []
        else:
            for item in config.models:
                self._remember(*parse_model(item))
            chosen = select(config.model_repo, config.models)
        for name, version, cores in chosen:
            self.models.setdefault(name, {})[str(version)] = self.build(name, str(version))

    def _remember(self, name: str, version: str, cores: int | None) -> None:
        if version:
            self.pins[name] = version
        self.cores_of[name] = cores

    @property
    def watched(self) -> list[str]:
        """The models poll mode keeps in step with the disk: those --models names, or every one."""
        return list(self.cores_of) if self.config.models else model_folders(self.config.model_repo)

    def wanted_version(self, name: str) -> str:
        """The version to serve: the pinned one, else the latest on disk (Triton's default version policy)."""
        folder = inside(self.config.model_repo, name, follow_any=self.follow_links)  # InvalidInput for a bad name
        on_disk = versions_on_disk(folder) if folder.is_dir() else []
        if not on_disk:
            raise ModelNotFound(f"{folder}: model {clip(name)} not found in the repository (expected "
                                f"{folder}/<version>/config.json)")
        pinned = self.pins.get(name)
        if pinned and int(pinned) not in on_disk:
            raise ModelNotFound(f"{folder / pinned}: version {pinned} of model {name!r} (pinned by --models or "
                                "--load-model) is not in the repository")
        return pinned or str(on_disk[-1])

    def build(self, name: str, version: str) -> ModelAPI:
        """A model version's API and (not yet started) engine cores; BundleError names a broken file."""
        cores = self.cores_of.get(name)
        auto, why = self.auto_cores
        n = cores or self.config.instances or auto
        reason = ("--models @" if cores else "--instances") if (cores or self.config.instances) else why
        encoder, encoder_why = encoder_thread(self.config, n)
        folder = inside(self.config.model_repo, name, version, follow_any=self.follow_links)
        api = ModelAPI(name, version, folder, self.config, self.telemetry, n, encoder)
        log.info("model %s version %s: %d engine core(s) (%s), encoder thread %s (%s)", name, version, n, reason,
                 "on" if encoder else "off", encoder_why)
        return api

    async def start(self, loop: asyncio.AbstractEventLoop, metrics: Metrics) -> None:
        """Start every engine core at once; raises BundleError if a model cannot load."""
        apis = self.all()
        results = await asyncio.gather(*(api.start(loop) for api in apis), return_exceptions=True)
        for api, result in zip(apis, results):
            if isinstance(result, CoreLoadError):
                raise BundleError(str(result))
            if isinstance(result, BaseException):
                raise result
            self.announce(api)

    def announce(self, api: ModelAPI) -> None:
        """A version that now serves: logged and in s2s_model_info."""
        if api.provider not in self._logged:  # one line per provider, not one per core
            self._logged.add(api.provider)
            log.info("ONNX Runtime runs %s (--device %s: %s)", api.provider, self.device, provider_reason(self.device))
        self.metrics.model_info.labels(api.name, api.version, api.provider, api.bundle.quantization).set(1)
        if api.bundle.source_language and api.bundle.target_language:
            self.languages[api.name] = (api.bundle.source_language, api.bundle.target_language)
        log.info("serving %s version %s (%s, %s)", api.name, api.version, api.bundle.task.name, api.provider)

    def get(self, name: str, version: str = "") -> ModelAPI:
        versions = self.models.get(name)
        if not versions:
            check_name(name)  # a name that cannot be one: said so, not "not served"
            if name in self.unloaded:
                raise ModelNotReady(f"model {clip(name)} is unloaded; load it again to serve it (KServe "
                                    f"RepositoryModelLoad, POST /v2/repository/models/{name}/load, or "
                                    f"`s2s models load {name}`)")
            known = ", ".join(sorted(self.models)) or "none"
            raise ModelNotFound(f"model {clip(name)} is not served here (served: {known})")
        if not version:
            return versions[max(versions, key=int)]
        if version not in versions:
            raise ModelNotFound(f"model {clip(name)} has no version {clip(version)} loaded (loaded: {', '.join(sorted(versions))})")
        return versions[version]

    def all(self) -> list[ModelAPI]:
        return [api for versions in self.models.values() for api in versions.values()]

    @property
    def ready(self) -> bool:
        """Server readiness: every loaded version ready; with none loaded, only where loading is the API's job
        (explicit and poll modes, as Triton)."""
        models = self.all()
        return all(m.ready for m in models) and (bool(models) or self.mode != "none")
