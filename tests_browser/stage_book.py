"""Stage a copy of the book's sources for `make test`, with notebook execution off.

`make test` executes every chapter once: nbmake runs the notebooks of this copy and
writes their outputs into it (``--overwrite``), then ``jupyter-book build`` renders the
copy from those stored outputs, and the browser tests open the result. The committed
notebooks in ``book/`` stay output-free.

What is copied is read from the book's own configuration, so that a new chapter folder,
bibliography or static folder needs no change here:

- ``_config.yml`` and ``_toc.yml``;
- every top-level folder that holds a ``_toc.yml`` entry (``book/``);
- the ``bibtex_bibfiles``, the ``sphinx.config.html_static_path`` folders (the local
  MathJax, see ``make mathjax``), ``html_extra_path`` entries, the ``sphinx.local_extensions``
  folders, and ``logo`` / ``html.favicon`` if set.

The copy's ``_config.yml`` is the original with ``execute.execute_notebooks: "off"``.

Usage::

    python tests_browser/stage_book.py DEST      # DEST must not exist
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns("_build", ".ipynb_checkpoints", "__pycache__", "*.pyc", ".DS_Store")


def toc_files(node) -> list[str]:
    """Every ``root`` / ``file`` entry of a sphinx-external-toc tree."""
    files = []
    if isinstance(node, dict):
        files += [str(node[key]) for key in ("root", "file") if key in node]
        for value in node.values():
            if isinstance(value, (list, dict)):
                files += toc_files(value)
    elif isinstance(node, list):
        for item in node:
            files += toc_files(item)
    return files


def sources_to_copy(root: Path = ROOT) -> list[str]:
    """Paths, relative to ``root``, that the book build reads."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8")) or {}
    paths = ["_config.yml", "_toc.yml"]
    for entry in toc_files(toc):
        parts = Path(entry).parts
        # a chapter in a folder: copy the folder (with its images and data);
        # a chapter at the top level: copy the file itself
        paths += [parts[0]] if len(parts) > 1 else [p.name for p in root.glob(f"{entry}.*")]
    sphinx_config = (config.get("sphinx") or {}).get("config") or {}
    paths += [str(p) for p in config.get("bibtex_bibfiles") or []]
    paths += [str(p) for p in sphinx_config.get("html_static_path") or []]
    paths += [str(p) for p in sphinx_config.get("html_extra_path") or []]
    paths += [str(p) for p in ((config.get("sphinx") or {}).get("local_extensions") or {}).values()]
    for key in (config.get("logo"), (config.get("html") or {}).get("favicon")):
        if key and "://" not in str(key):
            paths.append(str(key))
    return list(dict.fromkeys(paths))  # unique, in order


def stage(dest: Path, root: Path = ROOT) -> list[str]:
    if dest.exists():
        raise SystemExit(f"{dest} exists; remove it first (make test does)")
    paths = sources_to_copy(root)
    missing = [p for p in paths if not (root / p).exists()]
    if missing:
        raise SystemExit(
            f"missing, needed by the book build: {missing} "
            "(the local MathJax folder comes from `make mathjax`)"
        )
    dest.mkdir(parents=True)
    for rel in paths:
        src, target = root / rel, dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, target, ignore=IGNORE)
        else:
            shutil.copy2(src, target)

    config_path = dest / "_config.yml"
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    config.setdefault("execute", {})["execute_notebooks"] = "off"
    config_path.write_text(
        "# Staged by tests_browser/stage_book.py from the repository's _config.yml:\n"
        "# the notebooks here already hold nbmake's outputs, so the build does not execute them.\n"
        + yaml.safe_dump(config, sort_keys=False, allow_unicode=True, width=100),
        encoding="utf-8",
    )
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="folder to create (must not exist)")
    args = parser.parse_args(argv)
    copied = stage(args.dest)
    print(f"staged {', '.join(copied)} into {args.dest} (execute_notebooks: off)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
