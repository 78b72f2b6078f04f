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
import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

from contract import bundle
from contract.decoding import DecodingOptions
from contract.text import TextCodec
from engine import EngineOptions, TextHypothesis
from server.config import ServerConfig
from server.core_client.client import CoreHandle
from server.core_client.inflight import InFlight
from server.core_client.router import Router
from server.core_wire.events import Failed, Finished, Token
from server.core_wire.messages import CoreSpec
from server.errors import DeadlineExceeded, ModelNotReady, ShuttingDown
from server.models import distinct, languages
from server.models.detokenize import StreamingText
from server.models.prepare import Prepared, is_long, limits, prepare
from server.models.results import Generation, ModelInfo, Output, StreamEvent, Timings
from server.models.text_plan import AS_SENT, TextOptions, without_made_up
from server.telemetry import model_statistics as statistics
from server.telemetry.model_telemetry import Telemetry

log = logging.getLogger("s2s.model")


class ServedVersion:
    def __init__(
        self,
        name: str,
        version: str,
        folder: Path,
        config: ServerConfig,
        telemetry: Telemetry,
        n_cores: int,
        encoder_thread: bool = False,
    ):
        self.name, self.version, self.folder = name, version, folder
        # Every file against its sha256, once: the cores are given the files' stamps and hash again only a file
        # changed since (a 3.5 GB bundle takes seconds a pass, and a core that restarts would pay them again).
        self.bundle, stamps = bundle.verified(folder)
        m = self.bundle.model
        self.codec = TextCodec.from_file(
            folder / bundle.TOKENIZER_FILE, self.bundle.task, m.special, folder / bundle.TARGET_TOKENIZER_FILE
        )
        self.sched = config.scheduler
        self.offered = languages.Offered.of(self.bundle)  # None: a model without languages (addition)
        self.limits = limits(self.bundle, self.codec, config.scheduler)
        self.telemetry = telemetry.model(name, n_cores)
        self.stopping = False
        self.loaded = False  # every engine core has come up once (a model answers as soon as one has)
        self.stop_reason = "server is shutting down; retry on another replica"
        self.retired = (
            False  # replaced or unloaded: the model's gauges belong to its successor (or to nobody)
        )
        # Calls that submit more than once (distinct hypotheses) and are between submissions: a retired version
        # lets them finish before its cores drain.
        self._multi_pass = 0
        self._settled = asyncio.Event()
        self._settled.set()
        opts = EngineOptions(
            device=config.device,
            intra_op_threads=config.intra_op_threads,
            io_binding=config.io_binding,
            greedy_screen=config.greedy_screen,
            hashed=tuple(stamps.items()),
        )
        core_sched = dataclasses.replace(config.scheduler, encoder_thread=encoder_thread)
        specs = [
            CoreSpec(name, version, folder, i, opts, core_sched, config.log_level, config.grace_s)
            for i in range(n_cores)
        ]
        self.router = Router([CoreHandle(s, self.telemetry, config.core_stall_s) for s in specs])

    # ---- state -----------------------------------------------------------------------------------
    @property
    def cores(self) -> list[CoreHandle]:
        return self.router.cores

    @property
    def ready(self) -> bool:
        return self.router.any_up and not self.stopping

    @property
    def loading(self) -> bool:
        """Its engine cores are still starting for the first time."""
        return not self.loaded and not self.stopping

    @property
    def provider(self) -> str:
        return next((c.state.provider for c in self.cores if c.state.provider), "")

    def info(self) -> ModelInfo:
        return ModelInfo(
            self.name,
            self.version,
            self.bundle.task.name,
            self.provider,
            self.bundle.quantization,
            self.limits,
            len(self.cores),
            sum(c.state.up for c in self.cores),
            self.offered,
        )

    async def start(self, loop: asyncio.AbstractEventLoop) -> None:
        await asyncio.gather(*(core.start(loop) for core in self.cores))
        self.loaded = True
        self.telemetry.state_changed()

    @property
    def staged(self) -> bool:
        """Loading beside a serving version: the model's gauges are still that version's."""
        return not self.telemetry.serving and not self.retired

    def stage(self) -> None:
        self.telemetry.serving = False

    @property
    def encoded_ahead(self) -> int:
        return self.telemetry.encoded_ahead

    # ---- requests --------------------------------------------------------------------------------
    def prepare(
        self,
        texts: list[str],
        options: DecodingOptions = DecodingOptions(),
        target_prefixes: list[str] | None = None,
        text: TextOptions = TextOptions(),
        source_language: str | None = None,
        target_language: str | None = None,
    ) -> Prepared:
        """Validate and tokenize; raises InvalidInput naming the limit. ``text``: protected spans and long inputs
        split, for translation models (other tasks read their inputs as sent). The languages (codes, None: the
        bundle's default): ``server/models/languages.py``; a model without languages takes none."""
        statistics.noted(self.name, self.version)  # a call refused here is this version's failure
        t0 = time.perf_counter()
        text = text if self.bundle.task.name == "translation" else AS_SENT
        asked = languages.ask(self.name, self.bundle, source_language, target_language)
        p = prepare(
            self.name, self.bundle, self.codec, texts, options, self.limits, target_prefixes, text, asked
        )
        statistics.prepared(self.name, self.version, len(texts), time.perf_counter() - t0)
        return p

    def long(self, texts: list[str], target_prefixes: list[str] | None = None) -> bool:
        """Whether the doors call ``prepare`` for these texts in the parse lane (``prepare.is_long``)."""
        return is_long(texts, target_prefixes, self.limits)

    def _submit(
        self,
        p: Prepared,
        deadline: float | None,
        t0: float,
        stream: bool,
        core: CoreHandle | None = None,
        accepted: bool = False,
    ) -> InFlight:
        if self.stopping and not accepted:  # accepted: a later pass of a call that was taken before the stop
            raise ShuttingDown(self.stop_reason)
        if not self.loaded and not self.router.any_up:
            raise ModelNotReady(
                f"model {self.name!r} version {self.version} is loading (its engine cores are starting); "
                "retry shortly"
            )
        sequences = list(zip(p.src_ids, p.prefixes))
        req = self.router.submit(sequences, p.options, stream, deadline, t0, p.forced, core)
        self.telemetry.input_tokens.inc(sum(len(ids) for ids in p.src_ids))
        return req

    def _output(self, p: Prepared, i: int, ev: Finished) -> Output:
        scored, k = (
            p.options.return_scores,
            len(p.forced),
        )  # a forced language token is not part of the answer
        hyps = tuple(
            TextHypothesis(self.codec.decode(h.tokens[k:]), h.tokens[k:], h.score if scored else 0.0)
            for h in ev.hypotheses
        ) or (TextHypothesis(self.codec.decode(ev.tokens[k:]), ev.tokens[k:], 0.0),)
        return Output(hyps[0].text, len(p.src_ids[i]), hyps[0].output_tokens, hyps)

    @staticmethod
    def _timings(done: list[Finished], t0: float) -> Timings:
        return Timings(
            queue_seconds=max(d.admitted for d in done) - t0,
            time_to_first_token_seconds=min(d.first_token for d in done) - t0,
            total_seconds=time.monotonic() - t0,
        )

    async def generate(self, p: Prepared, deadline: float | None) -> Generation:
        """All outputs at once; raises ServingError (the request's status) on failure."""
        g = await self._answer(p, deadline)
        statistics.ran(g.timings.queue_seconds, g.timings.total_seconds)
        return g

    async def _answer(self, p: Prepared, deadline: float | None) -> Generation:
        if p.plan is None:
            g = await self._generate_rows(p, deadline)
            return dataclasses.replace(g, outputs=without_made_up(g.outputs)) if p.protected else g
        if not p.src_ids:  # every input is only spans: answered as sent, without the model
            g = Generation(self.name, self.version, [], Timings(0.0, 0.0, 0.0))
        else:
            g = await self._generate_rows(p, deadline)
        return dataclasses.replace(g, outputs=p.plan.answer(g.outputs, Output))

    async def _generate_rows(self, p: Prepared, deadline: float | None) -> Generation:
        if not distinct.wanted(p.options):
            return await self._generate(p, deadline)
        # Distinct texts (server/models/distinct.py): the whole beam, then the widest beam for the inputs still short.
        n, t0 = p.options.num_hypotheses, time.monotonic()
        outputs: list[Output | None] = [None] * len(p.src_ids)
        todo, first = list(range(len(p.src_ids))), None
        if self.stopping:
            raise ShuttingDown(self.stop_reason)
        self._multi_pass += 1
        self._settled.clear()
        try:
            for beam in distinct.widths(p.options, self.limits, len(p.src_ids)):
                sub = Prepared(
                    [p.src_ids[i] for i in todo],
                    distinct.widened(p.options, beam),
                    [p.prefixes[i] for i in todo],
                    forced=p.forced,
                )
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

    async def _generate(
        self, p: Prepared, deadline: float | None, core: CoreHandle | None = None, accepted: bool = False
    ) -> Generation:
        t0 = time.monotonic()
        req = self._submit(p, deadline, t0, stream=False, core=core, accepted=accepted)
        done: list[Finished | None] = [None] * len(p.src_ids)
        try:
            async with _deadline(deadline):
                for _ in done:
                    ev = await req.events.get()  # no Token: not streamed
                    if isinstance(ev, Failed):
                        raise ev.error()
                    done[ev.index] = ev
        except TimeoutError:  # the deadline passed: its rows leave the batch now
            self.router.cancel(req)
            raise _late() from None
        except BaseException:  # the client went away
            self.router.cancel(req)
            raise
        outputs = [self._output(p, i, ev) for i, ev in enumerate(done)]
        return Generation(self.name, self.version, outputs, self._timings(done, t0))

    async def stream(self, p: Prepared, deadline: float | None) -> AsyncIterator[StreamEvent]:
        """Text as it is produced (greedy and sampled inputs: token by token, a target prefix first; a beam's text
        comes when its hypotheses are final: until then any of them may still win), then one finished event per
        input, in input order, with its whole output (all its hypotheses)."""
        # Beam search: its text comes when final anyway, so as generate() finds it; and so does text whose spans are
        # masked or whose pieces are joined (known only once its rows are done).
        if distinct.wanted(p.options) or (p.plan is not None and not p.plan.streamable):
            g = await self.generate(p, deadline)
            for i, out in enumerate(g.outputs):
                yield StreamEvent(i, out.text, True, out)
            return
        t0 = time.monotonic()
        req = self._submit(p, deadline, t0, stream=True)
        n = len(p.src_ids)
        done: list[Finished | None] = [None] * n
        text = StreamingText(self.codec, n)
        forced = [len(p.forced)] * n  # per input, the forced tokens still to come: not streamed
        left = n
        try:
            while left:
                try:
                    async with _deadline(
                        deadline
                    ):  # not around the yield: the consumer's time is not ours to cut
                        ev = await req.events.get()
                except TimeoutError:
                    raise _late() from None
                if isinstance(ev, Token):
                    if forced[ev.index]:
                        forced[ev.index] -= 1
                    elif delta := text.add(ev.index, ev.token):
                        yield StreamEvent(ev.index, delta)
                elif isinstance(ev, Finished):
                    done[ev.index] = ev
                    left -= 1
                else:
                    raise ev.error()
        except BaseException:
            self.router.cancel(req)
            raise
        t = self._timings(done, t0)
        statistics.ran(t.queue_seconds, t.total_seconds)
        for i, ev in enumerate(done):
            out = self._output(p, i, ev)
            if (
                p.plan is not None
            ):  # repaired: the finished event's text is the answer, its deltas the model's
                out = p.plan.answer_one(i, out, Output)
            elif p.protected:
                out = without_made_up([out])[0]
            yield StreamEvent(i, text.rest(i, out.text), True, out)

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
        self.no_restarts()
        self.telemetry.state_changed()

    def no_restarts(self) -> None:
        """A core that exits from now on stays down: the model is stopping (a SIGTERM may have reached the cores
        too, and they drain and exit by themselves)."""
        for core in self.cores:
            core.closing = True

    def promote(self) -> None:
        """A staged version now serves: the model's gauges are its own."""
        self.telemetry.serving = True
        self.telemetry.state_changed()

    def retire(self, reason: str) -> None:
        """Replaced by another version, or unloaded: refuse new requests, leave the model's gauges alone."""
        self.retired = True
        self.telemetry.serving = False
        self.stop(reason)

    async def settle(self, timeout: float) -> None:
        """Until no call of this version is between two of its passes (bounded by ``timeout``)."""
        try:
            await asyncio.wait_for(self._settled.wait(), timeout)
        except asyncio.TimeoutError:
            log.warning(
                "model %s version %s: %d call(s) still between passes after %.0f s; draining anyway",
                self.name,
                self.version,
                self._multi_pass,
                timeout,
            )

    async def drain(self, grace_s: float) -> None:
        self.router.close(self.stop_reason)  # no core restarts now: a request waiting for one is answered
        for core in self.cores:
            core.drain(grace_s)
        await asyncio.gather(*(core.wait_exited(grace_s + 10) for core in self.cores))

    def abort(self) -> None:
        for core in self.cores:
            core.abort()


_NO_DEADLINE = contextlib.nullcontext()


def _deadline(deadline: float | None):
    """An ``async with`` context that raises TimeoutError once the deadline passes inside it (``_late()`` names it):
    the front end keeps every deadline itself, whatever a core does (a core that hangs, a pipe that is slow to
    deliver). Not a generator-based context manager: it wraps every request."""
    if deadline is None:
        return _NO_DEADLINE
    return asyncio.timeout_at(asyncio.get_running_loop().time() + (deadline - time.monotonic()))


def _late() -> DeadlineExceeded:
    return DeadlineExceeded("deadline exceeded before the request finished")
