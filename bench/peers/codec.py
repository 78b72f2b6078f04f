"""What a peer server needs besides CTranslate2: the bundle's tokenizer and ids, the search, the KServe BYTES wire.

A user wrapping CTranslate2 would write this much by hand; it imports only ``tokenizers`` and numpy, so that the
PyTriton peer can run from its own virtual environment (PyTriton pins a numpy older than the project's)."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

from tokenizers import Tokenizer

# The length rule's alpha a request with no option gets (contract.decoding.DEFAULT_LENGTH_PENALTY for the
# ctranslate2 rule); repeated here because this file must not import the project (see the module docstring).
CT2_LENGTH_PENALTY = 1.0


class Codec:
    """Text <-> CTranslate2 tokens as the engine does it: the source (reversed where the task says) tokens then
    EOS; the output cut at EOS, specials dropped (contract/text.py's TextCodec, without its import)."""

    def __init__(self, bundle: Path):
        config = json.loads((bundle / "config.json").read_text())
        self.tokenizer = Tokenizer.from_file(str(bundle / "tokenizer.json"))
        self.eos_id = config["special_ids"]["eos"]
        self.eos = self.tokenizer.id_to_token(self.eos_id)
        self.max_new = min(config["task"]["max_new_tokens"], config["model"]["max_len"] - 1)
        self.reverse = config["task"].get("reverse_source", False)

    def source_tokens(self, texts: list[str]) -> list[list[str]]:
        texts = [t[::-1] for t in texts] if self.reverse else texts
        return [e.tokens + [self.eos] for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def texts(self, hyps: list[list[str]]) -> list[str]:
        ids = [[self.tokenizer.token_to_id(t) for t in h] for h in hyps]
        ids = [i[: i.index(self.eos_id)] if self.eos_id in i else i for i in ids]
        return [t.strip() for t in self.tokenizer.decode_batch(ids, skip_special_tokens=True)]

    def search(self, beam: int) -> dict:
        """translate_batch's keywords for the search every side runs: greedy, or a beam with CTranslate2's rule."""
        kw = dict(beam_size=beam, max_decoding_length=self.max_new, return_scores=False)
        return kw | ({"length_penalty": CT2_LENGTH_PENALTY} if beam > 1 else {})


def unpack_bytes(raw: bytes) -> list[str]:
    """A KServe BYTES tensor's raw contents: each element a 4-byte little-endian length, then its bytes."""
    out, k = [], 0
    while k < len(raw):
        (n,) = struct.unpack_from("<I", raw, k)
        out.append(raw[k + 4 : k + 4 + n].decode())
        k += 4 + n
    return out


def pack_bytes(texts: list[str]) -> bytes:
    return b"".join(struct.pack("<I", len(b)) + b for b in (t.encode() for t in texts))


def ct2_translator(model_dir: Path, replicas: int):
    """A float32 CTranslate2 translator with ``replicas`` (inter_threads) of one thread each; the ids of the
    threads it started are printed (``ct2-threads ...``), so the bench can tell its CPU from Python's."""
    import ctranslate2

    before = set(os.listdir("/proc/self/task"))
    tr = ctranslate2.Translator(
        str(model_dir), device="cpu", compute_type="float32", inter_threads=replicas, intra_threads=1
    )
    print("ct2-threads", *sorted(set(os.listdir("/proc/self/task")) - before), flush=True, file=sys.stdout)
    return tr


def arguments(prog: str, doc: str):
    """The command line every peer takes."""
    import argparse

    p = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--ct2", type=Path, required=True, help="the CTranslate2 model directory")
    p.add_argument("--bundle", type=Path, required=True, help="the bundle whose tokenizer and config to use")
    p.add_argument("--model", default="translate-en-ja")
    p.add_argument(
        "--port", type=int, required=True, help="gRPC port (Triton: HTTP and metrics take the next two)"
    )
    p.add_argument("--beam", type=int, default=1)
    p.add_argument("--replicas", type=int, default=2, help="CTranslate2 replicas (Triton: model instances)")
    p.add_argument("--max-batch", type=int, default=64)
    p.add_argument("--max-delay-ms", type=float, default=5.0)
    return p
