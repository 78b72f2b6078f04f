"""`s2s import`: a Hugging Face checkpoint folder -> a bundle in the model repository, through `s2s export`.

The folder is read as a user downloaded it (config.json, generation_config.json, model.safetensors or
pytorch_model.bin, the tokenizer files); nothing is fetched (offline mode is set before transformers can be imported).
One small module per family (``export/hf_marian.py``, ``hf_m2m100.py`` for M2M100 and NLLB, ``hf_bart.py``,
``hf_mbart.py``, ``hf_t5.py`` for T5, mT5, Flan-T5 and MADLAD-400, ``hf_pegasus.py``, as CTranslate2's converter has
one loader each) reads its config.json into this project's model (``training/model.py`` with the family's knobs) and
its tokenizer files into ``tokenizers`` JSON (Marian's and M2M100's SentencePiece files converted by
``export/spm_tokenizer.py``; a tokenizer.json taken as it is, ``export/hf_tokenizer.py``), and names its weights;
config.json's sizes are first held to what the weights file holds (``export/hf_fields.py``); generation_config.json
becomes the bundle's decoding defaults (``export/hf_generation.py``); then the checkpoint goes through the same export
and validation as a trained one. Anything it cannot take is refused with ``ImportRefused`` naming the file and the
field, before anything is written to the repository.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from contract import bundle
from contract.config import ModelConfig, TaskConfig
from export import hf_bart, hf_fields, hf_m2m100, hf_marian, hf_mbart, hf_pegasus, hf_t5
from export.hf_checkpoint import ImportRefused, Loaded, read_json, token_of
from export.hf_fields import FieldError
from export.hf_generation import GENERATION_FIELDS, not_applied, task_config

__all__ = ["FAMILIES", "ImportOptions", "ImportRefused", "Loaded", "import_model", "read_json", "token_of"]

log = logging.getLogger("s2s.import")
# model_type values of config.json this import reads (m2m_100: NLLB too) -> the family's loader
FAMILIES = {
    "marian": hf_marian,
    "m2m_100": hf_m2m100,
    "bart": hf_bart,
    "mbart": hf_mbart,
    "t5": hf_t5,  # T5, Flan-T5 and MADLAD-400
    "mt5": hf_t5,
    "pegasus": hf_pegasus,
}
SUPPORTED = tuple(FAMILIES)
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


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
    # The LibreTranslate pair (`s2s import --source-lang/--target-lang`); None: tokenizer_config.json's, if any.
    source_language: str | None = None
    target_language: str | None = None


def weights_file(folder: Path) -> Path:
    path = next((folder / n for n in WEIGHT_FILES if (folder / n).is_file()), None)
    if path is None:
        raise ImportRefused(f"{folder}: no weights file; expected one of {', '.join(WEIGHT_FILES)}")
    return path


def read_weights(path: Path) -> dict:
    """The tensors of a weights file: safetensors, or a PyTorch pickle read with ``weights_only=True``."""
    try:
        if path.name.endswith(".safetensors"):
            from safetensors.torch import load_file

            return load_file(str(path))
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated or corrupt: safetensors' and torch's own errors
        raise ImportRefused(
            f"{path}: cannot be read as weights ({type(e).__name__}: {str(e)[:200]})"
        ) from None


def weight_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape without reading the tensors (``hf_fields.tensor_shapes``)."""
    try:
        return hf_fields.tensor_shapes(path)
    except Exception as e:  # truncated or corrupt: safetensors' and torch's own errors
        raise ImportRefused(
            f"{path}: cannot be read as weights ({type(e).__name__}: {str(e)[:200]})"
        ) from None


def layer_layout(fam) -> tuple[str, dict[str, str]]:
    """Where a family keeps its layers, and the config.json fields that count them (T5's encoder.block.{i}.)."""
    prefix = getattr(fam, "LAYER_PREFIX", hf_fields.BART_LAYERS)
    return prefix, getattr(fam, "LAYER_FIELDS", {s: f"{s}_layers" for s in hf_fields.STACKS})


def family(model_type: str):
    """The module that knows a family's knobs, tokenizer files and weight names."""
    return FAMILIES[model_type]


def map_weights(
    c: ModelConfig, theirs: dict, weights_file: Path, config_file: Path, model_type: str = "marian"
) -> dict:
    """The family's tensors under our names, every shape checked against the config."""
    import torch

    from training.model import Transformer

    fam = family(model_type)  # its field_of names the config field of a tensor
    prefix, counts = layer_layout(fam)
    layer_name = re.compile(
        re.escape(prefix).replace(r"\{stack\}", "(encoder|decoder)").replace(r"\{i\}", r"\d+")
    )
    with torch.device("meta"):  # the shapes only: no weights made
        want = {k: v.shape for k, v in Transformer(c).state_dict().items()}
    out = {}
    for ours, names in fam.weight_names(c).items():
        name = next((n for n in names if n in theirs), None)
        if name is None:
            if ours == "output_projection.bias":  # transformers does not save a zero final_logits_bias either
                out[ours] = torch.zeros(c.tgt_vocab_size)
                continue
            layer = layer_name.match(names[0])
            field = counts[layer.group(1)] if layer else fam.field_of(names[0])
            raise ImportRefused(
                f"{weights_file}: tensor {names[0]!r} is missing ({config_file} field {field!r} says it should be "
                "there)"
            )
        t = theirs[name].float()
        if ours == "output_projection.bias":
            t = t.reshape(-1)
        if tuple(t.shape) != tuple(want[ours]):
            raise ImportRefused(
                f"{weights_file}: tensor {name!r} has shape {tuple(theirs[name].shape)}, but {config_file} "
                f"field {fam.field_of(name)!r} makes it {tuple(want[ours])}"
            )
        out[ours] = t.contiguous()
    for stack, n in (("encoder", c.n_encoder_layers), ("decoder", c.n_decoder_layers)):
        if any(k.startswith(prefix.format(stack=stack, i=n)) for k in theirs):
            raise ImportRefused(
                f"{weights_file}: has {stack} layer {n}, but {config_file} field {counts[stack]!r} is {n}"
            )
    return out


def import_model(opts: ImportOptions) -> Path:
    os.environ["HF_HUB_OFFLINE"] = "1"  # read as it is; before transformers is imported anywhere below
    from export.publish import PublishRefused, destination

    try:
        destination(opts.repo, opts.name, opts.version)  # a name that is a path: refused before any work
    except PublishRefused as e:
        raise ImportRefused(str(e)) from None
    folder = Path(opts.source)
    if not folder.is_dir():
        raise ImportRefused(f"{folder}: not a folder; give the folder of a Hugging Face checkpoint")
    config_file = folder / "config.json"
    cfg = read_json(
        config_file, "not a Hugging Face checkpoint folder (config.json, weights and tokenizer files)"
    )
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED:
        raise ImportRefused(
            f"{config_file}: field 'model_type' is {model_type!r}; supported: {', '.join(SUPPORTED)}"
        )
    gen_file = folder / "generation_config.json"
    # generate() reads generation_config.json alone where there is one (config.json's forced_eos_token_id 0, which
    # every MarianConfig writes, does not apply then); a checkpoint older than that file keeps them in config.json.
    gen = (
        read_json(gen_file, "") if gen_file.is_file() else {k: cfg[k] for k in GENERATION_FIELDS if k in cfg}
    )
    tok_cfg = (
        read_json(folder / "tokenizer_config.json", "")
        if (folder / "tokenizer_config.json").is_file()
        else {}
    )
    weights = weights_file(folder)
    try:  # before the family builds anything by config.json's sizes (a vocabulary table, its layers)
        hf_fields.held_sizes(cfg, weight_shapes(weights), weights.name, *layer_layout(family(model_type)))
    except FieldError as e:
        raise ImportRefused(f"{config_file}: {e}") from None
    loaded = family(model_type).load(folder, cfg, tok_cfg)
    # before the weights are read: a refusal comes at once
    task = task_config(gen, loaded, gen_file if gen_file.is_file() else config_file)
    origin = {
        "model_type": model_type,
        "transformers_version": cfg.get("transformers_version"),
        "weights_file": weights.name,
        "weights_sha256": bundle.sha256_file(weights),
        "imported_with_transformers": _transformers_version(),
    }
    if skipped := not_applied(gen):  # config.json says so too, for whoever serves the bundle later
        origin["generation_not_applied"] = skipped
    with tempfile.TemporaryDirectory(prefix="s2s-import-") as tmp:
        ckpt = Path(tmp)
        _write_checkpoint(ckpt, loaded, task, weights, config_file, model_type, origin)
        return _export(opts, loaded, ckpt, origin, tok_cfg)


def _language(code) -> str | None:
    """tokenizer_config.json's source_lang / target_lang where it is a language code ("en"; not "ROMANCE")."""
    try:
        return bundle.check_language(code) if isinstance(code, str) else None
    except ValueError:
        return None


def _languages(opts: ImportOptions, loaded: Loaded, tok_cfg: dict) -> list[str | None]:
    """The bundle's source and target language: the flags', else tokenizer_config.json's (they decide the
    LibreTranslate pair it serves)."""
    langs = [_language(tok_cfg.get(k)) for k in ("source_lang", "target_lang")]
    m = loaded.languages
    if m is not None and langs[1] not in m.names:
        # a multilingual model's default target is one of its own languages, or none (each request names it)
        langs[1] = None
    for i, (flag, code) in enumerate(
        (("--source-lang", opts.source_language), ("--target-lang", opts.target_language))
    ):
        if code is not None and m is not None and code not in m.names:
            known = sorted(m.names)
            raise ImportRefused(
                f"{opts.source}: {flag} {code!r} is not one of the model's languages "
                f"({', '.join(known[:20])}{', ...' if len(known) > 20 else ''})"
            )
        langs[i] = code or langs[i]
    if m is None and not all(langs):
        log.info(
            "%s declares no language pair: the LibreTranslate API will not offer it (--source-lang and "
            "--target-lang name one)",
            opts.name,
        )
    return langs


def _transformers_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("transformers")
    except Exception:  # not installed: the import needs only safetensors, torch and tokenizers
        return None


def _write_checkpoint(
    ckpt: Path,
    loaded: Loaded,
    task: TaskConfig,
    weights: Path,
    config_file: Path,
    model_type: str,
    origin: dict,
) -> None:
    """The checkpoint folder `s2s export` reads. The weights are held once (the tensors read become the model's
    parameters) and none of them outlives this call: the export reads them back alone."""
    from training import checkpoint

    c = loaded.config
    state = map_weights(c, read_weights(weights), weights, config_file, model_type)
    model = checkpoint.model_holding(c, state)
    del state
    checkpoint.save(ckpt, model, task, loaded.source_tokenizer, metrics={}, train={"imported": origin})
    if loaded.target_tokenizer is not None:
        loaded.target_tokenizer.save(str(ckpt / checkpoint.TARGET_TOKENIZER))


def _export(opts: ImportOptions, loaded: Loaded, ckpt: Path, origin: dict, tok_cfg: dict) -> Path:
    from export.onnx_export import ExportOptions, export
    from export.publish import PublishRefused

    langs = _languages(opts, loaded, tok_cfg)  # LibreTranslate routes by them
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
                languages=loaded.languages,
            )
        )
    except PublishRefused as e:  # the version's number taken meanwhile
        raise ImportRefused(str(e)) from None
    except ValueError as e:  # validation: ONNX Runtime disagreed with PyTorch; nothing was published
        raise ImportRefused(f"{opts.source}: the exported graphs failed validation ({e})") from None
