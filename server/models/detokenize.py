"""Streaming text from token ids: what each new token adds to an input's text so far.

Subword decoding can rewrite the tail (a space, a merge), so the text is decoded whole and only what
extends what was already sent goes out; the final text corrects nothing that was sent, it only adds."""

from __future__ import annotations

from contract.text import TextCodec


class StreamingText:
    def __init__(self, codec: TextCodec, n: int):
        self.codec = codec
        self.tokens: list[list[int]] = [[] for _ in range(n)]
        self.sent = [""] * n

    def add(self, index: int, token: int) -> str:
        """Input ``index`` generated ``token``: the text to send now ("" if it changed nothing sendable)."""
        self.tokens[index].append(token)
        text = self.codec.decode(self.tokens[index])
        sent = self.sent[index]
        if text != sent and text.startswith(sent):
            self.sent[index] = text
            return text[len(sent) :]
        return ""

    def rest(self, index: int, final: str) -> str:
        """What the final text adds to what was sent ("" if it does not extend it)."""
        sent = self.sent[index]
        return final[len(sent) :] if final.startswith(sent) else ""
