"""What `s2s export` and `s2s import` print: this project's own lines (the ``s2s.*`` loggers) at INFO, and of the
libraries they drive (torch.onnx, onnxscript, onnx_ir, ONNX Runtime) only warnings and errors, less the few that
every export of these models raises and that no user can act on."""

from __future__ import annotations

import logging
import warnings

FORMAT = "%(levelname)s %(name)s: %(message)s"

# (category, message regex, the module it is raised from) of the Python warnings every export raises.
EXPORT_WARNINGS = (
    # torch.export's pytree calls its own deprecated isinstance check (torch 2.13).
    (FutureWarning, r"`isinstance\(treespec, LeafSpec\)` is deprecated", ""),
    # torch.onnx names each dynamic axis once: two inputs sharing an axis (batch, src_len) keep the first name.
    (
        UserWarning,
        r"# The axis name: .* will not be used, since it shares the same shape constraints",
        "torch",
    ),
)
# Loggers whose warnings are about parts of torch this project never exports (torchvision's ops).
QUIET_LOGGERS = ("torch.onnx._internal.exporter._registration",)


def configure() -> None:
    logging.basicConfig(level=logging.WARNING, format=FORMAT)
    logging.getLogger("s2s").setLevel(logging.INFO)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for category, message, module in EXPORT_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
