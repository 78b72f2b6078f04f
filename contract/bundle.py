"""The model bundle: the contract between `s2s export` and the server.

A model repository is laid out like Triton's, one folder per model and version:

    models/<name>/<version>/config.json      this file's schema (BundleConfig)
                            tokenizer.json   Hugging Face tokenizer
                            encoder.onnx     src_ids, src_mask -> memory, cross K/V per layer
                            decoder.onnx     one decoding step with KV cache

``config.json`` describes everything a reader needs: dimensions, special ids, the task's
preprocessing, tensor names with dynamic axes, the opset, and the sha256 of every other file,
so a truncated or swapped file is caught at load time with the file named.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contract.config import ModelConfig, TaskConfig, read_json, write_json
from contract.names import GraphIO, decoder_io, encoder_io

FORMAT_VERSION = 1
CONFIG_FILE, TOKENIZER_FILE, ENCODER_FILE, DECODER_FILE = "config.json", "tokenizer.json", "encoder.onnx", "decoder.onnx"
PAYLOAD_FILES = (TOKENIZER_FILE, ENCODER_FILE, DECODER_FILE)


class BundleError(Exception):
    """A bundle that cannot be served; the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class BundleConfig:
    name: str
    version: int
    model: ModelConfig
    task: TaskConfig
    opset: int
    files: dict[str, str]  # file name -> sha256
    source_checkpoint_sha256: str
    quantization: str = "none"  # none | int8 (dynamic, onnxruntime.quantization)
    validation: dict[str, Any] = field(default_factory=dict)  # what the export checked, with figures
    format_version: int = FORMAT_VERSION

    @property
    def encoder_io(self) -> GraphIO:
        return encoder_io(self.model.n_decoder_layers)

    @property
    def decoder_io(self) -> GraphIO:
        return decoder_io(self.model.n_decoder_layers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version, "name": self.name, "version": self.version,
            "model": self.model.to_dict(), "task": self.task.to_dict(), "opset": self.opset,
            "special_ids": self.model.special.__dict__,  # repeated at top level for readers that look only here
            "encoder": self.encoder_io.to_dict(), "decoder": self.decoder_io.to_dict(),
            "files": self.files, "source_checkpoint_sha256": self.source_checkpoint_sha256,
            "quantization": self.quantization, "validation": self.validation,
        }

    def write(self, folder: Path) -> None:
        write_json(Path(folder) / CONFIG_FILE, self.to_dict())


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_bundle(folder: Path, verify_hashes: bool = True) -> BundleConfig:
    """Parse and check config.json and the files it lists. Raises BundleError naming the file."""
    folder = Path(folder)
    cfg_path = folder / CONFIG_FILE
    if not cfg_path.is_file():
        raise BundleError(f"{cfg_path}: missing; a bundle folder needs {CONFIG_FILE} (written by `s2s export`)")
    try:
        d = read_json(cfg_path)
        if d.get("format_version") != FORMAT_VERSION:
            raise BundleError(f"{cfg_path}: format_version {d.get('format_version')!r}, this server reads {FORMAT_VERSION}")
        cfg = BundleConfig(
            name=d["name"], version=int(d["version"]), model=ModelConfig.from_dict(d["model"]),
            task=TaskConfig.from_dict(d["task"]), opset=int(d["opset"]), files=dict(d["files"]),
            source_checkpoint_sha256=d["source_checkpoint_sha256"], quantization=d.get("quantization", "none"),
            validation=d.get("validation", {}),
        )
    except BundleError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise BundleError(f"{cfg_path}: not a valid bundle config ({type(e).__name__}: {e})") from e
    for name in PAYLOAD_FILES:
        path = folder / name
        if not path.is_file():
            raise BundleError(f"{path}: missing (listed in {CONFIG_FILE})")
        if name not in cfg.files:
            raise BundleError(f"{cfg_path}: no sha256 recorded for {name}")
        if verify_hashes and (got := sha256_file(path)) != cfg.files[name]:
            raise BundleError(f"{path}: sha256 {got[:12]}… does not match {cfg.files[name][:12]}… in {CONFIG_FILE} "
                              "(truncated, corrupted or replaced after export)")
    return cfg
