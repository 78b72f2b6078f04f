"""What an engine core reports, as plain dataclasses: the typed events of each request (``Admitted``,
``Token``, ``Finished``, ``Failed``) and the figures of each step (``Stats``). The scheduler makes them
inside the core; the pipe carries them to the front end, where each event goes to its request's in-flight
handle and the stats to the metrics. Nothing here knows a process, a thread or a transport."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine import Hypothesis
from server.errors import ServingError


@dataclass(frozen=True)
class Admitted:
    """The request joined the core's running batch (its first input did): it has started. Once per request,
    in the first report after it joined, before any token or answer of it. The front end keeps it to itself
    (``InFlight.started``): a core that dies fails the requests it had started, and sends the others, whose
    caller has seen nothing of them, to another core (once: one that joined just before the death, its
    ``Admitted`` not sent yet, may be what killed it)."""

    request: int


@dataclass(frozen=True)
class Token:
    """A streaming request's sequence ``index`` generated ``token`` (EOS excluded)."""

    request: int
    index: int
    token: int


@dataclass(frozen=True)
class Finished:
    """Sequence ``index`` of a request is done. Times are ``time.monotonic()`` (one clock for every process)."""

    request: int
    index: int
    tokens: list[int]
    admitted: float
    first_token: float
    # n-best, best first; empty: just tokens, unscored
    hypotheses: list[Hypothesis] = field(default_factory=list)


@dataclass(frozen=True)
class Failed:
    """The whole request failed (nothing more comes for it); ``code`` is a gRPC status name."""

    request: int
    code: str
    message: str

    def error(self) -> ServingError:
        """The domain error it stands for, to raise at the edge (its code maps to the status once per transport)."""
        err = ServingError(self.message)
        err.code = self.code
        return err


Event = Token | Finished | Failed  # what a request's handle receives (Admitted stays with the front end)


@dataclass
class Stats:
    """Figures since the last report, for the front end's Prometheus metrics."""

    step_s: list[float] = field(default_factory=list)
    batch_rows: list[int] = field(default_factory=list)
    queue_s: list[float] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)
    tpot_s: list[float] = field(default_factory=list)
    generated: int = 0
    encoded_ahead: int = 0
    queued: int = 0  # rows waiting, now
    active: int = 0  # sequences decoding, now

    def take(self) -> Stats:
        out = Stats(
            self.step_s,
            self.batch_rows,
            self.queue_s,
            self.ttft_s,
            self.tpot_s,
            self.generated,
            self.encoded_ahead,
            self.queued,
            self.active,
        )
        self.step_s, self.batch_rows, self.queue_s, self.ttft_s, self.tpot_s = [], [], [], [], []
        self.generated = self.encoded_ahead = 0
        return out
