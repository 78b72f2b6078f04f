"""Many strings through a running server where one refused string costs only itself: the catalog commands'
(``s2s translate``, ``s2s check-po``) way of calling ``Seq2SeqClient.generate_many``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc

from s2s.seq2seq_client import GenerateManyError, Seq2SeqClient


@dataclass(frozen=True)
class Answer:
    text: str | None  # the output; None when the server refused this input
    refused: str | None = None  # the server's reason, without its position in the request


class RequestRefused(Exception):
    """The server refused a whole request (an option out of range, a model it does not serve, no connection):
    no entry is to blame, so the run stops. ``str()`` is the status and the server's message."""


def translate_each(
    client: Seq2SeqClient,
    model: str,
    texts: list[str],
    progress: Callable[[int], object] = lambda n: None,
    **kw,
) -> list[Answer]:
    """One Answer per text, in order. An input the server refuses with INVALID_ARGUMENT (empty, too long) gets
    its reason and the inputs after it are sent on; any other failure raises RequestRefused. ``progress(1)`` is
    called as each answer comes in; ``kw`` as ``Seq2SeqClient.generate_many``."""
    answers: list[Answer] = []
    while len(answers) < len(texts):
        start = len(answers)
        try:
            for out in client.generate_many(model, texts[start:], **kw):
                answers.append(Answer(out))
                progress(1)
        except GenerateManyError as e:
            bad = e.index if e.index is not None else (e.first if e.count == 1 else None)
            if e.code() != grpc.StatusCode.INVALID_ARGUMENT or bad is None:
                raise RequestRefused(f"{e.code().name}: {e.details()}") from None
            # generate_many answered every input before the refused one.
            assert len(answers) == start + bad, (len(answers), start, bad)
            answers.append(Answer(None, e.reason().strip()))
            progress(1)
        except grpc.RpcError as e:  # ListModels, before any request
            raise RequestRefused(f"{e.code().name}: {e.details()}") from None
    return answers
