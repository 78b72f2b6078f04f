"""Rate-limited WARNING lines for refused calls, shared by every transport."""

from __future__ import annotations

import logging
import time

log = logging.getLogger("s2s.server")


class RefusalLog:
    """WARNING lines for refused calls, at most one per kind every ``every_s`` seconds (with a count of
    those not written), so a flood of bad calls costs the log a line every few seconds."""

    def __init__(self, every_s: float = 10.0, level: int = logging.WARNING, label: str = "refused"):
        self.every_s, self.level, self.label = every_s, level, label
        self.last: dict[str, float] = {}
        self.skipped: dict[str, int] = {}

    def __call__(self, kind: str, message: str) -> None:
        now = time.monotonic()
        if now - self.last.get(kind, -self.every_s) < self.every_s:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
            return
        skipped = self.skipped.pop(kind, 0)
        self.last[kind] = now
        log.log(
            self.level,
            "%s (%s): %s%s",
            self.label,
            kind,
            message,
            f" [{skipped} more like it not logged]" if skipped else "",
        )
