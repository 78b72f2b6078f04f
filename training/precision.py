"""The training's arithmetic: bf16 autocast where the hardware makes it pay, float32 otherwise."""

from __future__ import annotations

from pathlib import Path

import torch


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
