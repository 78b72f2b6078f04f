"""What the front end knows of one engine core (``CoreState``), and the errors a core's handle raises."""

from __future__ import annotations

from dataclasses import dataclass

from server.errors import ServingError


class CoreUnavailable(ServingError):
    code = "UNAVAILABLE"


class CoreLoadError(RuntimeError):
    pass


@dataclass
class CoreState:
    up: bool = False
    provider: str = ""
    io_binding: bool = False
    greedy_screen: str = ""  # "on (why)" | "off (why)", as the core decided (engine.screen.choose)
    pid: int = 0
    restarts: int = 0
    deaths_in_a_row: int = 0
    ready_at: float = 0.0
