"""Self-describing checkpoints: a folder with weights (safetensors), config, tokenizer and metrics.

    model.safetensors   the weights
    config.json         {"model": ModelConfig, "task": TaskConfig, "train": TrainConfig}
    tokenizer.json      the Hugging Face tokenizer the model was trained with (its source side)
    target_tokenizer.json  the target side's, where it differs (imported models)
    metrics.json        the evaluation of this checkpoint
    trainer_state.pt    optimizer, schedule, epoch and RNG states, for --resume only

Loading rebuilds the model from config.json alone; nothing is guessed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer

from contract.config import ModelConfig, TaskConfig, read_json, write_json
from contract.text import TextCodec
from training.model import Transformer

WEIGHTS, CONFIG, TOKENIZER, METRICS, STATE = (
    "model.safetensors",
    "config.json",
    "tokenizer.json",
    "metrics.json",
    "trainer_state.pt",
)
TARGET_TOKENIZER = "target_tokenizer.json"


@dataclass
class Checkpoint:
    model: Transformer
    task: TaskConfig
    codec: TextCodec
    path: Path
    extra: dict[str, Any]

    @property
    def config(self) -> ModelConfig:
        return self.model.config


def weights(model: Transformer) -> dict:
    """The tensors to write. Tied weights share storage; safetensors stores each tensor once, so drop the alias."""
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    if model.config.tie_output:
        state.pop("output_projection.weight", None)
    if model.config.share_embeddings:
        state.pop("tgt_embed.weight", None)
    return state


def save(
    folder: Path, model: Transformer, task: TaskConfig, tokenizer: Tokenizer, metrics: dict, train: dict
) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    save_file(weights(model), str(folder / WEIGHTS))
    write_json(folder / CONFIG, {"model": model.config.to_dict(), "task": task.to_dict(), "train": train})
    tokenizer.save(str(folder / TOKENIZER))
    write_json(folder / METRICS, metrics)


def model_holding(config: ModelConfig, state: dict) -> Transformer:
    """The model whose parameters are ``state``'s tensors themselves, not copies of them: built on the meta device
    (no random initialisation to throw away) and filled with ``load_state_dict(assign=True)``, so that the weights
    exist once in memory while a model is loaded (an imported NLLB-600M's are 2.46 GB). Tied tables are tied again
    and the positional tables (buffers, not weights) computed. ValueError naming the tensors that do not fit."""
    import torch

    from training.positions import PositionalEncoding, RelativePositionBias

    with torch.device("meta"):
        model = Transformer(config)
    device = next((v.device for v in state.values()), torch.device("cpu"))
    # float32 as the model is built (load_state_dict without assign casts; with it, a tensor keeps its dtype)
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=False, assign=True)
    if config.tie_output:  # assign replaced the table's Parameter; the projection still held the meta one
        model.output_projection.weight = model.tgt_embed.weight
    for module in model.modules():
        if isinstance(module, PositionalEncoding) and not hasattr(module, "table"):
            module.pe = PositionalEncoding(
                config.d_model, config.max_len, config.positions, config.position_offset
            ).pe.to(device)
        if isinstance(module, RelativePositionBias):
            module.buckets = module.bucket_table().to(device)
    unfilled = [n for n, p in model.named_parameters() if p.is_meta]
    if unexpected or unfilled:
        raise ValueError(f"missing {unfilled or missing}, unexpected {unexpected}")
    return model


def load(folder: Path, device: str = "cpu") -> Checkpoint:
    folder = Path(folder)
    for name in (WEIGHTS, CONFIG, TOKENIZER):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder / name} is missing: not a checkpoint folder written by `s2s train`"
            )
    cfg = read_json(folder / CONFIG)
    config, task = ModelConfig.from_dict(cfg["model"]), TaskConfig.from_dict(cfg["task"])
    state = load_file(str(folder / WEIGHTS), device=device)
    # Checkpoints written before the output projection had its name call it "generator" (the annotated
    # Transformer's word, which here also named the engine's step loop): the same tensors.
    state = {
        ("output_projection." + k[len("generator.") :] if k.startswith("generator.") else k): v
        for k, v in state.items()
    }
    try:
        model = model_holding(config, state)
    except ValueError as e:
        raise ValueError(f"{folder / WEIGHTS} does not match config.json: {e}") from None
    del state
    codec = TextCodec.from_file(folder / TOKENIZER, task, config.special, folder / TARGET_TOKENIZER)
    return Checkpoint(model.to(device).eval(), task, codec, folder, cfg.get("train", {}))


def weights_sha256(folder: Path) -> str:
    """Read in chunks: a 2.5 GB checkpoint is not held in memory a second time to be hashed."""
    h = hashlib.sha256()
    with open(Path(folder) / WEIGHTS, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
