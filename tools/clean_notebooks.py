"""Put chapter notebooks into their committed form.

Clears outputs, execution counts and per-cell execution metadata, drops
authoring-tool metadata (jupytext), and declares the standard ``python3``
kernel. ``tests/test_book_hygiene.py`` checks the result.

Usage::

    python tools/clean_notebooks.py book/*.ipynb
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}
LANGUAGE_INFO = {"name": "python"}


def clean(path: Path) -> bool:
    """Clean one notebook in place; return whether it changed."""
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    nb["metadata"] = {"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO}
    for cell in nb["cells"]:
        meta = {key: value for key, value in cell.get("metadata", {}).items() if key == "tags"}
        cell["metadata"] = meta
        cell.pop("id", None)
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    nb["nbformat"], nb["nbformat_minor"] = 4, 4
    new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if new != text:
        path.write_text(new, encoding="utf-8")
        return True
    return False


def main(argv: list[str]) -> int:
    for name in argv:
        if clean(Path(name)):
            print(f"{name}: cleaned")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
