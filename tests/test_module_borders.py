"""Module borders, read from the source with ``ast`` (nothing imported): no module imports another
module's underscore name, the floors point one way (symbolic <- derivations <- render, and the floors inside
derivations/ and render/ below), and no import closes a loop among the project's modules.

Every import counts, at any depth (inside functions too), and so does a string naming a project module (the
modules ``memderive``'s ``__getattr__`` and the command line's dispatcher import by name). Imports sit at a module's
top: none inside a function but a memderive one under a ``# lazy:`` comment (``function_imports``).

Each rule is checked against a hand-written bad module too, so a checker that sees nothing fails.
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Folder -> installed package (pyproject's package-dir).
PACKAGES = {"symbolic": "memderive.symbolic", "derivations": "memderive.derivations", "render": "memderive"}
#: What each floor may import of the package (itself included).
FLOORS = {"symbolic": ("memderive.symbolic",),
          "derivations": ("memderive.symbolic", "memderive.derivations"),
          "render": ("memderive",)}


#: The floors inside a folder, lowest first, by module prefix; a module no prefix names is on the first floor. A
#: module imports its own floor and those below: the catalog (models, options and their tables, hardware) is below
#: the quantities, which are below ``estimate.py``, which is below what consumes whole estimates (the planner, the
#: claim checker, other tools' conventions). In render/: shared argument handling, then documents, figures, the
#: Python API, notebooks, the commands, and the package itself.
INNER_FLOORS = {
    "derivations": (("memderive.derivations.quantities",), ("memderive.derivations.estimate",),
                    ("memderive.derivations.search", "memderive.derivations.claims", "memderive.derivations.conventions"),
                    ("memderive.derivations",)),
    "render": (("memderive.documents",), ("memderive.figures",), ("memderive.api",), ("memderive.notebooks",),
               ("memderive.commands",), ("memderive", "memderive.__main__")),
    "symbolic": (),
}


def module_name(folder: str, path: Path) -> str:
    """The installed name of ``path`` (a file under ``folder``): ``render/commands/cli.py`` is ``memderive.commands.cli``."""
    parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PACKAGES[folder], *parts])


def inner_floor(folder: str, module: str) -> int:
    """The floor of ``module`` inside ``folder`` (0: the lowest); a package is its own ``__init__``'s floor."""
    best, depth = 0, -1
    for level, prefixes in enumerate(INNER_FLOORS[folder], 1):
        for prefix in prefixes:
            exact = prefix == PACKAGES[folder]  # the package's name covers its __init__ only
            if (module == prefix or (not exact and module.startswith(prefix + "."))) and prefix.count(".") > depth:
                best, depth = level, prefix.count(".")
    return best


def _modules() -> list[tuple[str, Path]]:
    return [(folder, path) for folder in PACKAGES for path in sorted((ROOT / folder).rglob("*.py"))]


def _imports(source: str) -> list[tuple[int, str, str | None]]:
    """``(line, module, name)`` of every ``from memderive... import name`` and ``import memderive...``
    (name None), at any depth (imports inside functions count)."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(_parsed(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "memderive":
            out += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name, None) for alias in node.names
                    if alias.name.split(".")[0] == "memderive"]
    return sorted(out, key=lambda item: item[0])


@lru_cache(maxsize=512)
def _parsed(source: str) -> ast.Module:
    return ast.parse(source)


def _named_modules(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of each string constant that is a dotted memderive module name (imported by name)."""
    return [(node.lineno, node.value) for node in ast.walk(_parsed(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"memderive(\.\w+)+", node.value)]


def edges(source: str, known: set[str]) -> list[tuple[int, str]]:
    """``(line, module)``: every project module ``source`` imports, at any depth, or names as a string; ``from
    package import name`` is the submodule where ``package.name`` is one, else the package."""
    out = []
    for line, module, name in _imports(source):
        target = f"{module}.{name}" if name is not None and f"{module}.{name}" in known else module
        while target not in known and "." in target:
            target = target.rpartition(".")[0]
        out.append((line, target))
    out += [(line, name) for line, name in _named_modules(source) if name in known]
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The loops of ``graph`` (module -> modules it imports): each strongly connected set of more than one module,
    or a module importing itself, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1 or v in graph.get(v, ()):
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def inner_floor_violations(folder: str, module: str, source: str, known: set[str]) -> list[str]:
    """Imports of a higher floor inside ``folder`` (a quantity importing ``estimate``, a document a command)."""
    mine = inner_floor(folder, module)
    return [f"line {line}: {target}" for line, target in edges(source, known)
            if _folder_of(target) == folder and inner_floor(folder, target) > mine]


def _folder_of(module: str) -> str:
    for folder in ("symbolic", "derivations"):
        if module == PACKAGES[folder] or module.startswith(PACKAGES[folder] + "."):
            return folder
    return "render"


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


def function_imports(source: str) -> list[str]:
    """Import statements inside a function body (at any depth), but a ``from memderive... import`` right under a
    ``# lazy:`` comment (issue 36: a memderive module that would make a cold path heavier, loaded where it is
    needed). Every other import sits at the module's top, a heavy third-party module bound there with
    ``symbolic.lazy.lazy`` (a docstring's ``>>>`` lines are a string, not statements)."""
    lines = source.splitlines()
    return [f"line {sub.lineno}: {ast.unparse(sub)}" for sub in _imports_in_functions(_parsed(source))
            if not (isinstance(sub, ast.ImportFrom) and (sub.module or "").split(".")[0] == "memderive"
                    and lines[sub.lineno - 2].strip().startswith("# lazy:"))]


def _imports_in_functions(node: ast.AST, inside: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements under ``node`` that sit inside a function (``inside``: ``node`` is in one), in order."""
    out: list[ast.Import | ast.ImportFrom] = []
    for child in ast.iter_child_nodes(node):
        if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
            out.append(child)
        out += _imports_in_functions(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return out


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


def test_the_loop_and_inner_floor_checks_see_bad_modules() -> None:
    known = {"memderive.derivations.estimate", "memderive.derivations.quantities.serving",
             "memderive.derivations.quantities", "memderive.derivations", "memderive.commands.cli",
             "memderive.commands.estimate", "memderive.documents.text", "memderive"}
    serving = "def f():\n    from memderive.derivations.estimate import estimate\n"
    assert edges(serving, known) == [(2, "memderive.derivations.estimate")]
    assert inner_floor_violations("derivations", "memderive.derivations.quantities.serving", serving, known) == [
        "line 2: memderive.derivations.estimate"]
    assert inner_floor_violations("derivations", "memderive.derivations.estimate",
                                  "from memderive.derivations.quantities import serving\n", known) == []
    # a document importing a command, named by a string (as the dispatcher names them)
    assert inner_floor_violations("render", "memderive.documents.text", 'M = ("memderive.commands.estimate",)\n',
                                  known) == ["line 1: memderive.commands.estimate"]
    assert inner_floor("render", "memderive") == 6 and inner_floor("render", "memderive.arguments") == 0
    assert inner_floor("derivations", "memderive.derivations") == 4
    assert inner_floor("derivations", "memderive.derivations.options") == 0
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}, "b": set()}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def _graph() -> dict[str, set[str]]:
    modules = {module_name(folder, path): path for folder, path in _modules()}
    known = set(modules)
    return {name: {target for _, target in edges(path.read_text(), known) if target != name}
            for name, path in modules.items()}


def test_no_import_closes_a_loop() -> None:
    graph = _graph()
    assert sum(map(len, graph.values())) > 500  # the graph is read (about 800 imports among 200 modules)
    assert cycles(graph) == []


@pytest.mark.parametrize("folder,path", _modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_imports_point_down_the_inner_floors(folder: str, path: Path) -> None:
    known = {module_name(f, p) for f, p in _modules()}
    assert inner_floor_violations(folder, module_name(folder, path), path.read_text(), known) == []


@pytest.mark.parametrize("folder,path", _modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_no_private_name_crosses_a_module_border(folder: str, path: Path) -> None:
    assert private_imports(path.read_text()) == []


@pytest.mark.parametrize("folder,path", _modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_imports_point_down_the_floors(folder: str, path: Path) -> None:
    assert floor_violations(folder, path.read_text()) == []


def test_function_imports_sees_a_bad_module() -> None:
    bad = ('"""\n>>> import json\n"""\n'
           "import os\n"
           "def f():\n    import json\n    from torch.utils import _pytree\n"
           "    # lazy: the time model, with a --gpu only\n    from memderive.derivations.quantities import device\n"
           "    # lazy: not ours, so not allowed\n    import torch\n"
           "    from memderive.symbolic import dims\n"
           "class C:\n    def g(self):\n        def h():\n            import heapq\n")
    assert function_imports(bad) == ["line 6: import json", "line 7: from torch.utils import _pytree",
                                     "line 11: import torch", "line 12: from memderive.symbolic import dims",
                                     "line 16: import heapq"]
    assert function_imports("import json\nfrom memderive.symbolic.lazy import lazy\ntorch = lazy('torch')\n") == []


@pytest.mark.parametrize("folder,path", _modules(), ids=lambda x: str(x.relative_to(ROOT)) if isinstance(x, Path) else x)
def test_imports_sit_at_the_module_top(folder: str, path: Path) -> None:
    assert function_imports(path.read_text()) == []
