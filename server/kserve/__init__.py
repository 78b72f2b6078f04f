"""KServe v2 / Triton inference protocol: one model description and one request parsing, two bindings.

* ``tensors``: the protocol-neutral request (``InferRequest``) and the BYTES framing; no transport.
* ``protocol``: the model's tensors and parameters, metadata and configuration as plain data.
* ``parse``: an ``InferRequest`` -> the model API's texts, options and prefixes (tensor names,
  datatypes and shapes only; the model API checks everything else, once).
* ``grpc_servicer`` (+ ``repository_rpcs``): the gRPC binding, protobuf <-> ``InferRequest``.
  The REST binding is ``server/kserve/rest_binding.py``, JSON and binary data <-> ``InferRequest``, no protobuf.

Each model takes a BYTES tensor ``text_input`` of shape [N] (or [N, 1]) and answers a BYTES tensor
``text_output`` of the same shape, one text per input, in order. Decoding options are request
parameters named as in seq2seq.v1 / CTranslate2 (beam_size, num_hypotheses, return_scores,
sampling_topk, ...); ``max_tokens`` / ``beam_width`` (Triton's names for max_new_tokens / beam_size)
may also be optional INT64/INT32 inputs of shape [1]; 0 or absent = the model's default. An optional
BYTES input ``target_prefix`` of text_input's shape gives each input's prefix ("" = none). Optional
outputs ``hypotheses`` (BYTES) and ``scores`` (FP32), shape [N, num_hypotheses], carry the n-best
lists. Triton's ``timeout`` request parameter (microseconds) shortens the deadline. See docs/KSERVE.md.
"""
