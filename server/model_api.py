"""The model API: one handle per served model version, the only thing front doors call.

Every front door (seq2seq.v1, KServe v2, LibreTranslate) maps its protocol to texts, decoding options
(``contract.decoding.DecodingOptions``) and target prefixes, calls
``prepare`` (validation and tokenization, cheap checks first) and then ``generate`` or ``stream``,
and maps the domain objects it gets back (``Generation``, ``StreamEvent``) to its protocol. None of
them sees an engine, a scheduler or a core. Texts are tokenized and detokenized here, in the front
end; the engine cores only ever see ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from contract import bundle
from contract.text import TextCodec
from engine import EngineOptions
from server.config import ServerConfig
from server.core_messages import CoreSpec
from server.cores import CoreHandle, Router
from server.errors import ServingError, ShuttingDown
from server.metrics import Metrics
from contract.decoding import DecodingOptions
from server import distinct
from server.prepare import Limits, Prepared, limits, prepare
from server.core_events import Finished, Stats

log = logging.getLogger("s2s.model")


# ---- what front doors get back -------------------------------------------------------------------
@dataclass(frozen=True)
class Hypothesis:
    text: str
    score: float  # 0 unless the request asked for scores
    output_tokens: int


@dataclass(frozen=True)
class Output:
    text: str  # hypotheses[0].text
    input_tokens: int
    output_tokens: int
    hypotheses: tuple[Hypothesis, ...] = ()  # num_hypotheses of them, best first


@dataclass(frozen=True)
class Timings:
    queue_seconds: float  # arrival until the last of its inputs joined a batch
    time_to_first_token_seconds: float
    total_seconds: float


@dataclass(frozen=True)
class Generation:
    model: str
    version: str
    outputs: list[Output]  # in input order
    timings: Timings


@dataclass(frozen=True)
class StreamEvent:
    index: int
    text_delta: str
    finished: bool = False
    output: Output | None = None


@dataclass(frozen=True)
class ModelInfo:
    name: str
    version: str
    task: str
    provider: str
    quantization: str
    limits: Limits
    cores: int
    cores_up: int


@dataclass
class _Pending:
    """Front-end state of one request in flight."""

    done: list[Finished | None]  # per input, once it finished
    future: asyncio.Future  # set when all are done, or failed with the request's error
    left: int  # inputs not finished yet
    events: asyncio.Queue | None = None  # streaming: (index, token), ("done", Finished) and ("error", err)


class ModelAPI:
    def __init__(self, name: str, version: str, folder: Path, config: ServerConfig, metrics: Metrics, n_cores: int,
                 on_change: Callable[[], None]):
        self.name, self.version, self.folder = name, version, folder
        self.bundle = bundle.read_bundle(folder, verify_hashes=False)  # each core verifies every hash as it loads
        m = self.bundle.model
        self.codec = TextCodec.from_file(folder / bundle.TOKENIZER_FILE, self.bundle.task, m.special)
        self.sched = config.scheduler
        self.limits = limits(self.bundle, self.codec, config.scheduler)
        self.metrics = metrics
        self.stopping = False
        self.stop_reason = "server is shutting down; retry on another replica"
        self.retired = False  # replaced or unloaded: the model's gauges belong to its successor (or to nobody)
        self.staged = False  # loading beside a serving version: the model's gauges are still that version's
        # Calls that submit more than once (distinct hypotheses) and are between submissions: a retired version
        # lets them finish before its cores drain.
        self._multi_pass = 0
        self._settled = asyncio.Event()
        self._settled.set()
        self._on_change = on_change
        opts = EngineOptions(device=config.device, intra_op_threads=config.intra_op_threads, io_binding=config.io_binding)
        encoder_thread = config.encoder_thread == "on" or (config.encoder_thread == "auto" and n_cores == 1)
        core_sched = dataclasses.replace(config.scheduler, encoder_thread=encoder_thread)
        specs = [CoreSpec(name, version, folder, i, opts, core_sched, config.log_level, config.grace_s) for i in range(n_cores)]
        self.router = Router([CoreHandle(s, self._stats, self._changed) for s in specs])
        self.m_input_tokens = metrics.input_tokens.labels(name)
        self.m_queue, self.m_ttft = metrics.queue_duration.labels(name), metrics.ttft.labels(name)
        self.m_tpot, self.m_generated = metrics.tpot.labels(name), metrics.generated_tokens.labels(name)
        self.m_step = [metrics.step_duration.labels(name, str(i)) for i in range(n_cores)]
        self.m_batch = [metrics.batch_size.labels(name, str(i)) for i in range(n_cores)]
        self.m_queued = [metrics.queued.labels(name, str(i)) for i in range(n_cores)]
        self.m_active = [metrics.active.labels(name, str(i)) for i in range(n_cores)]
        self.m_cores_up = metrics.cores_up.labels(name)
        self.m_restarts = metrics.core_restarts.labels(name)
        self._restarts_seen = 0
        self.encoded_ahead = 0  # sequences encoded on the cores' encoder threads while they decoded

    # ---- state -----------------------------------------------------------------------------------
    @property
    def cores(self) -> list[CoreHandle]:
        return self.router.cores

    @property
    def ready(self) -> bool:
        return self.router.any_up and not self.stopping

    @property
    def provider(self) -> str:
        return next((c.state.provider for c in self.cores if c.state.provider), "")

    def info(self) -> ModelInfo:
        return ModelInfo(self.name, self.version, self.bundle.task.name, self.provider, self.bundle.quantization,
                         self.limits, len(self.cores), sum(c.state.up for c in self.cores))

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        await asyncio.gather(*(core.start(loop) for core in self.cores))

    def _changed(self, core: CoreHandle | None) -> None:
        if self.retired or self.staged:
            self._on_change()
            return
        self.m_cores_up.set(sum(c.state.up for c in self.cores))
        restarts = sum(c.state.restarts for c in self.cores)
        if restarts > self._restarts_seen:
            self.m_restarts.inc(restarts - self._restarts_seen)
            self._restarts_seen = restarts
        self._on_change()

    def _stats(self, spec: CoreSpec, s: Stats) -> None:
        i = spec.index
        for v in s.step_s:
            self.m_step[i].observe(v)
        for v in s.batch_rows:
            self.m_batch[i].observe(v)
        for v in s.queue_s:
            self.m_queue.observe(v)
        for v in s.ttft_s:
            self.m_ttft.observe(v)
        for v in s.tpot_s:
            self.m_tpot.observe(v)
        if s.generated:
            self.m_generated.inc(s.generated)
        self.encoded_ahead += s.encoded_ahead
        if self.retired or self.staged:
            return
        self.m_queued[i].set(s.queued)
        self.m_active[i].set(s.active)

    # ---- requests --------------------------------------------------------------------------------
    def prepare(self, texts: list[str], options: DecodingOptions = DecodingOptions(),
                target_prefixes: list[str] | None = None) -> Prepared:
        """Validate and tokenize; raises InvalidInput naming the limit."""
        return prepare(self.name, self.bundle, self.codec, texts, options, self.limits, target_prefixes)

    def _submit(self, p: Prepared, deadline: float | None, t0: float, stream: bool,
                core: CoreHandle | None = None, accepted: bool = False) -> tuple[CoreHandle, object, _Pending]:
        if self.stopping and not accepted:  # accepted: a later pass of a call that was taken before the stop
            raise ShuttingDown(self.stop_reason)
        core = core or self.router.pick()
        loop = asyncio.get_running_loop()
        n = len(p.src_ids)
        pending = _Pending([None] * n, loop.create_future(), n, asyncio.Queue() if stream else None)

        def finished(ev: Finished) -> None:
            pending.done[ev.index] = ev
            pending.left -= 1
            if pending.events is not None:
                pending.events.put_nowait(("done", ev))
            if pending.left == 0:
                core.done(req)
                if not pending.future.done():
                    pending.future.set_result(None)

        def failed(err: ServingError) -> None:
            if pending.events is not None:
                pending.events.put_nowait(("error", err))
            if not pending.future.done():
                pending.future.set_exception(err)

        on_token = (lambda index, token: pending.events.put_nowait((index, token))) if stream else None
        req = core.submit(list(zip(p.src_ids, p.prefixes)), p.options, stream, deadline, t0, finished, failed, on_token)
        self.m_input_tokens.inc(sum(len(ids) for ids in p.src_ids))
        return core, req, pending

    def _output(self, p: Prepared, i: int, ev: Finished) -> Output:
        scored = p.options.return_scores
        hyps = tuple(Hypothesis(self.codec.decode(h.tokens), h.score if scored else 0.0, len(h.tokens))
                     for h in ev.hypotheses) or (Hypothesis(self.codec.decode(ev.tokens), 0.0, len(ev.tokens)),)
        return Output(hyps[0].text, len(p.src_ids[i]), hyps[0].output_tokens, hyps)

    def _timings(self, pending: _Pending, t0: float) -> Timings:
        done = pending.done  # all set: called once every input finished
        return Timings(queue_seconds=max(d.admitted for d in done) - t0,
                       time_to_first_token_seconds=min(d.first_token for d in done) - t0,
                       total_seconds=time.monotonic() - t0)

    async def generate(self, p: Prepared, deadline: float | None) -> Generation:
        """All outputs at once; raises ServingError (the request's status) on failure."""
        if not distinct.wanted(p.options):
            return await self._generate(p, deadline)
        # Distinct texts (server/distinct.py): the whole beam, then the widest beam for the inputs still short.
        n, t0 = p.options.num_hypotheses, time.monotonic()
        outputs: list[Output | None] = [None] * len(p.src_ids)
        todo, first = list(range(len(p.src_ids))), None
        if self.stopping:
            raise ShuttingDown(self.stop_reason)
        self._multi_pass += 1
        self._settled.clear()
        try:
            for beam in distinct.widths(p.options, self.limits, len(p.src_ids)):
                sub = Prepared([p.src_ids[i] for i in todo], distinct.widened(p.options, beam), [p.prefixes[i] for i in todo])
                g = await self._generate(sub, deadline, accepted=True)
                first = first or g.timings
                for i, o in zip(todo, g.outputs):  # the texts of a narrower pass first, then the new ones
                    hyps = distinct.pick((outputs[i].hypotheses if outputs[i] else ()) + o.hypotheses, n)
                    outputs[i] = Output(hyps[0].text, o.input_tokens, hyps[0].output_tokens, hyps)
                todo = [i for i in todo if len(outputs[i].hypotheses) < n]
                if not todo:
                    break
        finally:
            self._multi_pass -= 1
            if not self._multi_pass:
                self._settled.set()
        timings = Timings(first.queue_seconds, first.time_to_first_token_seconds, time.monotonic() - t0)
        return Generation(self.name, self.version, outputs, timings)

    async def _generate(self, p: Prepared, deadline: float | None, core: CoreHandle | None = None,
                        accepted: bool = False) -> Generation:
        t0 = time.monotonic()
        core, req, pending = self._submit(p, deadline, t0, stream=False, core=core, accepted=accepted)
        try:
            await pending.future
        except asyncio.CancelledError:
            core.cancel(req)
            raise
        outputs = [self._output(p, i, ev) for i, ev in enumerate(pending.done)]
        return Generation(self.name, self.version, outputs, self._timings(pending, t0))

    async def stream(self, p: Prepared, deadline: float | None) -> AsyncIterator[StreamEvent]:
        """Text as it is produced (greedy and sampled inputs: token by token, a target prefix first; a beam's text
        comes when its hypotheses are final: until then any of them may still win), then one finished event per
        input, in input order, with its whole output (all its hypotheses)."""
        if distinct.wanted(p.options):  # beam search: its text comes when final anyway, so as generate() finds it
            g = await self.generate(p, deadline)
            for i, out in enumerate(g.outputs):
                yield StreamEvent(i, out.text, True, out)
            return
        t0 = time.monotonic()
        core, req, pending = self._submit(p, deadline, t0, stream=True)
        n = len(pending.done)
        tokens: list[list[int]] = [[] for _ in range(n)]
        sent = [""] * n
        finished = 0
        try:
            while finished < n:
                a, b = await pending.events.get()
                if a == "error":
                    raise b
                if a == "done":
                    finished += 1
                    continue
                tokens[a].append(b)
                text = self.codec.decode(tokens[a])
                # Subword decoding can rewrite the tail (e.g. a space): send only what extends the prefix.
                if text != sent[a] and text.startswith(sent[a]):
                    delta, sent[a] = text[len(sent[a]):], text
                    yield StreamEvent(a, delta)
        except BaseException:
            core.cancel(req)
            raise
        for i, ev in enumerate(pending.done):
            out = self._output(p, i, ev)
            yield StreamEvent(i, out.text[len(sent[i]):] if out.text.startswith(sent[i]) else "", True, out)

    async def warm_up(self, deadline_s: float = 60.0) -> None:
        """One short request through every engine core (encoder and a few decoder steps): a version takes
        traffic only once each of its cores has answered. Raises ServingError if one fails."""
        eos = self.codec.special.eos
        p = Prepared([[eos]], DecodingOptions(beam_size=1, max_new_tokens=2), [[]])
        deadline = time.monotonic() + deadline_s
        await asyncio.gather(*(self._generate(p, deadline, core) for core in self.cores))

    # ---- shutdown --------------------------------------------------------------------------------
    def stop(self, reason: str = "") -> None:
        """New requests get UNAVAILABLE (with ``reason``) from now on; queued and running ones go on."""
        self.stopping = True
        self.stop_reason = reason or self.stop_reason
        self._on_change()

    def promote(self) -> None:
        """A staged version now serves: the model's gauges are its own."""
        self.staged = False
        self._changed(None)

    def retire(self, reason: str) -> None:
        """Replaced by another version, or unloaded: refuse new requests, leave the model's gauges alone."""
        self.retired = True
        self.stop(reason)

    async def settle(self, timeout: float) -> None:
        """Until no call of this version is between two of its passes (bounded by ``timeout``)."""
        try:
            await asyncio.wait_for(self._settled.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning("model %s version %s: %d call(s) still between passes after %.0f s; draining anyway",
                        self.name, self.version, self._multi_pass, timeout)

    async def drain(self, grace_s: float) -> None:
        for core in self.cores:
            core.drain(grace_s)
        await asyncio.gather(*(core.wait_exited(grace_s + 10) for core in self.cores))

    def abort(self) -> None:
        for core in self.cores:
            core.abort()
