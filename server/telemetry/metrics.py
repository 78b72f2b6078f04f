"""Prometheus metrics: one object per server, on its own registry (no module-level singletons).

Base units (seconds), conventional suffixes (_seconds, _total), a ``model`` label everywhere.
The engine cores report plain numbers (``server.core_wire.events.Stats``) that the model API records here;
this is the only module that knows prometheus_client.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from server.telemetry.metrics_http import MetricsServer

log = logging.getLogger("s2s.metrics")

# Latency buckets from 1 ms to 60 s: a decode step is ~1 ms, a long beam request tens of seconds.
LATENCY = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
STEP = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
BATCH = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = r = registry or CollectorRegistry()
        self._request_series: dict[tuple[str, str, str, str], tuple] = {}  # request_series(), by labels
        self.request_duration = Histogram(
            "s2s_request_duration_seconds",
            "Time from a request's arrival to its answer.",
            ["model", "method", "protocol"],
            buckets=LATENCY,
            registry=r,
        )
        self.queue_duration = Histogram(
            "s2s_queue_duration_seconds",
            "Time a sequence waits before its encoder runs.",
            ["model"],
            buckets=LATENCY,
            registry=r,
        )
        self.ttft = Histogram(
            "s2s_time_to_first_token_seconds",
            "Time from a request's arrival to its first generated token.",
            ["model"],
            buckets=LATENCY,
            registry=r,
        )
        self.tpot = Histogram(
            "s2s_time_per_output_token_seconds",
            "Mean time between a sequence's generated tokens.",
            ["model"],
            buckets=STEP,
            registry=r,
        )
        # ``core``: which engine core of the model (not ``instance``, which Prometheus sets to the scrape target).
        self.step_duration = Histogram(
            "s2s_decode_step_duration_seconds",
            "Duration of one batched decoder step.",
            ["model", "core"],
            buckets=STEP,
            registry=r,
        )
        self.batch_size = Histogram(
            "s2s_batch_size",
            "Rows (sequences; beams count each) in a decoder step.",
            ["model", "core"],
            buckets=BATCH,
            registry=r,
        )
        # ``code``: the gRPC status name, for HTTP too (its HTTP status follows from it: server/errors.py).
        self.requests = Counter(
            "s2s_requests",
            "Requests answered, by status code.",
            ["model", "method", "protocol", "code"],
            registry=r,
        )
        self.input_tokens = Counter("s2s_input_tokens", "Source tokens accepted.", ["model"], registry=r)
        self.generated_tokens = Counter("s2s_generated_tokens", "Tokens generated.", ["model"], registry=r)
        self.queued = Gauge(
            "s2s_queued_sequences", "Rows waiting to join a batch.", ["model", "core"], registry=r
        )
        self.active = Gauge("s2s_active_sequences", "Sequences being decoded.", ["model", "core"], registry=r)
        self.cores_up = Gauge(
            "s2s_engine_cores_up",
            "Engine core processes of the model that are running.",
            ["model"],
            registry=r,
        )
        self.core_restarts = Counter(
            "s2s_engine_core_restarts", "Engine core processes restarted after dying.", ["model"], registry=r
        )
        self.model_info = Gauge(
            "s2s_model_info",
            "Models served (value 1), with version and execution provider.",
            ["model", "version", "provider", "quantization"],
            registry=r,
        )
        self.build_info = Info("s2s_build", "Server build.", registry=r)

    def forget_version(self, model: str, version: str) -> None:
        """A version replaced by another: its s2s_model_info line goes."""
        self.model_info.remove_by_labels({"model": model, "version": version})

    def request_series(self, model: str, method: str, protocol: str, code: str):
        """The request counter's and duration histogram's children for these labels, looked up once (every call
        records into them; ``labels()`` builds and locks each time)."""
        key = (model, method, protocol, code)
        got = self._request_series.get(key)
        if got is None:
            got = self._request_series[key] = (
                self.requests.labels(model, method, protocol, code),
                self.request_duration.labels(model, method, protocol),
            )
        return got

    def forget_cores(self, model: str, cores: range) -> None:
        """Per-core series of cores the model no longer has (its new version runs fewer)."""
        for metric in (self.step_duration, self.batch_size, self.queued, self.active):
            for i in cores:
                metric.remove_by_labels({"model": model, "core": str(i)})

    def forget_model(self, model: str) -> None:
        """An unloaded model: none of its series is exported any more."""
        for metric in vars(self).values():
            if isinstance(metric, (Counter, Gauge, Histogram)):
                metric.remove_by_labels({"model": model})
        self._request_series = {k: v for k, v in self._request_series.items() if k[0] != model}

    def serve_http(self, port: int, host: str = "0.0.0.0") -> MetricsServer:
        """Start the /metrics endpoint on its own threads (it answers even while the event loop is busy)."""
        return MetricsServer(host, port, self.registry)
