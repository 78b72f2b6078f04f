"""bench.serving.peers_bench's load: one window of C closed-loop tritonclient ``grpc.aio`` workers against one
KServe v2 server, in a process of its own (the bench process holds the engine for the outputs check), with the
server's CPU read from /proc by process role at the window's edges; and what tritonclient spends on one answer."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from dataclasses import dataclass, field

import numpy as np

from bench.common.proc_cpu import threads_cpu_s, tree_split_s


@dataclass(frozen=True)
class Target:
    """A server under load: its address, root pid, how its inputs are shaped ([1], or [1, 1] for Triton's
    batching models) and the request parameters every request carries."""

    address: str
    pid: int
    model: str
    shape: tuple[int, ...]
    params: dict
    ct2_threads: tuple[int, ...] = ()  # CTranslate2's threads inside the root process (a peer's "ct2" CPU)
    timed: bool = False  # also measure an answer that carries the timings (s2s serve's "timings" parameter)


@dataclass
class Window:
    answers: int = 0
    seconds: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)  # server CPU seconds in the window, by process role
    client_s: float = 0.0
    latencies: list[float] = field(default_factory=list)
    indices: list[int] = field(default_factory=list)  # the input each latency answered, in the same order
    texts: dict[int, str] = field(default_factory=dict)  # input index -> answer
    answer_bytes: int = 0  # one answer's ModelInferResponse, serialized
    decode_us: float = 0.0  # tritonclient: InferResult + as_numpy + parameters of that answer, per answer
    timed_bytes: int = 0  # the same with the timings asked for (Target.timed)
    timed_decode_us: float = 0.0

    def per(self, cpu_s: float) -> float:
        return cpu_s / self.answers * 1e3  # ms per request


def role(pid: int, depth: int, comm: str) -> str:
    """The front end is the root; under it `s2s serve`'s engine cores, PyTriton's tritonserver and its stubs."""
    if depth == 0:
        return "front"
    if comm.startswith("tritonserver"):
        return "tritonserver"
    return "triton stub" if comm.startswith("triton_python") else "cores"  # comm: 15 characters at most


def _infer_input(text: str, shape: tuple[int, ...]):
    from tritonclient.grpc import InferInput

    inp = InferInput("text_input", list(shape), "BYTES")
    inp.set_data_from_numpy(np.array([text.encode()], dtype=object).reshape(shape))
    return inp


def _cpu(t: Target) -> dict[str, float]:
    out = tree_split_s(t.pid, role)
    if t.ct2_threads:  # the root process's CPU: CTranslate2's threads, and the rest (Python, gRPC)
        out["ct2"] = threads_cpu_s(t.pid, t.ct2_threads)
        out["front"] = out.get("front", 0.0) - out["ct2"]
    return out


async def load_window(
    t: Target, inputs: list[str], conc: int, seconds: float, min_answers: int, warmup: int, start: int
) -> Window:
    import tritonclient.grpc.aio as triton_aio

    client = triton_aio.InferenceServerClient(t.address)
    cursor, state = iter(range(start, 1 << 40)), {"measuring": False, "stop": False, "done": 0}
    out = Window()

    async def worker() -> None:
        while not state["stop"]:
            i = next(cursor) % len(inputs)
            inp = _infer_input(inputs[i], t.shape)
            measuring = state["measuring"]
            c = time.perf_counter()
            res = await client.infer(t.model, [inp], parameters=t.params or None, client_timeout=120)
            if measuring and state["measuring"]:
                out.latencies.append(time.perf_counter() - c)
                out.indices.append(i)
                out.texts[i] = res.as_numpy("text_output").reshape(-1)[0].decode()
                out.answers += 1
            state["done"] += 1

    tasks = [asyncio.create_task(worker()) for _ in range(conc)]
    try:
        while state["done"] < warmup:
            await asyncio.sleep(0.01)
        c0, s0, p0 = time.perf_counter(), _cpu(t), time.process_time()
        state["measuring"] = True
        while True:
            await asyncio.sleep(0.02)
            el = time.perf_counter() - c0
            if el >= seconds and out.answers >= min_answers or el >= 4 * seconds:
                break
        state["measuring"] = False
        out.seconds = time.perf_counter() - c0
        s1 = _cpu(t)
        out.cpu_s = {k: s1[k] - s0.get(k, 0.0) for k in s1}
        out.client_s = time.process_time() - p0
        state["stop"] = True
        await asyncio.gather(*tasks)
        out.answer_bytes, out.decode_us = await _decode_cost(client, t.model, t.shape, t.params, inputs[0])
        if t.timed:
            params = {**t.params, "timings": True}
            out.timed_bytes, out.timed_decode_us = await _decode_cost(
                client, t.model, t.shape, params, inputs[0]
            )
    finally:
        for task in tasks:
            task.cancel()
        await client.close()
    return out


async def _decode_cost(
    client, model: str, shape, params: dict, text: str, n: int = 2000
) -> tuple[int, float]:
    """One answer's size, and what tritonclient spends turning it into the caller's values (InferResult, the
    output as numpy, the response parameters), per answer over ``n`` repeats."""
    from tritonclient.grpc import InferResult, service_pb2

    res = await client.infer(model, [_infer_input(text, shape)], parameters=params or None)
    wire = res.get_response().SerializeToString()
    c = time.perf_counter()
    for _ in range(n):
        r = InferResult(service_pb2.ModelInferResponse.FromString(wire))
        r.as_numpy("text_output")
        r.get_response(as_json=False).parameters  # noqa: B018  (a caller reading the timings)
    return len(wire), (time.perf_counter() - c) / n * 1e6


def _run(conn, *args) -> None:
    conn.send(asyncio.run(load_window(*args)))


def window(t: Target, *args) -> Window:
    """``load_window`` in a spawned process: a lean client, as a user's load generator would be."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_run, args=(theirs, t, *args), daemon=True)
    proc.start()
    try:
        while not ours.poll(1.0):
            if not proc.is_alive():  # it failed: its traceback went to stderr
                raise RuntimeError(f"the load process exited with {proc.exitcode}")
        return ours.recv()
    finally:
        proc.join(30)
