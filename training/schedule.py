"""§5.3: Adam with the warm-up learning rate schedule."""

from __future__ import annotations

import torch

from training.config import TrainConfig


def rate(step: int, d_model: int, warmup: int, factor: float) -> float:
    """§5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def adam_with_warmup(
    model: torch.nn.Module, d_model: int, cfg: TrainConfig, step0: int
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam (§5.3) and its schedule from step ``step0`` on (--init-from: the checkpoint's step, 0 otherwise)."""
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)  # §5.3
    if step0:
        # Fresh Adam moments make the first updates ~lr * sign(g) in every coordinate: ramp the rate
        # back up over init_warmup steps, then follow the schedule from the checkpoint's step on.
        for g in opt.param_groups:
            g["initial_lr"] = g["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: rate(s + 1, d_model, cfg.warmup, cfg.lr_factor)
        * (min(1.0, (s + 1 - step0) / max(cfg.init_warmup, 1)) if step0 else 1.0),
        last_epoch=step0 - 1,
    )
    return opt, sched
