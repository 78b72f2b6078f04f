"""Model control without a restart: load, reload and unload model versions while the server serves.

Triton's model control modes (``--model-control-mode``): ``none`` (the repository is read once, at
start), ``explicit`` (the repository API loads and unloads: KServe ``RepositoryModelLoad`` /
``RepositoryModelUnload``, ``POST /v2/repository/models/NAME/load|unload``, ``s2s models``) and
``poll`` (the repository is rescanned every ``--repository-poll-secs``; new versions, removed versions,
new and removed models are applied). The version served is the latest on disk unless ``--models`` /
``--load-model`` pins one (Triton's default version policy, ``latest: 1``).

A load never leaves a model without a serving version: the new version's bundle is read and checked,
its engine cores start and each answers a warm-up request; only then does it take the model's traffic,
in one step of the event loop (no request sees neither version). The old version refuses new requests
from that moment, finishes what it accepted and stops. A bundle that fails any of this is stopped and
the load answers FAILED_PRECONDITION naming the file and what is wrong; the serving version is untouched.
An unload refuses new requests for the model (UNAVAILABLE), finishes those in flight and stops its
processes. The repository (``server/models/registry.py``) is what front doors read; only this module changes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from contract.bundle import BundleError
from server.errors import (
    InvalidInput,
    ModelControlDisabled,
    ModelLoadFailed,
    ModelNotFound,
    ModelNotReady,
    ServingError,
    ShuttingDown,
    clip,
)
from server.models.names import check_name, shown
from server.models.registry import ServedModels
from server.models.served_version import ServedVersion
from server.telemetry.refusal_log import RefusalLog

log = logging.getLogger("s2s.control")

# Load and unload parameters this server understands (Triton's "config" and "file:" overrides are refused:
# a bundle is served as it is on disk, hashes checked).
UNLOAD_PARAMETERS = ("unload_dependents",)  # no ensembles here: nothing depends on a model


@dataclass(frozen=True)
class IndexEntry:
    """One line of the repository index (Triton's RepositoryIndexResponse.ModelIndex)."""

    name: str
    version: str  # "" for a model not loaded
    state: str  # READY | UNAVAILABLE | LOADING | UNLOADING
    reason: str


def _signature(folder: Path) -> tuple:
    """What a version folder holds (names, sizes, times): a poll retries a failed load once this changes."""
    try:
        return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()))
    except OSError:
        return ()


class ModelControl:
    def __init__(self, repo: ServedModels):
        self.repo = repo
        self.config = repo.config
        self.mode = repo.mode
        # One lock per model with a change under way or waiting, dropped when none is: a lock kept per name
        # ever asked for would let a client grow the server's memory with names.
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        # Each change runs as a task of its own, not in the caller's: a caller cancelled or past its deadline
        # leaves it to finish (a half-made load is stopped, an unload drains), so no process is left behind.
        self._changes: set[asyncio.Task] = set()
        # A failed load is the client's doing in explicit mode (a broken bundle asked for again and again):
        # one ERROR line per model every 10 s, with a count of those not written.
        self._load_errors = RefusalLog(level=logging.ERROR, label="load failed")
        self._busy: dict[str, str] = {}  # name -> LOADING / UNLOADING while a change is under way
        self._failed: dict[str, tuple] = {}  # poll: name -> the folder signature whose load failed
        self._failures: dict[str, str] = {}  # name -> why its last load failed (until one succeeds)
        self._poller: asyncio.Task | None = None
        self.closing = False

    def start(self) -> None:
        if self.mode == "poll":
            self._poller = asyncio.ensure_future(self._poll())

    def begin_close(self) -> None:
        """The drain has begun: every load and unload from now on is refused (UNAVAILABLE), polling stops."""
        self.closing = True
        if self._poller is not None:
            self._poller.cancel()

    async def close(self, timeout: float | None = None) -> None:
        """Before shutdown: no new change starts; one under way finishes (a load is stopped before it would serve),
        waited for up to ``timeout`` seconds."""
        self.begin_close()
        pending = set(self._changes) | ({self._poller} if self._poller is not None else set())
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    def _refuse_if_closing(self) -> None:
        if self.closing:
            raise ShuttingDown(
                "server is shutting down: no model is loaded or unloaded now; retry on another replica"
            )

    async def _run(self, change) -> object:
        """Run a change (a coroutine) as a task of its own and wait for it; the caller's cancellation does not
        reach it."""
        task = asyncio.ensure_future(change)
        self._changes.add(task)
        task.add_done_callback(self._changes.discard)
        task.add_done_callback(
            lambda t: t.cancelled() or t.exception()
        )  # retrieved: no "never retrieved" line
        return await asyncio.shield(task)

    @contextlib.asynccontextmanager
    async def _locked(self, name: str):
        lock, users = self._locks.get(name, (None, 0))
        lock = lock or asyncio.Lock()
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)

    def _refuse_if_starting(self, name: str) -> None:
        """The server's first load of this model is under way: replacing or unloading it now would pull its engine
        cores from under that load (and a load that fails at start stops the server)."""
        if any(api.loading for api in self.repo.models.get(name, {}).values()):
            raise ModelNotReady(
                f"model {shown(name)} is still loading (the server's start); load or unload it once it is ready"
            )

    def failure(self, name: str) -> str:
        """Why the model's last load failed ("" if it did not)."""
        return self._failures.get(name, "")

    def _explicit(self, what: str) -> None:
        if self.mode != "explicit":
            raise ModelControlDisabled(
                f"{what} needs --model-control-mode explicit; this server runs in mode "
                f"{self.mode!r} ("
                + (
                    "it serves what the repository held at start: restart to change it)"
                    if self.mode == "none"
                    else "it follows the repository on disk "
                    "every --repository-poll-secs: add or remove version folders)"
                )
            )

    # ---- the repository API ------------------------------------------------------------------------
    async def load(self, name: str, parameters: dict | None = None) -> None:
        """Load a model, or reload it: its wanted version (pinned, else the latest on disk) replaces what serves."""
        self._explicit("load")
        check_name(name)
        self._refuse_if_closing()
        if parameters:
            raise InvalidInput(
                f"load parameters {', '.join(sorted(map(clip, parameters)))} are not supported: the "
                "bundle is served as it is on disk (export a new version to change it)"
            )
        await self._run(self.apply(name))

    async def unload(self, name: str, parameters: dict | None = None) -> None:
        self._explicit("unload")
        check_name(name)
        self._refuse_if_closing()
        unknown = sorted(set(parameters or ()) - set(UNLOAD_PARAMETERS))
        if unknown:
            raise InvalidInput(
                f"unload parameters {', '.join(map(clip, unknown))} are not supported (known: "
                f"{', '.join(UNLOAD_PARAMETERS)})"
            )
        await self._run(self.remove(name))

    def index(self, ready_only: bool = False) -> list[IndexEntry]:
        """Every model of the repository: each loaded version with its state, the others as UNAVAILABLE."""
        repo = self.repo
        out = []
        for name in sorted(set(repo.disk.names()) | set(repo.models) | repo.unloaded):
            versions = repo.models.get(name, {})
            for version, api in sorted(versions.items(), key=lambda kv: int(kv[0])):
                busy = self._busy.get(name)
                state = "READY" if api.ready else ("LOADING" if api.loading else "UNAVAILABLE")
                reason = "" if api.ready else ("shutting down" if api.stopping else "no engine core running")
                if api.loading and not api.ready:
                    reason = "its engine cores are starting"
                if busy == "LOADING" and api.ready:
                    reason = "serving; a new version is loading"
                out.append(IndexEntry(name, version, state, reason))
            if not versions:
                busy = self._busy.get(name)
                reason = self.failure(name) or ("unloaded" if name in repo.unloaded else "not loaded")
                out.append(IndexEntry(name, "", busy or "UNAVAILABLE", reason))
        return [e for e in out if e.state == "READY" or not ready_only]

    # ---- changes ------------------------------------------------------------------------------------
    async def apply(self, name: str) -> ServedVersion:
        """Serve ``name`` at its wanted version, a fresh copy even if that version already serves (a reload)."""
        async with self._locked(name):
            self._refuse_if_closing()
            self._refuse_if_starting(name)
            self._busy[name] = "LOADING"
            try:
                api = await self._apply(name)
                self._failures.pop(name, None)
                return api
            finally:
                self._busy.pop(name, None)

    async def _apply(self, name: str) -> ServedVersion:
        repo = self.repo
        version = repo.wanted_version(name)  # ModelNotFound naming the folder
        folder = repo.disk.version_dir(name, version)
        log.info("loading model %s version %s from %s", name, version, folder)
        try:
            # Off the event loop: every file against its sha256 (a file that is missing, truncated or still being
            # copied is named before anything starts; the cores hash again only a file changed since) and the
            # tokenizer built (a vocabulary of a million entries took 2 s): the loop serves meanwhile.
            new = await asyncio.to_thread(repo.build, name, version)
            new.stage()
        except BundleError as e:  # names the file
            raise self._failed_load(name, version, str(e)) from None
        except (
            Exception
        ) as e:  # a tokenizer.json that hashes right but does not parse (an edited config.json)
            raise self._failed_load(name, version, f"{folder}: {type(e).__name__}: {e}") from None
        step = "start"
        try:
            await new.start(asyncio.get_running_loop())
            step = "warm-up"
            await new.warm_up()
        except (ServingError, RuntimeError, OSError) as e:  # CoreLoadError names the file
            await self._discard(new)
            why = str(e) or type(e).__name__
            if step == "warm-up":
                why = f"{folder}: its engine cores loaded but a warm-up request failed: {why}"
            raise self._failed_load(name, version, why) from None
        except BaseException:
            await self._discard(new)
            raise
        if self.closing:  # the drain began while it loaded: it would serve nobody, and nobody would stop it
            await self._discard(new)
            raise ShuttingDown("server is shutting down: the load was stopped before the new version served")
        old = repo.models.get(name, {})
        for v, api in old.items():
            api.retire(f"model {name!r} version {v} was just replaced by version {version}; retry")
        repo.models[name] = {version: new}  # the switch: front doors look models up on every request
        repo.unloaded.discard(name)
        new.promote()
        repo.announce(new)
        repo.telemetry.changed()
        await asyncio.gather(*(self._drain(api) for api in old.values()))
        for v, api in old.items():
            if v != version:
                repo.metrics.forget_version(name, v)
            repo.metrics.forget_cores(name, range(len(new.cores), len(api.cores)))
        if old:
            log.info(
                "model %s: version %s serves; %s drained and stopped",
                name,
                version,
                ", ".join(f"version {v}" for v in old),
            )
        return new

    async def _drain(self, api: ServedVersion) -> None:
        """A retired version: what it accepted finishes (within --grace-s), then its processes exit."""
        await api.settle(self.config.grace_s)
        await api.drain(self.config.grace_s)

    def _failed_load(self, name: str, version: str, why: str) -> ModelLoadFailed:
        serving = self.repo.models.get(name)
        still = f"; version {', '.join(serving)} goes on serving" if serving else ""
        self._load_errors(name, f"model {name} version {version} failed to load: {why}{still}")
        self._failures[name] = f"version {version} failed to load: {why}"
        if not serving:
            self.repo.metrics.forget_model(name)  # the failed copy's own series
        return ModelLoadFailed(f"model {shown(name)} version {version} failed to load: {why}{still}")

    async def _discard(self, api: ServedVersion) -> None:
        """Stop a version that never took traffic (its cores may be up, half up or gone)."""
        api.retire("not loaded")
        for core in api.cores:
            core.stopping = True
            core.kill()
        await asyncio.gather(*(core.wait_exited(10) for core in api.cores), return_exceptions=True)

    async def remove(self, name: str, why: str = "unloaded", gone: bool = False) -> None:
        """Unload: new requests for the model get UNAVAILABLE, those in flight finish, its processes stop."""
        async with self._locked(name):
            self._refuse_if_starting(name)
            repo = self.repo
            versions = repo.models.pop(name, None)
            if versions is None:
                if name in repo.unloaded or name in repo.disk.names():
                    return  # not loaded: nothing to do (as Triton answers)
                raise ModelNotFound(
                    f"model {shown(name)} is neither loaded nor in the repository {self.config.model_repo}"
                )
            self._busy[name] = "UNLOADING"
            self._failures.pop(name, None)  # older news than this unload
            repo.unloaded.add(name)
            try:
                for api in versions.values():
                    api.retire(f"model {name!r} is being unloaded ({why}); load it again to serve it")
                repo.telemetry.changed()
                log.info("unloading model %s (%s): finishing requests in flight", name, why)
                await asyncio.gather(*(self._drain(api) for api in versions.values()))
                repo.metrics.forget_model(name)
                if gone:  # no longer in the repository: unknown from now on, not "unloaded"
                    repo.unloaded.discard(name)
                log.info("model %s unloaded", name)
            finally:
                self._busy.pop(name, None)

    # ---- poll mode -----------------------------------------------------------------------------------
    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.config.repository_poll_secs)
            try:
                await self.scan()
            except Exception:  # a scan must never stop the polling
                log.exception("repository scan failed")

    async def scan(self) -> None:
        """Bring the served models in step with the repository on disk."""
        repo = self.repo
        watched = repo.watched
        for name in watched:
            if self.closing:
                return
            try:
                version = repo.wanted_version(name)
            except ModelNotFound:
                if name in repo.models:
                    await self._run(self.remove(name, "its folder left the repository", gone=True))
                continue
            if version in repo.models.get(name, {}):
                continue
            signature = (version, _signature(repo.disk.version_dir(name, version)))
            if self._failed.get(name) == signature:
                continue  # logged once; tried again when the folder changes
            try:
                await self._run(self.apply(name))
                self._failed.pop(name, None)
            except ServingError:  # logged by _failed_load; the serving version goes on
                self._failed[name] = signature
        for name in list(repo.models):
            if name not in watched and not self.closing:
                await self._run(self.remove(name, "its folder left the repository", gone=True))
