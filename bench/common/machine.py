"""The machine a benchmark ran on, as its report states it."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def nproc() -> int:
    """Usable CPUs (the affinity mask, as `nproc`)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def machine() -> dict:
    return {"nproc": nproc(), "cpu": cpu_model(), "loadavg": os.getloadavg()}


def loadavg_text() -> str:
    """The three load averages as /proc/loadavg has them ("n/a" elsewhere)."""
    p = Path("/proc/loadavg")
    return " ".join(p.read_text().split()[:3]) if p.exists() else "n/a"
