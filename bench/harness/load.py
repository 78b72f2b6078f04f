"""One closed-loop load driver: C workers against one server, each sending one input a request and the next as
soon as its answer arrives, run in a process of its own (a lean client, as a user's load generator would be; the
bench process holds engines and references). A window: a warm-up of ``warmup`` answers, then at least ``seconds``
and ``min_answers`` answers (at most 4x ``seconds``); latencies are those of every request sent inside the window
(in-flight ones drained, not cancelled); the server's CPU by process role is read from /proc at its edges, and its
decode-step metrics where it has them. Protocols: KServe v2 gRPC through tritonclient's aio client (what a Triton
user runs), or seq2seq.v1 (its answers carry token counts and timings). Sides take turns: ``abba``."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from dataclasses import dataclass, field

import numpy as np

from bench.harness.server import cpu_by_role, scrape


def abba(sides: list, r: int) -> list:
    """Round r's order: as given on even rounds, reversed on odd ones (A B, B A, ...), so that the machine's
    drift does not land on one side."""
    return list(sides) if r % 2 == 0 else list(sides)[::-1]


def pct(xs: list[float], q: float) -> float:
    """Percentile by linear interpolation (numpy's default), q in [0, 100]; NaN of nothing."""
    return float(np.percentile(xs, q)) if len(xs) else float("nan")


@dataclass(frozen=True)
class Target:
    """A server under load: its address, root pid, the model, the protocol ("kserve" or "seq2seq"), the request
    parameters every request carries (KServe parameters; seq2seq GenerateOptions fields), the input's shape
    (Triton's batching models take [1, 1])."""

    address: str
    pid: int
    model: str
    protocol: str = "kserve"
    params: dict = field(default_factory=dict)
    shape: tuple[int, ...] = (1,)
    ct2_threads: tuple[int, ...] = ()
    metrics_port: int = 0


@dataclass
class Window:
    answers: int = 0  # answered inside the window
    seconds: float = 0.0
    tokens: int = 0  # their output tokens (seq2seq)
    cpu_s: dict[str, float] = field(default_factory=dict)  # server CPU seconds in the window, by process role
    client_s: float = 0.0
    latencies: list[float] = field(default_factory=list)  # every request sent inside the window
    indices: list[int] = field(default_factory=list)  # the input each latency answered, in the same order
    texts: dict[int, str] = field(default_factory=dict)  # input index -> answer
    ttfts: list[float] = field(default_factory=list)  # server-side time to first token (seq2seq)
    server_s: list[float] = field(default_factory=list)  # server-side total time (seq2seq)
    errors: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # decode-step histogram deltas
    answer_bytes: int = 0  # one answer's ModelInferResponse, serialized (KServe)
    decode_us: float = 0.0  # tritonclient: InferResult + as_numpy + parameters of that answer, per answer

    def per(self, cpu_s: float) -> float:
        return cpu_s / self.answers * 1e3 if self.answers else float("nan")  # ms per request

    @property
    def rps(self) -> float:
        return self.answers / self.seconds if self.seconds else 0.0

    @property
    def tps(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @classmethod
    def pooled(cls, windows: list[Window]) -> Window:
        """One window of several rounds': counts, durations and CPU add up, samples are pooled."""
        out = cls()
        for w in windows:
            out.answers, out.seconds, out.tokens = (
                out.answers + w.answers,
                out.seconds + w.seconds,
                out.tokens + w.tokens,
            )
            out.client_s += w.client_s
            for name in ("latencies", "indices", "ttfts", "server_s"):
                getattr(out, name).extend(getattr(w, name))
            out.texts.update(w.texts)
            for mine, theirs in ((out.cpu_s, w.cpu_s), (out.errors, w.errors), (out.metrics, w.metrics)):
                for k, v in theirs.items():
                    mine[k] = mine.get(k, 0) + v
        return out


async def _client(t: Target, inputs: list[str]):
    """(call(i) -> (text, tokens, ttft, server seconds), close) for the target's protocol."""
    if t.protocol == "seq2seq":
        import grpc

        from protos.seq2seq.v1 import seq2seq_pb2 as pb
        from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

        channel = grpc.aio.insecure_channel(t.address)
        stub, options = pb_grpc.Seq2SeqStub(channel), pb.GenerateOptions(**t.params)

        async def call(i: int):
            r = await stub.Generate(
                pb.GenerateRequest(model=t.model, inputs=[inputs[i]], options=options), timeout=120
            )
            tokens = sum(o.output_tokens for o in r.outputs)
            return r.outputs[0].text, tokens, r.timings.time_to_first_token_seconds, r.timings.total_seconds

        return call, channel.close
    import tritonclient.grpc.aio as aio

    client = aio.InferenceServerClient(t.address)

    async def call(i: int):
        res = await client.infer(
            t.model, [_infer_input(inputs[i], t.shape)], parameters=t.params or None, client_timeout=120
        )
        return res.as_numpy("text_output").reshape(-1)[0].decode(), 0, None, None

    call.client = client
    return call, client.close


def _error_name(e: Exception) -> str:
    """A failed request's status: gRPC's code name (tritonclient's status string), else the exception's type."""
    code = e.code() if callable(getattr(e, "code", None)) else None
    status = e.status() if callable(getattr(e, "status", None)) else None
    return getattr(code, "name", None) or (str(status).split(".")[-1] if status else type(e).__name__)


def _infer_input(text: str, shape: tuple[int, ...]):
    from tritonclient.grpc import InferInput

    inp = InferInput("text_input", list(shape), "BYTES")
    inp.set_data_from_numpy(np.array([text.encode()], dtype=object).reshape(shape))
    return inp


async def _drive(t: Target, inputs: list[str], conc: int, seconds: float, min_answers: int, warmup: int,
                 start: int, decode_cost: bool) -> Window:  # fmt: skip
    call, close = await _client(t, inputs)
    out, cursor, state = Window(), itertools.count(start), {"phase": 0, "warm": 0}

    async def worker() -> None:
        while state["phase"] < 2:
            i, inside = next(cursor) % len(inputs), state["phase"] == 1
            c = time.perf_counter()
            try:
                text, tokens, ttft, server_s = await call(i)
                err = None
            except Exception as e:  # an error is a figure (counted), not the end of the run
                err = _error_name(e)
            if inside:
                if err is not None:
                    out.errors[err] = out.errors.get(err, 0) + 1
                    continue
                out.latencies.append(time.perf_counter() - c)
                out.indices.append(i)
                out.texts[i] = text
                if ttft is not None:
                    out.ttfts.append(ttft)
                    out.server_s.append(server_s)
            if err is None and state["phase"] == 1:
                out.answers, out.tokens = out.answers + 1, out.tokens + tokens
            elif state["phase"] == 0:
                state["warm"] += 1

    tasks = [asyncio.create_task(worker()) for _ in range(conc)]
    try:
        until = time.monotonic() + 300
        while state["warm"] < warmup:
            if time.monotonic() > until or any(x.done() for x in tasks):
                raise RuntimeError(f"{t.address}: no warm-up in 300 s ({state['warm']} answers)")
            await asyncio.sleep(0.01)
        c0, s0, m0, p0 = (
            time.perf_counter(),
            cpu_by_role(t.pid, t.ct2_threads),
            scrape(t.metrics_port),
            time.process_time(),
        )
        state["phase"] = 1
        while (el := time.perf_counter() - c0) < seconds or out.answers < min_answers:
            if el >= 4 * seconds:
                break
            await asyncio.sleep(0.02)
        state["phase"] = 2
        out.seconds, out.client_s = time.perf_counter() - c0, time.process_time() - p0
        s1, m1 = cpu_by_role(t.pid, t.ct2_threads), scrape(t.metrics_port)
        out.cpu_s = {k: v - s0.get(k, 0.0) for k, v in s1.items()}
        out.metrics = {k: v - m0.get(k, 0.0) for k, v in m1.items()}
        await asyncio.gather(*tasks)  # drain: every request sent inside the window is answered
        if decode_cost:
            out.answer_bytes, out.decode_us = await _decode_cost(call.client, t, inputs[0])
    finally:
        for x in tasks:
            x.cancel()
        await close()
    return out


async def _decode_cost(client, t: Target, text: str, n: int = 2000) -> tuple[int, float]:
    """One answer's size, and what tritonclient spends turning it into the caller's values (InferResult, the
    output as numpy, the response parameters), per answer over ``n`` repeats."""
    from tritonclient.grpc import InferResult, service_pb2

    res = await client.infer(t.model, [_infer_input(text, t.shape)], parameters=t.params or None)
    wire = res.get_response().SerializeToString()
    c = time.perf_counter()
    for _ in range(n):
        r = InferResult(service_pb2.ModelInferResponse.FromString(wire))
        r.as_numpy("text_output")
        r.get_response(as_json=False).parameters  # noqa: B018  (a caller reading the timings)
    return len(wire), (time.perf_counter() - c) / n * 1e6


def _child(conn, *args) -> None:
    conn.send(asyncio.run(_drive(*args)))


def window(t: Target, inputs: list[str], conc: int, seconds: float, min_answers: int, warmup: int,
           start: int = 0, decode_cost: bool = False) -> Window:  # fmt: skip
    """One window of ``conc`` closed-loop workers, the inputs sent in order from ``start`` (cycled)."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    args = (t, inputs, conc, seconds, min_answers, warmup, start, decode_cost)
    proc = ctx.Process(target=_child, args=(theirs, *args), daemon=True)
    proc.start()
    try:
        while not ours.poll(1.0):
            if not proc.is_alive():  # it failed: its traceback went to stderr
                raise RuntimeError(f"the load process exited with {proc.exitcode}")
        return ours.recv()
    finally:
        proc.join(30)
