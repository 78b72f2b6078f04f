"""T5, mT5, Flan-T5 and MADLAD-400 (model_type t5 or mt5) as this project's model: the knobs they move, their
tokenizer, the names of their weights.

Raffel et al. 2020's Transformer: no positions added to the embeddings but a learned bias per head over bucketed
relative distances on the self-attention scores (bidirectional buckets in the encoder, causal in the decoder), one
table per stack that every layer shares; RMSNorm without bias (``T5LayerNorm``), pre-norm with a final norm per
stack; no 1/sqrt(d_k) on the scores; no bias in any projection; heads of ``d_kv`` (not always d_model / h). The
feed-forward is ReLU (T5 v1.0, ``feed_forward_proj: relu``) or gated GELU (``gated-gelu``: T5 v1.1, Flan-T5, mT5,
MADLAD; transformers' ``gelu_new``, the tanh approximation). v1.0 ties one table to the output projection and rescales
the decoder's output by d_model^-0.5 (``tie_word_embeddings``, written ``scale_decoder_outputs`` by transformers 5);
later ones keep a separate ``lm_head``. Decoding starts from ``<pad>`` (``decoder_start_token_id`` 0); a source reads
``X </s>``.

The tokenizer is SentencePiece's unigram, shipped as tokenizer.json (taken as it is) or as spiece.model, which is
converted as transformers' ``T5Tokenizer`` does (its extra ids appended). A Flan-T5 prompt such as ``summarize: ...``
is the user's text. MADLAD-400 asks for the target language as a ``<2xx>`` token first on the source: its vocabulary's
``<2xx>`` tokens become the bundle's languages (a request's target language, an ISO code or the model's own, placed
as that token; one naming none is read as sent), as Marian's multi-target ``>>xx<<`` are.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from contract.config import ModelConfig
from contract.languages import Languages
from contract.tokens import SpecialIds
from export import hf_tokenizer
from export.hf_checkpoint import ImportRefused, Loaded
from export.hf_marian import ConfigError

MODEL_TYPE = "t5"
SPM_FILE = "spiece.model"
FEED_FORWARD = {"relu": ("relu", False), "gated-gelu": ("gelu_tanh", True)}  # -> (activation, gated)
TARGET_CODE = re.compile(r"<2[a-z]{2,3}(_[A-Z][a-z]{3})?>")  # MADLAD-400's <2de>, <2zh_Latn>
# T5's relative positions reach any length; a budget where config.json names none (T5's n_positions, 512)
DEFAULT_MAX_LEN = 512
LAYER_PREFIX = "{stack}.block.{i}."  # the import's check for layers past num_layers
LAYER_FIELDS = {"encoder": "num_layers", "decoder": "num_decoder_layers"}


def model_config(cfg: dict[str, Any], unk: int, model_type: str = MODEL_TYPE) -> ModelConfig:
    """config.json (a T5Config or MT5Config) -> ModelConfig; ConfigError naming the field it cannot take."""

    def need(name: str) -> Any:
        if name not in cfg:
            raise ConfigError(f"field {name!r} is missing")
        return cfg[name]

    proj = cfg.get("feed_forward_proj", "relu" if model_type == "t5" else "gated-gelu")
    if proj not in FEED_FORWARD:
        raise ConfigError(f"field 'feed_forward_proj' is {proj!r}; supported: {', '.join(FEED_FORWARD)}")
    activation, gated = FEED_FORWARD[proj]
    # v1.0 ties the table to the output projection and rescales; transformers 5 writes the rescaling as its own
    # field (and tie_word_embeddings always true), earlier versions wrote tie_word_embeddings false for v1.1+.
    # mT5 never rescales.
    tied = model_type == "t5" and bool(
        cfg.get("scale_decoder_outputs", cfg.get("tie_word_embeddings", True) is not False)
    )
    pad = int(cfg.get("pad_token_id", 0))
    layers = int(need("num_layers"))
    try:
        return ModelConfig(
            src_vocab_size=int(need("vocab_size")),
            tgt_vocab_size=int(cfg["vocab_size"]),
            d_model=int(need("d_model")),
            n_heads=int(need("num_heads")),
            n_encoder_layers=layers,
            n_decoder_layers=int(cfg.get("num_decoder_layers") or layers),
            d_ff=int(need("d_ff")),
            dropout=0.0,
            max_len=int(cfg.get("n_positions") or DEFAULT_MAX_LEN),
            share_embeddings=True,
            tie_output=tied,
            special=SpecialIds(
                pad=pad,
                bos=int(cfg.get("decoder_start_token_id", pad)),
                eos=int(cfg.get("eos_token_id", 1)),
                unk=unk,
            ),
            activation=activation,
            scale_embedding=False,
            positions="relative",
            norm="pre",
            final_norm=True,
            output_bias=False,
            relative_attention_num_buckets=int(cfg.get("relative_attention_num_buckets", 32)),
            relative_attention_max_distance=int(cfg.get("relative_attention_max_distance", 128)),
            rms_norm=True,
            norm_eps=float(cfg.get("layer_norm_epsilon", 1e-6)),
            ffn_glu=gated,
            projection_bias=False,
            scale_attention=False,
            scale_output=tied,
            d_kv=int(need("d_kv")),
        )
    except (TypeError, ValueError) as e:  # sizes that do not fit together
        raise ConfigError(str(e)) from None


# Per layer: our name -> T5's (under encoder.block.{i}. / decoder.block.{i}.).
_ATTN = {"w_q": "q", "w_k": "k", "w_v": "v", "w_o": "o"}


def _ffn(at: str, gated: bool) -> dict[str, str]:
    dense = f"layer.{at}.DenseReluDense"
    if gated:
        return {"ffn.w_1": f"{dense}.wi_0", "ffn.v": f"{dense}.wi_1", "ffn.w_2": f"{dense}.wo"}
    return {"ffn.w_1": f"{dense}.wi", "ffn.w_2": f"{dense}.wo"}


def weight_names(c: ModelConfig) -> dict[str, list[str]]:
    """Each of our tensors -> the T5 names it may be stored under (the first present wins)."""
    names: dict[str, list[str]] = {
        "src_embed.weight": ["shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"],
        "encoder_norm.weight": ["encoder.final_layer_norm.weight"],
        "decoder_norm.weight": ["decoder.final_layer_norm.weight"],
    }
    if not c.tie_output:  # transformers ties a missing lm_head to the table: so does this
        names["output_projection.weight"] = ["lm_head.weight", "shared.weight"]
    for stack in ("encoder", "decoder"):
        bias = f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
        names[f"{stack}_position_bias.bias.weight"] = [bias]
    encoder = {
        **{f"self_attn.{a}": f"layer.0.SelfAttention.{b}" for a, b in _ATTN.items()},
        "norm1": "layer.0.layer_norm",
        **_ffn("1", c.ffn_glu),
        "norm2": "layer.1.layer_norm",
    }
    decoder = {
        **{f"self_attn.{a}": f"layer.0.SelfAttention.{b}" for a, b in _ATTN.items()},
        "norm1": "layer.0.layer_norm",
        **{f"cross_attn.{a}": f"layer.1.EncDecAttention.{b}" for a, b in _ATTN.items()},
        "norm2": "layer.1.layer_norm",
        **_ffn("2", c.ffn_glu),
        "norm3": "layer.2.layer_norm",
    }
    for stack, layers, table in (
        ("encoder", c.n_encoder_layers, encoder),
        ("decoder", c.n_decoder_layers, decoder),
    ):
        for i in range(layers):
            for ours, theirs in table.items():
                names[f"{stack}.{i}.{ours}.weight"] = [f"{stack}.block.{i}.{theirs}.weight"]
    return names


# Which config.json field sizes a tensor, to name it when a shape disagrees.
FIELD_OF = {
    "relative_attention_bias": "relative_attention_num_buckets / num_heads",
    "DenseReluDense.w": "d_ff / d_model",
    "Attention.": "num_heads / d_kv / d_model",
    "layer_norm": "d_model",
    "shared": "vocab_size / d_model",
    "embed_tokens": "vocab_size / d_model",
    "lm_head": "vocab_size / d_model",
}


def field_of(name: str) -> str:
    return next((f for key, f in FIELD_OF.items() if key in name), "d_model")


def spiece_tokenizer(folder: Path, tok_cfg: dict[str, Any], family: str = "T5"):
    """spiece.model as transformers' tokenizer class of the family makes it (``T5Tokenizer``, ``PegasusTokenizer``):
    the pieces and scores in their order, SentencePiece's control and user-defined pieces as added tokens, its
    normalizer's character map, then the family's converter (T5's extra ids appended, Pegasus's reserved ids before
    the pieces). transformers reads the file with sentencepiece's own protobuf module, which needs protobuf 7 (the
    gRPC pins hold 6); this reads it with transformers' copy of the schema and hands the rest to transformers."""
    from tokenizers import AddedToken
    from transformers.convert_slow_tokenizer import SLOW_TO_FAST_CONVERTERS

    from export.spm_tokenizer import CONTROL, USER_DEFINED, TokenizerError, read_spm

    try:
        proto = read_spm(folder / SPM_FILE)
    except TokenizerError as e:
        raise ImportRefused(str(e)) from None
    kwargs = {
        k: tok_cfg[k]
        for k in (
            "eos_token",
            "unk_token",
            "pad_token",
            "extra_ids",
            "offset",
            "mask_token",
            "mask_token_sent",
        )
        if k in tok_cfg
    }
    kwargs["vocab"] = [(p.piece, p.score) for p in proto.pieces]
    kwargs["additional_special_tokens"] = [
        AddedToken(p.piece, normalized=False, special=p.type == CONTROL)
        for p in proto.pieces
        if p.type in (CONTROL, USER_DEFINED)
    ]
    kwargs["_spm_precompiled_charsmap"] = proto.normalizer_spec.precompiled_charsmap or None
    if family == "Pegasus":
        from transformers import PegasusTokenizer as cls
    else:
        from transformers import T5Tokenizer as cls
    kwargs = SLOW_TO_FAST_CONVERTERS[cls.__name__].convert_from_spm(**kwargs)
    try:
        return cls(**kwargs).backend_tokenizer
    except Exception as e:  # the class's own refusals (extra_ids against the special tokens named, ...)
        raise ImportRefused(
            f"{folder / 'tokenizer_config.json'}: {cls.__name__} cannot be made of it ({type(e).__name__}: "
            f"{str(e)[:200]})"
        ) from None


def tokenizer(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any], family: str = "T5"):
    """tokenizer.json as it is, else spiece.model converted; its special ids checked against config.json."""
    if (folder / hf_tokenizer.FILE).is_file():
        tok = hf_tokenizer.read(folder, family)
    elif (folder / SPM_FILE).is_file():
        tok = spiece_tokenizer(folder, tok_cfg, family)
    else:
        raise ImportRefused(
            f"{folder}: no tokenizer; a {family} checkpoint needs {hf_tokenizer.FILE} or {SPM_FILE} beside config.json"
        )
    hf_tokenizer.check(tok, folder, cfg, tok_cfg)
    return tok


def load(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any]) -> Loaded:
    tok = tokenizer(folder, cfg, tok_cfg)
    unk = hf_tokenizer.special_id(tok, folder, tok_cfg, "unk_token", "<unk>")
    try:
        c = model_config(cfg, unk, cfg.get("model_type", MODEL_TYPE))
    except ConfigError as e:
        raise ImportRefused(f"{folder / 'config.json'}: {e}") from None
    codes = {t: i for t, i in tok.get_vocab(with_added_tokens=True).items() if TARGET_CODE.fullmatch(t)}
    # MADLAD reads a source of any of its languages as it is: only the target is said
    languages = Languages.of_tokens(codes, target="source_prefix", source="any") if codes else None
    return Loaded(c, tok, languages=languages)
