"""`s2s serve`: build the gRPC server, serve until SIGTERM/SIGINT, shut down gracefully (a second
signal cuts the grace period short).

Startup: load and verify every bundle (fail fast naming the file), start a scheduler thread per
model, the /metrics endpoint, the gRPC services (seq2seq.v1, KServe v2, health, reflection).
Shutdown: health NOT_SERVING, new requests refused (UNAVAILABLE), in-flight work gets the grace
period to finish, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass, field

import grpc
from google.protobuf import descriptor_pool
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from contract.version import __version__
from protos.seq2seq.v1 import seq2seq_pb2, seq2seq_pb2_grpc
from server.config import ServerConfig
from server.doors.http_door import HttpDoor
from server.doors.http_routes import http_routes
from server.doors.seq2seq_grpc import Seq2SeqServicer
from server.models.control import ModelControl
from server.models.registry import ServedModels
from server.telemetry.metrics import Metrics, MetricsServer
from server.telemetry.model_telemetry import Telemetry
from server.telemetry.refusal_log import RefusalLog
from server.telemetry.request_tracker import RequestTracker
from server.transport.grpc_interceptors import GuardInterceptor
from server.transport.http_app import HttpServer, start_http
from server.transport.ports import PortError, check_ports

log = logging.getLogger("s2s.server")


@dataclass
class Running:
    server: grpc.aio.Server
    port: int
    repo: ServedModels
    health: health.aio.HealthServicer
    metrics: Metrics
    http: MetricsServer | None
    config: ServerConfig
    control: ModelControl
    web: HttpServer | None = None
    cut_short: asyncio.Event = field(default_factory=asyncio.Event)
    # The models' first load: done once every engine core has come up (each model serves from its own first core).
    loaded: asyncio.Future | None = None

    async def load(self) -> None:
        await self.repo.start(asyncio.get_running_loop())  # BundleError names the file
        self.control.start()
        loaded = ", ".join(f"{mv.name}:{mv.version}" for mv in self.repo.all()) or "no model"
        log.info("serving %s: every model loaded", loaded)

    async def close_failed(self) -> None:
        """A model failed to load at start: the ports close and every engine core goes, at once."""
        await self.health.enter_graceful_shutdown()
        _kill_cores(self.repo)
        if self.web is not None:
            await self.web.stop(0)
        await self.server.stop(0)
        if self.http is not None:
            self.http.close()

    async def stop(self) -> None:
        """Graceful: NOT_SERVING, refuse new work, let in-flight requests finish within the grace period
        (or until ``abort()``: a second SIGTERM/SIGINT). Engine cores still loading are stopped at once."""
        await self.health.enter_graceful_shutdown()
        if self.loaded is not None and not self.loaded.done():
            self.loaded.cancel()
            await asyncio.gather(self.loaded, return_exceptions=True)
            _kill_cores(self.repo, loading_only=True)
        self.control.begin_close()  # loads and unloads get UNAVAILABLE from now on, polling stops
        for model in self.repo.all():
            model.stop()  # new requests now get UNAVAILABLE; queued and running ones go on
        # a change under way ends (a load is stopped before it serves)
        await self.control.close(self.config.grace_s)
        for model in self.repo.all():
            model.stop()
        drains = [model.drain(self.config.grace_s) for model in self.repo.all()]  # the cores exit when done
        backend = asyncio.ensure_future(asyncio.gather(self.server.stop(self.config.grace_s), *drains))
        # The HTTP port stays open (503 "shutting down") while gRPC or the cores still finish work, not only
        # while HTTP requests are in flight.
        fronts = [backend] + ([self.web.stop(self.config.grace_s, backend)] if self.web else [])
        graceful = asyncio.ensure_future(asyncio.gather(*fronts))
        cut = asyncio.ensure_future(self.cut_short.wait())
        await asyncio.wait([graceful, cut], return_when=asyncio.FIRST_COMPLETED)
        if not graceful.done():
            log.warning("second signal: grace period cut short, failing what is still in flight")
            for model in self.repo.all():
                model.abort()
            await self.server.stop(0)
            await asyncio.wait_for(graceful, 5)
        cut.cancel()
        if self.http is not None:
            self.http.close()

    def abort(self) -> None:
        self.cut_short.set()


class HealthBoard:
    """grpc.health.v1 statuses. Per model (service name = model name): SERVING while one of its engine
    cores runs (NOT_SERVING while they load); NOT_SERVING once it is unloaded. The server (service "") and its
    APIs: SERVING while the repository is ready (``--readiness``: every model, or per model). (After
    enter_graceful_shutdown the servicer ignores updates: NOT_SERVING stays for good.)"""

    def __init__(self, servicer: health.aio.HealthServicer, repo: ServedModels, services: list[str]):
        self.servicer, self.repo, self.services = servicer, repo, services
        self.loop = asyncio.get_running_loop()
        self.named: set[str] = set()  # models given a status so far

    async def update(self) -> None:
        serving, not_serving = (
            health_pb2.HealthCheckResponse.SERVING,
            health_pb2.HealthCheckResponse.NOT_SERVING,
        )
        for name in list(self.repo.models):
            self.named.add(name)
            await self.servicer.set(name, serving if self.repo.get(name).ready else not_serving)
        for name in self.named - set(self.repo.models):
            await self.servicer.set(name, not_serving)
        whole = serving if self.repo.ready else not_serving
        for name in ["", *self.services]:
            await self.servicer.set(name, whole)

    def changed(self) -> None:
        """Any thread: the update runs on the server's event loop."""
        self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.update()))


def _reflection(server: grpc.aio.Server, kserve: bool) -> list[str]:
    """Server reflection over every service, from a pool of its own: the KServe protocol lives in a private
    pool (protos/inference/__init__.py), the others in protobuf's default one. Returns the business services."""
    from grpc_reflection.v1alpha import reflection_pb2

    files = [seq2seq_pb2.DESCRIPTOR, health_pb2.DESCRIPTOR, reflection_pb2.DESCRIPTOR]
    names = [
        seq2seq_pb2.DESCRIPTOR.services_by_name["Seq2Seq"].full_name,
        health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
        reflection.SERVICE_NAME,
    ]
    if kserve:
        from protos.inference import grpc_service_pb2

        files.append(grpc_service_pb2.DESCRIPTOR)
        names.insert(1, grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name)
    pool = descriptor_pool.DescriptorPool()
    for f in files:
        pool.AddSerializedFile(f.serialized_pb)
    reflection.enable_server_reflection(names, server, pool)
    return names[:2] if kserve else names[:1]


def _kill_cores(repo: ServedModels, loading_only: bool = False) -> None:
    """SIGKILL engine cores (those not up yet, with ``loading_only``): nothing of theirs is in flight."""
    for model in repo.all():
        for core in model.cores:
            if not (loading_only and core.state.up):
                core.stopping = True
                core.kill()


async def start(config: ServerConfig, wait_loaded: bool = True) -> Running:
    """Open the ports, then load the models: each answers as soon as its own engine cores are up, the others
    "loading" meanwhile. ``wait_loaded``: return once every model has loaded (else ``Running.loaded`` says when)."""
    check_ports(config)  # a port in use is one line, before a bundle is read
    metrics = Metrics()
    metrics.build_info.info({"version": __version__})
    health_servicer = health.aio.HealthServicer()
    telemetry = Telemetry(metrics)  # the health board watches it once the services are known
    repo = ServedModels(config, telemetry)  # BundleError names the file
    try:
        running = await _start(config, metrics, health_servicer, telemetry, repo)
    except BaseException:  # whatever failed (a port in use), no engine core is left behind
        _kill_cores(repo)
        raise
    running.loaded = asyncio.ensure_future(running.load())
    if wait_loaded:
        try:
            await asyncio.shield(running.loaded)
        except BaseException:
            await running.close_failed()
            raise
    return running


async def _start(
    config: ServerConfig,
    metrics: Metrics,
    health_servicer: health.aio.HealthServicer,
    telemetry: Telemetry,
    repo: ServedModels,
) -> Running:
    refusals = RefusalLog()
    # every call of every door is counted here
    tracker = RequestTracker(metrics, lambda: repo.models, refusals)
    server = grpc.aio.server(
        interceptors=[GuardInterceptor(config.auth_token, tracker)],
        options=[
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.max_concurrent_streams", config.max_concurrent_streams),
            # on by default: a second server would share the port, its clients reaching either at random
            ("grpc.so_reuseport", 0),
        ],
    )
    seq2seq_pb2_grpc.add_Seq2SeqServicer_to_server(Seq2SeqServicer(repo, tracker), server)
    try:
        from server.kserve.grpc_binding import add_kserve
    except ImportError:
        add_kserve = None
    control = ModelControl(repo)
    door = HttpDoor(repo, tracker, config, control)
    if add_kserve is not None:
        add_kserve(server, repo, config.stream, tracker, control)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    services = _reflection(server, add_kserve is not None)

    address = f"{config.host}:{config.port}"
    if config.tls_cert:
        ca = config.tls_client_ca.read_bytes() if config.tls_client_ca else None
        creds = grpc.ssl_server_credentials(
            [(config.tls_key.read_bytes(), config.tls_cert.read_bytes())],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )
    try:  # grpc raises RuntimeError where it cannot bind (a port taken since check_ports)
        if config.tls_cert:
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
    except RuntimeError:
        port = 0
    if not port:
        raise PortError(f"cannot bind the gRPC port {address} (in use?); choose another with --port")
    await server.start()
    try:
        web = await start_http(config, tracker, door.auth, http_routes(door)) if config.http_port else None
    except BaseException:
        await server.stop(0)
        raise
    metrics_host = config.metrics_host or config.host
    http = metrics.serve_http(config.metrics_port, metrics_host) if config.metrics_port else None
    board = HealthBoard(health_servicer, repo, services)
    telemetry.watch(board.changed)
    await board.update()  # every model NOT_SERVING until its cores are up
    log.info(
        "loading %s (model control: %s): gRPC on %s (%s), HTTP on %s, metrics on %s",
        ", ".join(f"{mv.name}:{mv.version}" for mv in repo.all()) or "no model",
        config.model_control_mode,
        address,
        "TLS" if config.tls_cert else "plaintext",
        f"{config.host}:{web.port}" if web else "off",
        f"{metrics_host}:{config.metrics_port}" if config.metrics_port else "off",
    )
    return Running(server, port, repo, health_servicer, metrics, http, config, control, web=web)


async def serve(config: ServerConfig) -> None:
    running = await start(config, wait_loaded=False)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            running.abort()  # a second signal: the operator does not want to wait out the grace period
        for model in running.repo.all():  # before the loop runs anything else: a core may exit next
            model.no_restarts()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([running.loaded, stopped], return_when=asyncio.FIRST_COMPLETED)
    if running.loaded.done() and not running.loaded.cancelled() and running.loaded.exception():
        stopped.cancel()
        await running.close_failed()
        raise running.loaded.exception()
    await stopped
    log.info("shutting down: finishing in-flight requests (grace %.0fs)", config.grace_s)
    await running.stop()
    log.info("stopped")
