"""Export stage: a training checkpoint -> a self-describing ONNX bundle, validated against PyTorch."""
