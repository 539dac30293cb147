"""Heavy third-party modules, loaded on first use: the one way memderive defers an import.

A module that needs SymPy, NumPy, matplotlib, Jinja, nbformat, torch, transformers or PEFT binds it at its top
with ``sp = lazy("sympy")``: a stand-in that imports the real module at the first attribute read (``sp.Symbol``)
and from then on holds its namespace. Every memderive module imports its memderive dependencies at its top and
runs no third-party import while it is imported, so importing one is cheap, and a run imports only the heavy
modules its path uses (the cold ``estimate`` path none: ``tests/test_cold_path.py``). Where a type checker reads
the module (symbolic/, under mypy), the binding sits under ``if TYPE_CHECKING: import sympy as sp`` / ``else:``.
A standard-library module that a cold path should not pay for is bound the same way (``difflib``, which
``tests/test_cold_path.py`` keeps off the cold estimate; ``logging`` in the traced modules, which it imports untraced).
A module's own tables of SymPy objects (the checker's symbol tables) are ``functools.cache``'d functions, and the
module keeps their names readable through ``__getattr__ = lazy_names(__name__, WIDTH=width)``: built on first read.

>>> colorsys = lazy("colorsys")  # any module: nothing imported yet
>>> "rgb_to_hsv" in vars(colorsys)
False
>>> colorsys.rgb_to_hsv(1.0, 0.0, 0.0)  # the first read imports it
(0.0, 1.0, 1.0)
>>> "rgb_to_hsv" in vars(colorsys)
True
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from types import ModuleType
from typing import Any

__all__ = ["lazy", "lazy_names"]


class _Lazy(ModuleType):
    """A module's stand-in: the first attribute read imports it and copies its namespace in."""

    def __getattr__(self, attr: str) -> Any:
        module = import_module(self.__name__)
        self.__dict__.update(module.__dict__)  # later reads find the names without this method
        return getattr(module, attr)


def lazy(name: str) -> Any:
    """A stand-in for the module ``name`` (``"sympy"``, ``"numpy"``, ``"sympy.printing.latex"``) that imports it
    on first use."""
    return _Lazy(name)


def lazy_names(module: str, **builders: Callable[[], Any]) -> Callable[[str], Any]:
    """A module's ``__getattr__``: each name in ``builders`` reads as its builder's (cached) result, built on the
    first read, so that importing the module builds none of them.

    >>> getattr_ = lazy_names("m", SQUARES=lambda: [i * i for i in range(4)])
    >>> getattr_("SQUARES")
    [0, 1, 4, 9]
    >>> getattr_("CUBES")
    Traceback (most recent call last):
    AttributeError: module 'm' has no attribute 'CUBES'
    """

    def __getattr__(name: str) -> Any:
        if name in builders:
            return builders[name]()
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
