"""Batching policies: given a read-only view of a core's queue and running batch, how many rows to admit
before the next decode step (and, for a policy that waits for company, until when to wait). A policy
never touches the scheduler's queues or lock; the scheduler (``server/core_process/scheduler.py``) does the admitting.

* ``continuous`` (iteration-level, as Orca/vLLM/TGI): newcomers join the running batch before the
  next step; finished sequences leave and are answered at once.
* ``request`` (Triton's dynamic batcher): a batch is formed once (waiting up to max_queue_delay_ms
  for company) and decoded to completion before the next is formed.
* ``none``: one sequence at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.config import SchedulerConfig


@dataclass(frozen=True)
class QueueView:
    """What a policy may see of a core, at one moment (taken under the scheduler's lock)."""

    now: float  # time.monotonic()
    running_rows: int  # rows of the running batch
    running: int  # sequences in the running batch
    queued_rows: int  # rows waiting, encoded or not
    oldest_arrival: float | None  # arrival of the oldest waiting request; None: nothing waits
    stopping: bool  # draining: no company is coming


@dataclass(frozen=True)
class Admission:
    rows: int  # at most this many rows join the batch now
    wait_until: float | None = (
        None  # ask again at this time.monotonic() (or when the queue changes), admitting nothing
    )


class Continuous:
    """Newcomers join the running batch between any two steps."""

    def __init__(self, config: SchedulerConfig):
        self.max_rows = config.max_batch_size

    def admit(self, view: QueueView) -> Admission:
        return Admission(self.max_rows - view.running_rows)


class PerRequest:
    """Triton's dynamic batcher: form a batch (waiting up to max_queue_delay_ms), decode it to the end."""

    def __init__(self, config: SchedulerConfig):
        self.max_rows, self.delay_s = config.max_batch_size, config.max_queue_delay_ms / 1000

    def admit(self, view: QueueView) -> Admission:
        if view.running:
            return Admission(0)
        if (
            self.delay_s > 0
            and view.oldest_arrival is not None
            and view.queued_rows < self.max_rows
            and not view.stopping
        ):
            until = view.oldest_arrival + self.delay_s
            if view.now < until:
                return Admission(0, until)
        return Admission(self.max_rows)


class OneAtATime:
    """No batching: one sequence (a beam counts as one) decodes at a time."""

    def __init__(self, config: SchedulerConfig):
        pass

    def admit(self, view: QueueView) -> Admission:
        return Admission(0 if view.running else 1)


POLICIES = {"continuous": Continuous, "request": PerRequest, "none": OneAtATime}
