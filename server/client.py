"""A small Python client for seq2seq.v1, and the `s2s client` command built on it."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import grpc

from protos.seq2seq.v1 import seq2seq_pb2 as pb
from protos.seq2seq.v1 import seq2seq_pb2_grpc as pb_grpc


class Seq2SeqClient:
    """Example: ``Seq2SeqClient("localhost:8001").generate("addition", ["12+30"])`` -> ["42"]."""

    def __init__(self, target: str = "localhost:8001", *, token: str | None = None, tls_ca: Path | None = None,
                 timeout: float | None = 60.0, channel: grpc.Channel | None = None):
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

    def request(self, model: str, texts: list[str], max_new_tokens: int = 0, beam_size: int = 0, version: str = "") -> pb.GenerateRequest:
        return pb.GenerateRequest(model=model, version=version, inputs=texts,
                                  options=pb.GenerateOptions(max_new_tokens=max_new_tokens, beam_size=beam_size))

    def generate_full(self, model: str, texts: list[str], **kw) -> pb.GenerateResponse:
        return self.stub.Generate(self.request(model, texts, **kw), timeout=self.timeout, metadata=self.metadata)

    def generate(self, model: str, texts: list[str], **kw) -> list[str]:
        return [o.text for o in self.generate_full(model, texts, **kw).outputs]

    def stream(self, model: str, texts: list[str], **kw) -> Iterator[pb.GenerateStreamResponse]:
        return self.stub.GenerateStream(self.request(model, texts, **kw), timeout=self.timeout, metadata=self.metadata)

    def models(self) -> list[pb.ModelInfo]:
        return list(self.stub.ListModels(pb.ListModelsRequest(), timeout=self.timeout, metadata=self.metadata).models)


def run_cli(args) -> int:
    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    try:
        with Seq2SeqClient(args.server, token=args.token, tls_ca=args.tls_ca, timeout=args.timeout) as client:
            if args.list:
                for m in client.models():
                    print(f"{m.name}\tversion {m.version}\t{m.task}\t{m.provider}\tmax_input_tokens={m.max_input_tokens}"
                          f"\tmax_new_tokens={m.max_new_tokens}")
                return 0
            if not args.model:
                print("s2s client: --model NAME is required (list them with --list)", file=sys.stderr)
                return 2
            kw = dict(max_new_tokens=args.max_new_tokens, beam_size=args.beam_size)
            if args.stream:
                # Inputs stream in parallel; print each line once its input is finished, in order.
                done: dict[int, str] = {}
                nxt = 0
                for ev in client.stream(args.model, texts, **kw):
                    if len(texts) == 1 and ev.text_delta:
                        print(ev.text_delta, end="", flush=True)
                    if ev.finished:
                        done[ev.index] = ev.output.text
                        while nxt in done:
                            print("" if len(texts) == 1 else done[nxt], flush=True)
                            nxt += 1
            else:
                for text in client.generate(args.model, texts, **kw):
                    print(text)
        return 0
    except grpc.RpcError as e:
        print(f"s2s client: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
