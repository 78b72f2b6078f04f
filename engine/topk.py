"""Each row's n best tokens by log-probability, in ONNX Runtime: LogSoftmax then TopK over beam rows' logits.

A beam step needs, per row, the 2k best extensions and the row's log-softmax normaliser. numpy has no
top-k, and ``argpartition`` over a beam batch's logits costs several times ONNX Runtime's LogSoftmax + TopK
kernels (docs/BENCHMARKS.md#design-choices). The graph is two nodes, built here with ``onnx.helper`` when the first beam runs; the tests
check it against numpy (``engine.search.top_sorted`` and a log-sum-exp).

A model whose tokens include some it never generates (Marian's ``<pad>``, its generation_config's
``bad_words_ids``) gets a third node: -inf added to those tokens *after* the log-softmax, so the others keep
the log-probabilities the model gives them, as transformers' ``generate()`` computes them.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

OPSET = 18
IR_VERSION = 9  # what every ONNX Runtime this project supports reads (onnx's helper writes its newest)


def _graph(vocab_size: int = 0, suppressed: tuple[int, ...] = ()) -> bytes:
    from onnx import TensorProto, helper

    nodes = [helper.make_node("LogSoftmax", ["logits"], ["logp"], axis=-1)]
    init = []
    if suppressed:
        mask = np.zeros(vocab_size, np.float32)
        mask[list(suppressed)] = -np.inf
        init.append(helper.make_tensor("suppressed", TensorProto.FLOAT, [vocab_size], mask.tolist()))
        nodes.append(helper.make_node("Add", ["logp", "suppressed"], ["allowed"]))
    nodes.append(
        helper.make_node(
            "TopK",
            ["allowed" if suppressed else "logp", "k"],
            ["values", "indices"],
            axis=-1,
            largest=1,
            sorted=1,
        )
    )
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
        initializer=init,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model.SerializeToString()


class TopLogprobs:
    """``top(logits (R, V), n) -> (log-probabilities (R, n) float64, token ids (R, n))``, best first, ties to the
    lower id (the ONNX TopK contract, as argmax breaks them). On the CPU, whatever device the decoder uses:
    the step loop reads logits on the host."""

    def __init__(self, threads: int = 1, vocab_size: int = 0, suppressed: tuple[int, ...] = ()):
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        self.session = ort.InferenceSession(
            _graph(vocab_size, suppressed), so, providers=["CPUExecutionProvider"]
        )

    def __call__(self, logits: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        x = np.ascontiguousarray(logits, dtype=np.float32)
        n = min(n, x.shape[-1])
        values, indices = self.session.run(None, {"logits": x, "k": np.array([n], np.int64)})
        return values.astype(np.float64), indices
