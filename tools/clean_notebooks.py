"""Put chapter notebooks into their committed form.

Clears outputs, execution counts and per-cell metadata other than ``tags``, drops
notebook metadata other than the standard ``python3`` kernel (authoring-tool
metadata such as jupytext's), and keeps everything else as committed: cell ids,
the ``nbformat_minor`` (4.4 notebooks have no cell ids, 4.5 ones have one per
cell; a 4.5 cell without one gets a new id), and the order of the kernelspec's
keys when its values are already the standard ones. A notebook already in this
form is left byte for byte. ``tests/test_book_hygiene.py`` checks the result.

Usage::

    python tools/clean_notebooks.py book/*.ipynb           # clean in place
    python tools/clean_notebooks.py --check book/*.ipynb   # list what would change, exit 1 if any
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
LANGUAGE_INFO = {"name": "python"}


def cleaned(text: str) -> str:
    """The committed form of a notebook's JSON text (the layout of ``json.dump(indent=1)``)."""
    nb = json.loads(text)
    metadata = {"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO}
    if nb.get("metadata") != metadata:  # dict equality: the committed key order is kept
        nb["metadata"] = metadata
    with_ids = (nb.get("nbformat", 4), nb.get("nbformat_minor", 0)) >= (4, 5)
    for cell in nb["cells"]:
        cell["metadata"] = {key: value for key, value in cell.get("metadata", {}).items() if key == "tags"}
        if with_ids and not cell.get("id"):
            cell["id"] = uuid.uuid4().hex[:8]
        elif not with_ids:
            cell.pop("id", None)  # nbformat 4.4 has no cell ids
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def clean(path: Path, write: bool = True) -> bool:
    """Clean one notebook in place (unless ``write`` is false); return whether it changed."""
    text = Path(path).read_text(encoding="utf-8")
    new = cleaned(text)
    if new == text:
        return False
    if write:
        Path(path).write_text(new, encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/clean_notebooks.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path, metavar="NOTEBOOK", help="notebooks to clean")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; list the notebooks that are not clean and exit 1 if any")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    dirty = []
    for path in args.notebooks:
        try:
            changed = clean(path, write=not args.check)
        except (json.JSONDecodeError, KeyError) as err:
            parser.error(f"{path}: not a notebook ({err})")
        if changed:
            dirty.append(path)
            print(f"{path}: {'not clean' if args.check else 'cleaned'}")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
