"""The torch-free contract shared by training, export and server.

One definition of the model configuration, the special tokens, the tensor names of the ONNX
graphs and the bundle layout. Training, export and the server all import from here; nobody
retypes ``pad=0`` or ``n_layers=3`` elsewhere.
"""

from contract.config import ModelConfig, TaskConfig
from contract.tokens import SPECIAL_TOKENS, SpecialIds

__all__ = ["ModelConfig", "TaskConfig", "SPECIAL_TOKENS", "SpecialIds"]
