"""Model and task configuration: plain dataclasses that round-trip through JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contract.tokens import SpecialIds

ACTIVATIONS = ("relu", "gelu", "swish")
POSITIONS = ("sinusoid", "sinusoid_half", "sinusoid_fairseq", "learned")
NORMS = ("post", "pre")
_KNOBS = (
    "activation",
    "scale_embedding",
    "positions",
    "position_offset",
    "norm",
    "final_norm",
    "output_bias",
    "embedding_norm",
)


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
    # Architecture knobs: the paper's choices by default; the families imported from other trainers
    # (export/hf_marian.py) differ from it in these, and only these, ways (as CTranslate2's TransformerSpec).
    activation: str = "relu"  # FFN non-linearity: relu (§3.3) | gelu | swish (x * sigmoid(x), Marian's)
    scale_embedding: bool = True  # §3.4: embeddings x sqrt(d_model); Marian configs may turn it off
    # sinusoid: §3.5, sin and cos interleaved; sinusoid_half: the same frequencies, all sines first then all
    # cosines (Marian); sinusoid_fairseq: sines first, frequencies 10000^(-i/(d/2 - 1)) in float32 (fairseq's, M2M100 and
    # NLLB); learned: a stored table per stack (BART's: the encoder's and the decoder's). Row = position +
    # position_offset in every kind (fairseq starts at pad + 1, BART at 2).
    positions: str = "sinusoid"
    position_offset: int = 0
    norm: str = "post"  # post: LayerNorm(x + Sublayer(x)) (§3.1); pre: x + Sublayer(LayerNorm(x))
    final_norm: bool = False  # a LayerNorm after the last layer of each stack (pre-norm families have one)
    output_bias: bool = True  # the pre-softmax projection has a bias (Marian's final_logits_bias)
    # a LayerNorm of each stack's embeddings, positions added, before its first layer (BART's layernorm_embedding)
    embedding_norm: bool = False

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("share_embeddings needs src_vocab_size == tgt_vocab_size")
        for name, value, allowed in (
            ("activation", self.activation, ACTIVATIONS),
            ("positions", self.positions, POSITIONS),
            ("norm", self.norm, NORMS),
        ):
            if value not in allowed:
                raise ValueError(f"{name}={value!r} is not one of {', '.join(allowed)}")

    @property
    def d_head(self) -> int:  # d_k = d_v = d_model / h
        return self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """The architecture knobs are written only where they differ from the paper's: the configs of models
        trained here stay as they were, and read as before."""
        d = dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            if f.name in _KNOBS and d[f.name] == f.default:
                del d[f.name]
        return d

    @property
    def is_paper(self) -> bool:
        """No knob moved: any reader of bundle formats before the knobs computes this model."""
        return all(getattr(self, f.name) == f.default for f in dataclasses.fields(self) if f.name in _KNOBS)

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
    # Decoding as an imported model's generation_config.json says (export/hf_import.py): its alpha (None: the
    # rule's own default), its n-gram ban, and the tokens it never generates (bad_words_ids of one token,
    # Marian's <pad>), which the engine removes after the log-softmax, as transformers does.
    length_penalty: float | None = None
    no_repeat_ngram_size: int = 0
    suppressed_ids: tuple[int, ...] = ()
    # A token every source starts with, before its text (BART's <s>; CTranslate2's add_source_bos), and a token forced
    # as the first of every output, not part of the answer (generation_config.json's forced_bos_token_id: BART's <s>);
    # a multilingual model's target language takes the forced token's place (contract/languages.py).
    source_start_id: int | None = None
    forced_bos_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Fields at their defaults since the first bundles are not written, so those bundles read as they did."""
        d = dataclasses.asdict(self)
        for name, default in _TASK_OMITTED.items():
            if d[name] == default:
                del d[name]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskConfig:
        d = dict(d)
        if "suppressed_ids" in d:
            d["suppressed_ids"] = tuple(int(i) for i in d["suppressed_ids"])
        return cls(**d)


_TASK_OMITTED = {
    "length_penalty_type": "gnmt",
    "length_penalty": None,
    "no_repeat_ngram_size": 0,
    "suppressed_ids": (),
    "source_start_id": None,
    "forced_bos_id": None,
}


def write_json(path: Path, obj: Any) -> None:
    """Stable JSON (sorted keys, trailing newline) so that rebuilt artifacts diff cleanly."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
