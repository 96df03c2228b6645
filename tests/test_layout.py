"""The package's rooms stay apart: what imports what inside kmtrf_core, read from the source.

- the paper's modules (the package top) never import the training runs, the cost harness or
  the book's plumbing;
- no module imports another module's private names;
- the static import graph has no cycle;
- an import inside a function says why on its line;
- the training cache is keyed by every module the training loop reaches.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kmtrf_core
from kmtrf_core.training import runs

PACKAGE = Path(kmtrf_core.__file__).resolve().parent
SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
ROOMS = ("training", "cost", "book", "estimator")


def _name(path: Path) -> str:
    parts = ["kmtrf_core", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path):
    """(imported module, imported names, node, at top level) for each kmtrf_core import of a file."""
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    package = _name(path) if path.name == "__init__.py" else _name(path).rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(anchor + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.startswith("kmtrf_core"):
                yield module, [alias.name for alias in node.names], node, id(node) in top_level
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("kmtrf_core"):
                    yield alias.name, [], node, id(node) in top_level


MODULES = {_name(p): p for p in SOURCES}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ROOMS else "paper"


@pytest.mark.parametrize("path", SOURCES, ids=[_name(p) for p in SOURCES])
def test_paper_modules_do_not_import_the_plumbing(path):
    if _room(_name(path)) != "paper" or path.name == "__init__.py":
        return
    rooms = {module for module, *_ in _imports(path) if _room(module) != "paper"}
    assert not rooms, f"{_name(path)} imports {sorted(rooms)}"


@pytest.mark.parametrize("path", SOURCES, ids=[_name(p) for p in SOURCES])
def test_no_private_names_cross_modules(path):
    private = [(module, name) for module, names, *_ in _imports(path) for name in names
               if name.startswith("_") and name != "__future__"]
    assert not private, f"{_name(path)} imports private names {private}"


@pytest.mark.parametrize("path", SOURCES, ids=[_name(p) for p in SOURCES])
def test_imports_inside_functions_say_why(path):
    lines = path.read_text().splitlines()
    unexplained = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    line = lines[inner.lineno - 1]
                    above = lines[inner.lineno - 2] if inner.lineno > 1 else ""
                    if "#" not in line and "#" not in above:
                        unexplained.append(line.strip())
    assert not unexplained, f"{_name(path)}: imports inside functions without a reason: {unexplained}"


def _graph() -> dict:
    graph = {}
    for name, path in MODULES.items():
        targets = set()
        for module, names, _, top in _imports(path):
            if not top:
                continue
            candidates = [module] + [f"{module}.{n}" for n in names]
            targets |= {m for m in candidates if m in MODULES and m != name}
        graph[name] = targets
    return graph


def test_import_graph_has_no_cycle():
    graph = _graph()
    # a package __init__ re-exports its submodules: an edge into a package means its __init__,
    # which imports the submodules; leave those edges out, they are not a module needing another
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node] - packages):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, f"import cycles: {cycles}"


def test_training_cache_covers_every_module_the_loop_imports():
    reached = set(runs.training_modules())
    assert {"kmtrf_core.model", "kmtrf_core.attention", "kmtrf_core.embeddings", "kmtrf_core.tasks",
            "kmtrf_core.objectives", "kmtrf_core.lloyd", "kmtrf_core.validation", "kmtrf_core.evaluate",
            "kmtrf_core.training.loop", "kmtrf_core.training.config",
            "kmtrf_core.training.checkpoints"} <= reached
    assert not {m for m in reached if _room(m) == "book"}, "the book's plumbing does not change training"
    # the imports the loop really executes are all in the fingerprint
    import sys
    loaded = {m for m in sys.modules if m.startswith("kmtrf_core.") and m in MODULES}
    needed = {m for m in loaded if m in _closure("kmtrf_core.training.loop")}
    assert needed <= reached


def _closure(root: str) -> set:
    graph, seen, todo = _graph(), set(), [root]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def test_fingerprint_changes_with_the_code_of_a_reached_module(monkeypatch):
    before = runs.training_code_fingerprint()
    real = runs._code_fingerprint

    def edited(source):
        return real(source) + ("x" if "def sparsemax_threshold" in source else "")

    runs.training_code_fingerprint.cache_clear()
    monkeypatch.setattr(runs, "_code_fingerprint", edited)
    try:
        assert runs.training_code_fingerprint() != before
    finally:
        monkeypatch.undo()
        runs.training_code_fingerprint.cache_clear()
    assert runs.training_code_fingerprint() == before
