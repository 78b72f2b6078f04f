"""`s2s export`: checkpoint -> models/<name>/<version>/ {encoder.onnx, decoder.onnx, tokenizer.json, config.json}."""

from __future__ import annotations

import dataclasses
import gc
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import torch
from torch.export import Dim

from contract import bundle, names
from contract.bundle import BundleConfig
from contract.config import ModelConfig
from export.fused import translation_table
from export.publish import destination, next_version, publish
from export.quantize import graph_data_files
from export.quantize import resolve as resolve_quantization
from export.validate import validate_bundle
from export.wrappers import DecoderGraph, EncoderGraph
from training import checkpoint

log = logging.getLogger("s2s.export")
logging.getLogger("onnx_ir").setLevel(logging.WARNING)  # its passes log every deduplicated initializer
OPSET = 18


@dataclass
class ExportOptions:
    checkpoint: Path
    repo: Path
    name: str
    version: int | None = None  # None = next free version
    quantize: str = "none"  # none | int8 (= export.quantize.INT8) | int8-dynamic | int8-nbits
    atol: float = 1e-4
    # ISO 639-1 codes written to config.json (translation bundles; the LibreTranslate API routes by them).
    source_language: str | None = None
    target_language: str | None = None
    beam_size: int | None = None  # the served default beam (task.beam_size); None = the checkpoint's
    # Attention as ONNX Runtime's fused com.microsoft.MultiHeadAttention (export/fused.py; format 3 bundles)
    # rather than standard ONNX nodes (format 2, any ONNX runtime).
    fused: bool = False
    # The decoder's self-attention and its cache as ONNX Runtime's GroupQueryAttention (export/fused.py; format 3):
    # faster on CPUs at OPUS-MT's size (docs/BENCHMARKS.md#marian-ct2-notes); CUDA's kernel is float16-only.
    gqa: bool = False
    # The length penalty rule a request gets when it names none (task.length_penalty_type; format 4 unless gnmt).
    length_penalty_type: str | None = None
    origin: dict | None = None  # s2s import: where the checkpoint came from (written to config.json)
    languages: Any = None  # s2s import of a multilingual model: its contract.languages.Languages


def _example_inputs(model, b: int = 3, s: int = 5, p: int = 4, t: int = 2, g: int = 2):
    """Example shapes are all >= 2: the exporter would freeze a dynamic axis whose example size is 1. The decoder's
    rows are g per source (a beam's), so that its rows and its sources stay two sizes."""
    c = model.config
    src = torch.randint(4, c.src_vocab_size, (b, s))
    src_mask = torch.ones(b, s, dtype=torch.long)
    rows = b * g
    past = [torch.randn(rows, c.n_heads, p, c.d_head) for _ in range(2 * c.n_decoder_layers)]
    cross = [torch.randn(b, c.n_heads, s, c.d_head) for _ in range(2 * c.n_decoder_layers)]
    tgt = torch.randint(4, c.tgt_vocab_size, (rows, t))
    positions = torch.arange(p, p + t).expand(rows, t).contiguous()
    past_mask = torch.ones(rows, p, dtype=torch.long)
    return (src, src_mask), (tgt, positions, past_mask, *past, *cross, src_mask)


def _dims(io: names.GraphIO) -> dict[str, dict[int, Dim]]:
    axis = {
        a: Dim(a, min=0 if a == "past_len" else 1, max=4096)
        for a in ("batch", "sources", "src_len", "past_len", "tgt_len")
    }
    return {name: {k: axis[v] for k, v in axes.items()} for name, axes in io.inputs.items()}


def _export(
    module: torch.nn.Module, args: tuple, io: names.GraphIO, path: Path, n_named: int, fused: bool, gqa: bool
) -> None:
    """n_named: how many leading forward() parameters are named; the rest arrive as *rest."""
    module.eval()
    dims = [d for d in _dims(io).values()]
    shapes = [*dims[:n_named], tuple(dims[n_named:])] if n_named < len(dims) else dims
    torch.onnx.export(
        module,
        args,
        str(path),
        dynamo=True,
        opset_version=OPSET,
        external_data=False,  # unless the weights pass 1.5 GB: then torch writes <graph>.data beside the graph
        input_names=list(io.inputs),
        output_names=list(io.outputs),
        dynamic_shapes=shapes,
        optimize=True,
        verbose=False,
        custom_translation_table=translation_table(fused, gqa),
    )
    onnx.checker.check_model(str(path), full_check=True)


def fold_output_bias(path: Path) -> bool:
    """logits = MatMul(x, W) + b  ->  MatMul(Concat(x, 1), Concat(W, b)): the output bias as one more row of the
    projection, so no Add passes over the (rows, vocabulary) logits after it (the same sums, in the same order:
    MLAS adds the last row last). W^T of a tied table stays a Transpose and the new weight a Concat, both folded
    into one initializer when ONNX Runtime loads the graph, so the file keeps one copy of the table. For float32
    graphs: the quantizers take the bias as it is. Returns whether the graph had such an Add."""
    import numpy as np
    from onnx import helper, numpy_helper

    # The graph alone first: a model without an output bias (NLLB's) has its weights (GBs) left unread.
    producer = {o: n for n in onnx.load(str(path), load_external_data=False).graph.node for o in n.output}
    if getattr(producer.get(names.LOGITS), "op_type", None) != "Add":
        return False
    model = onnx.load(str(path))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    add = producer[names.LOGITS]
    bias = next((i for i in add.input if i in inits and len(inits[i].dims) == 1), None)
    matmul = next((producer.get(i) for i in add.input if i != bias), None)
    if bias is None or matmul is None or matmul.op_type != "MatMul":
        return False
    x, w = matmul.input
    for name in ("logits_bias_axes", "logits_bias_one"):  # [0], [1]
        g.initializer.append(numpy_helper.from_array(np.array([name.endswith("one")], np.int64), name))
    nodes = [
        helper.make_node("Unsqueeze", [bias, "logits_bias_axes"], ["logits_bias_row"]),
        helper.make_node("Concat", [w, "logits_bias_row"], ["logits_weight_with_bias"], axis=0),  # (K + 1, V)
        helper.make_node("Shape", [x], ["logits_x_lead"], start=0, end=-1),
        helper.make_node("Concat", ["logits_x_lead", "logits_bias_one"], ["logits_ones_shape"], axis=0),
        helper.make_node(
            "ConstantOfShape",
            ["logits_ones_shape"],
            ["logits_ones"],
            value=numpy_helper.from_array(np.ones(1, np.float32)),
        ),
        helper.make_node("Concat", [x, "logits_ones"], ["logits_x_with_one"], axis=-1),  # (B, T, K + 1)
        helper.make_node("MatMul", ["logits_x_with_one", "logits_weight_with_bias"], [names.LOGITS]),
    ]
    at = list(g.node).index(matmul)
    g.node.remove(add)
    g.node.remove(matmul)
    for i, n in enumerate(nodes):
        g.node.insert(at + i, n)
    data = path.with_name(path.name + ".data")
    if data.exists():  # a graph past the protobuf limit keeps its weights beside it, as torch wrote them
        data.unlink()  # onnx.load read them in; written anew with the graph's new initializers
        onnx.save(
            model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name
        )
    else:
        onnx.save(model, str(path))
    return True


def export(opts: ExportOptions) -> Path:
    bundle.check_language(opts.source_language, "--source-lang")  # before minutes of export, not after
    bundle.check_language(opts.target_language, "--target-lang")
    model_dir = destination(opts.repo, opts.name, opts.version)  # PublishRefused: a name that is a path
    quantization = resolve_quantization(opts.quantize)  # "int8" -> the measured variant, recorded as such
    ckpt = checkpoint.load(opts.checkpoint)
    model, task = ckpt.model.eval(), ckpt.task
    del ckpt  # the model alone holds the weights: freed before quantizing
    c = model.config
    if opts.gqa and c.d_head % 8:  # ONNX Runtime's GroupQueryAttention takes heads of a multiple of 8 only
        log.info("heads of %d: the self-attention stays standard ONNX nodes", c.d_head)
        opts = dataclasses.replace(opts, gqa=False)
    version = next_version(model_dir) if opts.version is None else opts.version
    final = model_dir / str(version)
    with tempfile.TemporaryDirectory(prefix="s2s-export-") as tmp:
        out = Path(tmp)
        _write_graphs(model, out, opts)
        if quantization == "none":
            fold_output_bias(out / bundle.DECODER_FILE)
        else:
            from export.quantize import quantize

            # The quantizer holds a float graph and its int8 copy: the model's weights (2.5 GB of an NLLB-600M)
            # are not held beside them, but read back for the validation.
            del model
            gc.collect()
            quantize(out, quantization)
            model = checkpoint.load(opts.checkpoint).model.eval()
        cfg = _bundle_config(opts, out, c, task, version, quantization)
        cfg.write(out)
        # Fails loudly (ValueError) if ONNX Runtime disagrees with PyTorch; nothing is published then.
        report = validate_bundle(
            model, out, atol=opts.atol if quantization == "none" else None, one_token_over_past=opts.gqa
        )
        cfg = BundleConfig(**{**cfg.__dict__, "validation": report})
        cfg.write(out)
        publish(out, final, replace=opts.version is not None)
    log.info("exported %s -> %s (%s)", opts.checkpoint, final, report)
    return final


def _write_graphs(model, out: Path, opts: ExportOptions) -> None:
    """The encoder and decoder graphs, traced from the training model, into ``out``."""
    c = model.config
    enc_args, dec_args = _example_inputs(model)
    with torch.no_grad():
        _export(
            EncoderGraph(model),
            enc_args,
            names.encoder_io(c.n_decoder_layers),
            out / bundle.ENCODER_FILE,
            2,
            opts.fused,
            opts.gqa,
        )
        _export(
            DecoderGraph(model),
            dec_args,
            names.decoder_io(c.n_decoder_layers, per_source=True),
            out / bundle.DECODER_FILE,
            3,
            opts.fused,
            opts.gqa,
        )


def _bundle_config(
    opts: ExportOptions, out: Path, c: ModelConfig, task, version: int, quantization: str
) -> BundleConfig:
    """The tokenizer(s) copied beside the graphs in ``out``, and the bundle's config.json: dims, task (with the
    options' beam and length rule), every payload file's hash, where it came from."""
    shutil.copy(opts.checkpoint / checkpoint.TOKENIZER, out / bundle.TOKENIZER_FILE)
    target_tokenizer = (opts.checkpoint / checkpoint.TARGET_TOKENIZER).is_file()
    if target_tokenizer:
        shutil.copy(opts.checkpoint / checkpoint.TARGET_TOKENIZER, out / bundle.TARGET_TOKENIZER_FILE)
    payload = bundle.PAYLOAD_FILES + ((bundle.TARGET_TOKENIZER_FILE,) if target_tokenizer else ())
    # A graph over 1.5 GB of weights (NLLB-600M's) is written with its weights in <graph>.data, hashed as the
    # graph is: the bundle check refuses a graph reading a file config.json does not list.
    payload += tuple(graph_data_files(out))
    if opts.beam_size is not None:
        task = dataclasses.replace(task, beam_size=opts.beam_size)
    if opts.length_penalty_type is not None:
        task = dataclasses.replace(task, length_penalty_type=opts.length_penalty_type)
    return BundleConfig(
        name=opts.name,
        version=version,
        model=c,
        opset=OPSET,
        task=task,
        files={f: bundle.sha256_file(out / f) for f in payload},
        source_checkpoint_sha256=checkpoint.weights_sha256(opts.checkpoint),
        quantization=quantization,
        source_language=opts.source_language,
        target_language=opts.target_language,
        origin=opts.origin,
        languages=opts.languages,
        cross_per_source=True,  # training.model's cross-attention folds a source's rows (attend_per_source)
        format_version=bundle.format_for(
            c, task, opts.fused or opts.gqa, target_tokenizer, opts.languages is not None
        ),
    )
