"""Model and task configuration: plain dataclasses that round-trip through JSON."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from contract.tokens import SpecialIds

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "swish")
POSITIONS = ("sinusoid", "sinusoid_half", "sinusoid_fairseq", "learned", "relative")
NORMS = ("post", "pre")
# The knobs T5 moves (Raffel et al. 2020): readers of bundle formats before 8 do not know them (contract/bundle.py).
LATER_KNOBS = (
    "relative_attention_num_buckets",
    "relative_attention_max_distance",
    "rms_norm",
    "norm_eps",
    "ffn_glu",
    "projection_bias",
    "scale_attention",
    "scale_output",
    "d_kv",
)
_KNOBS = (
    "activation",
    "scale_embedding",
    "positions",
    "position_offset",
    "norm",
    "final_norm",
    "output_bias",
    "embedding_norm",
    *LATER_KNOBS,
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
    # FFN non-linearity: relu (§3.3) | gelu | gelu_tanh (its tanh approximation: T5's gelu_new) | swish (x * sigmoid(x),
    # Marian's)
    activation: str = "relu"
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
    # positions "relative" (T5): no position is added to the embeddings; a learned bias per head for each bucket of the
    # distance key - query is added to the self-attention scores, the buckets exact up to half their number, then
    # logarithmic up to max_distance (bidirectional in the encoder, causal in the decoder)
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    rms_norm: bool = False  # RMSNorm (scale only: no mean subtracted, no bias; T5's) instead of LayerNorm
    norm_eps: float = (
        1e-5  # the epsilon of every norm (torch's LayerNorm default; T5's layer_norm_epsilon 1e-6)
    )
    ffn_glu: bool = (
        False  # FFN(x) = (act(x W_1) * x V) W_2 (Shazeer 2020, "GLU Variants"; T5 v1.1's gated-gelu)
    )
    projection_bias: bool = True  # the attention and FFN projections have biases (T5's have none)
    scale_attention: bool = (
        True  # §3.2.1's 1/sqrt(d_k) on the scores (T5 has none: its initialisation scales Q)
    )
    scale_output: bool = False  # the decoder's output x d_model^-0.5 before a tied projection (T5 v1.0)
    d_kv: int | None = None  # the size of each head where it is not d_model / h (T5's d_kv: MADLAD-3B's 128)

    def __post_init__(self) -> None:
        if self.d_kv is None and self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        buckets, distance = self.relative_attention_num_buckets, self.relative_attention_max_distance
        if self.positions == "relative" and not (buckets >= 4 and buckets // 2 < distance):
            # past max_distance every distance shares the last bucket: what lets the buckets be one table of distances
            raise ValueError(
                f"relative_attention_max_distance={distance} must be more than half of "
                f"relative_attention_num_buckets={buckets}, and the buckets at least 4"
            )
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
        return self.d_kv if self.d_kv is not None else self.d_model // self.n_heads

    def to_dict(self) -> dict[str, Any]:
        """The architecture knobs are written only where they differ from the paper's: the configs of models
        trained here stay as they were, and read as before."""
        d = dataclasses.asdict(self)
        for f in dataclasses.fields(self):
            if f.name in _KNOBS and d[f.name] == f.default:
                del d[f.name]
        return d

    @property
    def moves_later_knobs(self) -> bool:
        """A knob of LATER_KNOBS moved, or relative positions: only readers of bundle format 8 compute this model."""
        return (
            self.positions == "relative"
            or self.activation == "gelu_tanh"
            or any(
                getattr(self, f.name) != f.default for f in dataclasses.fields(self) if f.name in LATER_KNOBS
            )
        )

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
    # generate()'s rules on where an output ends, as an imported model's generation_config.json sets them (the
    # engine's search follows them, engine/search.py): the token made the last of an output that reaches its budget
    # (forced_eos_token_id), no end token before min_length tokens with the start token counted, and the beam search's
    # stopping rule under the transformers penalty (early_stopping: False, True or "never").
    forced_eos_id: int | None = None
    min_length: int = 0
    early_stopping: bool | str = False

    def __post_init__(self) -> None:
        if self.early_stopping not in (False, True, "never"):
            raise ValueError(f"early_stopping={self.early_stopping!r} is not one of false, true, 'never'")

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
    "forced_eos_id": None,
    "min_length": 0,
    "early_stopping": False,
}


def write_json(path: Path, obj: Any) -> None:
    """Stable JSON (sorted keys, trailing newline) so that rebuilt artifacts diff cleanly."""
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
