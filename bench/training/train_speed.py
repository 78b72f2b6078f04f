"""Training throughput, target tokens/s, of each change to the training loop, measured one by one in one run.

    python -m bench.training.train_speed            # ~6 min on 2 idle cores; writes docs/experiments.md#train-speed
    python -m bench.training.train_speed --quick    # fewer steps, prints only

The model is the default en->ja one (d_model 256, 2+2 layers, d_ff 1024, joint BPE 8,000) on the
real corpus (the first 30,000 training pairs, shuffled with a fixed seed). Each variant trains
``--steps`` optimizer steps after 3 warm-up steps; tokens are target tokens without padding.
Variants run in turn, ABBA-style over ``--passes`` passes, and the median pass is reported.

* **before**: the loop as it was: written-out attention, batches of 96 sentences, one process with
  2 intra-op threads;
* **fused attention**: ``F.scaled_dot_product_attention`` in training mode (``training/model.py``);
* **token batches**: batches of at most 2,500 padded tokens (§5.1) instead of 96 sentences;
* **2 ranks x 1 thread**: two data-parallel processes (gloo), one thread each, as
  ``scripts/train_defaults.sh`` runs ``torchrun --nproc_per_node 2``;
* **bf16 autocast**: measured everywhere, kept (``--precision auto``) only where the CPU has AMX or
  AVX-512 BF16; without them oneDNN emulates bf16;
* **torch.compile**: inductor, ``dynamic=True`` (batch shapes vary); its compile time is excluded.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

from bench import ROOT
from bench.common.markdown import write_section

DATA = (ROOT / "data/en-ja/ui-strings.tsv", ROOT / "data/en-ja/ui-strings-copyleft.tsv")


def setup(n_pairs: int):
    from contract.config import ModelConfig, TaskConfig
    from contract.text import TextCodec
    from training import tasks
    from training.batching import encode_pairs
    from training.vocab import bpe_tokenizer

    train = tasks.translation(*DATA).train
    random.Random(0).shuffle(train)
    train = train[:n_pairs]
    tok = bpe_tokenizer((t for p in train for t in p), 8000)
    cfg = ModelConfig(
        src_vocab_size=tok.get_vocab_size(),
        tgt_vocab_size=tok.get_vocab_size(),
        d_model=256,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=1024,
        dropout=0.1,
        max_len=64,
        share_embeddings=True,
        tie_output=True,
    )
    codec = TextCodec(tok, TaskConfig("translation", False, "unk", max_new_tokens=63), cfg.special)
    return cfg, encode_pairs(train, codec, cfg.max_len)


def written_out_attend(self, x, k, v, bias):
    """The attention of the loop before: scores, mask, softmax, dropout, weighted sum, as separate ops."""
    q = self.split_heads(self.w_q(x))
    scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
    attn = self.dropout((scores + bias.to(scores.dtype)).softmax(dim=-1))
    return self.w_o((attn @ v).transpose(1, 2).flatten(2))


def run_variant(cfg, examples, variant: dict, steps: int, rank: int = 0, world: int = 1) -> float:
    """Train ``steps`` steps; returns target tokens/s of all ranks together (rank 0's clock)."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from training import model as model_mod
    from training.batching import batch_indices, collate

    torch.set_num_threads(variant.get("threads", 2))
    fused = model_mod.MultiHeadAttention.attend
    if not variant.get("fused", True):
        model_mod.MultiHeadAttention.attend = written_out_attend
    try:
        torch.manual_seed(0)
        model = model_mod.Transformer(cfg).train()
        net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
        if variant.get("compile"):
            net = torch.compile(net, dynamic=True)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
        batches = batch_indices(
            examples, 96, seed=1, rank=rank, world=world, max_tokens=variant.get("tokens", 0)
        )
        dtype = torch.bfloat16 if variant.get("bf16") else None
        warm, tokens, t0 = 3, 0, 0.0
        for i, idx in enumerate(batches[: warm + steps]):
            if i == warm:
                t0, tokens = time.perf_counter(), 0
            b = collate([examples[j] for j in idx], cfg)
            with torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None):
                logits = net(b.src, b.src_mask, b.tgt_in)
            loss = F.cross_entropy(
                logits.float().flatten(0, 1),
                b.tgt_out.flatten(),
                ignore_index=cfg.special.pad,
                label_smoothing=0.1,
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            tokens += b.n_tokens
        elapsed = time.perf_counter() - t0
        if world > 1:
            total = torch.tensor([float(tokens)])
            dist.all_reduce(total)
            tokens = int(total.item())
        return tokens / elapsed
    finally:
        model_mod.MultiHeadAttention.attend = fused


def _ddp_worker(rank: int, world: int, cfg, examples, variant: dict, steps: int, port: int, out) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        rate = run_variant(cfg, examples, variant, steps, rank, world)
        if rank == 0:
            out.put(rate)
    finally:
        dist.destroy_process_group()


def run_ddp(cfg, examples, variant: dict, steps: int) -> float:
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    mp.start_processes(
        _ddp_worker, args=(2, cfg, examples, variant, steps, port, out), nprocs=2, start_method="spawn"
    )
    return out.get(timeout=5)


VARIANTS = [
    ("before: written-out attention, 96-sentence batches, 1 process x 2 threads", dict(fused=False)),
    ("+ fused attention (scaled_dot_product_attention)", dict()),
    ("+ token batches (2,500 padded tokens)", dict(tokens=2500)),
    (
        "+ 2 ranks x 1 thread (data parallel, gloo): the default recipe",
        dict(tokens=2500, threads=1, ddp=True),
    ),
    ("default recipe + bf16 autocast", dict(tokens=2500, threads=1, ddp=True, bf16=True)),
    ("default recipe + torch.compile", dict(tokens=2500, threads=1, ddp=True, compile=True)),
]


def main() -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.training.train_speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--steps", type=int, default=12, help="timed steps per variant and pass")
    ap.add_argument("--passes", type=int, default=3, help="passes over all variants (median reported)")
    ap.add_argument("--pairs", type=int, default=30000, help="training pairs loaded (BPE is learned on them)")
    ap.add_argument(
        "--quick", action="store_true", help="4 steps, 1 pass, no compile; prints, writes nothing"
    )
    args = ap.parse_args()
    if args.quick:
        args.steps, args.passes = 4, 1
    from training.train import bf16_is_fast

    cfg, examples = setup(args.pairs)
    variants = [v for v in VARIANTS if not (args.quick and v[1].get("compile"))]
    rates: dict[str, list[float]] = {name: [] for name, _ in variants}
    for p in range(args.passes):
        order = variants if p % 2 == 0 else variants[::-1]  # ABBA: drift of the machine hits all alike
        for name, v in order:
            rate = (
                run_ddp(cfg, examples, v, args.steps)
                if v.get("ddp")
                else run_variant(cfg, examples, v, args.steps)
            )
            rates[name].append(rate)
            print(f"pass {p + 1}: {name}: {rate:.0f} tgt tok/s", flush=True)
    base = statistics.median(rates[variants[0][0]])
    fast, why = bf16_is_fast("cpu")
    rows = ["| variant | target tokens/s (median) | vs before |", "|---|---:|---:|"]
    for name, _ in variants:
        med = statistics.median(rates[name])
        rows.append(f"| {name} | {med:.0f} | {med / base:.2f}x |")
    import platform

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    table = (
        f"`python -m bench.training.train_speed`: {args.steps} steps per variant, median of {args.passes} ABBA passes, "
        f"{os.cpu_count()} cores ({cpu}); bf16 autocast by `--precision auto` here: {'yes' if fast else 'no'} ({why}).\n\n"
        + "\n".join(rows)
    )
    print(table)
    if not args.quick:
        write_section(ROOT / "docs" / "experiments.md", "train-speed", table, title="# Experiments")
    return 0


if __name__ == "__main__":
    sys.exit(main())
