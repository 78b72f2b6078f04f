"""How many engine cores a model gets, and whether each runs an encoder thread: sized to the machine it starts on."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from engine.device import cuda_probe
from server.config import ServerConfig

# CPU the front end spends per CPU an engine core spends, at full load (docs/BENCHMARKS.md, the
# CPU-per-request table).
FRONT_END_SHARE = 0.4


def usable_cpus(cgroup: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """CPUs this process may use: its affinity, capped by a cgroup CPU quota (a container's --cpus or a
    Kubernetes CPU limit, which affinity does not show)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = None
    try:  # cgroup v2: "max 100000" or "<quota> <period>"
        q, period = (cgroup / "cpu.max").read_text().split()
        if q != "max":
            quota = int(q) / int(period)
    except (OSError, ValueError):
        try:  # cgroup v1
            q = int((cgroup / "cpu" / "cpu.cfs_quota_us").read_text())
            if q > 0:
                quota = q / int((cgroup / "cpu" / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            pass
    if quota is not None and math.ceil(quota) < cpus:
        return max(1, math.ceil(quota)), f"cgroup CPU quota {quota:g}"
    return cpus, f"{cpus} usable CPU cores"


def default_beam(bundle: Path) -> int:
    """The beam a request that names none gets (the bundle's task.beam_size); 1 where the bundle cannot be read
    (its load reports why)."""
    try:
        return max(1, int(json.loads((bundle / "config.json").read_text())["task"].get("beam_size", 1)))
    except (OSError, ValueError, KeyError, TypeError):
        return 1


def default_cores(config: ServerConfig, beam: int = 1) -> tuple[int, str]:
    """Engine cores per model when neither --instances nor NAME@CORES says: sized to the machine it starts on.

    One single-threaded engine core per CPU core is the fastest way to use a CPU for decoding (one intra-op
    thread beat two per session; parallelism comes from separate decode loops), but the front end (gRPC,
    HTTP, tokenizing) needs CPU too: about ``FRONT_END_SHARE`` of a busy engine core's. So the cores get what
    is left after the front end's share, never fewer than one. On 2 CPUs that is one core, the least server CPU
    per request; ``--instances 2`` trades CPU per request for throughput (docs/BENCHMARKS.md, the serving
    variants). A model whose default search is a beam (``beam`` > 1) gets a core per CPU: a request's engine work
    grows with the beam and its front-end work does not, so the front end's share shrinks to what the cores leave
    idle, and one core, not the front end, is then the bottleneck (docs/BENCHMARKS.md#design-choices). A GPU
    batches inside one core: one."""
    cpus, where = usable_cpus()
    if config.device != "cpu" and cuda_probe()[0]:
        return 1, "CUDA: one core per model batches on the GPU"
    per_core = max(1, config.intra_op_threads)
    if beam > 1:
        return max(1, cpus // per_core), (
            f"{where}, the model's default search a beam of {beam} (the front end's "
            f"share is small against a beam's decoding), / {per_core} intra-op "
            "thread(s) per engine core"
        )
    n = max(1, int(cpus / (1 + FRONT_END_SHARE)) // per_core)
    return n, (
        f"{where}, less the front end's share (~{FRONT_END_SHARE:g} CPU per busy engine core), "
        f"/ {per_core} intra-op thread(s) per engine core"
    )


def encoder_thread(config: ServerConfig, n_cores: int) -> tuple[bool, str]:
    """Whether each engine core of a model runs a second thread that encodes queued requests while it decodes.

    It overlaps the encoder with the decode loop, which pays where a CPU is not busy already (docs/BENCHMARKS.md,
    the serving variants). Auto: on with one core and at least 2 usable CPUs, or on CUDA (the encoder runs on
    the GPU)."""
    if config.encoder_thread != "auto":
        return config.encoder_thread == "on", f"--encoder-thread {config.encoder_thread}"
    if n_cores != 1:
        return False, f"auto: {n_cores} engine cores share the CPUs already"
    if config.device != "cpu" and cuda_probe()[0]:
        return True, "auto: CUDA"
    cpus, where = usable_cpus()
    if cpus >= 2:
        return True, f"auto: one engine core, {where}"
    return False, f"auto: {where}: it would only compete with the decode loop"
