"""The tour notebook: ``notebooks/tour.md`` (prose and command lines) made into ``notebooks/tour.ipynb``, executed.

``notebooks/tour.md`` is the tour's one source. Markdown between fences becomes Markdown cells; a fenced block
whose info string is ``memderive`` (at the start of a line) becomes one code cell that runs each of its lines as
``%memderive LINE`` (a line magic the tour's first cell defines: the command line run in the kernel); a
``python`` block becomes a code cell as written. ``python -m memderive.notebooks.tour`` rebuilds and executes it;
``tests/test_notebooks.py`` checks the committed notebook against a fresh build and a fresh run.

>>> cells = tour_cells("Intro\\n\\n```memderive\\nmodels\\ngpus\\n```\\n\\n```python\\nx = 1\\n```\\n")
>>> [(c.cell_type, c.source) for c in cells]
[('markdown', 'Intro'), ('code', '%memderive models\\n%memderive gpus'), ('code', 'x = 1')]
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memderive.notebooks.bundled import ROOT, execute, write
from memderive.symbolic.lazy import lazy

nbv4 = lazy("nbformat.v4")

__all__ = ["SOURCE", "TOUR", "tour_cells", "tour", "build"]

SOURCE = ROOT / "notebooks" / "tour.md"
TOUR = ROOT / "notebooks" / "tour.ipynb"
_FENCE = re.compile(r"^```(memderive|python)\n(.*?)^```$", re.M | re.S)


def tour_cells(text: str) -> list[Any]:
    """The cells of a tour written as Markdown with ``memderive`` and ``python`` fenced blocks."""
    cells, at = [], 0
    for block in _FENCE.finditer(text):
        prose = text[at:block.start()].strip()
        if prose:
            cells.append(nbv4.new_markdown_cell(prose))
        lines = [line for line in block.group(2).splitlines() if line.strip()]
        code = "\n".join(f"%memderive {line}" for line in lines) if block.group(1) == "memderive" else "\n".join(lines)
        cells.append(nbv4.new_code_cell(code))
        at = block.end()
    if text[at:].strip():
        cells.append(nbv4.new_markdown_cell(text[at:].strip()))
    return cells


def tour(source: str | Path = SOURCE) -> Any:
    """The tour notebook (not executed), with stable cell ids."""
    nb = nbv4.new_notebook(cells=tour_cells(Path(source).read_text()))
    for i, cell in enumerate(nb.cells):
        cell.id = f"tour-{i}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def build(path: str | Path = TOUR) -> Path:
    """Rebuild and execute the tour (from the repository root, where its relative paths point) and write it."""
    return write(execute(tour(), cwd=ROOT), path, force=True)


def main(argv: Sequence[str] = ()) -> int:
    print(build(argv[0] if argv else TOUR))
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
