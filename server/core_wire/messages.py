"""The pipe protocol between the front end and an engine core, as small pickled dataclasses.

front end -> core: ``CoreSpec`` (first, once), ``Submit``, ``Cancel``, ``Drain`` (graceful: finish
queued work within a grace period, then exit), ``Abort`` (fail what is left now).
core -> front end: ``Ready`` (once loaded) or ``LoadFailed``; then ``Report`` (the scheduler's typed
events and stats, ``server/core_wire/events.py``) until it exits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine import EngineOptions
from server.config import SchedulerConfig
from server.core_wire.events import Stats


@dataclass(frozen=True)
class CoreSpec:
    model: str
    version: str
    folder: Path
    index: int  # this core's number among the model's cores (the ``core`` metrics label)
    engine: EngineOptions
    scheduler: SchedulerConfig
    log_level: str = "INFO"
    grace_s: float = 10.0  # a SIGTERM sent to the core itself drains it with this grace period


@dataclass(frozen=True)
class Submit:
    request: int
    sequences: list[tuple[list[int], list[int]]]  # (source ids, target prefix ids) per input
    options: tuple  # DecodingOptions.to_tuple(): max_new_tokens resolved, the seed drawn when sampling
    stream: bool
    deadline: float | None  # time.monotonic(): one clock for all processes of the machine
    arrival: float
    # A multilingual model's target language: its token(s), forced before every input's prefix. They count among
    # max_new_tokens (as transformers' generate() counts its forced BOS within max_length); the front end leaves
    # them out of the answer.
    forced: tuple[int, ...] = ()


@dataclass(frozen=True)
class Cancel:
    request: int


@dataclass(frozen=True)
class Drain:
    grace_s: float


@dataclass(frozen=True)
class Abort:
    pass


@dataclass(frozen=True)
class Ready:
    provider: str
    io_binding: bool
    pid: int
    greedy_screen: str = ""  # "on: why" or "off: why" (engine.screen.choose), for the start log


@dataclass(frozen=True)
class LoadFailed:
    message: str


@dataclass(frozen=True)
class Report:
    events: list  # scheduler Token / Finished / Failed
    stats: Stats
