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


def load(folder: Path, device: str = "cpu") -> Checkpoint:
    folder = Path(folder)
    for name in (WEIGHTS, CONFIG, TOKENIZER):
        if not (folder / name).is_file():
            raise FileNotFoundError(
                f"{folder / name} is missing: not a checkpoint folder written by `s2s train`"
            )
    cfg = read_json(folder / CONFIG)
    config, task = ModelConfig.from_dict(cfg["model"]), TaskConfig.from_dict(cfg["task"])
    model = Transformer(config)
    state = load_file(str(folder / WEIGHTS), device=device)
    # Checkpoints written before the output projection had its name call it "generator" (the annotated
    # Transformer's word, which here also named the engine's step loop): the same tensors.
    state = {
        ("output_projection." + k[len("generator.") :] if k.startswith("generator.") else k): v
        for k, v in state.items()
    }
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"output_projection.weight", "tgt_embed.weight"}
    if unexpected or set(missing) - tied:
        raise ValueError(
            f"{folder / WEIGHTS} does not match config.json: missing {missing}, unexpected {unexpected}"
        )
    codec = TextCodec.from_file(folder / TOKENIZER, task, config.special, folder / TARGET_TOKENIZER)
    return Checkpoint(model.to(device).eval(), task, codec, folder, cfg.get("train", {}))


def weights_sha256(folder: Path) -> str:
    return hashlib.sha256((Path(folder) / WEIGHTS).read_bytes()).hexdigest()
