"""Book hygiene: notebooks, table of contents, bibliography, CI entry point.

Fast, no heavy imports: only json, re and PyYAML (which jupyter-book brings).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
MARKDOWN = sorted(BOOK.glob("*.md"))


def _load_script(path: Path):
    """Import a script that is not in a package (tools/, tests_browser/) by its path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


colab_cell = _load_script(ROOT / "tools" / "colab_cell.py")
# the one walker of _toc.yml, shared with the staging of make test's build and the browser tests
toc_files = _load_script(ROOT / "tests_browser" / "stage_book.py").toc_files


def _read_nb(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))


# --- notebooks ---------------------------------------------------------------------

nb_param = pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])


@nb_param
def test_notebook_committed_without_outputs(nb_path):
    nb = _read_nb(nb_path)
    dirty = [
        i for i, cell in enumerate(nb["cells"])
        if cell.get("cell_type") == "code"
        and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, f"{nb_path.name}: cells {dirty} have outputs or an execution_count; strip them"


# the HTML book shows code cells at about 90 characters before a reader has to scroll sideways
MAX_CODE_LINE = 88
# chapter globals a reader cannot decode (issue 11); names such as `profile`, `sizes` read instead
CRYPTIC_GLOBALS = {"P", "S", "S4", "G", "L", "CA", "DS"}


@nb_param
def test_code_lines_fit_the_page(nb_path):
    long = [
        (i, line) for i, cell in enumerate(_read_nb(nb_path)["cells"]) if cell.get("cell_type") == "code"
        for line in _source(cell).splitlines() if len(line) > MAX_CODE_LINE
    ]
    assert not long, f"{nb_path.name}: code lines over {MAX_CODE_LINE} characters: {long[:3]}"


@nb_param
def test_chapter_globals_have_readable_names(nb_path):
    assigned = set()
    for cell in _read_nb(nb_path)["cells"]:
        if cell.get("cell_type") == "code":
            assigned |= set(re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)\s*=(?!=)", _source(cell), flags=re.M))
    assert not assigned & CRYPTIC_GLOBALS, f"{nb_path.name}: {sorted(assigned & CRYPTIC_GLOBALS)}"


@nb_param
def test_notebook_uses_standard_python3_kernel(nb_path):
    kernelspec = _read_nb(nb_path).get("metadata", {}).get("kernelspec", {})
    assert kernelspec.get("name") == "python3", f"{nb_path.name}: kernelspec.name is {kernelspec.get('name')!r}"


@nb_param
def test_first_code_cell_is_the_colab_setup_cell(nb_path):
    code_cells = [c for c in _read_nb(nb_path)["cells"] if c.get("cell_type") == "code"]
    assert code_cells, f"{nb_path.name}: no code cell"
    expected = colab_cell.colab_cell_source()
    assert _source(code_cells[0]).rstrip("\n") == expected, (
        f"{nb_path.name}: first code cell differs from the Colab set-up cell derived from "
        f"_config.yml; run `python tools/colab_cell.py --fix {nb_path.relative_to(ROOT)}`"
    )


def test_colab_cell_is_derived_from_config():
    repo = _config()["repository"]
    url, branch = str(repo["url"]).rstrip("/"), str(repo["branch"])
    source = colab_cell.colab_cell_source()
    assert f'"kmtrf_core @ git+{url}@{branch}"' in source
    lines = source.splitlines()
    install_lines = [line for line in lines if '"pip", "install"' in line or "subprocess.run" in line]
    assert len(install_lines) == 2
    # The install runs only in the `else:` of a try-import of google.colab: every line after
    # `else:` belongs to that block.
    assert "    import google.colab  # noqa: F401  (importable only on Colab)" in lines
    assert "except ImportError:" in lines
    after_else = lines[lines.index("else:") + 1:]
    assert all(line in after_else for line in install_lines)
    assert all(line.startswith("    ") for line in after_else)
    compile(source, "<colab cell>", "exec")


def test_colab_cell_does_nothing_off_colab():
    import subprocess
    import sys

    calls = []
    fake_subprocess = type(sys)("subprocess")
    fake_subprocess.run = lambda *a, **k: calls.append(a)
    saved = sys.modules.get("subprocess")
    sys.modules["subprocess"] = fake_subprocess
    try:
        exec(colab_cell.colab_cell_source(), {})
    finally:
        sys.modules["subprocess"] = saved if saved is not None else subprocess
    assert calls == [], "the Colab cell tried to install outside Colab"


def _run_colab_cell(monkeypatch, on_colab: bool) -> list:
    """Execute the Colab cell with a stand-in subprocess (and google.colab when ``on_colab``)."""
    import sys

    calls = []
    fake_subprocess = type(sys)("subprocess")
    fake_subprocess.run = lambda *a, **k: calls.append(a)
    monkeypatch.setitem(sys.modules, "subprocess", fake_subprocess)
    if on_colab:
        monkeypatch.setitem(sys.modules, "google", type(sys)("google"))
        monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    else:
        monkeypatch.setitem(sys.modules, "google.colab", None)  # None: the import fails
    exec(colab_cell.colab_cell_source(), {})
    return calls


def test_colab_cell_leaves_the_profile_alone_off_colab(monkeypatch, capsys):
    import os

    monkeypatch.delenv("KMTRF_PROFILE", raising=False)
    assert _run_colab_cell(monkeypatch, on_colab=False) == []
    assert "KMTRF_PROFILE" not in os.environ
    assert capsys.readouterr().out == ""


def test_colab_cell_on_colab_runs_quick_unless_a_profile_is_chosen(monkeypatch, capsys):
    # issue: chapter 9 opened alone on Colab trained the book profile's runs one after another
    import os

    monkeypatch.delenv("KMTRF_PROFILE", raising=False)
    assert len(_run_colab_cell(monkeypatch, on_colab=True)) == 1  # the pip install
    assert os.environ["KMTRF_PROFILE"] == "quick"
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2, lines
    assert "KMTRF_PROFILE=quick" in lines[0] and "os.environ['KMTRF_PROFILE'] = 'book'" in lines[0]
    assert "HTML book" in lines[1] and "cell outputs" in lines[1]  # {glue:text} stays raw on Colab

    monkeypatch.setenv("KMTRF_PROFILE", "paper")
    _run_colab_cell(monkeypatch, on_colab=True)
    assert os.environ["KMTRF_PROFILE"] == "paper"
    assert "KMTRF_PROFILE=paper" in capsys.readouterr().out


# --- table of contents -------------------------------------------------------------

TOC_FILES = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8")))


def _resolve(entry: str) -> list[Path]:
    path = ROOT / entry
    if path.suffix in {".md", ".ipynb"}:
        return [path] if path.exists() else []
    return [p for p in (path.with_suffix(".md"), path.with_suffix(".ipynb")) if p.exists()]


def test_toc_is_not_empty():
    assert TOC_FILES, "_toc.yml lists no file"


@pytest.mark.parametrize("entry", TOC_FILES)
def test_toc_entry_exists(entry):
    found = _resolve(entry)
    assert len(found) == 1, f"_toc.yml entry {entry!r}: expected one .md or .ipynb file, found {found}"


def test_every_notebook_is_in_toc():
    listed = {p.resolve() for entry in TOC_FILES for p in _resolve(entry)}
    missing = [p.name for p in NOTEBOOKS if p.resolve() not in listed]
    assert not missing, f"notebooks not listed in _toc.yml: {missing}"


# --- bibliography ------------------------------------------------------------------

BIB_KEY = re.compile(r"^\s*@\s*(?!comment|string|preamble)\w+\s*\{\s*([^,\s]+)\s*,", re.I | re.M)
CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def _bib_keys() -> list[str]:
    return BIB_KEY.findall((ROOT / "references.bib").read_text(encoding="utf-8"))


def _markdown_texts() -> list[tuple[str, str]]:
    texts = [(p.name, p.read_text(encoding="utf-8")) for p in MARKDOWN]
    for nb_path in NOTEBOOKS:
        for i, cell in enumerate(_read_nb(nb_path)["cells"]):
            if cell.get("cell_type") == "markdown":
                texts.append((f"{nb_path.name} cell {i}", _source(cell)))
    return texts


def test_bibliography_keys_are_unique():
    keys = _bib_keys()
    assert keys, "references.bib: no entry found"
    duplicates = sorted({k for k in keys if keys.count(k) > 1})
    assert not duplicates, f"references.bib: duplicate keys {duplicates}"


def test_every_citation_is_in_bibliography():
    keys = set(_bib_keys())
    unknown = []
    for where, text in _markdown_texts():
        for group in CITE.findall(text):
            unknown += [(where, key.strip()) for key in group.split(",") if key.strip() not in keys]
    assert not unknown, f"citations missing from references.bib: {unknown}"


def test_config_points_at_the_bibliography():
    bibfiles = _config().get("bibtex_bibfiles", [])
    assert bibfiles, "_config.yml: bibtex_bibfiles is empty"
    for name in bibfiles:
        assert (ROOT / name).exists(), f"_config.yml names a missing bib file {name!r}"


# --- CI runs what the README says --------------------------------------------------

def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^\s*make test\b", readme, re.M), "README.md does not give `make test`"
    ci_lines = [
        line.strip() for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    assert "make test" in ci_lines, ".ci/run does not run `make test`"


def test_api_page_documents_every_module():
    package = ROOT / "kmtrf_core"
    modules = {".".join(("kmtrf_core", *p.relative_to(package).with_suffix("").parts))
               for p in package.rglob("*.py")
               if "__pycache__" not in p.parts and p.stem not in ("__init__", "__main__")}
    documented = set(re.findall(r"^\.\. automodule:: (\S+)", (BOOK / "api.md").read_text(), flags=re.M))
    assert modules - documented == set(), f"modules missing from book/api.md: {sorted(modules - documented)}"
    assert documented - modules == set(), f"book/api.md names unknown modules: {sorted(documented - modules)}"


# --- "What we found": every number comes from the run ---------------------------------

_QUOTED = re.compile(r"\{glue:[a-z]+\}`[^`]*`|\$\$.*?\$\$|\$[^$]*\$|`[^`]*`|\{[a-z]+\}`[^`]*`", re.S)
_CITED = re.compile(r"(?:Figures?|Sections?|[Cc]hapters?|Eqs?\.|Tables?|Appendix|Theorems?|Propositions?|"
                    r"Definitions?|Part|Algorithm|Fig\.)\s+[A-Z]?\d+(?:\.\d+)?(?:\s*(?:and|to|,)\s*\d+)*")
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:[.,]\d+)*%?")
_LEVEL = re.compile(r"\b95% (?=interval|CI|confidence)")  # the stated confidence level, a method constant


def _found_sections(nb_path: Path) -> list:
    cells = [_source(c) for c in _read_nb(nb_path)["cells"] if c.get("cell_type") == "markdown"]
    return [text for text in cells if text.lstrip().startswith("## What we found")]


def _typed_numbers(text: str) -> list:
    """Numbers in prose that are neither glued, math, code nor a citation of the paper."""
    plain = _LEVEL.sub(" ", _CITED.sub(" ", _QUOTED.sub(" ", text)))
    return _NUMBER.findall(plain)


def test_the_typed_number_detector():
    text = ("The layer reached {glue:text}`x:.3f` after $T = 10$ steps (Figure 7, Section 4 and chapter 16), "
            "`probe_steps`, on its 95% interval; it was 0.93 at step 4000 and 12% faster.")
    assert _typed_numbers(text) == ["0.93", "4000", "12%"]


@nb_param
def test_what_we_found_quotes_the_run(nb_path):
    # issue 24, part 5: the paragraph cannot disagree with the ledger when its numbers are glued
    for text in _found_sections(nb_path):
        assert not _typed_numbers(text), f"{nb_path.name}: typed numbers in 'What we found': {_typed_numbers(text)}"
