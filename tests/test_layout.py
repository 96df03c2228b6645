"""The package's rooms stay apart: what imports what inside kmtrf_core, read from the source.

- the paper's modules (the package top) never import the training runs, the cost harness or
  the book's plumbing;
- no module imports another module's private names;
- the static import graph has no cycle;
- an import inside a function says why on its line;
- the training cache is keyed by every module the training loop reaches;
- ``import kmtrf_core`` and the paper's modules load no scikit-learn, Dask, POT or progress bars;
- no module is longer than 600 lines;
- the book room is plumbing by kind, then one module per chapter named after its notebook, each
  with its test file; chapters do not import each other's modules (but for the listed shared results).
"""

from __future__ import annotations

import ast
import functools
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
    """The room of a module; a room's package itself (``kmtrf_core.cost``, as in ``from .cost import fit``) is
    in its room."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in ROOMS else "paper"


PAPER_SOURCES = [p for p in SOURCES if _room(_name(p)) == "paper" and p.name != "__init__.py"]
"""The paper room's modules, its package ``__init__`` aside (it loads the other rooms on first use)."""


@pytest.mark.parametrize("path", PAPER_SOURCES, ids=[_name(p) for p in PAPER_SOURCES])
def test_paper_modules_do_not_import_the_plumbing(path):
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
    needed = loaded & _closure("kmtrf_core.training.loop")
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


PAPER_MODULES = sorted(
    name for name in MODULES if _room(name) == "paper" and name != "kmtrf_core" and name.split(".")[-1] not in ROOMS
)
HEAVY = ("sklearn", "distributed", "dask", "ot", "tqdm.auto")
"""What the paper room must not load: scikit-learn, Dask, POT and tqdm's progress bars (torch itself
imports ``tqdm`` for its hub, but never ``tqdm.auto``, which the training room's bars use)."""


def _loaded_after(statement: str) -> set:
    """Modules that ``statement`` loads in a fresh interpreter, beyond what ``import torch`` loads."""
    import subprocess
    import sys

    code = ("import sys, torch; before = set(sys.modules); " + statement +
            "; print('\\n'.join(sorted(set(sys.modules) - before)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


_FORKED_PROBE = """
import json, os, sys, torch
results = {}
for statement in json.loads(sys.argv[1]):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            before = set(sys.modules)
            exec(statement, {"__name__": "__main__"})
            result = sorted(set(sys.modules) - before)
        except BaseException as err:
            result = f"{statement!r} raised {type(err).__name__}: {err}"
        with os.fdopen(write, "w") as out:
            json.dump(result, out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    results[statement] = json.loads(text) if text else f"{statement!r}: the child ended with status {status}"
print(json.dumps(results))
"""
"""One interpreter imports torch, then forks a child per statement: each child starts from the state of a
fresh interpreter after ``import torch`` (the parent runs no statement), runs its statement alone and
reports the modules it loaded, as :func:`_loaded_after` would, for the cost of one ``import torch``."""


@functools.lru_cache(maxsize=None)
def _loaded_after_each(statements: tuple) -> dict:
    """``{statement: set of modules it loads}``, each as by :func:`_loaded_after` (forked on Linux)."""
    import json
    import subprocess
    import sys

    if not sys.platform.startswith("linux"):  # fork after import torch is safe on Linux; elsewhere, one by one
        return {statement: _loaded_after(statement) for statement in statements}
    done = subprocess.run([sys.executable, "-c", _FORKED_PROBE, json.dumps(statements)], capture_output=True,
                          text=True, check=True)
    results = json.loads(done.stdout)
    failed = {statement: result for statement, result in results.items() if isinstance(result, str)}
    assert not failed, f"{failed}\n{done.stderr}"
    return {statement: set(result) for statement, result in results.items()}


LIGHT_STATEMENTS = ("import kmtrf_core", *(f"import {name}" for name in PAPER_MODULES))
FIRST_USE = "import kmtrf_core; kmtrf_core.TrainConfig; kmtrf_core.TransformerKMeans"


def _loaded(statement: str) -> set:
    return _loaded_after_each((*LIGHT_STATEMENTS, FIRST_USE))[statement]


def test_a_forked_probe_loads_what_a_fresh_interpreter_loads():
    assert _loaded(FIRST_USE) == _loaded_after(FIRST_USE)  # the statement that loads the most


@pytest.mark.parametrize("statement", LIGHT_STATEMENTS)
def test_the_paper_room_loads_light(statement):
    loaded = _loaded(statement)
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m in HEAVY)
    rooms = sorted(m for m in loaded if m.startswith("kmtrf_core.") and _room(m) != "paper")
    assert not heavy and not rooms, f"{statement} loads {heavy + rooms}"


def test_the_other_rooms_load_on_first_use():
    loaded = _loaded(FIRST_USE)
    assert {"kmtrf_core.training", "kmtrf_core.estimator"} <= loaded
    for name in kmtrf_core.__all__:
        assert getattr(kmtrf_core, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        kmtrf_core.no_such_name  # noqa: B018


def test_runs_and_the_executor_do_not_import_each_other_in_a_cycle():
    imported = {module for module, *_ in _imports(MODULES["kmtrf_core.training.runs"])}
    assert "kmtrf_core.training.executor" not in imported


MAX_MODULE_LINES = 600
"""A module a newcomer can read in one sitting; a longer one is split by idea (or, in the book, by chapter)."""


@pytest.mark.parametrize("path", SOURCES, ids=[_name(p) for p in SOURCES])
def test_no_module_is_longer_than_600_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{_name(path)} has {lines} lines"


BOOK_DIR = PACKAGE.parent / "book"
PLUMBING = {"catalog", "claims", "comparisons", "groups", "heldout", "plotting", "profiles", "timing", "uncertainty"}
"""The book room's modules by kind; every other module of kmtrf_core.book is one chapter's."""


def test_the_book_room_is_plumbing_by_kind_then_one_module_per_chapter():
    """``kmtrf_core/book/chNN_<notebook>.py`` for ``book/NN_<notebook>.ipynb`` (chapter 9's plateau section may
    have a module of its own, ``ch09_plateau``), each tested in ``tests/test_book_chNN_<...>.py``."""
    notebooks = {path.stem for path in BOOK_DIR.glob("*.ipynb")}
    tests = PACKAGE.parent / "tests"
    for path in (PACKAGE / "book").glob("*.py"):
        name = path.stem
        if name == "__init__" or name in PLUMBING:
            continue
        assert name.startswith("ch"), f"kmtrf_core/book/{path.name}: neither plumbing ({sorted(PLUMBING)}) nor a chapter"
        number = name[2:4]
        chapter = [nb for nb in notebooks if nb.startswith(f"{number}_")]
        assert chapter, f"kmtrf_core/book/{path.name}: no notebook book/{number}_*.ipynb"
        assert name in (f"ch{chapter[0]}", f"ch{number}_plateau"), f"{path.name} should be named ch{chapter[0]}.py"
        assert (tests / f"test_book_{name}.py").exists(), f"no tests/test_book_{name}.py"


SHARED_RESULTS = {"14_dissimilarity": {"kmtrf_core.book.ch11_generalization": {"family_generalization"}}}
"""Where a chapter imports another chapter's module, and what: chapter 14 correlates EMDs with the family
table of chapter 11 (recomputed from the same catalog runs, so both chapters show the same numbers)."""


def test_a_chapter_imports_only_its_own_module_and_the_listed_shared_results():
    import json

    for path in sorted(BOOK_DIR.glob("*.ipynb")):
        code = "\n".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"]
                         if cell["cell_type"] == "code")
        tree = ast.parse("\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!"))))
        number = path.stem.split("_", 1)[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kmtrf_core.book.ch"):
                if node.module.startswith(f"kmtrf_core.book.ch{number}_"):
                    continue
                allowed = SHARED_RESULTS.get(path.stem, {}).get(node.module, set())
                names = {alias.name for alias in node.names}
                assert names <= allowed, f"{path.name} imports {sorted(names - allowed)} from {node.module}"


def test_chapter_modules_do_not_import_each_other():
    for path in (PACKAGE / "book").glob("ch*.py"):
        for module, *_ in _imports(path):
            assert not module.startswith("kmtrf_core.book.ch"), f"{_name(path)} imports {module}"
