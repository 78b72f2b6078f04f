"""seq2seq.v1.Seq2Seq: protobuf <-> domain objects, validation, status codes. No ONNX Runtime here."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc
from server.config import SchedulerConfig
from server.errors import ServingError, clip_details
from server.interceptors import RefusalLog
from server.metrics import Metrics
from server.repository import ModelVersion, Repository
from server.requests import GenOptions, limits, prepare
from server.scheduler import Job


# The client's doing (or a retry-later): logged at WARNING at most, rate-limited.
CLIENT_CODES = frozenset({"INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "UNAUTHENTICATED"})


def deadline_of(context: grpc.aio.ServicerContext) -> float | None:
    left = context.time_remaining()
    return None if left is None else time.monotonic() + left


class RequestTracker:
    """Counts a call by status code and times it; the one place request metrics are recorded for every API."""

    def __init__(self, metrics: Metrics, repo: Repository, refusals: RefusalLog):
        self.metrics, self.repo, self.refusals = metrics, repo, refusals

    @contextlib.asynccontextmanager
    async def track(self, context: grpc.aio.ServicerContext, model: str, method: str):
        label = model if model in self.repo.models else ""  # unknown names would explode label cardinality
        t0 = time.perf_counter()
        code = "OK"
        recorded = False

        def record() -> None:
            nonlocal recorded
            if not recorded:
                recorded = True
                self.metrics.requests.labels(label, method, code).inc()
                self.metrics.request_duration.labels(label, method).observe(time.perf_counter() - t0)

        try:
            yield
        except ServingError as e:
            code = e.code
            record()  # before the status goes out: a client that scrapes right after its error finds it counted
            details = clip_details(str(e))
            if code in CLIENT_CODES:
                self.refusals(code, f"{method}: {details}")
            await context.abort(grpc.StatusCode[e.code], details)
        except asyncio.CancelledError:
            code = "CANCELLED"
            raise
        except grpc.aio.AbortError:
            code = context.code().name if context.code() else "UNKNOWN"
            raise
        except Exception:
            code = "INTERNAL"
            raise
        finally:
            record()


def job_output(mv: ModelVersion, job: Job) -> pb.Output:
    return pb.Output(text=mv.engine.codec.decode(job.seq.result), input_tokens=len(job.seq.src_ids),
                     output_tokens=len(job.seq.result))


class Seq2SeqServicer(pb_grpc.Seq2SeqServicer):
    def __init__(self, repo: Repository, sched: SchedulerConfig, tracker: RequestTracker):
        self.repo, self.sched, self.tracker = repo, sched, tracker

    def _prepare(self, request: pb.GenerateRequest):
        mv = self.repo.get(request.model, request.version)
        opts = GenOptions(max_new_tokens=request.options.max_new_tokens, beam=max(1, request.options.beam_size))
        seqs = prepare(mv, list(request.inputs), opts, limits(mv, self.sched))
        mv.scheduler.metrics.input_tokens.labels(mv.name).inc(sum(len(s.src_ids) for s in seqs))
        return mv, seqs

    async def Generate(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext) -> pb.GenerateResponse:
        async with self.tracker.track(context, request.model, "Generate"):
            t0 = time.monotonic()
            mv, seqs = self._prepare(request)
            jobs = await mv.scheduler.generate(seqs, deadline_of(context))
            timings = pb.Timings(
                queue_seconds=max(j.admitted - j.arrival for j in jobs),
                time_to_first_token_seconds=min(j.first_token for j in jobs) - t0,
                total_seconds=time.monotonic() - t0,
            )
            return pb.GenerateResponse(model=mv.name, version=mv.version, outputs=[job_output(mv, j) for j in jobs], timings=timings)

    async def GenerateStream(self, request: pb.GenerateRequest, context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GenerateStreamResponse]:
        async with self.tracker.track(context, request.model, "GenerateStream"):
            mv, seqs = self._prepare(request)
            index = {s.id: i for i, s in enumerate(seqs)}
            events: asyncio.Queue = asyncio.Queue()
            tokens: dict[int, list[int]] = {i: [] for i in range(len(seqs))}
            sent: dict[int, str] = {i: "" for i in range(len(seqs))}
            task = asyncio.ensure_future(mv.scheduler.generate(seqs, deadline_of(context), lambda job, tok: events.put_nowait((job, tok))))
            task.add_done_callback(lambda _: events.put_nowait(None))
            codec = mv.engine.codec
            try:
                while (ev := await events.get()) is not None:
                    job, tok = ev
                    i = index[job.seq.id]
                    tokens[i].append(tok)
                    text = codec.decode(tokens[i])
                    if text != sent[i]:
                        # Subword decoding can rewrite the tail (e.g. a space); send only what extends the prefix.
                        delta = text[len(sent[i]):] if text.startswith(sent[i]) else ""
                        if delta:
                            sent[i] += delta
                            yield pb.GenerateStreamResponse(index=i, text_delta=delta)
                jobs = task.result()  # raises the request's error, if any
            finally:
                task.cancel()
            for i, job in enumerate(jobs):
                out = job_output(mv, job)
                yield pb.GenerateStreamResponse(index=i, text_delta=out.text[len(sent[i]):] if out.text.startswith(sent[i]) else "",
                                                finished=True, output=out)

    async def ListModels(self, request: pb.ListModelsRequest, context: grpc.aio.ServicerContext) -> pb.ListModelsResponse:
        out = []
        for name, versions in sorted(self.repo.models.items()):
            mv = self.repo.get(name)
            lim = limits(mv, self.sched)
            cfg = mv.engine.config
            out.append(pb.ModelInfo(
                name=name, version=mv.version, task=cfg.task.name, provider=mv.engine.provider,
                max_input_tokens=lim.max_input_tokens, max_new_tokens=lim.max_new_tokens,
                max_inputs_per_request=lim.max_inputs, max_beam_size=lim.max_beam,
                versions=sorted(versions, key=int), quantization=cfg.quantization,
                max_input_chars=lim.max_input_chars, max_rows_per_request=lim.max_rows,
            ))
        return pb.ListModelsResponse(models=out)
