"""Marian (OPUS-MT, FuguMT) as this project's model: the knobs it moves and the names of its weights.

Marian is the paper's post-norm Transformer with: swish activation, embeddings scaled by sqrt(d) (when
``scale_embedding``), sinusoids laid out sines first, an output bias (``final_logits_bias``), source, target
and output embeddings tied (one table unless ``share_encoder_decoder_embeddings`` is off), decoding started
from ``<pad>``, ``<pad>`` never generated, EOS id 0. One loader per family, as CTranslate2's converter has;
nothing else in the import is Marian's.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path
from typing import Any

from contract.config import ModelConfig
from contract.languages import Languages
from contract.tokens import SpecialIds
from export.hf_checkpoint import ImportRefused, Loaded, read_json, token_of
from export.hf_fields import FieldError, flag, token_id, vocabulary_ids, whole

MODEL_TYPE = "marian"
TARGET_CODE = re.compile(r">>[A-Za-z]{2,3}(_[A-Za-z]{2,4})?<<")  # >>fra<<, >>pt_BR<<, >>zho_Hans<<
log = logging.getLogger("s2s.import")
ACTIVATIONS = {
    "swish": "swish",
    "silu": "swish",
    "gelu": "gelu",
    "relu": "relu",
}  # transformers' name -> ours


# A field of config.json that this model cannot take; the message names it.
ConfigError = FieldError
BIG = 1 << 40  # sizes are held to what the weights hold (hf_fields.held_sizes); this only keeps them integers


def model_config(cfg: dict[str, Any], unk: int) -> ModelConfig:
    """config.json (a MarianConfig) -> ModelConfig; ConfigError naming the field it cannot take."""
    act = cfg.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise ConfigError(f"field 'activation_function' is {act!r}; supported: {', '.join(ACTIVATIONS)}")
    for a, b in (
        ("encoder_attention_heads", "decoder_attention_heads"),
        ("encoder_ffn_dim", "decoder_ffn_dim"),
    ):
        if whole(cfg, a, 1, BIG) != whole(cfg, b, 1, BIG):
            raise ConfigError(
                f"fields {a!r} ({cfg[a]}) and {b!r} ({cfg[b]}) differ; one value for both stacks is supported"
            )
    shared = flag(cfg, "share_encoder_decoder_embeddings", True)
    vocab = whole(cfg, "vocab_size", 1, BIG)
    tgt_vocab = vocab if shared else whole(cfg, "decoder_vocab_size", 1, BIG, vocab)
    pad = token_id(cfg, "pad_token_id", BIG)  # below the vocabulary's size: checked with vocab.json (load)
    d_model = whole(cfg, "d_model", 1, BIG)
    try:
        return ModelConfig(
            src_vocab_size=vocab,
            tgt_vocab_size=tgt_vocab,
            d_model=d_model,
            n_heads=whole(cfg, "encoder_attention_heads", 1, d_model),
            n_encoder_layers=whole(cfg, "encoder_layers", 1, BIG),
            n_decoder_layers=whole(cfg, "decoder_layers", 1, BIG),
            d_ff=whole(cfg, "encoder_ffn_dim", 1, BIG),
            dropout=0.0,
            max_len=whole(cfg, "max_position_embeddings", 1, BIG),
            share_embeddings=shared,
            tie_output=flag(cfg, "tie_word_embeddings", True),
            special=SpecialIds(
                pad=pad,
                bos=token_id(cfg, "decoder_start_token_id", BIG, pad),
                eos=token_id(cfg, "eos_token_id", BIG),
                unk=unk,
            ),
            activation=ACTIVATIONS[act],
            scale_embedding=flag(cfg, "scale_embedding", False),
            positions="sinusoid_half",
            output_bias=True,
        )
    except FieldError:
        raise
    except (
        TypeError,
        ValueError,
    ) as e:  # sizes that do not fit together (d_model not divisible by the heads, ...)
        raise ConfigError(str(e)) from None


# Per layer: our name -> Marian's (under model.encoder.layers.{i}. / model.decoder.layers.{i}.).
_ATTN = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "out_proj"}
_ENCODER = {
    **{f"self_attn.{a}": f"self_attn.{b}" for a, b in _ATTN.items()},
    "norm1": "self_attn_layer_norm",
    "ffn.w_1": "fc1",
    "ffn.w_2": "fc2",
    "norm2": "final_layer_norm",
}
_DECODER = {
    **{f"self_attn.{a}": f"self_attn.{b}" for a, b in _ATTN.items()},
    **{f"cross_attn.{a}": f"encoder_attn.{b}" for a, b in _ATTN.items()},
    "norm1": "self_attn_layer_norm",
    "norm2": "encoder_attn_layer_norm",
    "ffn.w_1": "fc1",
    "ffn.w_2": "fc2",
    "norm3": "final_layer_norm",
}
# Which config.json field sizes a tensor, to name it when a shape disagrees.
FIELD_OF = {
    "embed": "vocab_size / d_model",
    "fc1": "encoder_ffn_dim / decoder_ffn_dim",
    "fc2": "encoder_ffn_dim / decoder_ffn_dim",
    "proj": "d_model",
    "layer_norm": "d_model",
    "final_logits_bias": "vocab_size",
}


def weight_names(c: ModelConfig) -> dict[str, list[str]]:
    """Each of our tensors -> the Marian names it may be stored under (tied tables have several; the first present wins)."""
    names: dict[str, list[str]] = {}
    if c.share_embeddings:
        names["src_embed.weight"] = [
            "model.shared.weight",
            "model.encoder.embed_tokens.weight",
            "model.decoder.embed_tokens.weight",
            "lm_head.weight",
        ]
    else:
        names["src_embed.weight"] = ["model.encoder.embed_tokens.weight"]
        names["tgt_embed.weight"] = ["model.decoder.embed_tokens.weight"] + (
            ["lm_head.weight"] if c.tie_output else []
        )
    if not c.tie_output:
        names["output_projection.weight"] = ["lm_head.weight"]
    names["output_projection.bias"] = ["final_logits_bias"]
    for stack, layers, table in (
        ("encoder", c.n_encoder_layers, _ENCODER),
        ("decoder", c.n_decoder_layers, _DECODER),
    ):
        for i in range(layers):
            for ours, theirs in table.items():
                for p in ("weight", "bias"):
                    names[f"{stack}.{i}.{ours}.{p}"] = [f"model.{stack}.layers.{i}.{theirs}.{p}"]
    return names


def field_of(name: str) -> str:
    return next((f for key, f in FIELD_OF.items() if key in name), "d_model")


def load(folder: Path, cfg: dict[str, Any], tok_cfg: dict[str, Any]) -> Loaded:
    """config.json and Marian's tokenizer files (source.spm, target.spm, vocab.json, target_vocab.json)."""
    config_file = folder / "config.json"
    specials = {
        k: token_of(tok_cfg, f"{k}_token", d)
        for k, d in (("eos", "</s>"), ("unk", "<unk>"), ("pad", "<pad>"))
    }
    vocab_file = folder / "vocab.json"
    vocab = read_json(vocab_file, "a Marian tokenizer needs source.spm, target.spm and vocab.json")
    try:
        c = model_config(cfg, 0)  # unk: vocab.json's, once its ids are known to be ids
    except ConfigError as e:
        raise ImportRefused(f"{config_file}: {e}") from None
    check_ids(vocab_file, vocab, c.src_vocab_size, "vocab_size")
    unk = vocab.get(specials["unk"])
    if unk is None:
        raise ImportRefused(f"{vocab_file}: no {specials['unk']!r} entry (the tokenizer's unk_token)")
    ids = c.special
    for field, i, size in (
        ("pad_token_id", ids.pad, max(c.src_vocab_size, c.tgt_vocab_size)),
        ("eos_token_id", ids.eos, c.tgt_vocab_size),
        ("decoder_start_token_id", ids.bos, c.tgt_vocab_size),
    ):
        if i >= size:
            raise ImportRefused(
                f"{config_file}: field {field!r} is {i}; ids are below {size} (the vocabulary's size)"
            )
    c = dataclasses.replace(c, special=dataclasses.replace(ids, unk=unk))
    try:
        separate = flag(tok_cfg, "separate_vocabs", False)
    except FieldError as e:
        raise ImportRefused(f"{folder / 'tokenizer_config.json'}: {e}") from None
    if separate == c.share_embeddings:
        raise ImportRefused(
            f"{folder / 'tokenizer_config.json'}: field 'separate_vocabs' is {separate}, but "
            f"{config_file} field 'share_encoder_decoder_embeddings' is {c.share_embeddings}"
        )
    src, tgt = _tokenizers(folder, separate, specials, c)
    # A multi-target model's >>xx<< tokens: a request's target language becomes its token before the source, as
    # MarianTokenizer reads a text that starts with it; one naming none is read as sent (its text may carry it).
    codes = {t: i for t, i in vocab.items() if TARGET_CODE.fullmatch(t)}
    languages = Languages.of_tokens(codes, target="source_prefix", source="none") if codes else None
    return Loaded(c, src, tgt, languages=languages)


def check_ids(path: Path, vocab: dict, size: int, field: str) -> None:
    """A vocabulary file's ids are ids below config.json's ``field`` (``size``); ImportRefused naming the entry."""
    if not vocab:
        raise ImportRefused(f"{path}: no entries")
    try:
        vocabulary_ids(vocab, size, field)
    except FieldError as e:
        raise ImportRefused(f"{path}: {e}") from None


def _tokenizers(folder: Path, separate: bool, specials: dict[str, str], c: ModelConfig):
    """(source tokenizer, target tokenizer or None when the sides are one), converted from Marian's files."""
    from export.spm_tokenizer import TokenizerError, convert, missing_pieces

    files = ["source.spm", "target.spm", "vocab.json"] + (["target_vocab.json"] if separate else [])
    for f in files:
        if not (folder / f).is_file():
            raise ImportRefused(f"{folder / f}: missing; a Marian tokenizer needs {', '.join(files)}")
    src_vocab = read_json(folder / "vocab.json", "")
    tgt_vocab = read_json(folder / "target_vocab.json", "") if separate else src_vocab
    sides = (
        (folder / "vocab.json", src_vocab, c.src_vocab_size, "vocab_size", "source.spm"),
        (
            folder / ("target_vocab.json" if separate else "vocab.json"),
            tgt_vocab,
            c.tgt_vocab_size,
            "decoder_vocab_size" if separate else "vocab_size",
            "target.spm",
        ),
    )
    for path, vocab, size, field, spm in sides:
        check_ids(path, vocab, size, field)
        for token in specials.values():
            if token not in vocab:
                raise ImportRefused(f"{path}: no {token!r} entry (the tokenizer's special token)")
        try:
            missing = missing_pieces(folder / spm, vocab)
        except TokenizerError as e:
            raise ImportRefused(str(e)) from None
        if missing:
            log.warning(
                "%s: %d SentencePiece pieces are not in it (MarianTokenizer reads them as <unk>): %s",
                path,
                len(missing),
                missing[:5],
            )
    ids = {t: src_vocab[t] for t in specials.values()}
    try:
        src = convert(folder / "source.spm", src_vocab, ids, decodes=False)
        same = (folder / "source.spm").read_bytes() == (folder / "target.spm").read_bytes() and not separate
        tgt = (
            None
            if same
            else convert(
                folder / "target.spm", tgt_vocab, {t: tgt_vocab[t] for t in specials.values()}, decodes=True
            )
        )
    except TokenizerError as e:
        raise ImportRefused(str(e)) from None
    return src, tgt
