"""Each row's n best tokens by log-probability, in ONNX Runtime: LogSoftmax then TopK over beam rows' logits.

A beam step needs, per row, the 2k best extensions and the row's log-softmax normaliser. numpy has no
top-k, and ``argpartition`` over a beam batch's logits costs several times ONNX Runtime's LogSoftmax + TopK
kernels (docs/BENCHMARKS.md#design-choices). The graph is two nodes, built here with ``onnx.helper`` when the first beam runs; the tests
check it against numpy (``engine.search.top_sorted`` and a log-sum-exp).

A model whose tokens include some it never generates (Marian's ``<pad>``, its generation_config's
``bad_words_ids``) keeps them in the log-softmax, so the others keep the log-probabilities the model gives them,
as transformers' ``generate()`` computes them (-inf after the log-softmax). TopK then takes as many more tokens as
there are suppressed ones and the suppressed are dropped from what it returns: the n best of the rest are among
them. An Add of -inf over the whole (rows, vocabulary) log-softmax did the same with one more pass over it, a
third of the graph's time at a vocabulary of 32k (docs/BENCHMARKS.md#marian-ct2-notes).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

OPSET = 18
IR_VERSION = 9  # what every ONNX Runtime this project supports reads (onnx's helper writes its newest)


def _graph() -> bytes:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("LogSoftmax", ["logits"], ["logp"], axis=-1),
        helper.make_node("TopK", ["logp", "k"], ["values", "indices"], axis=-1, largest=1, sorted=1),
    ]
    graph = helper.make_graph(
        nodes,
        "top_logprobs",
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["rows", "vocab"]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("values", TensorProto.FLOAT, ["rows", "n"]),
            helper.make_tensor_value_info("indices", TensorProto.INT64, ["rows", "n"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model.SerializeToString()


class TopLogprobs:
    """``top(logits (R, V), n) -> (log-probabilities (R, n) float64, token ids (R, n))``, best first, ties to the
    lower id (the ONNX TopK contract, as argmax breaks them). On the CPU, whatever device the decoder uses:
    the step loop reads logits on the host."""

    def __init__(self, threads: int = 1, suppressed: tuple[int, ...] = ()):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.session = ort.InferenceSession(_graph(), so, providers=["CPUExecutionProvider"])
        self.suppressed = np.unique(np.asarray(suppressed, np.int64))

    def __call__(self, logits: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(logits, dtype=np.float32)
        n = min(n, x.shape[-1])
        k = min(n + len(self.suppressed), x.shape[-1])
        values, indices = self.session.run(None, {"logits": x, "k": np.array([k], np.int64)})
        values = values.astype(np.float64)
        if len(self.suppressed):
            banned = np.isin(indices, self.suppressed)
            values[banned] = -np.inf
            # the suppressed move behind the rest (a stable sort keeps the rest in TopK's order), then n are kept
            keep = np.argsort(banned, axis=-1, kind="stable")[:, :n]
            values, indices = (np.take_along_axis(a, keep, axis=-1) for a in (values, indices))
        return values, indices
