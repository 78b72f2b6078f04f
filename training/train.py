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
from tqdm import tqdm

from contract.config import ModelConfig, TaskConfig, read_json, write_json
from contract.text import TextCodec
from training import checkpoint, tasks
from training.averaging import keep_copy, save_averaged
from training.batching import batch_indices, collate, encode_pairs
from training.config import TrainConfig
from training.distributed import DistEnv, replicas_in_sync
from training.evaluate import evaluate
from training.masked_pairs import mask_pairs
from training.model import Transformer
from training.plots import learning_curves
from training.precision import resolve_precision
from training.run_state import Run
from training.schedule import adam_with_warmup
from training.vocab import bpe_tokenizer, char_tokenizer

LOG_EVERY = 10  # steps between two lines of steps.jsonl
PROBE = 500  # training pairs decoded per epoch to compare with validation


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
    run, start_epoch = _start(cfg, env, out, splits, task)
    train_probe = splits.train[: min(len(splits.train), PROBE)]
    valid = splits.valid[: cfg.eval_max]
    row: dict = {}
    for epoch in range(start_epoch, cfg.epochs + 1):
        loss_sum, tok_sum, train_s, out_of_time = _train_epoch(run, epoch)
        if env.main:
            row = _evaluate_epoch(run, epoch, train_probe, valid, loss_sum, tok_sum, train_s)
            if out_of_time:
                row["partial_epoch"] = True
            _save_epoch(run, epoch, row)
        if _stop(run, out_of_time, row):
            break

    if env.main and cfg.average_every:
        save_averaged(run, row, valid)
    _finish(run, row)
    return row


def _start(
    cfg: TrainConfig, env: DistEnv, out: Path, splits: tasks.Splits, task: TaskConfig
) -> tuple[Run, int]:
    """The model (new, --resume'd or --init-from a checkpoint), its optimizer and schedule where the run
    stands, and the first epoch to train."""
    start: dict = {}  # --init-from: where the checkpoint's run stopped (step, epoch, minutes)
    if cfg.resume or cfg.init_from:
        ckpt = checkpoint.load(out / "last" if cfg.resume else Path(cfg.init_from))
        tokenizer, model = ckpt.codec.tokenizer, ckpt.model.train()
        if cfg.init_from:
            start = read_json(Path(cfg.init_from) / checkpoint.METRICS)
    else:
        tokenizer = build_tokenizer(cfg, splits)
        model = Transformer(_model_config(cfg, tokenizer.get_vocab_size(with_added_tokens=True)))
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
    opt, sched = adam_with_warmup(model, config.d_model, cfg, int(start.get("step", 0)))
    run = Run(cfg, env, out, task, tokenizer, model, ddp, codec, train_ex, opt, sched, None)
    start_epoch = _restore(run, start)

    run.autocast_dtype, precision_why = resolve_precision(cfg.precision, env.device)
    if env.main:
        print(
            f"precision: {precision_why}; batches: "
            f"{f'{cfg.batch_tokens} padded tokens' if cfg.batch_tokens else f'{cfg.batch_size} sentences'} per rank",
            flush=True,
        )
    run.t0 = time.time()
    if (cfg.resume or start) and run.log_path.exists():
        rows = [json.loads(line) for line in run.log_path.read_text().splitlines() if line.strip()]
        run.elapsed_before = rows[-1]["time_s"] if rows else 0.0
    return run, start_epoch


def _model_config(cfg: TrainConfig, vocab: int) -> ModelConfig:
    return ModelConfig(
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


def _restore(run: Run, start: dict) -> int:
    """--resume: the optimizer, schedule, best score and random states of last/; otherwise a fresh log (that
    goes on from the checkpoint's own row with --init-from). Returns the first epoch to train."""
    cfg, out = run.cfg, run.out
    start_epoch, run.best = int(start.get("epoch", 0)) + 1, -math.inf
    if cfg.resume:
        state = torch.load(out / "last" / checkpoint.STATE, weights_only=False)
        run.opt.load_state_dict(state["optimizer"])
        run.sched.load_state_dict(state["scheduler"])
        start_epoch, run.best = state["epoch"] + 1, state["best"]
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["py_rng"])
    elif run.env.main:
        for stale in (run.log_path, out / "steps.jsonl"):
            stale.unlink(missing_ok=True)
        if (
            start
        ):  # the curve goes on from the checkpoint's own row (its earlier rows left with its run folder)
            out.mkdir(parents=True, exist_ok=True)
            run.log_path.write_text(json.dumps({**start, "init_from": str(cfg.init_from)}) + "\n")
    return start_epoch


def _train_epoch(run: Run, epoch: int) -> tuple[float, float, float, bool]:
    """One epoch of optimizer steps on this rank's share of the batches: the loss summed over target tokens,
    the target tokens, the seconds it took, and whether --max-steps or --time-budget-min ended it."""
    cfg, env = run.cfg, run.env
    run.ddp.train()
    batches = batch_indices(
        run.train_ex, cfg.batch_size, cfg.seed + epoch, env.rank, env.world, cfg.batch_tokens
    )
    bar = tqdm(batches, desc=f"epoch {epoch}/{cfg.epochs}", disable=not env.main, leave=False, unit="batch")
    budget_s = cfg.time_budget_min * 60 if cfg.time_budget_min > 0 else math.inf
    loss_sum = tok_sum = 0.0
    epoch_t0 = time.time()
    out_of_time = False
    for i, idx in enumerate(bar):
        loss, n_tokens = _step(run, idx)
        loss_sum += loss * n_tokens
        tok_sum += n_tokens
        tok_s = tok_sum * env.world / max(time.time() - epoch_t0, 1e-9)
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{run.sched.get_last_lr()[0]:.2e}", tgt_tok_s=f"{tok_s:.0f}")
        step = run.sched.last_epoch
        if env.main and step % LOG_EVERY == 0:  # the loss curve between evaluations
            with open(run.out / "steps.jsonl", "a") as f:
                f.write(
                    json.dumps(
                        {
                            "step": step,
                            "time_s": round(run.elapsed(), 1),
                            "train_loss": round(loss, 4),
                            "lr": run.sched.get_last_lr()[0],
                        }
                    )
                    + "\n"
                )
        if cfg.average_every and step % cfg.average_every == 0 and env.main:
            keep_copy(run.model, run.kept, step, cfg.average_last)
        if cfg.max_steps and step >= cfg.max_steps:  # every rank counts the same steps
            out_of_time = True
            break
        if i % 20 == 19 and budget_s < math.inf:  # every rank must stop at the same step
            over = torch.tensor([int(run.elapsed() >= budget_s)])
            if env.world > 1:
                dist.broadcast(over, 0)
            if over.item():
                out_of_time = True
                break
    return loss_sum, tok_sum, time.time() - epoch_t0, out_of_time


def _step(run: Run, idx: list[int]) -> tuple[float, int]:
    """One optimizer step on the batch of training pairs ``idx``: its loss and its target tokens."""
    cfg, config = run.cfg, run.config
    batch = collate([run.train_ex[j] for j in idx], config).to(run.env.device)
    with torch.autocast(
        run.env.device.split(":")[0],
        dtype=run.autocast_dtype or torch.float32,
        enabled=run.autocast_dtype is not None,
    ):
        logits = run.ddp(batch.src, batch.src_mask, batch.tgt_in)  # (B, T, V)
    loss = F.cross_entropy(
        logits.float().flatten(0, 1),
        batch.tgt_out.flatten(),
        ignore_index=config.special.pad,
        label_smoothing=cfg.label_smoothing,
    )  # §5.4 label smoothing
    run.opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(run.model.parameters(), cfg.clip)
    run.opt.step()
    run.sched.step()
    return loss.item(), batch.n_tokens


def _evaluate_epoch(
    run: Run, epoch: int, train_probe: list, valid: list, loss_sum: float, tok_sum: float, train_s: float
) -> dict:
    """The epoch's row of metrics.jsonl: the training loss and speed, and both sets decoded (main rank)."""
    run.model.eval()
    tr, va = (
        evaluate(
            run.model,
            run.codec,
            pairs,
            device=run.env.device,
            translation=run.translation,
            bleu_tokenize=run.cfg.bleu_tokenize,
        )
        for pairs in (train_probe, valid)
    )
    return {
        "epoch": epoch,
        "step": run.sched.last_epoch,
        "time_s": round(run.elapsed(), 1),
        "train_smoothed_loss": loss_sum / max(tok_sum, 1),
        # target tokens (no padding) per second of optimisation, all ranks together
        "train_tgt_tokens_per_s": round(tok_sum * run.env.world / max(train_s, 1e-9), 1),
        **{f"train_{k}": v for k, v in tr.items() if k != "n"},
        **{f"valid_{k}": v for k, v in va.items() if k != "n"},
    }


def _save_epoch(run: Run, epoch: int, row: dict) -> None:
    """The row logged and printed; last/ (with the trainer's state) saved, best/ too when validation improved."""
    out, model, task = run.out, run.model, run.task
    with open(run.log_path, "a") as f:
        f.write(json.dumps(row) + "\n")
    score = row["valid_chrf"] if run.translation else row["valid_seq_acc"]
    summary = " ".join(f"{k}={v:.4f}" for k, v in row.items() if k.startswith("valid_"))
    print(
        f"epoch {epoch} ({row['time_s']}s, {row['train_tgt_tokens_per_s']:.0f} tgt tok/s) {summary}",
        flush=True,
    )
    train_info = {"config": dataclasses.asdict(run.cfg), "epoch": epoch, "world": run.env.world}
    checkpoint.save(out / "last", model, task, run.tokenizer, row, train_info)
    torch.save(
        {
            "optimizer": run.opt.state_dict(),
            "scheduler": run.sched.state_dict(),
            "epoch": epoch,
            "best": max(run.best, score),
            "torch_rng": torch.get_rng_state(),
            "py_rng": random.getstate(),
        },
        out / "last" / checkpoint.STATE,
    )
    if score > run.best:
        run.best = score
        checkpoint.save(out / "best", model, task, run.tokenizer, row, train_info)
    learning_curves(run.log_path, out / "learning_curves.png", title=f"{task.name} ({out.name})")


def _stop(run: Run, out_of_time: bool, row: dict) -> bool:
    """Whether every rank stops after this epoch: out of steps or time, or --stop-at reached (rank 0 decides)."""
    cfg, env = run.cfg, run.env
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
    return bool(stop.item())


def _finish(run: Run, row: dict) -> None:
    env = run.env
    in_sync = replicas_in_sync(run.model, env)
    if env.main:
        if env.world > 1:
            print(f"replicas in sync: {in_sync}", flush=True)
        print(
            f"done: best validation {'chrF' if run.translation else 'exact match'} {run.best:.4f}; "
            f"checkpoints in {run.out}",
            flush=True,
        )
        write_json(
            run.out / "summary.json",
            {
                "epochs": row.get("epoch"),
                "train_time_s": round(time.time() - run.t0, 1),
                "best_valid": run.best,
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
