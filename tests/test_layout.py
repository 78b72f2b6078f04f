"""The code's shape, as the architecture asks of it: no import circle anywhere in the tree's packages; server/'s
folders are its layers and import down only; the engine core's process (core_process/, and core_wire/ between it
and the front end) reaches no event loop, gRPC or aiohttp, and the front end's side of a core (core_client/) never
reaches the scheduler; no module that speaks HTTP reaches gRPC or generated protobuf code (directly or through the
server modules it imports); no package imports the command line (s2s/); no file of the project (tests and
generated stubs aside) over 400 lines, and no function of the command line or the training loop over 80; no test
imports the benchmarks or another test file (only conftest and helper modules). Read from the source (ast), so a
lazy import inside a function counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGES = ("server", "engine")
# Every package of the tree (a folder with an __init__.py at the top): the whole import graph has no circle.
TREE = tuple(sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "protos"))
MAX_LINES = 400
# Modules that speak HTTP: the aiohttp doors and what only they use.
GRPC_PREFIXES = ("grpc", "grpc_health", "grpc_reflection", "google.protobuf", "protos")
ASYNC_PREFIXES = ("asyncio", "aiohttp", "uvloop", *GRPC_PREFIXES)

# server/ by layer: what each folder may not import (directly). The front end's layers go down only:
# transport (ports, middlewares, interceptors) <- doors and KServe (protocols) <- models (the model API,
# the served versions) <- core (engine cores) ; telemetry beside them, reading what the cores report.
CORE_FOLDERS = ("server.core_client", "server.core_wire", "server.core_process")
FORBIDDEN = {
    "server.transport": ("server.doors", "server.kserve", "server.models", *CORE_FOLDERS, "engine"),
    "server.doors": (*CORE_FOLDERS, "engine"),
    "server.kserve": (*CORE_FOLDERS, "engine"),
    "server.models": ("server.doors", "server.kserve", "server.transport", "server.core_process"),
    # The front end's side of a core starts the core process by module name; it never imports the scheduler.
    "server.core_client": (
        "server.doors",
        "server.kserve",
        "server.transport",
        "server.models",
        "server.core_process",
    ),
    # The wire between them: plain messages both sides import, importing neither side.
    "server.core_wire": ("server.core_client", "server.core_process", "server.models"),
    "server.core_process": (
        "server.doors",
        "server.kserve",
        "server.transport",
        "server.models",
        "server.core_client",
    ),
    "server.telemetry": ("server.doors", "server.kserve", "server.transport", "server.models"),
}
# The engine-core child process imports neither asyncio nor gRPC nor aiohttp, at any depth: only the front
# end's side of a core (server.core_client) lives on the event loop.
CORE_CHILD_FOLDERS = ("server.core_process", "server.core_wire")
# Modules that speak HTTP, by folder: they reach no gRPC or protobuf.
HTTP_FOLDERS = ("server.doors",)
HTTP_EXTRA = ("server.kserve.rest_binding", "server.kserve.repository_rest", "server.kserve.json_codec")
GRPC_DOORS = ("server.doors.seq2seq_grpc",)


def _modules(packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    out = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()
TREE_MODULES = _modules(TREE)


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
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found.update(
                f"{base}.{a.name}" for a in node.names
            )  # `from server import distinct` imports a module
    return found


def _internal(imported: set[str]) -> set[str]:
    return {m for m in imported if m in MODULES}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}
TREE_GRAPH = {
    name: {m for m in _imports(name, path) if m in TREE_MODULES} for name, path in TREE_MODULES.items()
}


def _cycle(package: str, graph: dict[str, set[str]] = GRAPH) -> list[str] | None:
    """An import circle among the modules of ``package`` ("": every package of ``graph``), or None. A package's
    __init__ that imports a submodule which imports the package back (``from pkg import sibling``) is one."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for dep in sorted(d for d in graph[m] if d in graph and d != m):  # `from pkg import sub` inside pkg
            if state.get(dep) == 1:
                return stack[stack.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(m for m in graph if not package or m.split(".")[0] == package):
        if m not in state and (found := visit(m)):
            return found
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
    circle = _cycle(package)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_no_import_circle_in_the_tree():
    """Across every package of the tree, bench/ and training/ included: no module reaches itself."""
    assert {"bench", "contract", "engine", "export", "server", "training"} <= set(TREE), TREE
    circle = _cycle("", TREE_GRAPH)
    assert circle is None, "import circle: " + " -> ".join(circle)


def test_tests_import_no_benchmark_and_no_other_test_file():
    """The tests build on the product and on their helper modules (conftest, tests/<helper>.py), never on the
    benchmarks (bench/) or on another test file."""
    bad = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for i in sorted(_imports(path.stem, path)):
            top = i.split(".")[0]
            if top == "bench" or (top.startswith("test_") and (ROOT / "tests" / f"{top}.py").is_file()):
                bad.append(f"{path.name} imports {i}")
    assert not bad, "\n".join(bad)


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


def _under(m: str, folder: str) -> bool:
    return m == folder or m.startswith(folder + ".")


HTTP_MODULES = sorted(
    m
    for m in MODULES
    if (m.startswith("server.transport.http_") or m in HTTP_EXTRA or any(_under(m, f) for f in HTTP_FOLDERS))
    and m not in GRPC_DOORS
)


def test_http_modules_are_found():
    assert {"server.transport.http_app", "server.kserve.rest_binding", "server.doors.libretranslate"} <= set(
        HTTP_MODULES
    )


def _offenders(module: str, prefixes: tuple[str, ...]) -> list[str]:
    out = []
    for m, via in _reach(module).items():
        bad = sorted(i for i in GRAPH[m] if any(i == p or i.startswith(p + ".") for p in prefixes))
        if bad:
            out.append(f"{m} (imported by {via or 'itself'}) imports {', '.join(bad)}")
    return out


@pytest.mark.parametrize("module", HTTP_MODULES)
def test_http_modules_reach_no_grpc_or_protobuf(module):
    offenders = _offenders(module, GRPC_PREFIXES)
    assert not offenders, f"{module} speaks HTTP but reaches gRPC/protobuf:\n" + "\n".join(offenders)


CORE_CHILD = sorted(m for m in MODULES if any(_under(m, f) for f in CORE_CHILD_FOLDERS))


def test_core_child_modules_are_found():
    assert {
        "server.core_process.process",
        "server.core_process.scheduler",
        "server.core_wire.messages",
    } <= set(CORE_CHILD)
    assert not any(_under(m, "server.core_client") for m in CORE_CHILD)


@pytest.mark.parametrize("module", CORE_CHILD)
def test_engine_core_reaches_no_event_loop_or_grpc(module):
    offenders = _offenders(module, ASYNC_PREFIXES)
    assert not offenders, (
        f"{module} runs in the engine core but reaches an event loop or gRPC:\n" + "\n".join(offenders)
    )


CORE_CLIENT = sorted(m for m in MODULES if _under(m, "server.core_client"))


@pytest.mark.parametrize("module", CORE_CLIENT)
def test_core_client_reaches_no_scheduler(module):
    """The front end's side of a core talks to the core process over the wire only: at any depth it imports
    nothing of the core process's folder (the scheduler, its admission and jobs)."""
    reached = sorted(
        f"{m} (imported by {via or 'itself'})"
        for m, via in _reach(module).items()
        if _under(m, "server.core_process")
    )
    assert not reached, f"{module} reaches the core process's code:\n" + "\n".join(reached)


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_layers_go_down_only(folder):
    bad = []
    for m in sorted(x for x in MODULES if _under(x, folder)):
        for i in sorted(GRAPH[m]):
            hit = [f for f in FORBIDDEN[folder] if i == f or i.startswith(f + ".")]
            if hit and (i in MODULES or i.split(".")[0] == "engine"):
                bad.append(f"{m} imports {i}")
    assert not bad, f"{folder} may not import {', '.join(FORBIDDEN[folder])}:\n" + "\n".join(bad)


def test_every_server_module_has_a_room():
    """server/ itself holds only the entry point and what every layer shares; the rest lives in a folder."""
    top = sorted(p.stem for p in (ROOT / "server").glob("*.py") if p.stem != "__init__")
    assert top == ["app", "config", "errors"], top


def _product_files() -> list[Path]:
    """Every Python file of the project but the tests and the generated gRPC stubs."""
    return sorted(
        p
        for p in ROOT.rglob("*.py")
        if not {".venv", "tests", "protos", "node_modules"} & set(p.relative_to(ROOT).parts)
        and not p.relative_to(ROOT).parts[0].startswith(".")
    )


def test_files_are_under_400_lines():
    files = _product_files()
    assert {"server", "bench", "s2s", "training", "scripts"} <= {p.relative_to(ROOT).parts[0] for p in files}
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


MAX_FUNCTION_LINES = 80
# The command line (one module per subcommand) and the training loop (its parts named) keep functions short.
SHORT_FUNCTIONS = ("s2s", "training/train.py", "training/averaging.py", "training/schedule.py")


def test_command_line_and_training_loop_functions_are_short():
    long = []
    for entry in SHORT_FUNCTIONS:
        for path in sorted((ROOT / entry).rglob("*.py")) if (ROOT / entry).is_dir() else [ROOT / entry]:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


IMPORT_ONLY = ("torch", "transformers", "sentencepiece", "safetensors", "training", "export")


def test_serving_needs_no_import_extra():
    """Imported models are served with `tokenizers` alone: no module of server/ or engine/ imports torch,
    transformers or sentencepiece (the import extra), nor training/ or export/."""
    bad = sorted(
        f"{m} imports {i}"
        for m in MODULES
        for i in GRAPH[m]
        if any(i == p or i.startswith(p + ".") for p in IMPORT_ONLY)
    )
    assert bad == []


def test_no_package_imports_the_command_line():
    """The command line (s2s/) sits on top: the server, the engine, the contract and export import nothing from
    it (the version they report lives in contract/version.py, which pyproject.toml's version matches)."""
    from contract.version import __version__

    below = _modules(("server", "engine", "contract", "export"))
    bad = sorted(
        f"{m} imports {i}" for m, path in below.items() for i in _imports(m, path) if i.split(".")[0] == "s2s"
    )
    assert bad == []
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'\nversion = "{__version__}"\n' in pyproject


def test_product_modules_are_imported_by_name():
    """Every module of the product is imported plainly, so the import graph read here is the whole graph: no
    importlib.import_module from a table of names (the Hugging Face families are a dict of modules)."""
    product = _modules(("contract", "engine", "export", "server", "training"))
    bad = sorted(
        f"{m} calls {name}"
        for m, path in product.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and (name := getattr(node.func, "attr", None) or getattr(node.func, "id", None))
        in ("import_module", "__import__")
    )
    assert bad == []
    from export.hf_import import FAMILIES

    assert {"marian", "m2m_100", "bart", "mbart"} <= set(FAMILIES)
    assert all(module.__name__.startswith("export.hf_") for module in FAMILIES.values()), FAMILIES
