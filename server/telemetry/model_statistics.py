"""Triton's statistics extension, per model version: what every inference call of every door did, as the request
tracker records it.

A tracked inference call (``RequestTracker.track`` of Generate, GenerateStream, ModelInfer, ModelStreamInfer or
Translate) carries a ``Call`` in a context variable; the model API notes on it the version that took the call
(``noted``, where the door resolves it) and its phases (``prepared``, ``ran``), and the tracker records it when the
call ends. A call that never reached a served version (an unknown model) is in no version's figures.

The figures, as Triton defines them (docs/KSERVE.md#statistics):

- ``success`` / ``fail``: calls and their whole time in the server;
- ``queue``: waiting for a place in a batch (arrival at the engine core until the last input joined a batch);
- ``compute_input``: checking and tokenizing the texts; ``compute_infer``: in the engine, from joining a batch
  until the last output was done; ``compute_output``: from there until the answer was built;
- ``inference_count``: the inputs (texts) of successful calls, as Triton counts each element of a batch;
- ``execution_count``: successful calls, each one execution of its inputs together (``batch_stats`` by their
  number). The engine also batches rows of different calls at every decode step (continuous batching): those
  batches are in /metrics (``s2s_batch_size``), not here.
"""

from __future__ import annotations

import contextvars
import time
from dataclasses import dataclass, field

INFERENCE_METHODS = frozenset({"Generate", "GenerateStream", "ModelInfer", "ModelStreamInfer", "Translate"})
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


@dataclass(slots=True)
class Call:
    """What one tracked inference call learned on its way (times in ns)."""

    start_ns: int
    version: tuple[str, str] | None = None  # (model, version) that took it
    inputs: int = 0
    input_ns: int = 0
    queue_ns: int = 0
    infer_ns: int = 0
    ran_at_ns: int = 0  # when the engine's outputs were back


CALL: contextvars.ContextVar[Call | None] = contextvars.ContextVar("s2s_call", default=None)


def noted(name: str, version: str) -> None:
    """The call in progress (if any) is taken by this model version."""
    if (call := CALL.get()) is not None:
        call.version = (name, version)


def prepared(name: str, version: str, inputs: int, seconds: float) -> None:
    if (call := CALL.get()) is not None:
        call.version = (name, version)
        call.inputs += inputs
        call.input_ns += int(seconds * 1e9)


def ran(queue_seconds: float, total_seconds: float) -> None:
    """The engine's part of the call: ``queue_seconds`` waiting, the rest of ``total_seconds`` computing."""
    if (call := CALL.get()) is not None:
        call.queue_ns += int(queue_seconds * 1e9)
        call.infer_ns += int(max(0.0, total_seconds - queue_seconds) * 1e9)
        call.ran_at_ns = time.perf_counter_ns()


@dataclass(slots=True)
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int) -> None:
        self.count += 1
        self.ns += max(0, ns)

    def to_dict(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass
class VersionStatistics:
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    phases: dict[str, Duration] = field(default_factory=lambda: {p: Duration() for p in PHASES})
    batches: dict[int, dict[str, Duration]] = field(default_factory=dict)  # batch size -> compute_* durations

    def to_dict(self, name: str, version: str) -> dict:
        """Triton's ``$model_stat``."""
        no_cache = Duration().to_dict()  # this server has no response cache
        return {
            "name": name,
            "version": version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {
                "success": self.success.to_dict(),
                "fail": self.fail.to_dict(),
                **{p: d.to_dict() for p, d in self.phases.items()},
                "cache_hit": no_cache,
                "cache_miss": no_cache,
            },
            "batch_stats": [
                {"batch_size": size, **{p: d.to_dict() for p, d in phases.items()}}
                for size, phases in sorted(self.batches.items())
            ],
            "memory_usage": [],  # Triton's backends may report it; ONNX Runtime's is not measured here
            "response_stats": {},  # per response of a decoupled model: every call here has one answer
        }


class ModelStatistics:
    """Every model version's figures since the server started (kept for versions no longer served: a version
    loaded again goes on counting, as the process's other counters do)."""

    def __init__(self):
        self.versions: dict[tuple[str, str], VersionStatistics] = {}

    def of(self, name: str, version: str) -> VersionStatistics:
        return self.versions.get((name, version)) or VersionStatistics()

    def record(self, call: Call, ok: bool) -> None:
        if call.version is None:
            return
        end = time.perf_counter_ns()
        # Made where missing, not as setdefault's default: that would build one on every call.
        if (s := self.versions.get(call.version)) is None:
            s = self.versions[call.version] = VersionStatistics()
        s.last_inference_ms = time.time_ns() // 1_000_000
        if not ok:
            s.fail.add(end - call.start_ns)
            return
        s.success.add(end - call.start_ns)
        s.inference_count += call.inputs
        s.execution_count += 1
        output_ns = end - call.ran_at_ns if call.ran_at_ns else 0
        spent = {
            "queue": call.queue_ns,
            "compute_input": call.input_ns,
            "compute_infer": call.infer_ns,
            "compute_output": output_ns,
        }
        for phase, ns in spent.items():
            s.phases[phase].add(ns)
        if (batch := s.batches.get(call.inputs)) is None:
            batch = s.batches[call.inputs] = {p: Duration() for p in PHASES if p != "queue"}
        for phase, d in batch.items():
            d.add(spent[phase])
