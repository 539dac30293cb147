"""Each test's kind, read from the source with ``ast`` (nothing imported), for the markers of conftest.py.

* ``reference``: the test loads torch, transformers, PEFT or accelerate: its module imports one at the
  top (directly or through a helper module of tests/ that does), or the test, a fixture it uses or a
  function of its module it calls imports one or uses a name bound to one;
* ``slow``: otherwise, the test runs something end to end in another process or kernel: a subprocess
  (the command line as installed, LaTeX, ruff and mypy), or a notebook executed by a Jupyter kernel; or it
  is a hypothesis property test (``@given``: a hundred examples, each a derivation); or it is marked
  ``@pytest.mark.slow`` by hand (an in-process test measured at over a second: conftest.py's summary names
  every ``fast`` test that took longer, so a new one is found);
* ``fast``: everything else, pure in-process unit tests.

>>> source = '''
... import subprocess
... def _cli(*args):
...     return subprocess.run(args)
... def helper():
...     import torch
... def test_a(): _cli("x")
... def test_b(): helper()
... def test_c(): assert 1 + 1 == 2
... @given(st.integers())
... def test_e(x): assert x == x
... '''
>>> kinds = module_kinds(source)
>>> kinds.of("test_a"), kinds.of("test_b"), kinds.of("test_c"), kinds.of("test_e")
('slow', 'reference', 'fast', 'slow')
>>> module_kinds("import torch\\ndef test_d(): pass\\n").of("test_d")
'reference'
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

__all__ = ["KINDS", "HEAVY", "ModuleKinds", "module_kinds", "file_kinds"]

#: The markers, each with the help text pyproject registers.
KINDS = ("fast", "reference", "slow")
#: Libraries whose import makes a test a cross-check against the reference implementation.
HEAVY = frozenset({"torch", "transformers", "peft", "accelerate"})
#: Modules and names that run something in another process or kernel.
SLOW_MODULES = frozenset({"subprocess", "nbclient", "nbconvert", "jupyter_client"})
SLOW_NAMES = frozenset({("memderive.notebooks.bundled", "execute")})
TESTS = Path(__file__).resolve().parent


def _root(module: str) -> str:
    return module.split(".")[0]


def _bindings(nodes: list[ast.stmt] | list[ast.AST]) -> dict[str, tuple[str, str | None]]:
    """``name -> (module, imported name or None)`` for the imports among ``nodes`` (not nested)."""
    out: dict[str, tuple[str, str | None]] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                out[(alias.asname or alias.name).split(".")[0]] = (alias.name, None)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                out[alias.asname or alias.name] = (node.module, alias.name)
    return out


@cache
def _helper_is_heavy(name: str) -> bool:
    """A helper module of tests/ (``hf_meta``) that imports a heavy library at its top, or a heavy helper."""
    path = TESTS / f"{name}.py"
    if not path.is_file():
        return False
    tree = ast.parse(path.read_text())
    return any(_is_heavy(module) for module, _ in _bindings(tree.body).values())


def _is_heavy(module: str) -> bool:
    """A heavy library, or a helper of tests/ that imports one (``hf_meta`` or ``tests.hf_meta``)."""
    helper = module.removeprefix("tests.")
    return _root(module) in HEAVY or ("." not in helper and _helper_is_heavy(helper))


def _is_slow(module: str, name: str | None) -> bool:
    return _root(module) in SLOW_MODULES or (module, name) in SLOW_NAMES


def _kind_of_binding(module: str, name: str | None) -> str | None:
    return "reference" if _is_heavy(module) else "slow" if _is_slow(module, name) else None


@dataclass
class ModuleKinds:
    """The kind of each top-level function or method of one test module (``of``)."""

    whole: str | None
    direct: dict[str, str | None] = field(default_factory=dict)
    calls: dict[str, set[str]] = field(default_factory=dict)

    def of(self, name: str, fixtures: tuple[str, ...] = ()) -> str:
        """``reference`` over ``slow`` over ``fast``: the test, its module's functions it reaches, its fixtures."""
        if self.whole is not None:
            return self.whole
        seen: set[str] = set()
        todo = [name, *fixtures]
        found: set[str] = set()
        while todo:
            current = todo.pop()
            if current in seen or current not in self.calls:
                continue
            seen.add(current)
            if self.direct.get(current):
                found.add(self.direct[current])  # type: ignore[arg-type]
            todo.extend(self.calls[current])
        return "reference" if "reference" in found else "slow" if "slow" in found else "fast"


def _is_property_test(node: ast.AST) -> bool:
    """Decorated with hypothesis' ``@given(...)`` (or ``@hypothesis.given(...)``)."""
    for decorator in getattr(node, "decorator_list", ()):
        func = decorator.func if isinstance(decorator, ast.Call) else decorator
        if getattr(func, "id", getattr(func, "attr", None)) == "given":
            return True
    return False


def _functions(tree: ast.Module) -> dict[str, ast.AST]:
    """Top-level functions, and methods as ``Class.method`` (and plain ``method`` when unambiguous)."""
    out: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    out[f"{node.name}.{item.name}"] = item
                    out.setdefault(item.name, item)
    return out


def module_kinds(source: str) -> ModuleKinds:
    """The kinds of one module's functions (see the module docstring)."""
    tree = ast.parse(source)
    top = _bindings(tree.body)
    if any(_is_heavy(module) for module, _ in top.values()):
        return ModuleKinds("reference")
    functions = _functions(tree)
    kinds = ModuleKinds(None)
    for name, node in functions.items():
        nested = list(ast.walk(node))
        local = _bindings(nested)
        marks = {_kind_of_binding(module, imported) for module, imported in local.values()}
        used = {n.id for n in nested if isinstance(n, ast.Name)}
        marks |= {_kind_of_binding(*top[n]) for n in used if n in top and n not in local}
        if _is_property_test(node):
            marks.add("slow")
        kinds.direct[name] = "reference" if "reference" in marks else "slow" if "slow" in marks else None
        kinds.calls[name] = {n for n in used if n in functions and n != name}
    return kinds


@cache
def file_kinds(path: str) -> ModuleKinds:
    return module_kinds(Path(path).read_text())
