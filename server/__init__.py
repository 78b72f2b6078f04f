"""Serving stage: a gRPC server on ONNX Runtime. Never imports torch, training or export."""
