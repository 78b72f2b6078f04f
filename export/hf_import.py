"""`s2s import`: a Hugging Face checkpoint folder -> a bundle in the model repository, through `s2s export`.

The folder is read as a user downloaded it (config.json, generation_config.json, model.safetensors or
pytorch_model.bin, the tokenizer files); nothing is fetched (offline mode is set before transformers can
be imported). Its weights become this project's model (``training/model.py`` with the family's knobs,
``export/hf_marian.py``), its tokenizers ``tokenizers`` JSON (``export/spm_tokenizer.py``), its
generation_config.json the bundle's decoding defaults; then the checkpoint goes through the same export and
validation as a trained one. Anything it cannot take is refused with ``ImportRefused`` naming the file and
the field, before anything is written to the repository.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contract import bundle
from contract.config import ModelConfig, TaskConfig

log = logging.getLogger("s2s.import")
SUPPORTED = ("marian", "m2m_100")  # model_type values of config.json this import reads (m2m_100: NLLB too)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class ImportRefused(Exception):
    """A checkpoint folder this import cannot take; the message names the file and the field."""


@dataclass
class ImportOptions:
    source: Path  # the Hugging Face checkpoint folder
    repo: Path
    name: str
    version: int | None = None
    quantize: str = "none"  # as `s2s export --quantize`
    # The decoder's self-attention as ONNX Runtime's GroupQueryAttention (export/fused.py): faster on CPUs at the
    # sizes of the models users bring; off for bundles meant for CUDA (its kernel is float16-only).
    gqa: bool = True


def _json(path: Path, what: str) -> dict[str, Any]:
    if not path.is_file():
        raise ImportRefused(f"{path}: missing; {what}")
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ImportRefused(f"{path}: not valid JSON ({e})") from None
    if not isinstance(d, dict):
        raise ImportRefused(f"{path}: a JSON object was expected, not {type(d).__name__}")
    return d


def read_weights(folder: Path) -> tuple[Path, dict]:
    """The weights file and its tensors: safetensors, or a PyTorch pickle read with ``weights_only=True``."""
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            if name.endswith(".safetensors"):
                from safetensors.torch import load_file

                return path, load_file(str(path))
            import torch

            return path, torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated or corrupt: safetensors' and torch's own errors
            raise ImportRefused(
                f"{path}: cannot be read as weights ({type(e).__name__}: {str(e)[:200]})"
            ) from None
    raise ImportRefused(f"{folder}: no weights file; expected one of {', '.join(WEIGHT_FILES)}")


def family(model_type: str):
    """The module that knows a family's knobs and weight names (one per family, as CTranslate2's converter)."""
    from export import hf_m2m100, hf_marian

    return {"marian": hf_marian, "m2m_100": hf_m2m100}[model_type]


def map_weights(
    c: ModelConfig, theirs: dict, weights_file: Path, config_file: Path, model_type: str = "marian"
) -> dict:
    """The family's tensors under our names, every shape checked against the config."""
    import torch

    from training.model import Transformer

    hf_marian = family(model_type)  # its field_of names the config field of a tensor
    want = {k: v.shape for k, v in Transformer(c).state_dict().items()}
    out = {}
    for ours, names in hf_marian.weight_names(c).items():
        name = next((n for n in names if n in theirs), None)
        if name is None:
            if ours == "output_projection.bias":  # transformers does not save a zero final_logits_bias either
                out[ours] = torch.zeros(c.tgt_vocab_size)
                continue
            raise ImportRefused(
                f"{weights_file}: tensor {names[0]!r} is missing ({config_file} field "
                f"{hf_marian.field_of(names[0])!r} or the layer counts say it should be there)"
            )
        t = theirs[name].float()
        if ours == "output_projection.bias":
            t = t.reshape(-1)
        if tuple(t.shape) != tuple(want[ours]):
            raise ImportRefused(
                f"{weights_file}: tensor {name!r} has shape {tuple(theirs[name].shape)}, but {config_file} "
                f"field {hf_marian.field_of(name)!r} makes it {tuple(want[ours])}"
            )
        out[ours] = t.contiguous()
    for stack, n in (("encoder", c.n_encoder_layers), ("decoder", c.n_decoder_layers)):
        if any(k.startswith(f"model.{stack}.layers.{n}.") for k in theirs):
            raise ImportRefused(
                f"{weights_file}: has {stack} layer {n}, but {config_file} field '{stack}_layers' is {n}"
            )
    return out


def task_config(gen: dict[str, Any], c: ModelConfig, gen_file: Path) -> TaskConfig:
    """generation_config.json's decoding -> the bundle's defaults."""
    bad = gen.get("bad_words_ids") or []
    if any(not isinstance(w, list) or len(w) != 1 for w in bad):
        raise ImportRefused(
            f"{gen_file}: field 'bad_words_ids' holds sequences of several tokens; only single tokens "
            "(such as Marian's [[<pad>]]) are supported"
        )
    suppressed = sorted({int(w[0]) for w in bad} | {int(t) for t in gen.get("suppress_tokens") or []})
    for name in ("early_stopping", "forced_eos_token_id", "repetition_penalty", "min_length"):
        if gen.get(name) not in (None, False, 1.0, 0):
            log.warning(
                "%s: %s=%r is not applied (generate() gives the same tokens unless a row reaches max_length)",
                gen_file,
                name,
                gen[name],
            )
    max_length = int(gen.get("max_length") or c.max_len)
    alpha = float(gen.get("length_penalty", 1.0))
    return TaskConfig(
        "translation",
        unknown="unk",
        max_new_tokens=max(1, min(max_length - 1, c.max_len - 1)),
        beam_size=int(gen.get("num_beams") or 1),
        length_penalty_type="transformers",
        length_penalty=None if alpha == 1.0 else alpha,
        no_repeat_ngram_size=int(gen.get("no_repeat_ngram_size") or 0),
        suppressed_ids=tuple(suppressed),
    )


def _tokenizers(folder: Path, separate: bool, specials: dict[str, str], c: ModelConfig):
    """(source tokenizer, target tokenizer or None when the sides are one), converted from Marian's files."""
    from export.spm_tokenizer import TokenizerError, convert, missing_pieces

    files = ["source.spm", "target.spm", "vocab.json"] + (["target_vocab.json"] if separate else [])
    for f in files:
        if not (folder / f).is_file():
            raise ImportRefused(f"{folder / f}: missing; a Marian tokenizer needs {', '.join(files)}")
    src_vocab = _json(folder / "vocab.json", "")
    tgt_vocab = _json(folder / "target_vocab.json", "") if separate else src_vocab
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
        ids = {int(i) for i in vocab.values()}
        if max(ids) >= size:
            raise ImportRefused(f"{path}: ids up to {max(ids)}, but config.json field {field!r} is {size}")
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


def import_model(opts: ImportOptions) -> Path:
    os.environ["HF_HUB_OFFLINE"] = "1"  # read as it is; before transformers is imported anywhere below
    folder = Path(opts.source)
    if not folder.is_dir():
        raise ImportRefused(f"{folder}: not a folder; give the folder of a Hugging Face checkpoint")
    config_file = folder / "config.json"
    cfg = _json(
        config_file, "not a Hugging Face checkpoint folder (config.json, weights and tokenizer files)"
    )
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED:
        raise ImportRefused(
            f"{config_file}: field 'model_type' is {model_type!r}; supported: {', '.join(SUPPORTED)}"
        )
    gen_file = folder / "generation_config.json"
    gen = {
        **{k: cfg[k] for k in ("num_beams", "max_length", "bad_words_ids", "length_penalty") if k in cfg},
        **(_json(gen_file, "") if gen_file.is_file() else {}),
    }
    tok_cfg = (
        _json(folder / "tokenizer_config.json", "") if (folder / "tokenizer_config.json").is_file() else {}
    )
    specials = {
        "eos": tok_cfg.get("eos_token", "</s>"),
        "unk": tok_cfg.get("unk_token", "<unk>"),
        "pad": tok_cfg.get("pad_token", "<pad>"),
    }
    specials = {k: v["content"] if isinstance(v, dict) else str(v) for k, v in specials.items()}
    languages = None
    if model_type == "marian":
        c, src_tok, tgt_tok = _marian(folder, cfg, config_file, tok_cfg, specials)
    else:
        c, src_tok, languages = _m2m100(folder, cfg, config_file, tok_cfg)
        tgt_tok = None
    weights_file, theirs = read_weights(folder)
    state = map_weights(c, theirs, weights_file, config_file, model_type)
    task = task_config(gen, c, gen_file)
    return _export(
        opts,
        c,
        task,
        state,
        src_tok,
        tgt_tok,
        languages,
        {
            "model_type": model_type,
            "transformers_version": cfg.get("transformers_version"),
            "weights_file": weights_file.name,
            "weights_sha256": bundle.sha256_file(weights_file),
            "imported_with_transformers": _transformers_version(),
        },
        tok_cfg,
    )


def _marian(folder: Path, cfg: dict, config_file: Path, tok_cfg: dict, specials: dict):
    vocab_file = folder / "vocab.json"
    unk = _json(vocab_file, "a Marian tokenizer needs source.spm, target.spm and vocab.json").get(
        specials["unk"]
    )
    if unk is None:
        raise ImportRefused(f"{vocab_file}: no {specials['unk']!r} entry (the tokenizer's unk_token)")
    from export import hf_marian

    try:
        c = hf_marian.model_config(cfg, int(unk))
    except hf_marian.ConfigError as e:
        raise ImportRefused(f"{config_file}: {e}") from None
    separate = bool(tok_cfg.get("separate_vocabs", False))
    if separate == c.share_embeddings:
        raise ImportRefused(
            f"{folder / 'tokenizer_config.json'}: field 'separate_vocabs' is {separate}, but "
            f"{config_file} field 'share_encoder_decoder_embeddings' is {c.share_embeddings}"
        )
    return c, *_tokenizers(folder, separate, specials, c)


def _m2m100(folder: Path, cfg: dict, config_file: Path, tok_cfg: dict):
    from export import hf_m2m100

    try:
        c = hf_m2m100.model_config(cfg, 3)  # unk: replaced below by the tokenizer's own
    except hf_m2m100.ConfigError as e:
        raise ImportRefused(f"{config_file}: {e}") from None

    def refuse(message: str):
        raise ImportRefused(message)

    tok, languages = hf_m2m100.tokenizer(folder, tok_cfg, c.src_vocab_size, refuse)
    unk_token = tok_cfg.get("unk_token", "<unk>")
    unk = tok.token_to_id(unk_token["content"] if isinstance(unk_token, dict) else str(unk_token))
    if unk is None:
        refuse(
            f"{folder}: the tokenizer has no {tok_cfg.get('unk_token', '<unk>')!r} token (tokenizer_config.json's unk_token)"
        )
    return dataclasses.replace(c, special=dataclasses.replace(c.special, unk=unk)), tok, languages


def _language(code) -> str | None:
    """tokenizer_config.json's source_lang / target_lang where it is a language code ("en"; not "ROMANCE")."""
    try:
        return bundle.check_language(code) if isinstance(code, str) else None
    except ValueError:
        return None


def _transformers_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("transformers")
    except Exception:  # not installed: the import needs only safetensors, torch and tokenizers
        return None


def _export(
    opts: ImportOptions,
    c: ModelConfig,
    task: TaskConfig,
    state: dict,
    src_tok,
    tgt_tok,
    languages,
    origin: dict,
    tok_cfg: dict,
) -> Path:
    from export.onnx_export import ExportOptions, export
    from training import checkpoint
    from training.model import Transformer

    model = Transformer(c)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"tgt_embed.weight", "output_projection.weight"}, (
        missing,
        unexpected,
    )
    langs = [
        _language(tok_cfg.get(k)) for k in ("source_lang", "target_lang")
    ]  # LibreTranslate routes by them
    with tempfile.TemporaryDirectory(prefix="s2s-import-") as tmp:
        ckpt = Path(tmp)
        checkpoint.save(ckpt, model, task, src_tok, metrics={}, train={"imported": origin})
        if tgt_tok is not None:
            tgt_tok.save(str(ckpt / checkpoint.TARGET_TOKENIZER))
        try:
            return export(
                ExportOptions(
                    checkpoint=ckpt,
                    repo=opts.repo,
                    name=opts.name,
                    version=opts.version,
                    quantize=opts.quantize,
                    gqa=opts.gqa,
                    origin=origin,
                    source_language=langs[0],
                    target_language=langs[1],
                    languages=languages,
                )
            )
        except ValueError as e:  # validation: ONNX Runtime disagreed with PyTorch; nothing was published
            raise ImportRefused(f"{opts.source}: the exported graphs failed validation ({e})") from None
