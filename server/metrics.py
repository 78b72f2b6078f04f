"""Prometheus metrics: one object per server, on its own registry (no module-level singletons).

Base units (seconds), conventional suffixes (_seconds, _total), a ``model`` label everywhere.
The scheduler feeds it plain numbers; this is the only module that knows prometheus_client.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, start_http_server

# Latency buckets from 1 ms to 60 s: a decode step is ~1 ms, a long beam request tens of seconds.
LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
STEP = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)
BATCH = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = r = registry or CollectorRegistry()
        self.request_duration = Histogram("s2s_request_duration_seconds", "Time from a request's arrival to its answer.",
                                          ["model", "method"], buckets=LATENCY, registry=r)
        self.queue_duration = Histogram("s2s_queue_duration_seconds", "Time a sequence waits before its encoder runs.",
                                        ["model"], buckets=LATENCY, registry=r)
        self.ttft = Histogram("s2s_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.",
                              ["model"], buckets=LATENCY, registry=r)
        self.tpot = Histogram("s2s_time_per_output_token_seconds", "Mean time between a sequence's generated tokens.",
                              ["model"], buckets=STEP, registry=r)
        self.step_duration = Histogram("s2s_decode_step_duration_seconds", "Duration of one batched decoder step.",
                                       ["model"], buckets=STEP, registry=r)
        self.batch_size = Histogram("s2s_batch_size", "Rows (sequences; beams count each) in a decoder step.",
                                    ["model"], buckets=BATCH, registry=r)
        self.requests = Counter("s2s_requests", "Requests answered, by gRPC status code.", ["model", "method", "code"], registry=r)
        self.input_tokens = Counter("s2s_input_tokens", "Source tokens accepted.", ["model"], registry=r)
        self.generated_tokens = Counter("s2s_generated_tokens", "Tokens generated.", ["model"], registry=r)
        self.queued = Gauge("s2s_queued_sequences", "Sequences waiting to join a batch.", ["model"], registry=r)
        self.active = Gauge("s2s_active_sequences", "Sequences being decoded.", ["model"], registry=r)
        self.model_info = Gauge("s2s_model_info", "Models served (value 1), with version and execution provider.",
                                ["model", "version", "provider", "quantization"], registry=r)
        self.build_info = Info("s2s_build", "Server build.", registry=r)

    def serve_http(self, port: int, host: str = "0.0.0.0"):
        """Start the /metrics endpoint; returns (server, thread) so shutdown can close it."""
        return start_http_server(port, addr=host, registry=self.registry)
