"""The files an ONNX graph reads besides itself: external data (``TensorProto.data_location == EXTERNAL``),
which ONNX Runtime loads from the graph's folder by the ``location`` the graph names.

The bundle check (``contract.bundle.read_bundle``) hashes every file ``config.json`` lists; a graph saved
with external data would otherwise load weights from files no hash covers. ``onnx`` is imported only
when a bundle's hashes are checked (the serve extra has it; reading a bundle's config does not need it).
"""

from __future__ import annotations

from pathlib import Path


def external_data_files(graph: Path) -> list[str]:
    """The ``location`` of every external-data tensor of ``graph`` (and of its subgraphs), in order."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    out: dict[str, None] = {}

    def tensor(t) -> None:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for entry in t.external_data:
                if entry.key == "location":
                    out.setdefault(entry.value, None)

    def walk(g) -> None:
        for t in g.initializer:
            tensor(t)
        for sparse in g.sparse_initializer:
            tensor(sparse.values)
            tensor(sparse.indices)
        for node in g.node:
            for a in node.attribute:
                if a.HasField("t"):
                    tensor(a.t)
                for t in a.tensors:
                    tensor(t)
                if a.HasField("g"):
                    walk(a.g)
                for sub in a.graphs:
                    walk(sub)

    walk(model.graph)
    return list(out)
