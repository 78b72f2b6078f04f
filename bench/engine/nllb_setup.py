"""The NLLB-600M-shaped checkpoint of bench/engine/nllb_ct2.py, made here as a user's download would look, and the
artifacts made from it (bundles, CTranslate2's conversion), each made once, timed, and cached under .cache/bench/nllb/.

The checkpoint: ``M2M100ForConditionalGeneration`` with NLLB-200-distilled-600M's ``M2M100Config`` (d 1024, 12+12
layers, 16 heads, d_ff 4096, ReLU, embeddings scaled, pre-norm with a final norm, one table for both embeddings and
the output projection) at transformers' random initialisation, saved with ``save_pretrained`` (safetensors), and an
NLLB tokenizer.json: a BPE with Metaspace trained here on generated lines, its vocabulary filled with pieces no text
produces up to NLLB's size, wrapped in transformers' ``NllbTokenizer`` (which appends the 202 FLORES-200 codes,
eng_Latn ... zul_Latn, and <mask> as added tokens, as NLLB's own tokenizer.json has them). Nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import CACHE as BENCH_CACHE
from bench import ROOT

os.environ["HF_HUB_OFFLINE"] = "1"
CACHE = BENCH_CACHE / "nllb"
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")  # fairseq's ids 0-3, as NLLB has them
# NllbTokenizer appends FLORES-200's 202 language codes and <mask>; NLLB's tokenizer holds 256,204 tokens and its
# config.json says 256,206 (two ids no token has).
ADDED = 202 + 1
NLLB_TOKENS, NLLB_VOCAB = 256_204, 256_206


@dataclass(frozen=True)
class Shape:
    d_model: int = 1024
    layers: int = 12
    heads: int = 16
    d_ff: int = 4096
    vocab: int = NLLB_VOCAB  # config.json's vocab_size; the tokenizer holds vocab - 2 tokens

    @property
    def tag(self) -> str:
        return f"d{self.d_model}-l{self.layers}-v{self.vocab}"


QUICK = Shape(64, 2, 4, 128, 4000)


def lines(n: int, seed: int) -> list[str]:
    sys.path.insert(0, str(ROOT / "tests"))
    import marian_models as mm

    return mm.lines(n, seed)


def make_tokenizer(folder: Path, tokens: int):
    """NLLB's tokenizer.json layout at ``tokens`` tokens in all (the pieces, then the codes and <mask>)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import NllbTokenizer

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    bpe.train_from_iterator(
        lines(3000, 0),
        trainers.BpeTrainer(vocab_size=400, special_tokens=list(SPECIALS), show_progress=False),
    )
    model = json.loads(bpe.to_str())["model"]
    vocab = dict(model["vocab"])
    for i in range(len(vocab), tokens - ADDED):  # filler pieces up to NLLB's size: no merge makes them
        vocab[f"▁w{i}"] = i
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tok = NllbTokenizer(vocab=vocab, merges=merges, src_lang="eng_Latn", tgt_lang="fra_Latn")
    assert len(tok) == tokens, (len(tok), tokens)
    tok.save_pretrained(folder)
    return tok


def make_checkpoint(folder: Path, shape: Shape) -> None:
    """A random NLLB-600M-shaped checkpoint, saved as transformers saves one."""
    import torch
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration

    folder.mkdir(parents=True, exist_ok=True)
    make_tokenizer(folder, shape.vocab - (NLLB_VOCAB - NLLB_TOKENS))
    torch.manual_seed(0)
    cfg = M2M100Config(  # NLLB-200-distilled-600M's config.json, at `shape`
        vocab_size=shape.vocab,
        d_model=shape.d_model,
        encoder_layers=shape.layers,
        decoder_layers=shape.layers,
        encoder_attention_heads=shape.heads,
        decoder_attention_heads=shape.heads,
        encoder_ffn_dim=shape.d_ff,
        decoder_ffn_dim=shape.d_ff,
        max_position_embeddings=1024,
        activation_function="relu",
        scale_embedding=True,
        dropout=0.1,
        attention_dropout=0.1,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        tie_word_embeddings=True,
    )
    model = M2M100ForConditionalGeneration(cfg).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=0, decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, max_length=200
    )
    model.save_pretrained(folder)  # safetensors


@dataclass
class Measured:
    """One command's wall time and peak RSS (its own and its waited-for children's largest)."""

    wall_s: float
    peak_rss_mb: float
    out: str

    def figures(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "out"}


def measured(cmd: list[str], env: dict | None = None) -> Measured:
    """``cmd`` run to completion; its stdout, wall time and peak RSS (ru_maxrss from wait4)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, text=True
    )
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}")
    return Measured(wall, usage.ru_maxrss / 1024, out)


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def folder_mb(folder: Path) -> dict[str, float]:
    """Each file's size in MB (10^6 bytes), and the total."""
    sizes = {p.name: p.stat().st_size / 1e6 for p in sorted(Path(folder).iterdir()) if p.is_file()}
    return {**sizes, "total": sum(sizes.values())}


class Artifacts:
    """The checkpoint and what is made from it, for one shape; each step is done once and its cost kept in
    costs.json beside the artifacts (a later run reads it instead of measuring again)."""

    def __init__(self, shape: Shape, root: Path = CACHE):
        self.shape, self.root = shape, root / shape.tag
        self.ckpt, self.repo, self.ct2 = self.root / "hf", self.root / "models", self.root / "ct2"
        self.costs_file = self.root / "costs.json"

    def costs(self) -> dict:
        return json.loads(self.costs_file.read_text()) if self.costs_file.is_file() else {}

    def record(self, key: str, value) -> None:
        costs = self.costs()
        costs[key] = value
        self.root.mkdir(parents=True, exist_ok=True)
        self.costs_file.write_text(json.dumps(costs, indent=1) + "\n")

    def checkpoint(self) -> Path:
        if not (self.ckpt / "model.safetensors").is_file():
            t0 = time.perf_counter()
            make_checkpoint(self.ckpt, self.shape)
            self.record("checkpoint", {"wall_s": time.perf_counter() - t0, "files_mb": folder_mb(self.ckpt)})
        return self.ckpt

    def bundle(self, quantize: str) -> Path:
        """``s2s import`` (its CLI, as a user runs it), float32 (``none``) or ``--quantize int8``."""
        name = "nllb" if quantize == "none" else f"nllb-{quantize}"
        out = self.repo / name / "1"
        if not (out / "config.json").is_file():
            ckpt = self.checkpoint()
            cmd = ["-m", "s2s.cli", "import", str(ckpt), "--repo", str(self.repo), "--name", name]
            m = measured(python(*cmd, "--version", "1", "--quantize", quantize))
            self.record(f"import-{quantize}", {**m.figures(), "files_mb": folder_mb(out)})
        return out

    def ct2_model(self) -> Path:
        """CTranslate2's own converter on the checkpoint (float32; int8 is its compute_type at load)."""
        if not (self.ct2 / "model.bin").is_file():
            ckpt = self.checkpoint()
            converter = Path(sys.executable).with_name("ct2-transformers-converter")
            m = measured([str(converter), "--model", str(ckpt), "--output_dir", str(self.ct2), "--force"])
            self.record("ct2-convert", {**m.figures(), "files_mb": folder_mb(self.ct2)})
        return self.ct2
