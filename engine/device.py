"""Which ONNX Runtime provider runs: CUDA when it can really load here, else the CPU, and the CPU's fusion exclusions."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging

import onnxruntime as ort

from contract.bundle import BundleError

log = logging.getLogger("s2s.engine")


# What onnxruntime-gpu's CUDA provider links against (its GPU requirements page): without any of
# them ORT prints red ERROR lines at every session and falls back to CPU.
CUDA_LIBRARIES = ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13", "libcudnn.so.9")


@functools.lru_cache(maxsize=1)
def cuda_probe() -> tuple[bool, str]:
    """Can the CUDA provider load here? Decided before asking ONNX Runtime for it, and why."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, "this onnxruntime build has no CUDA provider"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False, "no NVIDIA driver (libcuda.so.1 not found)"
    if hasattr(ort, "preload_dlls"):  # loads CUDA/cuDNN from the nvidia-* wheels when they are installed
        with contextlib.suppress(Exception):
            ort.preload_dlls(directory="")
    for lib in CUDA_LIBRARIES:
        try:
            ctypes.CDLL(lib)
        except OSError:
            return False, f"{lib} not found (the CUDA provider needs CUDA 13 and cuDNN 9)"
    return True, "NVIDIA driver, CUDA 13 and cuDNN 9 found"


def providers_for(device: str) -> list[str]:
    if device == "cpu":
        return ["CPUExecutionProvider"]
    usable, why = cuda_probe()
    if usable:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if device == "cuda":
        raise BundleError(f"--device cuda asked, but the CUDA provider cannot load: {why}")
    return ["CPUExecutionProvider"]


@functools.lru_cache(maxsize=None)
def log_provider_once(device: str, provider: str) -> None:
    """One line per process and device setting: which provider runs, and why (the server logs it at INFO once)."""
    log.debug("ONNX Runtime runs %s (--device %s: %s)", provider, device, provider_reason(device))


def provider_reason(device: str) -> str:
    return "asked for" if device == "cpu" else cuda_probe()[1]


# ONNX Runtime fusions that slow these graphs down on the CPU. SkipLayerNormalization (Add + LayerNormalization in
# one node) is slower there than the two nodes it replaces: the step profile times both in every run
# (docs/BENCHMARKS.md), outputs equal to float rounding. CUDA keeps every fusion.
CPU_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)


def disabled_optimizers(providers: list[str]) -> list[str]:
    return [] if providers[0] == "CUDAExecutionProvider" else list(CPU_DISABLED_OPTIMIZERS)
