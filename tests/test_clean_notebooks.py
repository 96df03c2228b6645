"""tools/clean_notebooks.py: the committed form of a notebook, and its command line."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))

_spec = importlib.util.spec_from_file_location("clean_notebooks", ROOT / "tools" / "clean_notebooks.py")
clean_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(clean_notebooks)


def _dump(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def _notebook(minor: int, ids: bool) -> dict:
    cells = [
        {"cell_type": "markdown", "metadata": {"jupyter": {"source_hidden": True}}, "source": ["# Title"]},
        {"cell_type": "code", "execution_count": 3, "metadata": {"tags": ["hide-input"], "scrolled": True},
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["1\n"]}], "source": ["print(1)"]},
    ]
    if ids:
        for i, cell in enumerate(cells):
            cell["id"] = f"cell{i}"
    metadata = {"jupytext": {"formats": "ipynb,py"},
                "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": minor}


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_notebooks_are_left_byte_for_byte(nb_path):
    text = nb_path.read_text(encoding="utf-8")
    assert clean_notebooks.cleaned(text) == text, f"run python tools/clean_notebooks.py {nb_path.name}"


def test_cleaning_keeps_cell_ids_and_the_format_version():
    nb = json.loads(clean_notebooks.cleaned(_dump(_notebook(5, ids=True))))
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 5)
    assert [cell["id"] for cell in nb["cells"]] == ["cell0", "cell1"]
    code = nb["cells"][1]
    assert code["outputs"] == [] and code["execution_count"] is None
    assert code["metadata"] == {"tags": ["hide-input"]} and nb["cells"][0]["metadata"] == {}
    assert nb["metadata"] == {"kernelspec": clean_notebooks.KERNELSPEC, "language_info": {"name": "python"}}


def test_a_cell_without_id_gets_one_in_nbformat_4_5_and_none_in_4_4():
    nb = _notebook(5, ids=True)
    del nb["cells"][1]["id"]
    ids = [cell.get("id") for cell in json.loads(clean_notebooks.cleaned(_dump(nb)))["cells"]]
    assert ids[0] == "cell0" and ids[1] and ids[1] != "cell0"
    old = json.loads(clean_notebooks.cleaned(_dump(_notebook(4, ids=True))))
    assert old["nbformat_minor"] == 4 and all("id" not in cell for cell in old["cells"])


def test_cleaning_twice_changes_nothing_the_second_time(tmp_path):
    path = tmp_path / "nb.ipynb"
    path.write_text(_dump(_notebook(5, ids=True)), encoding="utf-8")
    assert clean_notebooks.clean(path) is True
    first = path.read_text(encoding="utf-8")
    assert clean_notebooks.clean(path) is False and path.read_text(encoding="utf-8") == first


def test_command_line_help_check_and_a_missing_file(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        clean_notebooks.main(["--help"])
    assert exit_info.value.code == 0 and "--check" in capsys.readouterr().out
    path = tmp_path / "nb.ipynb"
    dirty = _dump(_notebook(5, ids=True))
    path.write_text(dirty, encoding="utf-8")
    assert clean_notebooks.main(["--check", str(path)]) == 1
    assert path.read_text(encoding="utf-8") == dirty  # --check writes nothing
    assert clean_notebooks.main([str(path)]) == 0
    assert clean_notebooks.main(["--check", str(path)]) == 0
    with pytest.raises(SystemExit) as exit_info:
        clean_notebooks.main([str(tmp_path / "missing.ipynb")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().endswith("no such notebook: " + str(tmp_path / "missing.ipynb"))
