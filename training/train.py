"""The training loop (§5): Adam with the warm-up schedule, label smoothing, dropout, clipping.

Runs on CPU by default and CUDA when present; under ``torchrun`` it trains data-parallel
(gloo on CPU, NCCL on GPU): every rank sees its own share of the batches and gradients are
averaged, so adding processes or nodes adds throughput.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from contract.config import ModelConfig, TaskConfig, read_json, write_json
from contract.text import TextCodec
from training import checkpoint, tasks
from training.batching import batch_indices, collate, encode_pairs
from training.config import TrainConfig
from training.evaluate import evaluate
from training.masked_pairs import mask_pairs
from training.model import Transformer
from training.plots import learning_curves
from training.vocab import bpe_tokenizer, char_tokenizer

LOG_EVERY = 10  # steps between two lines of steps.jsonl


def rate(step: int, d_model: int, warmup: int, factor: float) -> float:
    """§5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def build_data(cfg: TrainConfig) -> tuple[tasks.Splits, TaskConfig]:
    if cfg.task == "addition":
        splits = tasks.addition(cfg.digits, cfg.n_train, cfg.n_valid, cfg.n_test, cfg.seed)
        task = TaskConfig("addition", cfg.reverse_source, "reject", max_new_tokens=cfg.digits + 3)
    elif cfg.task in ("copy", "reverse"):
        splits = tasks.symbols(
            cfg.task, cfg.min_len, cfg.max_len_sym, cfg.n_train, cfg.n_valid, cfg.n_test, cfg.seed
        )
        task = TaskConfig(cfg.task, cfg.reverse_source, "reject", max_new_tokens=cfg.max_len_sym + 2)
    elif cfg.task == "translation":
        if not cfg.data:
            raise SystemExit("--task translation needs --data FILE.tsv (source<TAB>target per line)")
        splits = tasks.translation(*(Path(f) for f in cfg.data.split(",") if f))
        if cfg.mask_spans:
            # The split stays that of the raw source; the test split stays raw, as users send it.
            train, n_train = mask_pairs(splits.train)
            valid, n_valid = mask_pairs(splits.valid)
            splits = tasks.Splits(train, valid, splits.test)
            if os.environ.get("RANK", "0") == "0":
                print(f"--mask-spans: {n_train} training and {n_valid} validation pairs masked", flush=True)
        task = TaskConfig("translation", cfg.reverse_source, "unk", max_new_tokens=cfg.max_len - 1)
    else:
        raise SystemExit(f"unknown task {cfg.task!r}; choose one of {', '.join(tasks.TASKS)}")
    return splits, task


def build_tokenizer(cfg: TrainConfig, splits: tasks.Splits):
    if cfg.task == "translation":
        return bpe_tokenizer((t for pair in splits.train for t in pair), cfg.vocab_size)
    return char_tokenizer("".join(s + t for s, t in splits.train + splits.valid + splits.test))


def bf16_is_fast(device: str) -> tuple[bool, str]:
    """Whether bf16 autocast pays here, and why. Detected, not assumed: the machine kind changes.

    On a CPU bf16 matmuls are fast only with AMX or AVX-512 BF16; without them oneDNN emulates
    bf16 and training gets slower than float32.
    """
    if device.startswith("cuda"):
        ok = torch.cuda.is_bf16_supported()
        return ok, "CUDA device supports bf16" if ok else "CUDA device without bf16"
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    found = sorted(flags & {"amx_bf16", "avx512_bf16"})
    return bool(found), f"CPU flags {', '.join(found)}" if found else "CPU has neither AMX nor AVX-512 BF16"


def resolve_precision(cfg_precision: str, device: str) -> tuple[torch.dtype | None, str]:
    """The autocast dtype (None = plain float32) and the reason, for the log."""
    if cfg_precision == "fp32":
        return None, "float32 (--precision fp32)"
    if cfg_precision == "bf16":
        return torch.bfloat16, "bf16 autocast (--precision bf16)"
    if cfg_precision != "auto":
        raise SystemExit(f"--precision must be auto, fp32 or bf16, not {cfg_precision!r}")
    fast, why = bf16_is_fast(device)
    return (torch.bfloat16, f"bf16 autocast ({why})") if fast else (None, f"float32 ({why})")


def keep_copy(model: torch.nn.Module, folder: Path, step: int, keep: int) -> None:
    """Write the weights as averaging/step-N.safetensors and drop all but the newest ``keep``."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file(checkpoint.weights(model), str(folder / f"step-{step}.safetensors"))
    for old in sorted(folder.glob("step-*.safetensors"), key=lambda f: int(f.stem.split("-")[1]))[:-keep]:
        old.unlink()


def average_weights(paths: list[Path]) -> dict[str, torch.Tensor]:
    """§6.1: "a single model obtained by averaging the last 5 checkpoints". Arithmetic mean per tensor."""
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        for k, v in load_file(str(path)).items():
            total[k] = total[k] + v.double() if k in total else v.double()
    return {k: (v / len(paths)).float() for k, v in total.items()}


class DistEnv:
    """torchrun's environment (read here, at the entry point, never at import)."""

    def __init__(self, device: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if device == "auto":
            device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
        self.device = device
        if self.world > 1:
            dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()


def replicas_in_sync(model: torch.nn.Module, env: DistEnv) -> bool:
    """All ranks hold bit-identical weights (DDP's promise; checked, not assumed)."""
    flat = torch.cat([p.detach().flatten().double() for p in model.parameters()]).cpu()
    digest = torch.tensor(
        [flat.sum().item(), (flat * torch.arange(flat.numel(), dtype=torch.float64)).sum().item()]
    )
    if env.world == 1:
        return True
    gathered = [torch.zeros_like(digest) for _ in range(env.world)]
    dist.all_gather(gathered, digest)
    return all(torch.equal(g, gathered[0]) for g in gathered)


def check(cfg: TrainConfig) -> None:
    """What can be refused before any data is read: flag conflicts, and an --init-from folder that is not a checkpoint."""
    cfg.check()
    if cfg.init_from:
        need = (checkpoint.WEIGHTS, checkpoint.CONFIG, checkpoint.TOKENIZER, checkpoint.METRICS)
        missing = [f for f in need if not (Path(cfg.init_from) / f).is_file()]
        if missing:
            raise ValueError(
                f"--init-from {cfg.init_from}: {', '.join(missing)} missing; give a checkpoint folder "
                "written by `s2s train` (e.g. runs/NAME/last or checkpoints/NAME)"
            )


def train(cfg: TrainConfig) -> dict:
    check(cfg)
    env = DistEnv(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    splits, task = build_data(cfg)
    start: dict = {}  # --init-from: where the checkpoint's run stopped (step, epoch, minutes)
    if cfg.resume or cfg.init_from:
        ckpt = checkpoint.load(out / "last" if cfg.resume else Path(cfg.init_from))
        tokenizer, model = ckpt.codec.tokenizer, ckpt.model.train()
        if cfg.init_from:
            start = read_json(Path(cfg.init_from) / checkpoint.METRICS)
    else:
        tokenizer = build_tokenizer(cfg, splits)
        vocab = tokenizer.get_vocab_size(with_added_tokens=True)
        config = ModelConfig(
            src_vocab_size=vocab,
            tgt_vocab_size=vocab,
            d_model=cfg.d_model,
            n_heads=cfg.n_heads,
            n_encoder_layers=cfg.n_layers,
            n_decoder_layers=cfg.n_layers,
            d_ff=cfg.d_ff,
            norm=cfg.norm,
            final_norm=cfg.norm == "pre",
            dropout=cfg.dropout,
            max_len=cfg.max_len,
            share_embeddings=cfg.task == "translation",
            tie_output=True,
        )
        model = Transformer(config)
    model.to(env.device)
    config = model.config
    codec = TextCodec(tokenizer, task, config.special)
    train_ex = encode_pairs(splits.train, codec, config.max_len)
    dropped = len(splits.train) - len(train_ex)

    if env.main:
        splits.write(out / "data")
        print(
            f"task={task.name} train={len(train_ex)} (dropped {dropped} over max_len={config.max_len}) "
            f"valid={len(splits.valid)} test={len(splits.test)} vocab={codec.vocab_size} "
            f"params={sum(p.numel() for p in model.parameters()):,} device={env.device} world={env.world}",
            flush=True,
        )

    ddp = torch.nn.parallel.DistributedDataParallel(model) if env.world > 1 else model
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)  # §5.3
    step0 = int(start.get("step", 0))
    start_epoch, best = int(start.get("epoch", 0)) + 1, -math.inf
    if step0:
        # Fresh Adam moments make the first updates ~lr * sign(g) in every coordinate: ramp the rate
        # back up over init_warmup steps, then follow the schedule from the checkpoint's step on.
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: rate(s + 1, config.d_model, cfg.warmup, cfg.lr_factor)
        * (min(1.0, (s + 1 - step0) / max(cfg.init_warmup, 1)) if step0 else 1.0),
        last_epoch=step0 - 1,
    )
    log_path = out / "metrics.jsonl"
    if cfg.resume:
        state = torch.load(out / "last" / checkpoint.STATE, weights_only=False)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        start_epoch, best = state["epoch"] + 1, state["best"]
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["py_rng"])
    elif env.main:
        for stale in (log_path, out / "steps.jsonl"):
            stale.unlink(missing_ok=True)
        if (
            start
        ):  # the curve goes on from the checkpoint's own row (its earlier rows left with its run folder)
            out.mkdir(parents=True, exist_ok=True)
            log_path.write_text(json.dumps({**start, "init_from": str(cfg.init_from)}) + "\n")

    train_probe = splits.train[: min(len(splits.train), 500)]
    valid = splits.valid[: cfg.eval_max]
    translation = task.name == "translation"
    autocast_dtype, precision_why = resolve_precision(cfg.precision, env.device)
    if env.main:
        print(
            f"precision: {precision_why}; batches: "
            f"{f'{cfg.batch_tokens} padded tokens' if cfg.batch_tokens else f'{cfg.batch_size} sentences'} per rank",
            flush=True,
        )
    kept = out / "averaging"  # weight copies for §6.1 averaging; in the run folder, never published
    t0 = time.time()
    elapsed_before = 0.0
    if (cfg.resume or start) and log_path.exists():
        rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
        elapsed_before = rows[-1]["time_s"] if rows else 0.0
    budget_s = cfg.time_budget_min * 60 if cfg.time_budget_min > 0 else math.inf
    out_of_time = False
    row: dict = {}
    for epoch in range(start_epoch, cfg.epochs + 1):
        ddp.train()
        batches = batch_indices(
            train_ex, cfg.batch_size, cfg.seed + epoch, env.rank, env.world, cfg.batch_tokens
        )
        bar = tqdm(
            batches, desc=f"epoch {epoch}/{cfg.epochs}", disable=not env.main, leave=False, unit="batch"
        )
        loss_sum = tok_sum = 0.0
        epoch_t0 = time.time()
        for i, idx in enumerate(bar):
            batch = collate([train_ex[j] for j in idx], config).to(env.device)
            with torch.autocast(
                env.device.split(":")[0],
                dtype=autocast_dtype or torch.float32,
                enabled=autocast_dtype is not None,
            ):
                logits = ddp(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V)
            loss = F.cross_entropy(
                logits.float().flatten(0, 1),
                batch.tgt_out.flatten(),
                ignore_index=config.special.pad,
                label_smoothing=cfg.label_smoothing,
            )  # §5.4 label smoothing
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            sched.step()
            loss_sum += loss.item() * batch.n_tokens
            tok_sum += batch.n_tokens
            tok_s = tok_sum * env.world / max(time.time() - epoch_t0, 1e-9)
            bar.set_postfix(
                loss=f"{loss.item():.3f}", lr=f"{sched.get_last_lr()[0]:.2e}", tgt_tok_s=f"{tok_s:.0f}"
            )
            step = sched.last_epoch
            if env.main and step % LOG_EVERY == 0:  # the loss curve between evaluations
                with open(out / "steps.jsonl", "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "step": step,
                                "time_s": round(elapsed_before + time.time() - t0, 1),
                                "train_loss": round(loss.item(), 4),
                                "lr": sched.get_last_lr()[0],
                            }
                        )
                        + "\n"
                    )
            if cfg.average_every and step % cfg.average_every == 0 and env.main:
                keep_copy(model, kept, step, cfg.average_last)
            if cfg.max_steps and step >= cfg.max_steps:  # every rank counts the same steps
                out_of_time = True
                break
            if i % 20 == 19 and budget_s < math.inf:  # every rank must stop at the same step
                over = torch.tensor([int(elapsed_before + time.time() - t0 >= budget_s)])
                if env.world > 1:
                    dist.broadcast(over, 0)
                if over.item():
                    out_of_time = True
                    break

        if env.main:
            model.eval()
            train_s = time.time() - epoch_t0
            tr = evaluate(
                model,
                codec,
                train_probe,
                device=env.device,
                translation=translation,
                bleu_tokenize=cfg.bleu_tokenize,
            )
            va = evaluate(
                model,
                codec,
                valid,
                device=env.device,
                translation=translation,
                bleu_tokenize=cfg.bleu_tokenize,
            )
            row = {
                "epoch": epoch,
                "step": sched.last_epoch,
                "time_s": round(elapsed_before + time.time() - t0, 1),
                "train_smoothed_loss": loss_sum / max(tok_sum, 1),
                # target tokens (no padding) per second of optimisation, all ranks together
                "train_tgt_tokens_per_s": round(tok_sum * env.world / max(train_s, 1e-9), 1),
                **{f"train_{k}": v for k, v in tr.items() if k != "n"},
                **{f"valid_{k}": v for k, v in va.items() if k != "n"},
            }
            if out_of_time:
                row["partial_epoch"] = True
            with open(log_path, "a") as f:
                f.write(json.dumps(row) + "\n")
            score = va["chrf"] if translation else va["seq_acc"]
            summary = " ".join(f"{k}={v:.4f}" for k, v in row.items() if k.startswith("valid_"))
            print(
                f"epoch {epoch} ({row['time_s']}s, {row['train_tgt_tokens_per_s']:.0f} tgt tok/s) {summary}",
                flush=True,
            )
            train_info = {"config": dataclasses.asdict(cfg), "epoch": epoch, "world": env.world}
            checkpoint.save(out / "last", model, task, tokenizer, row, train_info)
            torch.save(
                {
                    "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(),
                    "epoch": epoch,
                    "best": max(best, score),
                    "torch_rng": torch.get_rng_state(),
                    "py_rng": random.getstate(),
                },
                out / "last" / checkpoint.STATE,
            )
            if score > best:
                best = score
                checkpoint.save(out / "best", model, task, tokenizer, row, train_info)
            learning_curves(log_path, out / "learning_curves.png", title=f"{task.name} ({out.name})")
        stop = torch.tensor(
            [
                int(
                    out_of_time
                    or (env.main and cfg.stop_at is not None and row.get("valid_seq_acc", 0) >= cfg.stop_at)
                )
            ]
        )
        if env.world > 1:
            dist.broadcast(stop, 0)
        env.barrier()
        if stop.item():
            break

    if env.main and cfg.average_every:
        copies = sorted(kept.glob("step-*.safetensors"), key=lambda f: int(f.stem.split("-")[1]))[
            -cfg.average_last :
        ]
        if len(copies) >= 2:
            averaged = Transformer(config)
            averaged.load_state_dict(average_weights(copies), strict=False)
            averaged.eval()
            va = evaluate(
                averaged, codec, valid, device="cpu", translation=translation, bleu_tokenize=cfg.bleu_tokenize
            )
            steps = [int(f.stem.split("-")[1]) for f in copies]
            arow = {
                "epoch": row.get("epoch"),
                "step": steps[-1],
                "time_s": row.get("time_s"),
                "averaged_steps": steps,
                **{f"valid_{k}": v for k, v in va.items() if k != "n"},
            }
            checkpoint.save(
                out / "averaged",
                averaged,
                task,
                tokenizer,
                arow,
                {"config": dataclasses.asdict(cfg), "averaged_steps": steps, "world": env.world},
            )
            print(
                "averaged "
                + ",".join(map(str, steps))
                + ": "
                + " ".join(f"{k}={v:.4f}" for k, v in arow.items() if k.startswith("valid_")),
                flush=True,
            )

    in_sync = replicas_in_sync(model, env)
    if env.main:
        if env.world > 1:
            print(f"replicas in sync: {in_sync}", flush=True)
        print(
            f"done: best validation {'chrF' if translation else 'exact match'} {best:.4f}; checkpoints in {out}",
            flush=True,
        )
        write_json(
            out / "summary.json",
            {
                "epochs": row.get("epoch"),
                "train_time_s": round(time.time() - t0, 1),
                "best_valid": best,
                "world": env.world,
                "replicas_in_sync": in_sync,
                "last": row,
            },
        )
    if env.world > 1:
        # Every rank leaves together: a rank that tore down its gloo group while rank 0 was still writing
        # files aborted now and then ("terminate called without an active exception").
        env.barrier()
        dist.destroy_process_group()
    return row
