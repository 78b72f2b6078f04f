"""What an engine core's scheduler tracks: each request it accepted, and each input's generation (a job)."""

from __future__ import annotations

from dataclasses import dataclass

from engine import Sequence
from server.errors import Cancelled, DeadlineExceeded, ServingError


@dataclass(eq=False)
class Request:
    id: int
    arrival: float
    deadline: float | None  # time.monotonic() after which it is dropped
    left: int = 0  # jobs not finished yet
    over: bool = False  # failed, cancelled or done: nothing more is reported for it
    admitted: bool = False  # one of its jobs joined the running batch (``Admitted`` was reported)
    rows_active: int = 0  # rows of its jobs in the running batch now (fair_queue.py's cap counts them)


@dataclass(eq=False)
class Job:
    """One input's generation, as the scheduler tracks it."""

    seq: Sequence
    request: Request
    index: int
    admitted: float | None = None
    first_token: float | None = None
    n_tokens: int = 0
    cancelled: bool = False

    @property
    def rows(self) -> int:
        return self.seq.n_rows

    def expired(self, now: float) -> ServingError | None:
        """Why it may no longer start (cancelled, or its deadline passed while it waited), if so."""
        if self.cancelled:
            return Cancelled("cancelled before it started")
        if self.request.deadline is not None and now > self.request.deadline:
            return DeadlineExceeded(
                f"deadline exceeded while queued ({now - self.request.arrival:.3f} s waiting)"
            )
        return None
