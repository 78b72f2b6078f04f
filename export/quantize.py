"""int8 dynamic quantization of both graphs (weights int8, activations quantized on the fly).

Dynamic quantization suits this CPU-bound, small-batch decoder: no calibration data, and the
MatMul weights (most of the bytes) shrink 4x. Its accuracy change is measured by bench/decode.py.
"""

from __future__ import annotations

from pathlib import Path

from onnxruntime.quantization import QuantType, quantize_dynamic

from contract import bundle


def quantize_int8(folder: Path) -> None:
    for name in (bundle.ENCODER_FILE, bundle.DECODER_FILE):
        src = folder / name
        tmp = folder / f"{name}.int8"
        # MatMul only: Gather (embeddings) and attention internals stay float for accuracy.
        quantize_dynamic(src, tmp, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
        tmp.replace(src)
