"""Module borders, read from the source with ``ast`` (nothing imported): no module imports another
module's underscore name, and the floors point one way (symbolic <- derivations <- render).

Each rule is checked against a hand-written bad module too, so a checker that sees nothing fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Folder -> installed package (pyproject's package-dir).
PACKAGES = {"symbolic": "memderive.symbolic", "derivations": "memderive.derivations", "render": "memderive"}
#: What each floor may import of the package (itself included).
FLOORS = {"symbolic": ("memderive.symbolic",),
          "derivations": ("memderive.symbolic", "memderive.derivations"),
          "render": ("memderive",)}


def _modules() -> list[tuple[str, Path]]:
    return [(folder, path) for folder in PACKAGES for path in sorted((ROOT / folder).rglob("*.py"))]


def _imports(source: str) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every ``from memderive... import name`` and ``import memderive...``
    (name None), at any depth (imports inside functions count)."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "memderive":
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names
                    if alias.name.split(".")[0] == "memderive"]
    return sorted(out, key=lambda item: item[0])


def private_imports(source: str) -> list[str]:
    """Underscore names imported from another module of the package (dunders such as ``__version__`` aside)."""
    return [f"line {line}: {name} from {module}" for line, module, name in _imports(source)
            if name is not None and name.startswith("_") and not name.startswith("__")]


def floor_violations(folder: str, source: str) -> list[str]:
    """Imports of a higher floor: symbolic importing derivations or render, derivations importing render."""
    allowed = FLOORS[folder]
    bad = []
    for line, module, name in _imports(source):
        target = module if name is None or module != "memderive" else f"memderive.{name}"
        if not any(target == a or target.startswith(a + ".") for a in allowed):
            bad.append(f"line {line}: {target}")
    return bad


def test_the_checks_see_a_bad_module() -> None:
    bad = ("from memderive.symbolic.expr import _Node\n"
           "def f():\n    from memderive.derivations.quantities.inference import _check\n"
           "from memderive.documents.writeup import estimate_document\n")
    assert private_imports(bad) == ["line 1: _Node from memderive.symbolic.expr",
                                    "line 3: _check from memderive.derivations.quantities.inference"]
    assert floor_violations("derivations", bad) == ["line 4: memderive.documents.writeup"]
    assert floor_violations("symbolic", bad) == ["line 3: memderive.derivations.quantities.inference",
                                                 "line 4: memderive.documents.writeup"]
    assert private_imports("from memderive.symbolic.expr import Expr, __doc__\n") == []


@pytest.mark.parametrize("folder,path", _modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_no_private_name_crosses_a_module_border(folder: str, path: Path) -> None:
    assert private_imports(path.read_text()) == []


@pytest.mark.parametrize("folder,path", _modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_imports_point_down_the_floors(folder: str, path: Path) -> None:
    assert floor_violations(folder, path.read_text()) == []
