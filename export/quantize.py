"""int8 variants of both graphs; `s2s export --quantize int8` picks the measured winner.

* ``int8-dynamic``: ``quantize_dynamic`` of the MatMul weights (int8), activations quantized on
  the fly per call (``DynamicQuantizeLinear`` + ``MatMulInteger``); no calibration data.
* ``int8-nbits``: ``MatMulNBits`` with 8-bit blockwise weights and ``accuracy_level=4``, so ONNX
  Runtime's MLAS quantizes the activations to int8 inside the kernel and multiplies with the CPU's
  int8 dot-product instructions (AVX-512 VNNI / AVX-VNNI / AMX where present) in one node, instead of
  the three nodes and the float round trip of the dynamic path.

``int8-dynamic`` quantizes each call's activations with one scale for the whole batch, so a row's int8 output
can depend on which rows share its batch (the same 640 held-out inputs decoded under two batch-refill
policies gave different int8 outputs, identical float32 ones); 568-586 of 640 equal CTranslate2 int8's.

Both leave Gather (embeddings), LayerNorm and the attention internals in float32: they are a small
share of the time and most of the accuracy risk. docs/studies/int8-variants.md has each variant's speed
and its chrF / exact-match change against float32 (docs/BENCHMARKS.md#int8-variants); ``INT8`` names
the variant ``int8`` resolves to.

``fp16`` (for GPUs): every float initializer and operator in half precision (ONNX Runtime's own
``float16`` converter), the graphs' inputs and outputs kept float32 so that the engine, its KV cache
layout and the bundle's tensor names stay as they are. ``convert_bundle`` makes any of these from a
float32 bundle without PyTorch (what ``scripts/gpu_check.py`` does on a GPU host).
"""

from __future__ import annotations

import logging
from pathlib import Path

from contract import bundle
from contract.bundle import BundleConfig

VARIANTS = ("int8-dynamic", "int8-nbits")
INT8 = "int8-dynamic"  # what `--quantize int8` means: the faster within the accuracy bar in docs/BENCHMARKS.md#int8-variants
FP16 = "fp16"
CHOICES = ("none", "int8", *VARIANTS, FP16)
NBITS_BLOCK = (
    32  # weights per scale: 32 keeps the 8-bit error well below the float32 export tolerance's scale
)


def resolve(name: str) -> str:
    """The concrete variant a --quantize value stands for ("int8" = the measured default)."""
    if name not in CHOICES:
        raise ValueError(f"--quantize {name!r}: choose one of {', '.join(CHOICES)}")
    return INT8 if name == "int8" else name


def quantize(folder: Path, variant: str) -> None:
    """Rewrite encoder.onnx and decoder.onnx in `folder` in place."""
    variant = resolve(variant)
    if variant == "none":
        return
    # onnxruntime.quantization logs "consider pre-processing" advice per graph on the root logger; it does not
    # apply to these graphs. Quietened for the call only: the caller's own logging stays as it was.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        _quantize(folder, variant)
    finally:
        root.setLevel(level)


def fold_weight_transposes(model) -> int:
    """MatMul(x, Transpose(W)) with W an initializer -> MatMul(x, W^T) with W^T an initializer of its own.

    The tied output projection reads the embedding matrix through a Transpose node, and both quantizers only
    quantize a MatMul whose weight is an initializer: without this the largest MatMul of a decoder step
    (d_model x vocabulary, more than half its multiply-adds at translate-en-ja's size) stayed float32. The
    embedding Gather keeps the float matrix. Returns how many MatMuls were rewritten."""
    from onnx import numpy_helper

    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    folded, done = 0, {}
    for node in g.node:
        if node.op_type != "MatMul" or node.input[1] in inits:
            continue
        t = producer.get(node.input[1])
        if t is None or t.op_type != "Transpose" or t.input[0] not in inits:
            continue
        w = numpy_helper.to_array(inits[t.input[0]])
        perm = next((list(a.ints) for a in t.attribute if a.name == "perm"), None)
        if w.ndim != 2 or perm not in (None, [1, 0]):
            continue
        name = done.get(t.input[0])
        if name is None:
            name = done[t.input[0]] = f"{t.input[0]}.T"
            g.initializer.append(numpy_helper.from_array(w.T.copy(), name))
        node.input[1] = name
        folded += 1
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    for t in [n for n in g.node if n.op_type == "Transpose" and not any(o in used for o in n.output)]:
        g.node.remove(t)
    return folded


def graph_data_files(folder: Path) -> list[str]:
    """The external-data files the bundle's two graphs read (none for a graph under ``LARGE_GRAPH_BYTES``)."""
    from contract.graph_files import external_data_files

    return [f for g in (bundle.ENCODER_FILE, bundle.DECODER_FILE) for f in external_data_files(folder / g)]


def convert_bundle(src: Path, dst: Path, variant: str) -> BundleConfig:
    """A float32 bundle -> a ``variant`` copy at ``dst`` (config.json's hashes and quantization rewritten; its
    validation says what was converted from what). Torch-free; the caller checks the result's outputs."""
    import shutil

    cfg = bundle.read_bundle(src)
    if cfg.quantization != "none":
        raise ValueError(f"{src}: already {cfg.quantization}; convert a float32 bundle")
    variant = resolve(variant)
    dst.mkdir(parents=True, exist_ok=True)
    for f in (*bundle.PAYLOAD_FILES, *graph_data_files(src)):
        shutil.copy(src / f, dst / f)
    quantize(dst, variant)
    out = BundleConfig(
        **{
            **cfg.__dict__,
            "files": {
                f: bundle.sha256_file(dst / f) for f in (*bundle.PAYLOAD_FILES, *graph_data_files(dst))
            },
            "quantization": variant,
            "validation": {"converted_from": str(src), "source_files": cfg.files},
        }
    )
    out.write(dst)
    return out


# ONNX's protobuf holds at most 2 GB: a graph with more weights than this keeps them in ``<graph>.data`` beside it
# (torch.onnx.export's own threshold), a file of the bundle that config.json hashes like the graph.
LARGE_GRAPH_BYTES = 1536 * 1024 * 1024


def weight_bytes(model) -> int:
    """The bytes of a graph's initializers (loaded, external data included)."""
    from onnx import numpy_helper

    return sum(
        numpy_helper.to_array(t).nbytes if not t.raw_data else len(t.raw_data)
        for t in model.graph.initializer
    )


def save(model, path: Path) -> None:
    """``model`` at ``path``, its weights in ``<name>.data`` beside it when they pass ``LARGE_GRAPH_BYTES``."""
    import onnx

    large = weight_bytes(model) > LARGE_GRAPH_BYTES
    onnx.save_model(model, str(path), save_as_external_data=large, location=f"{path.name}.data")


def _fp16(model, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # keep_io_types: float32 at the graph's edges (Casts inserted there), so the engine's arrays and the cache
    # it keeps between steps are what a float32 bundle uses; inside, MatMuls and attention run in half.
    save(convert_float_to_float16(model, keep_io_types=True), dst)


def _quantize(folder: Path, variant: str) -> None:
    """Each graph rewritten through a scratch folder beside it: the new graph (and its ``.data``, when large)
    replace the old graph and the external data it had."""
    import tempfile

    import onnx

    from contract.graph_files import external_data_files

    for name in (bundle.ENCODER_FILE, bundle.DECODER_FILE):
        src = folder / name
        old = external_data_files(src)
        model = onnx.load(str(src))  # with its external data
        with tempfile.TemporaryDirectory(prefix=f"{name}.", dir=folder) as scratch:
            work, dst = Path(scratch) / "in", Path(scratch) / "out"
            work.mkdir(), dst.mkdir()
            if variant == FP16:
                _fp16(model, dst / name)
            elif variant == "int8-dynamic":
                from onnxruntime.quantization import QuantType, quantize_dynamic

                fold_weight_transposes(model)
                large = weight_bytes(model) > LARGE_GRAPH_BYTES  # the float graph; int8 MatMuls are a quarter
                save(model, work / name)  # quantize_dynamic reads a path without copying the graph in memory
                del model
                # MatMul only: Gather (embeddings) and attention internals stay float for accuracy.
                quantize_dynamic(
                    work / name,
                    dst / name,
                    weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul"],
                    use_external_data_format=large,
                )
            else:
                from onnxruntime.quantization.matmul_nbits_quantizer import (
                    DefaultWeightOnlyQuantConfig,
                    MatMulNBitsQuantizer,
                )

                fold_weight_transposes(model)
                cfg = DefaultWeightOnlyQuantConfig(
                    block_size=NBITS_BLOCK, is_symmetric=True, accuracy_level=4, bits=8
                )
                q = MatMulNBitsQuantizer(model, algo_config=cfg)
                q.process()
                save(q.model.model, dst / name)
            for f in old:
                (folder / f).unlink(missing_ok=True)
            for f in dst.iterdir():
                f.chmod(
                    0o644
                )  # the external-data writer makes 0600 files; the server may run as another user
                f.replace(folder / f.name)
