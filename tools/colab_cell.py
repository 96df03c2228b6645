"""The Colab set-up cell that opens every chapter, derived from ``_config.yml``.

The repository URL and branch are set once, in ``_config.yml`` (``repository.url``
and ``repository.branch``). This module turns them into the source of the first
code cell of each notebook, and ``tests/test_book_hygiene.py`` checks that every
chapter carries exactly that source.

Usage::

    python tools/colab_cell.py              # print the cell source
    python tools/colab_cell.py --fix book/*.ipynb   # rewrite the first code cell
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "_config.yml"


def repository(config_path: Path | str = CONFIG) -> tuple[str, str]:
    """Return ``(url, branch)`` from the ``repository`` section of ``_config.yml``."""
    with open(config_path, encoding="utf-8") as f:
        config = yaml.safe_load(f)
    repo = config.get("repository") or {}
    url, branch = repo.get("url"), repo.get("branch")
    if not url or not branch:
        raise ValueError(f"{config_path}: repository.url and repository.branch must be set")
    return str(url).rstrip("/"), str(branch)


def install_requirement(config_path: Path | str = CONFIG) -> str:
    """The pip requirement that installs kmtrf_core from the repository."""
    url, branch = repository(config_path)
    return f"kmtrf_core @ git+{url}@{branch}"


def colab_cell_source(config_path: Path | str = CONFIG) -> str:
    """Exact source of the first code cell of every chapter (no trailing newline).

    The guard is a try-import: ``importlib.util.find_spec("google.colab")`` raises
    ModuleNotFoundError (instead of returning None) where no ``google`` package exists.
    On Colab the cell also makes ``quick`` the profile unless ``KMTRF_PROFILE`` is set
    (at ``book`` a chapter opened alone trains every layer it lacks, one after another),
    and prints which profile runs, how to choose another, and that the values
    the prose quotes (``{glue:text}``) show in the HTML book, not on Colab.
    """
    requirement = install_requirement(config_path)
    return (
        "# Colab set-up: install kmtrf_core from the repository; elsewhere this does nothing.\n"
        "import os, subprocess, sys\n"
        "try:\n"
        "    import google.colab  # noqa: F401  (importable only on Colab)\n"
        "except ImportError:\n"
        "    pass\n"
        "else:\n"
        f'    requirement = "{requirement}"\n'
        '    pip = [sys.executable, "-m", "pip", "install", "-q", requirement]\n'
        "    subprocess.run(pip, check=True)\n"
        "    # quick unless chosen: at `book` a chapter trains its layers one by one (Preface)\n"
        '    os.environ.setdefault("KMTRF_PROFILE", "quick")\n'
        """    print(f"Profile: KMTRF_PROFILE={os.environ['KMTRF_PROFILE']}. For the HTML book's "\n"""
        """          "sizes run os.environ['KMTRF_PROFILE'] = 'book' (slow, see the Preface), "\n"""
        """          "then the cells below.")\n"""
        '    print("Numbers the text quotes show in the HTML book; here, read the cell outputs.")'
    )


def _source_text(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def fix_notebook(path: Path | str, config_path: Path | str = CONFIG) -> bool:
    """Make the first code cell of ``path`` the Colab set-up cell.

    If the notebook has no code cell, or its first code cell is not a set-up cell
    (it does not mention ``google.colab``), a new cell is inserted before the first
    code cell. Returns True when the file changed.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    source = colab_cell_source(config_path)
    cells = nb.setdefault("cells", [])
    first = next((i for i, c in enumerate(cells) if c.get("cell_type") == "code"), None)
    if first is not None and "google.colab" in _source_text(cells[first]):
        cell = cells[first]
        if _source_text(cell) == source:
            return False
        cell["source"] = source.splitlines(keepends=True)
    else:
        cell = {
            "cell_type": "code",
            "execution_count": None,
            "metadata": {},
            "outputs": [],
            "source": source.splitlines(keepends=True),
        }
        if nb.get("nbformat", 4) >= 4 and nb.get("nbformat_minor", 0) >= 5:
            import uuid

            cell["id"] = uuid.uuid4().hex[:8]
        cells.insert(first if first is not None else len(cells), cell)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", nargs="+", metavar="NOTEBOOK",
                        help="rewrite the first code cell of these notebooks")
    args = parser.parse_args(argv)
    if not args.fix:
        print(colab_cell_source())
        return 0
    for nb_path in args.fix:
        changed = fix_notebook(nb_path)
        print(f"{nb_path}: {'fixed' if changed else 'already up to date'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
