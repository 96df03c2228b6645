import ast
import dataclasses
import json
from pathlib import Path

import pytest
import torch

from kmtrf_core import default_device
from kmtrf_core.book import PROFILES, Sizes, get_profile
from kmtrf_core.book.profiles import LloydSizes
from kmtrf_core.device import resolve_device

BOOK = Path(__file__).resolve().parents[1] / "book"


def test_every_profile_defines_the_same_chapters_with_one_class_each():
    names = list(PROFILES)
    assert names == ["quick", "book", "paper"]
    reference = PROFILES["book"]
    for name in names:
        assert set(PROFILES[name]) == set(reference), name
        for chapter, sizes in reference.items():
            assert type(PROFILES[name][chapter]) is type(sizes), (name, chapter)
            assert isinstance(sizes, Sizes) and dataclasses.is_dataclass(sizes)
    assert len({type(sizes) for sizes in reference.values()}) == len(reference)


def test_sizes_are_frozen_and_typed():
    sizes = get_profile("quick").chapter("lloyd")
    with pytest.raises(dataclasses.FrozenInstanceError):
        sizes.k = 99
    with pytest.raises(TypeError, match="LloydSizes.k must be int"):
        LloydSizes(n=10, d=2, k=3.0, steps=5, tasks=4)
    with pytest.raises(TypeError, match="must be int"):
        LloydSizes(n=10, d=2, k=True, steps=5, tasks=4)  # a bool is not a size
    with pytest.raises(TypeError):
        LloydSizes(n=10, d=2, k=3, steps=5)  # a missing size
    assert [name for name, _ in sizes.items()] == [f.name for f in dataclasses.fields(LloydSizes)]


def test_environment_variable_selects_the_profile(monkeypatch):
    monkeypatch.delenv("KMTRF_PROFILE", raising=False)
    assert get_profile().name == "book"
    monkeypatch.setenv("KMTRF_PROFILE", "quick")
    assert get_profile().name == "quick"
    assert get_profile("paper").name == "paper"  # an explicit name wins
    monkeypatch.setenv("KMTRF_PROFILE", "huge")
    with pytest.raises(ValueError, match="profile"):
        get_profile()


def test_chapter_sizes_and_description():
    p = get_profile("quick")
    s = p.chapter("construction")
    assert s.table_k <= s.table_n
    assert "quick" in p.describe() and "table_k=" in p.describe("construction")
    with pytest.raises(ValueError, match="chapter"):
        p.chapter("nonexistent")


def test_quick_is_never_larger_than_book():
    for chapter, sizes in PROFILES["quick"].items():
        for key, value in sizes.items():
            other = getattr(PROFILES["book"][chapter], key)
            if isinstance(value, int) and not isinstance(value, bool) and key not in ("d", "k", "n"):
                assert value <= other, (chapter, key)


@pytest.mark.parametrize("available,expected", [(True, "cuda"), (False, "cpu")])
def test_device_is_cuda_when_available_else_cpu(monkeypatch, available, expected):
    # both branches on any machine: torch.device("cuda") is a name, building it needs no GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    assert default_device().type == expected
    assert resolve_device(None).type == expected
    assert get_profile().device.type == expected
    assert get_profile("quick").device.type == expected
    assert resolve_device("cpu").type == "cpu"  # an explicit device wins


def _chapter_call(node):
    """The chapter name of ``<...>.chapter("name")``, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "chapter"
            and len(node.args) == 1 and isinstance(node.args[0], ast.Constant)):
        return node.args[0].value
    return None


def size_reads(source: str) -> list[tuple[str, str]]:
    """``(chapter, size)`` for every size a piece of code reads: ``x = p.chapter("c")`` then ``x.size``,
    or ``p.chapter("c").size`` directly."""
    tree = ast.parse(source)
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            chapter = _chapter_call(node.value)
            if chapter is not None:
                names[node.targets[0].id] = chapter
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in names:
                reads.append((names[node.value.id], node.attr))
            elif _chapter_call(node.value) is not None:
                reads.append((_chapter_call(node.value), node.attr))
    return reads


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code":
            lines += [line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!"))]
    return "\n".join(lines)


def test_size_reads_are_found():
    code = 'sizes = profile.chapter("lloyd")\nprint(sizes.k, sizes.items())\nget_profile().chapter("cost").n'
    assert sorted(size_reads(code)) == [("cost", "n"), ("lloyd", "items"), ("lloyd", "k")]
    assert sum(len(size_reads(_notebook_code(path))) for path in BOOK.glob("*.ipynb")) > 50


@pytest.mark.parametrize("path", sorted(BOOK.glob("*.ipynb")), ids=lambda p: p.name)
def test_every_size_a_chapter_reads_exists(path):
    reads = size_reads(_notebook_code(path))
    profile = get_profile("quick")
    for chapter, name in reads:
        sizes = profile.chapter(chapter)
        assert hasattr(sizes, name), f"{path.name} reads {chapter}.{name}, which {type(sizes).__name__} lacks"
