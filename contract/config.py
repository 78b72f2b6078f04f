"""Model and task configuration: plain dataclasses that round-trip through JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contract.tokens import SpecialIds


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of the encoder-decoder (Vaswani et al. 2017, Table 3 names in comments)."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 128  # d_model
    n_heads: int = 4  # h
    n_encoder_layers: int = 2  # N (encoder)
    n_decoder_layers: int = 2  # N (decoder)
    d_ff: int = 512  # d_ff
    dropout: float = 0.1  # P_drop
    max_len: int = 256  # longest sequence (source or target, special tokens included)
    share_embeddings: bool = False  # one table for source and target (needs a joint vocabulary)
    tie_output: bool = True  # output projection = target embedding (paper §3.4)
    special: SpecialIds = field(default_factory=SpecialIds)

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size")

    @property
    def d_head(self) -> int:  # d_k = d_v = d_model / h
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelConfig:
        d = dict(d)
        d["special"] = SpecialIds(**d.get("special", {}))
        return cls(**d)


@dataclass(frozen=True)
class TaskConfig:
    """What the model was trained to do, and how raw text becomes its input.

    The server applies exactly this preprocessing, so a model trained on reversed input is
    served with reversed input without the caller knowing.
    """

    name: str  # addition | copy | reverse | translation
    reverse_source: bool = False  # the seeds' "input reversed" option
    # What to do with characters the tokenizer cannot represent: a closed alphabet (arithmetic)
    # rejects them; open text (translation) maps them to <unk> as sentencepiece/BPE models do.
    unknown: Literal["reject", "unk"] = "reject"
    max_new_tokens: int = 64  # default decode budget per request
    # The beam a request gets when it names none (beam_size 0): chosen by measurement per model
    # (docs/experiments.md); the paper's 4 for translation where it raises chrF, greedy elsewhere.
    beam_size: int = 1
    # The length penalty rule a request gets when it names none (length_penalty_type ""): chosen by measurement per
    # model (docs/DECODING.md). "gnmt" is not written, so bundles that keep it read as they always did.
    length_penalty_type: str = "gnmt"

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        if d["length_penalty_type"] == "gnmt":
            del d["length_penalty_type"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskConfig:
        return cls(**d)


def write_json(path: Path, obj: Any) -> None:
    """Stable JSON (sorted keys, trailing newline) so that rebuilt artifacts diff cleanly."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
