"""The one place where what the engine cores report goes: their per-step ``Stats`` into Prometheus, and
state changes (a core up or down, a version staged, promoted, retired) to whoever watches health.

Events flow one way: a core's handle (``server/core_client/client.py``) hands plain values to its model version's
``ModelTelemetry``; nothing up here calls back down, and the model API holds no Prometheus children.
The health board subscribes once, at the top (``Telemetry.watch``), instead of a callback being
handed down through the repository and the model API to every core.
"""

from __future__ import annotations

from collections.abc import Callable

from server.core_wire.events import Stats
from server.telemetry.metrics import Metrics


class Telemetry:
    def __init__(self, metrics: Metrics):
        self.metrics = metrics
        self._watchers: list[Callable[[], None]] = []

    def watch(self, watcher: Callable[[], None]) -> None:
        """``watcher()`` runs after every change of any model's state (on the event loop's thread)."""
        self._watchers.append(watcher)

    def changed(self) -> None:
        for watcher in self._watchers:
            watcher()

    def model(self, name: str, n_cores: int) -> ModelTelemetry:
        return ModelTelemetry(self, name, n_cores)


class ModelTelemetry:
    """One model version's figures. Counters and histograms count every version's work; the gauges (rows
    queued and decoding, cores up, restarts) are the serving version's alone: a version loading beside it
    (``staged``) or replaced and draining (``retired``) leaves them to the one that serves."""

    def __init__(self, telemetry: Telemetry, name: str, n_cores: int):
        self.telemetry = telemetry
        m = telemetry.metrics
        self.serving = True
        self.input_tokens = m.input_tokens.labels(name)
        self.queue, self.ttft = m.queue_duration.labels(name), m.ttft.labels(name)
        self.tpot, self.generated = m.tpot.labels(name), m.generated_tokens.labels(name)
        self.step = [m.step_duration.labels(name, str(i)) for i in range(n_cores)]
        self.batch = [m.batch_size.labels(name, str(i)) for i in range(n_cores)]
        self.queued = [m.queued.labels(name, str(i)) for i in range(n_cores)]
        self.active = [m.active.labels(name, str(i)) for i in range(n_cores)]
        self.cores_up_gauge = m.cores_up.labels(name)
        self.restarts_counter = m.core_restarts.labels(name)
        self.up = [False] * n_cores
        self.restarts = [0] * n_cores
        self._restarts_seen = 0
        self.encoded_ahead = 0  # sequences encoded on the cores' encoder threads while they decoded

    @property
    def cores_up(self) -> int:
        return sum(self.up)

    def stats(self, core: int, s: Stats) -> None:
        """One report of a core's step loop."""
        for v in s.step_s:
            self.step[core].observe(v)
        for v in s.batch_rows:
            self.batch[core].observe(v)
        for v in s.queue_s:
            self.queue.observe(v)
        for v in s.ttft_s:
            self.ttft.observe(v)
        for v in s.tpot_s:
            self.tpot.observe(v)
        if s.generated:
            self.generated.inc(s.generated)
        self.encoded_ahead += s.encoded_ahead
        if self.serving:
            self.queued[core].set(s.queued)
            self.active[core].set(s.active)

    def core_state(self, core: int, up: bool, restarts: int) -> None:
        """A core came up or went down."""
        self.up[core], self.restarts[core] = up, restarts
        self.state_changed()

    def state_changed(self) -> None:
        if self.serving:
            self.cores_up_gauge.set(self.cores_up)
            restarts = sum(self.restarts)
            if restarts > self._restarts_seen:
                self.restarts_counter.inc(restarts - self._restarts_seen)
                self._restarts_seen = restarts
        self.telemetry.changed()
