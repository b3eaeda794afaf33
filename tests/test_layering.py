"""The package's layers: every import (lazy ones too) goes down the pipeline, never up or round a cycle, and
no module grows past the size a reader can hold.

Layers, lowest first; a module may import its own layer and the ones below. Inside `snipjit.runtime`
the sub-packages have an order of their own."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "snipjit"
MAX_LINES = 600

LAYERS = [
    ("snipjit.memory", "snipjit.version"),           # leaves: buffer placement, the version
    ("snipjit.ir",),                                  # Graph IR and its text form
    ("snipjit.ops",),                                 # what ops mean: registry, inference, reference kernels
    ("snipjit.snippets",),                            # subgraph compiler and the target-machine interface
    ("snipjit.targets",),                             # code generators: LLVM, C
    ("snipjit.frontend", "snipjit.passes"),           # ONNX in, graph passes
    ("snipjit.runtime",),                             # programs, requests, threads, caches
    ("snipjit.compiler", "snipjit.builder", "snipjit.backend"),   # the API
    ("snipjit.cli", "snipjit.visualize", "snipjit.benchmark", "snipjit.integrations", "snipjit"),  # tools, front door
]
RUNTIME_LAYERS = [
    ("snipjit.runtime.errors", "snipjit.runtime.scoped"),
    ("snipjit.runtime.caches",),           # kernel and compiled-model caches, saved models
    ("snipjit.runtime.parallel",),         # threads: native pool, Python pool, BLAS threads
    ("snipjit.runtime.implementations",),  # what a step can run on: snippets, GEMM, copies, references
    ("snipjit.runtime.planning",),         # building the program: implementations chosen, shapes, memory
    ("snipjit.runtime.execution",),        # running it: requests, feeds, profiles
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The snipjit modules `name` imports anywhere in its text (top level, functions, conditionals, type
    checking); `from package import module` counts the package too, since the package runs first."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


def rank(name: str, layers) -> int | None:
    best = None
    for i, group in enumerate(layers):
        for prefix in group:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    return None if best is None else best[0]


GRAPH = {name: imports(name, path, set(modules())) for name, path in modules().items()}


def test_every_module_has_a_layer():
    assert [m for m in GRAPH if rank(m, LAYERS) is None] == []
    runtime = [m for m in GRAPH if m.startswith("snipjit.runtime.")]
    assert [m for m in runtime if rank(m, RUNTIME_LAYERS) is None] == []


@pytest.mark.parametrize("layers", [LAYERS, RUNTIME_LAYERS], ids=["package", "runtime"])
def test_imports_go_down_the_layers(layers):
    upward = [f"{a} -> {b}" for a, targets in GRAPH.items() for b in sorted(targets)
              if None not in (rank(a, layers), rank(b, layers)) and rank(b, layers) > rank(a, layers)]
    assert upward == []


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph: any with two modules is a cycle
    (a package whose __init__ imports a submodule that imports the package back is one)."""
    graph = GRAPH
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_modules_stay_small():
    big = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert big == {}
