"""The code's shape, as the architecture asks of it: no import circle inside server/ or engine/, no module that
speaks HTTP reaching grpc or generated protobuf code (directly or through the server modules it imports), and
no file of server/ over 400 lines. Read from the source (ast), so a lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("server", "engine")
MAX_LINES = 400
# Modules that speak HTTP: the aiohttp doors and what only they use.
HTTP_PREFIXES = ("server.http_", "server.openapi", "server.playground", "server.libretranslate_html",
                 "server.kserve.json_codec")
GRPC_PREFIXES = ("grpc", "grpc_health", "grpc_reflection", "google.protobuf", "protos")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module ``name`` imports (absolute names; relative imports resolved), at any depth of the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)  # `from server import distinct` imports a module
    return found


def _internal(imported: set[str]) -> set[str]:
    return {m for m in imported if m in MODULES}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycle(package: str) -> list[str] | None:
    """An import circle among the modules of ``package`` (its __init__ importing its own submodules excepted), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(_internal(GRAPH[m])):
            if dep.startswith(m + "."):  # a package importing its own submodule is no circle
                continue
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(m for m in GRAPH if m.split(".")[0] == package):
        if m not in state and (found := visit(m)):
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
    circle = _cycle(package)
    assert circle is None, "import circle: " + " -> ".join(circle)


def _reach(start: str) -> dict[str, str]:
    """Every module of ours ``start`` imports, directly or not, each with the module that first imports it."""
    seen = {start: ""}
    todo = [start]
    while todo:
        m = todo.pop()
        for dep in _internal(GRAPH[m]):
            if dep not in seen:
                seen[dep] = m
                todo.append(dep)
    return seen


HTTP_MODULES = sorted(m for m in MODULES if m.startswith(HTTP_PREFIXES))


def test_http_modules_are_found():
    assert {"server.http_server", "server.http_kserve", "server.http_libretranslate"} <= set(HTTP_MODULES)


@pytest.mark.parametrize("module", HTTP_MODULES)
def test_http_modules_reach_no_grpc_or_protobuf(module):
    offenders = []
    for m, via in _reach(module).items():
        bad = sorted(i for i in GRAPH[m] if i.split(".")[0] in {p.split(".")[0] for p in GRPC_PREFIXES}
                     and i.startswith(GRPC_PREFIXES))
        if bad:
            offenders.append(f"{m} (imported by {via or 'itself'}) imports {', '.join(bad)}")
    assert not offenders, f"{module} speaks HTTP but reaches gRPC/protobuf:\n" + "\n".join(offenders)


def test_server_files_are_under_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / "server").rglob("*.py"))
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"files of server/ over {MAX_LINES} lines: {long}"
