"""The served model versions by name: what every door reads, and what model control changes."""

from __future__ import annotations

import asyncio
import logging

from contract.bundle import BundleError
from engine.device import provider_reason
from server.config import ServerConfig
from server.core_client.core_state import CoreLoadError
from server.core_client.sizing import default_beam, default_cores, encoder_thread
from server.errors import ModelNotFound, ModelNotReady, clip
from server.models.disk import Repository, parse_model
from server.models.languages import Offered
from server.models.names import check_name
from server.models.served_version import ServedVersion
from server.telemetry.model_telemetry import Telemetry

log = logging.getLogger("s2s.repository")


class ServedModels:
    """Served models by name and version: what every front door reads. ``server/models/control.py`` changes it
    (load, unload, poll); loading fails fast, naming the broken file."""

    def __init__(self, config: ServerConfig, telemetry: Telemetry):
        self.models: dict[str, dict[str, ServedVersion]] = {}
        self.unloaded: set[str] = set()  # unloaded through the API (or their folder removed, in poll mode)
        # model -> the languages its last serving version offered (an unloaded model's pairs answer "unloaded")
        self.languages: dict[str, Offered] = {}
        self.config, self.telemetry, self.metrics = config, telemetry, telemetry.metrics
        self.device = config.device
        self._logged: set[str] = set()  # providers already logged
        self.mode = config.model_control_mode
        self.follow_links = config.model_repo_links == "any"
        self.auto_cores = default_cores(config)
        self.disk = Repository(config.model_repo, config.model_name, self.follow_links)
        # NAME[:VERSION][@CORES] as configured (--models, --load-model): a pinned version and a core count that
        # every later load of that model keeps.
        self.pins: dict[str, str] = {}
        self.cores_of: dict[str, int | None] = {}
        if self.mode == "explicit":
            wanted = tuple(config.load_model)
            for item in wanted:  # checked at start, so that a typo fails the start, not the first load
                name, version, cores = parse_model(item)
                self._remember(name, version, cores)
            chosen = self.disk.select(wanted) if wanted else []
        else:
            for item in config.models:
                self._remember(*parse_model(item))
            chosen = self.disk.select(config.models)
        for name, version, _cores in chosen:
            self.models.setdefault(name, {})[str(version)] = self.build(name, str(version))

    def _remember(self, name: str, version: str, cores: int | None) -> None:
        if version:
            self.pins[name] = version
        self.cores_of[name] = cores

    @property
    def watched(self) -> list[str]:
        """The models poll mode keeps in step with the disk: those --models names, or every one."""
        return list(self.cores_of) if self.config.models else self.disk.names()

    def wanted_version(self, name: str) -> str:
        """The version to serve: the pinned one, else the latest on disk (Triton's default version policy)."""
        folder = self.disk.model_dir(name)  # InvalidInput for a bad name
        on_disk = self.disk.versions(name)
        if not on_disk:
            raise ModelNotFound(
                f"{folder}: model {clip(name)} not found in the repository (expected {self.disk.expected})"
            )
        pinned = self.pins.get(name)
        if pinned and int(pinned) not in on_disk:
            raise ModelNotFound(
                f"{folder / pinned}: version {pinned} of model {name!r} (pinned by --models or "
                "--load-model) is not in the repository"
            )
        return pinned or str(on_disk[-1])

    def build(self, name: str, version: str) -> ServedVersion:
        """A model version's API and (not yet started) engine cores; BundleError names a broken file."""
        cores = self.cores_of.get(name)
        auto, why = self.auto_cores
        folder = self.disk.version_dir(name, version)
        beam = default_beam(folder)
        if beam > 1 and not (cores or self.config.instances):
            auto, why = default_cores(self.config, beam)
        n = cores or self.config.instances or auto
        reason = ("--models @" if cores else "--instances") if (cores or self.config.instances) else why
        encoder, encoder_why = encoder_thread(self.config, n)
        api = ServedVersion(name, version, folder, self.config, self.telemetry, n, encoder)
        log.info(
            "model %s version %s: %d engine core(s) (%s), encoder thread %s (%s)",
            name,
            version,
            n,
            reason,
            "on" if encoder else "off",
            encoder_why,
        )
        return api

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start every model's engine cores at once. Each model serves as soon as its own cores are up (announced
        then), not once the slowest has loaded; raises BundleError as soon as one cannot load."""

        async def one(api: ServedVersion) -> None:
            await api.start(loop)
            self.announce(api)

        tasks = [asyncio.ensure_future(one(api)) for api in self.all()]
        try:
            for done in asyncio.as_completed(tasks):
                try:
                    await done
                except CoreLoadError as e:
                    raise BundleError(str(e)) from None
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def announce(self, api: ServedVersion) -> None:
        """A version that now serves: logged and in s2s_model_info."""
        if api.provider not in self._logged:  # one line per provider, not one per core
            self._logged.add(api.provider)
            log.info(
                "ONNX Runtime runs %s (--device %s: %s)",
                api.provider,
                self.device,
                provider_reason(self.device),
            )
        self.metrics.model_info.labels(api.name, api.version, api.provider, api.bundle.quantization).set(1)
        if api.offered is not None:
            self.languages[api.name] = api.offered
        log.info("serving %s version %s (%s, %s)", api.name, api.version, api.bundle.task.name, api.provider)

    def get(self, name: str, version: str = "") -> ServedVersion:
        versions = self.models.get(name)
        if not versions:
            check_name(name)  # a name that cannot be one: said so, not "not served"
            if name in self.unloaded:
                raise ModelNotReady(
                    f"model {clip(name)} is unloaded; load it again to serve it (KServe "
                    f"RepositoryModelLoad, POST /v2/repository/models/{name}/load, or "
                    f"`s2s models load {name}`)"
                )
            known = ", ".join(sorted(self.models)) or "none"
            raise ModelNotFound(f"model {clip(name)} is not served here (served: {known})")
        if not version:
            return versions[max(versions, key=int)]
        if version not in versions:
            raise ModelNotFound(
                f"model {clip(name)} has no version {clip(version)} loaded (loaded: {', '.join(sorted(versions))})"
            )
        return versions[version]

    def all(self) -> list[ServedVersion]:
        return [api for versions in self.models.values() for api in versions.values()]

    @property
    def loading(self) -> list[str]:
        """The models whose engine cores are still starting for the first time."""
        return sorted(api.name for api in self.all() if api.loading)

    @property
    def ready(self) -> bool:
        """Server readiness. ``--readiness all``: every loaded version ready; with none loaded, only where loading is
        the API's job (explicit and poll modes, as Triton). ``per-model``: every model has loaded once and one of
        them serves; each model's own readiness says which."""
        models = self.all()
        if not models:
            return self.mode != "none"
        if self.config.readiness == "per-model":
            return not self.loading and any(m.ready for m in models)
        return all(m.ready for m in models)
