"""Data-parallel training under ``torchrun``: the ranks' environment and the check that their weights agree."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


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
