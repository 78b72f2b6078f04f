"""A small Python client for seq2seq.v1, and the `s2s client` command built on it."""

from __future__ import annotations

import itertools
import os
import re
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path

import grpc

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc

# When ListModels does not list the model: the server's default max_inputs_per_request.
DEFAULT_INPUTS_PER_REQUEST = 64
DEFAULT_CONCURRENCY = 4
RETRY_DELAYS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)  # RESOURCE_EXHAUSTED: resent after each (6.35 s in all)


class GenerateManyError(grpc.RpcError):
    """A request sent by ``generate_many`` failed; earlier outputs were already yielded.

    ``first`` and ``count`` are the positions (0-based, in the iterable given) of the inputs of the failed
    request; ``index`` is the position of the input the server named, or None when the whole request was
    refused (e.g. UNAVAILABLE, or an option out of range). ``code()`` and ``details()`` are the server's.
    """

    def __init__(self, code: grpc.StatusCode, details: str, first: int, count: int):
        self._code, self._details, self.first, self.count = code, details, first, count
        m = _INPUT_RE.match(details or "")
        self.index = first + int(m.group(1)) if m and int(m.group(1)) < count else None
        super().__init__(f"{code.name}: {details}")

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def reason(self) -> str:
        """``details()`` without the server's in-request position ("input 3: ..."), which ``index`` replaces."""
        if self.index is None:
            return self._details
        return _INPUT_RE.sub(lambda m: "" if m.group(2) else "the input", self._details, count=1)


_INPUT_RE = re.compile(r"^input (\d+)(: )?")  # how the server names one input of a request


# GenerateRequest's switches for translation models (on when absent): docs/DECODING.md#protected-spans-and-long-inputs.
TEXT_FLAGS = ("protect_spans", "keep_numbers", "split_long")


def _per_request(max_inputs: int, max_rows: int, beam_size: int) -> int:
    """Inputs one request may have: each input takes beam_size rows (max_rows 0 = no row limit known)."""
    return max(1, min(max_inputs, max_rows // max(1, beam_size))) if max_rows else max_inputs


def _chunks(items: Iterable[str], n: int) -> Iterator[list[str]]:
    it = iter(items)
    while chunk := list(itertools.islice(it, n)):
        yield chunk


_ASK = object()  # limits() / default_beam(): call ListModels themselves


class Seq2SeqClient:
    """Example: ``Seq2SeqClient("localhost:8001").generate("addition", ["12+30"])`` -> ["42"]."""

    def __init__(
        self,
        target: str = "localhost:8001",
        *,
        token: str | None = None,
        tls_ca: Path | None = None,
        timeout: float | None = 60.0,
        channel: grpc.Channel | None = None,
    ):
        if channel is None:
            if tls_ca is not None:
                channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(Path(tls_ca).read_bytes()))
            else:
                channel = grpc.insecure_channel(target)
        self.channel = channel
        self.stub = pb_grpc.Seq2SeqStub(channel)
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> Seq2SeqClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(
        self,
        model: str,
        texts: list[str],
        max_new_tokens: int = 0,
        beam_size: int = 0,
        version: str = "",
        target_prefixes: list[str] | None = None,
        source_language: str = "",
        target_language: str = "",
        **options,
    ) -> pb.GenerateRequest:
        """``options``: any other GenerateOptions field by name (num_hypotheses=4, sampling_topk=10, seed=1, ...), and
        the request's TEXT_FLAGS (protect_spans=False, ...; absent = the server's default, on). The languages: a
        code each ("" = the model's default), for models that know theirs (ListModels lists them)."""
        text = {k: options.pop(k) for k in TEXT_FLAGS if k in options}
        return pb.GenerateRequest(
            model=model,
            version=version,
            inputs=texts,
            target_prefixes=target_prefixes or [],
            options=pb.GenerateOptions(max_new_tokens=max_new_tokens, beam_size=beam_size, **options),
            source_language=source_language,
            target_language=target_language,
            **text,
        )

    def generate_full(self, model: str, texts: list[str], **kw) -> pb.GenerateResponse:
        return self.stub.Generate(
            self.request(model, texts, **kw), timeout=self.timeout, metadata=self.metadata
        )

    def generate(self, model: str, texts: list[str], **kw) -> list[str]:
        return [o.text for o in self.generate_full(model, texts, **kw).outputs]

    def stream(self, model: str, texts: list[str], **kw) -> Iterator[pb.GenerateStreamResponse]:
        return self.stub.GenerateStream(
            self.request(model, texts, **kw), timeout=self.timeout, metadata=self.metadata
        )

    def models(self) -> list[pb.ModelInfo]:
        return list(
            self.stub.ListModels(pb.ListModelsRequest(), timeout=self.timeout, metadata=self.metadata).models
        )

    def info(self, model: str) -> pb.ModelInfo | None:
        """What ListModels says about ``model``; None if it is not listed (or the server has no ListModels)."""
        try:
            models = self.models()
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
            models = []
        return next((m for m in models if m.name == model), None)

    def limits(self, model: str, info: pb.ModelInfo | None | object = _ASK) -> tuple[int, int]:
        """(max_inputs_per_request, max_rows_per_request) as ListModels advertises them for ``model``;
        (DEFAULT_INPUTS_PER_REQUEST, 0) if it is not listed (0: no row limit advertised). ``info``: what
        ``info(model)`` already returned (None included), to save the call."""
        info = self.info(model) if info is _ASK else info
        if info is None:
            return DEFAULT_INPUTS_PER_REQUEST, 0
        return info.max_inputs_per_request or DEFAULT_INPUTS_PER_REQUEST, info.max_rows_per_request

    def default_beam(self, model: str, info: pb.ModelInfo | None | object = _ASK) -> int:
        """The beam ``model`` decodes with when a request names none (beam_size 0); 1 if not advertised."""
        info = self.info(model) if info is _ASK else info
        return (
            next((int(r.default) for r in (info.option_limits if info else ()) if r.name == "beam_size"), 1)
            or 1
        )

    def max_inputs_per_request(self, model: str, beam_size: int = 1) -> int:
        """The most inputs one request for ``model`` may have: its max_inputs_per_request and, as each input
        takes ``beam_size`` rows, its max_rows_per_request / beam_size."""
        return _per_request(*self.limits(model), beam_size)

    def generate_many(
        self,
        model: str,
        texts: Iterable[str],
        *,
        inputs_per_request: int = 0,
        concurrency: int = DEFAULT_CONCURRENCY,
        **kw,
    ) -> Iterator[str]:
        """One output per input of ``texts`` (any iterable, read lazily), in order, as the requests complete.

        Inputs go in requests of at most ``inputs_per_request`` (0 = the model's advertised limit; never
        above it), with up to ``concurrency`` requests in flight (fewer if together they would hold more
        rows, inputs x beam, than the model's max_rows_per_request: its queue), so memory stays bounded
        however long ``texts`` is. A request refused with RESOURCE_EXHAUSTED (queue full) is resent after
        a backoff, up to len(RETRY_DELAYS_S) times. A failed request raises GenerateManyError once the
        outputs before its failed input were yielded (those of its own request are asked again, without
        it); the requests still in flight are then cancelled. ``kw``: as ``generate`` (max_new_tokens, ...).
        """
        info = self.info(model)  # one ListModels call for both
        beam = kw.get("beam_size") or self.default_beam(model, info)
        max_inputs, rows = self.limits(model, info)
        limit = _per_request(max_inputs, rows, beam)
        n = min(inputs_per_request, limit) if inputs_per_request else limit
        if n < 1 or concurrency < 1:
            raise ValueError(f"inputs_per_request and concurrency must be positive (got {n}, {concurrency})")
        if rows:
            concurrency = max(1, min(concurrency, rows // (n * beam)))
        window: deque[tuple[int, pb.GenerateRequest, grpc.Future]] = (
            deque()
        )  # (first input's position, request, call)
        sent = 0
        try:
            for chunk in _chunks(texts, n):
                request = self.request(model, chunk, **kw)
                window.append((sent, request, self._send(request)))
                sent += len(chunk)
                # Yield what is ready, in order; wait for the oldest only when the window is full.
                while window and (len(window) >= concurrency or window[0][2].done()):
                    yield from self._outputs(*window.popleft())
            while window:
                yield from self._outputs(*window.popleft())
        finally:
            for _, _, call in window:
                call.cancel()

    def _send(self, request: pb.GenerateRequest) -> grpc.Future:
        return self.stub.Generate.future(request, timeout=self.timeout, metadata=self.metadata)

    def _outputs(self, first: int, request: pb.GenerateRequest, call: grpc.Future) -> Iterator[str]:
        delays = iter(RETRY_DELAYS_S)
        while True:
            try:
                reply = call.result()
                break
            except grpc.RpcError as e:
                delay = next(delays, None) if e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED else None
                if delay is not None:  # the model's queue is full (of others' work): back off and resend
                    time.sleep(delay)
                    call = self._send(request)
                    continue
                err = GenerateManyError(e.code(), e.details(), first, len(request.inputs))
                if err.index is not None and err.index > first:
                    # The server refuses a whole request for one bad input: answer the inputs before it, then fail.
                    before = pb.GenerateRequest()
                    before.CopyFrom(request)
                    del before.inputs[err.index - first :]
                    yield from self._outputs(first, before, self._send(before))
                raise err from None
        for out in reply.outputs:
            yield out.text


def _stdin_texts(stream: Iterable[str], lines: deque) -> Iterator[str]:
    """The non-blank lines of ``stream``, read lazily. For each one yielded, ``lines`` gets
    (its 1-based line number, blank lines just before it); at the end, (None, trailing blank lines)."""
    blanks = 0
    for number, line in enumerate(stream, 1):
        text = line.rstrip("\r\n")
        if not text.strip():
            blanks += 1
            continue
        lines.append((number, blanks))
        blanks = 0
        yield text
    lines.append((None, blanks))


def _streamed(
    client: Seq2SeqClient, model: str, texts: Iterable[str], n: int, deltas: bool, **kw
) -> Iterator[str]:
    """As ``generate_many``, with one GenerateStream request at a time; prints text deltas if ``deltas``."""
    first = 0
    for chunk in _chunks(texts, n):
        yield from _stream_chunk(client, model, chunk, first, deltas, **kw)
        first += len(chunk)


def _stream_chunk(
    client: Seq2SeqClient, model: str, chunk: list[str], first: int, deltas: bool, **kw
) -> Iterator[str]:
    done: dict[int, str] = {}
    nxt = 0
    try:
        for ev in client.stream(model, chunk, **kw):
            if deltas and ev.text_delta:
                print(ev.text_delta, end="", flush=True)
            if ev.finished:
                done[ev.index] = ev.output.text
                while nxt in done:
                    yield done.pop(nxt)
                    nxt += 1
    except grpc.RpcError as e:
        err = GenerateManyError(e.code(), e.details(), first, len(chunk))
        if (
            err.index is not None and first + nxt < err.index
        ):  # as generate_many: answer those before the bad input
            yield from _stream_chunk(client, model, chunk[nxt : err.index - first], first + nxt, deltas, **kw)
        raise err from None


#: `s2s client` flags that map 1:1 onto GenerateOptions fields (unset = the server's default).
DECODING_FLAGS = (
    "length_penalty",
    "length_penalty_type",
    "repetition_penalty",
    "no_repeat_ngram_size",
    "min_new_tokens",
    "disable_unk",
    "sampling_topk",
    "sampling_topp",
    "sampling_temperature",
    "seed",
)


def run_cli(args) -> int:
    from_stdin = not args.text
    lines: deque = deque()  # stdin only: line numbers and blank lines of the inputs not yet answered
    texts: Iterable[str] = _stdin_texts(sys.stdin, lines) if from_stdin else args.text
    answered = 0
    try:
        with Seq2SeqClient(args.server, token=args.token, tls_ca=args.tls_ca, timeout=args.timeout) as client:
            if args.list:
                for m in client.models():
                    langs = (
                        f"\tlanguages={','.join(m.source_languages)}->{','.join(m.target_languages)}"
                        if m.target_languages
                        else ""
                    )
                    print(
                        f"{m.name}\tversion {m.version}\t{m.task}\t{m.provider}\tmax_input_tokens={m.max_input_tokens}"
                        f"\tmax_new_tokens={m.max_new_tokens}\tmax_inputs_per_request={m.max_inputs_per_request}"
                        + langs
                    )
                return 0
            if not args.model:
                print("s2s client: --model NAME is required (list them with --list)", file=sys.stderr)
                return 2
            if args.inputs_per_request < 0 or args.concurrency < 1:
                print("s2s client: --inputs-per-request must be >= 0 and --concurrency >= 1", file=sys.stderr)
                return 2
            n, concurrency = args.inputs_per_request, args.concurrency
            if from_stdin and not n and sys.stdin.isatty():
                n = concurrency = 1  # typed by hand: answer each line once it is entered
            kw = dict(max_new_tokens=args.max_new_tokens, beam_size=args.beam_size)
            kw.update(source_language=args.source_lang, target_language=args.target_lang)
            kw.update({k: v for k in DECODING_FLAGS if (v := getattr(args, k, None)) is not None})
            kw.update({k: False for k in TEXT_FLAGS if getattr(args, f"no_{k}", False)})
            if args.stream:
                it = iter(texts)
                head = list(itertools.islice(it, 2))
                deltas = len(head) == 1  # one input in all: print its text as it is generated
                limit = client.max_inputs_per_request(
                    args.model, args.beam_size or client.default_beam(args.model)
                )
                n = min(n, limit) if n else limit
                outputs = _streamed(client, args.model, itertools.chain(head, it), n, deltas, **kw)
            else:
                deltas = False
                outputs = client.generate_many(
                    args.model, texts, inputs_per_request=n, concurrency=concurrency, **kw
                )
            for text in outputs:
                if from_stdin:
                    print("\n" * lines.popleft()[1], end="")
                print("" if deltas else text, flush=True)
                answered += 1
            if from_stdin and lines:
                print("\n" * lines.popleft()[1], end="", flush=True)
        return 0
    except GenerateManyError as e:
        # Name the failed input by its stdin line number (blank lines count) or its TEXT argument position;
        # `lines` holds the inputs not yet answered, from position `answered` on.
        number = (lambda i: lines[i - answered][0]) if from_stdin else (lambda i: i + 1)
        what = "line" if from_stdin else "input"
        if e.index is not None:
            where = f"{what} {number(e.index)}"
        elif e.count == 1:
            where = f"{what} {number(e.first)}"
        else:  # the whole request was refused (no input named), and nothing of it was answered
            where = f"{what}s {number(e.first)}-{number(e.first + e.count - 1)}"
        print(f"s2s client: {where}: {e.code().name}: {e.reason()}", file=sys.stderr)
        return 1
    except grpc.RpcError as e:
        print(f"s2s client: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. `s2s client ... | head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
