"""Server configuration: parsed once at the entry point (flags over environment over defaults), passed explicitly."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

from contract.decoding import MAX_BEAM_SIZE
from server.models.languages import PairPick, parse_pairs
from server.models.names import name_problem

BatchingMode = Literal["continuous", "request", "none"]
ControlMode = Literal["none", "explicit", "poll"]
CONTROL_MODES = ("none", "explicit", "poll")


@dataclass(frozen=True)
class SchedulerConfig:
    mode: BatchingMode = "continuous"  # continuous (per decode step) | request (Triton-style) | none
    # Rows (a beam counts its width) decoded together: 64 beat 16 in throughput, CPU per request and p50 under
    # load (docs/BENCHMARKS.md#design-choices), and a beam of 4 at 16 rows decoded only four inputs a step.
    max_batch_size: int = 64
    # Rows waiting per engine core; beyond it RESOURCE_EXHAUSTED at once. 16 batches of 64 rows: as many rows as
    # 256 per core held when each core decoded 16 rows at a time (and a 2-CPU machine ran two cores, not one).
    max_queue_size: int = 1024
    max_queue_delay_ms: float = 0.0  # request mode: wait this long for a fuller batch
    max_inputs_per_request: int = 64
    # A second thread per engine core encodes queued requests while the step loop decodes: a second CPU core's
    # worth of work when a model has one engine core; with one engine core per CPU core they would only compete.
    encoder_thread: bool = True
    max_beam_size: int = 8


@dataclass(frozen=True)
class StreamConfig:
    """Backpressure on a bidirectional stream (ModelStreamInfer): what one client that sends without
    reading can make the server hold. Beyond either bound the server stops reading that stream."""

    max_pending: int = 128  # requests read but not yet answered and sent
    max_pending_bytes: int = 16 * 1024 * 1024  # their request and answer bytes


@dataclass(frozen=True)
class ServerConfig:
    model_repo: Path = Path("models")
    # inside: a model or version folder that is a symlink must resolve inside model_repo; any: links go anywhere.
    model_repo_links: str = "inside"
    models: tuple[str, ...] = ()  # serve only these (NAME[:VERSION][@CORES]); () = all, latest version
    model_name: str | None = None  # the repository is one model: its folder or bundle (KServe's /mnt/models)
    readiness: str = "all"  # all: while every model is ready (Triton's); per-model: all loaded, one serves
    # Triton's model control: none (the repository is read once at start), explicit (the repository API loads
    # and unloads; --load-model at start), poll (the repository is rescanned every repository_poll_secs).
    model_control_mode: ControlMode = "none"
    repository_poll_secs: float = 15.0  # Triton's default
    load_model: tuple[str, ...] = ()  # explicit mode: NAME[:VERSION][@CORES] loaded at start
    pair: tuple[PairPick, ...] = ()  # --pair: the model the LibreTranslate API sends a language pair to
    instances: int = 0  # engine cores (processes) per model; 0 = sized to the machine (the CPUs less the front end's share)
    host: str = "0.0.0.0"
    port: int = 8001  # Triton's gRPC port
    metrics_port: int = 8002  # Triton's metrics port
    metrics_host: str | None = None  # None: the same address as gRPC (--host)
    http_port: int = 8000  # Triton's HTTP port: KServe v2 REST, LibreTranslate API, playground; 0 = off
    device: str = "auto"
    intra_op_threads: int = 1
    io_binding: str = "auto"  # auto (on CUDA) | on | off: KV cache kept in device memory between steps
    encoder_thread: str = "auto"  # auto (one engine core and 2+ CPUs, or CUDA) | on | off
    # Greedy rows' tokens from an int8 screen of a float32 output projection, proven exact (engine/screen.py):
    # auto (where the projection is large enough to pay) | on | off
    greedy_screen: str = "auto"
    grace_s: float = 10.0
    # The front end's event loop: uvloop (libuv) makes a bare gRPC call cheaper for the server; under ModelInfer load
    # the two loops are within noise of each other (docs/BENCHMARKS.md, the serving variants).
    event_loop: str = "auto"  # auto (uvloop when installed) | uvloop | asyncio
    max_message_bytes: int = 4 * 1024 * 1024
    max_concurrent_streams: int = 256  # HTTP/2 streams (calls) at once per client connection
    # The HTTP port: a request's headers, and then its body, must each arrive within this many seconds
    # (an idle keep-alive connection is closed after it too); at most this many connections open at once
    # (each is a file descriptor, and the usual `ulimit -n` is 1024).
    http_read_timeout_s: float = 30.0
    http_max_connections: int = 512
    # One client address may hold at most this many of them (0 = no share of its own), so that one peer
    # opening slow connections cannot take the port from everyone. Behind a proxy every client has the
    # proxy's address: set it to http_max_connections there.
    http_max_connections_per_peer: int = 64
    tls_handshake_timeout_s: float = (
        10.0  # HTTPS: a connection that has not finished its TLS handshake by then is closed
    )
    cors_allow_origin: str | None = (
        None  # comma-separated origins (or *) whose browsers may call the HTTP API
    )
    # An engine core with requests in flight that reports nothing for this long (a working core reports
    # every 50 ms) is marked down, its requests failed with UNAVAILABLE, and it is killed and restarted.
    core_stall_s: float = 10.0
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None  # set: clients must present a certificate (mTLS)
    auth_token: str | None = None  # set: every call needs "authorization: Bearer <token>"
    log_level: str = "INFO"
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    stream: StreamConfig = field(default_factory=StreamConfig)


# flag -> (field, type, help). Each flag's environment variable is S2S_<FLAG>, e.g. S2S_PORT.
_FLAGS = {
    "model-repo": (Path, "model repository: models/<name>/<version>/ bundles written by `s2s export`"),
    "models": (
        str,
        "comma-separated NAME[:VERSION][@CORES] to serve, e.g. translate-en-ja:1@2 (default: every "
        "model, latest version)",
    ),
    "model-name": (
        str,
        "serve --model-repo as this one model: its folder (<version>/config.json) or one bundle (config.json "
        "at its top), as KServe's storage initializer lays out a storageUri (default: <name>/<version>/ folders)",
    ),
    "readiness": (
        str,
        'all | per-model: the server is ready (health "", /v2/health/ready) while every model is (all), or '
        "once every model has loaded and then while one serves (per-model; health under each name says which)",
    ),
    "model-repo-links": (
        str,
        "inside | any: inside (default) refuses a model or version folder that is a symlink "
        "resolving outside --model-repo; any follows links anywhere",
    ),
    "model-control-mode": (
        str,
        "none | explicit | poll: none serves what is in the repository at start (restart "
        "to change it); explicit: the repository API (KServe RepositoryModelLoad / "
        "POST /v2/repository/models/NAME/load, `s2s models`) loads and unloads; poll: the "
        "repository is rescanned and new or removed versions and models are applied",
    ),
    "repository-poll-secs": (float, "poll mode: seconds between repository scans"),
    "load-model": (
        str,
        "explicit mode: a model to load at start, NAME[:VERSION][@CORES] (repeat the flag, or "
        "comma-separate; default: none)",
    ),
    "pair": (
        str,
        "SOURCE-TARGET=MODEL: the model the LibreTranslate API translates that pair with, where several "
        "serve it (repeat the flag, or comma-separate; e.g. en-ja=translate-en-ja). Unpicked pairs go to a "
        "one-pair model before a multilingual one, a model exported here before an imported one, then "
        "by name; each pair's model is logged at start",
    ),
    "instances": (
        int,
        "engine cores (processes, each with its own decode loop) per model; 0 = the usable CPU "
        "cores less the front end's share (~0.4 CPU per busy core), at least 1 (one on CUDA): "
        "1 on 2 CPUs, 2 on 4, 5 on 8",
    ),
    "host": (str, "address to bind"),
    "port": (int, "gRPC port (seq2seq.v1, KServe v2, health, reflection)"),
    "http-port": (
        int,
        "HTTP port: KServe v2 REST, the LibreTranslate API, the playground page at / (0 = off)",
    ),
    "metrics-port": (int, "Prometheus /metrics port (0 = off)"),
    "metrics-host": (str, "address /metrics binds (default: --host; 127.0.0.1 keeps it private)"),
    "device": (str, "auto | cpu | cuda: auto uses CUDA when ONNX Runtime can load it"),
    "intra-op-threads": (int, "ONNX Runtime threads per session (1 is fastest on small CPUs; measured)"),
    "io-binding": (
        str,
        (
            "auto | on | off: keep the KV cache in ONNX Runtime device memory between steps "
            "(auto: on CUDA, where numpy would copy it through the host every step)"
        ),
    ),
    "encoder-thread": (
        str,
        (
            "auto | on | off: a second thread per engine core encodes queued requests while it "
            "decodes (auto: on when a model has one engine core and at least 2 usable CPUs, or "
            "runs on CUDA)"
        ),
    ),
    "greedy-screen": (
        str,
        (
            "auto | on | off: greedy rows' next token from an int8 screen of a float32 model's output "
            "projection, each proven to be the argmax (else computed in full), so outputs are unchanged "
            "(auto: on where d_model x target vocabulary is large enough for it to pay, as for "
            "OPUS-MT-sized models; off for small ones, where the float32 projection costs less)"
        ),
    ),
    "event-loop": (
        str,
        "auto | uvloop | asyncio: the front end's event loop (auto: uvloop when it is installed, "
        "as it is with the serve extra)",
    ),
    "grace-s": (float, "on SIGTERM, seconds in-flight requests get to finish"),
    "max-message-bytes": (
        int,
        "largest gRPC message accepted (bigger ones: RESOURCE_EXHAUSTED before any work)",
    ),
    "max-concurrent-streams": (
        int,
        "calls in flight at once per client connection (HTTP/2 streams; more wait)",
    ),
    "http-read-timeout-s": (
        float,
        "HTTP: seconds a client gets to send a request's headers, and then its body (an "
        "idle keep-alive connection is closed after as long); 0 = no limit",
    ),
    "http-max-connections": (
        int,
        "HTTP: connections open at once; more are answered 503 and closed (0 = no limit)",
    ),
    "http-max-connections-per-peer": (
        int,
        "HTTP: connections one client address may hold at once; more are answered "
        "503 and closed (0 = no limit of its own; behind a proxy, raise it to "
        "--http-max-connections)",
    ),
    "tls-handshake-timeout-s": (
        float,
        "HTTPS: seconds a connection gets to finish its TLS handshake; then it is closed",
    ),
    "cors-allow-origin": (
        str,
        "HTTP: comma-separated origins (or *) allowed to call the REST and LibreTranslate "
        "APIs from a browser (CORS; preflight answered); default off",
    ),
    "core-stall-s": (
        float,
        "an engine core with requests in flight that reports nothing for this long is marked "
        "down, its requests get UNAVAILABLE, and it is killed and restarted",
    ),
    "stream-max-pending": (
        int,
        "ModelStreamInfer: requests of one stream read but not yet answered; beyond, "
        "the server stops reading it",
    ),
    "stream-max-pending-bytes": (
        int,
        "ModelStreamInfer: bytes of those requests and answers; beyond, the server stops reading it",
    ),
    "tls-cert": (Path, "PEM certificate chain: serve TLS"),
    "tls-key": (Path, "PEM private key for --tls-cert"),
    "tls-client-ca": (Path, "PEM CA bundle: require client certificates (mTLS)"),
    "auth-token": (str, "require 'authorization: Bearer TOKEN' metadata on every call"),
    "log-level": (str, "DEBUG | INFO | WARNING | ERROR"),
    "batching": (str, "continuous | request | none"),
    "max-batch-size": (int, "sequences decoded together per model"),
    "max-queue-size": (int, "waiting sequences per model before RESOURCE_EXHAUSTED"),
    "max-queue-delay-ms": (float, "request batching: wait up to this for a fuller batch"),
    "max-inputs-per-request": (int, "inputs one request may carry"),
    "max-beam-size": (int, "largest beam a request may ask for"),
}


# Numeric flags and their ranges, checked at start: (low, high, whether low itself is allowed). A value
# outside (a negative timeout made every request 408, a negative cap refused every connection) stops the start
# with a message naming the flag and the range.
_RANGES: dict[str, tuple[float, float, bool]] = {
    "port": (0, 65535, True),
    "http_port": (0, 65535, True),
    "metrics_port": (0, 65535, True),
    "repository_poll_secs": (0, 1e6, False),
    "instances": (0, 1024, True),
    "intra_op_threads": (1, 1024, True),
    "grace_s": (0, 1e6, True),
    "max_message_bytes": (1, 2**31 - 1, True),
    "max_concurrent_streams": (1, 2**31 - 1, True),
    "http_read_timeout_s": (0, 1e6, True),
    "http_max_connections": (0, 1_000_000, True),
    "http_max_connections_per_peer": (0, 1_000_000, True),
    "tls_handshake_timeout_s": (0, 1e6, False),
    "core_stall_s": (0, 1e6, True),
    "stream_max_pending": (1, 1_000_000, True),
    "stream_max_pending_bytes": (1, 2**40, True),
    "max_batch_size": (1, 1_000_000, True),
    "max_queue_size": (1, 100_000_000, True),
    "max_queue_delay_ms": (0, 1e6, True),
    "max_inputs_per_request": (1, 1_000_000, True),
    "max_beam_size": (1, MAX_BEAM_SIZE, True),
}
_MEANING = {
    "port": "0 picks a free port",
    "http_port": "0 = off",
    "metrics_port": "0 = off",
    "instances": "0 = auto",
    "http_read_timeout_s": "0 = no limit",
    "http_max_connections": "0 = no limit",
    "http_max_connections_per_peer": "0 = no limit of its own",
    "core_stall_s": "0 = no watchdog",
}


def _check_ranges(values: dict[str, object]) -> None:
    import math

    for key, (low, high, low_ok) in _RANGES.items():
        if key not in values:
            continue
        v = values[key]
        inside = (
            isinstance(v, (int, float))
            and not math.isnan(v)
            and (v >= low if low_ok else v > low)
            and v <= high
        )
        if not inside:
            lows = (
                f"{low:g} to {high:g}"
                if low_ok
                else ("positive" if low == 0 else f"above {low:g}") + f", at most {high:g}"
            )
            note = f" ({_MEANING[key]})" if key in _MEANING else ""
            raise SystemExit(f"--{key.replace('_', '-')} must be {lows}{note}, not {v!r}")


_REPEATABLE = (
    "load-model",
    "pair",
)  # given several times (or comma-separated, as the environment variable must be)


def _names(raw) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    return tuple(m.strip() for item in items for m in str(item).split(",") if m.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    for flag, (typ, help_) in _FLAGS.items():
        more = {"action": "append"} if flag in _REPEATABLE else {}
        p.add_argument(
            f"--{flag}",
            type=typ,
            default=None,
            help=f"{help_} [env S2S_{flag.upper().replace('-', '_')}]",
            **more,
        )


def from_args(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> ServerConfig:
    """Flags win over S2S_* environment variables, which win over the defaults."""
    values: dict[str, object] = {}
    for flag, (typ, _) in _FLAGS.items():
        attr = flag.replace("-", "_")
        raw = getattr(args, attr, None)
        if raw is None and (e := env.get(f"S2S_{attr.upper()}")) not in (None, ""):
            try:
                raw = typ(e)
            except ValueError:
                raise SystemExit(
                    f"S2S_{attr.upper()} (--{flag}) must be a {typ.__name__}, not {e[:40]!r}"
                ) from None
        if raw is not None:
            values[attr] = raw
    _check_ranges(values)
    sched_fields = {f.name for f in fields(SchedulerConfig)}
    sched = {k: v for k, v in values.items() if k in sched_fields}
    stream = {
        f.name: values[f"stream_{f.name}"] for f in fields(StreamConfig) if f"stream_{f.name}" in values
    }
    if "batching" in values:
        if values["batching"] not in ("continuous", "request", "none"):
            raise SystemExit(f"--batching must be continuous, request or none, not {values['batching']!r}")
        sched["mode"] = values["batching"]
    top = {k: v for k, v in values.items() if k in {f.name for f in fields(ServerConfig)}}
    for key in ("models", "load_model", "pair"):
        if key in top:
            top[key] = _names(top[key])
    if "pair" in top:
        try:
            top["pair"] = parse_pairs(top["pair"])
        except ValueError as e:
            raise SystemExit(str(e)) from None
    mode = top.get("model_control_mode", "none")
    if mode not in CONTROL_MODES:
        raise SystemExit(f"--model-control-mode must be none, explicit or poll, not {mode!r}")
    if top.get("load_model") and mode != "explicit":
        raise SystemExit(
            "--load-model needs --model-control-mode explicit (the other modes load what the repository "
            "holds, or --models)"
        )
    if mode == "explicit" and top.get("models"):
        raise SystemExit(
            "--models selects what the none and poll modes serve; in explicit mode name the models to "
            "load at start with --load-model"
        )
    if (name := top.get("model_name")) is not None and (why := name_problem(name)):
        raise SystemExit(f"--model-name {name[:40]!r} is not a model name: {why}")
    if top.get("readiness", "all") not in ("all", "per-model"):
        raise SystemExit(f"--readiness must be all or per-model, not {top['readiness']!r}")
    if top.get("model_repo_links", "inside") not in ("inside", "any"):
        raise SystemExit(f"--model-repo-links must be inside or any, not {top['model_repo_links']!r}")
    if top.get("event_loop", "auto") not in ("auto", "uvloop", "asyncio"):
        raise SystemExit(f"--event-loop must be auto, uvloop or asyncio, not {top['event_loop']!r}")
    for key in ("io_binding", "encoder_thread", "greedy_screen"):
        if top.get(key, "auto") not in ("auto", "on", "off"):
            raise SystemExit(f"--{key.replace('_', '-')} must be auto, on or off, not {top[key]!r}")
    if bool(top.get("tls_cert")) != bool(top.get("tls_key")):
        raise SystemExit("--tls-cert and --tls-key go together")
    return ServerConfig(**top, scheduler=SchedulerConfig(**sched), stream=StreamConfig(**stream))
