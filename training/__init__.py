"""Training stage: the PyTorch Transformer, tokenizers, tasks, the training loop and evaluation."""
