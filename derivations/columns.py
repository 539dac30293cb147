"""Arithmetic that reads the same on one layout's numbers and on columns of layouts, so that the time model is one
code: ``estimate --gpu`` runs it on Python ints and floats, ``plan`` on the layouts of one structure at once
(``derivations.search.columns``: NumPy ``object`` arrays holding the same Python ints and floats, so every cell is
computed by the same Python operation as the scalar path, to the bit).

Python's ``max``, ``min`` and ``a if c else b`` branch on one value; these helpers do the same on a scalar and cell by
cell on a column. A plain ``if`` on a per-layout value is left as it is: on a column it holds when every layout of
the structure agrees (``Column.__bool__``) and raises otherwise, so a branch the structure does not fix cannot pass
silently. No NumPy is imported unless a column is given (the cold path of ``estimate`` imports none).

>>> maximum(0.0, -1.5), maximum(2, 3, 1), minimum(4, 8), where(3 > 2, "a", "b")
(0.0, 3, 4, 'a')
"""

from __future__ import annotations

from functools import cache
from typing import Any

from memderive.symbolic.errors import DerivationError
from memderive.symbolic.lazy import lazy

np = lazy("numpy")

__all__ = ["maximum", "minimum", "where", "is_column", "ColumnBranch", "column_class"]

_SCALARS = (int, float)


def is_column(x: Any) -> bool:
    """Whether ``x`` is a column of layouts (a NumPy array), not one number."""
    return not isinstance(x, _SCALARS) and hasattr(x, "__array_ufunc__")


def where(cond: Any, a: Any, b: Any) -> Any:
    """``a if cond else b``, cell by cell on a column."""
    if not is_column(cond):
        return a if cond else b
    return _column(np.where(cond, a, b))


def maximum(a: Any, *rest: Any) -> Any:
    """``max(a, *rest)`` (the first of equal values, as Python's), cell by cell on columns."""
    out = a
    for x in rest:
        out = where(x > out, x, out) if is_column(x) or is_column(out) else max(out, x)
    return out


def minimum(a: Any, *rest: Any) -> Any:
    """``min(a, *rest)`` (the first of equal values, as Python's), cell by cell on columns."""
    out = a
    for x in rest:
        out = where(x < out, x, out) if is_column(x) or is_column(out) else min(out, x)
    return out


def _column(values: Any) -> Any:
    """An ``object`` column of Python numbers (NumPy's int64/float64 cells converted exactly)."""
    return values.astype(object).view(column_class())


class ColumnBranch(DerivationError):
    """A branch on a per-layout value that the rows of one structure do not share."""


@cache
def column_class() -> type:
    """``Column`` (``search.columns``), the class built on first use: it subclasses NumPy's array, and NumPy is
    imported only when a column is (the cold path of ``estimate`` imports none)."""

    class Column(np.ndarray):
        """Per-layout values of one structure's rows: an ``object`` array of Python numbers. Its truth value is its
        rows' when they all agree (a branch the structure fixes), else ``ColumnBranch``."""

        def __bool__(self) -> bool:
            truths = set(map(bool, self.ravel().tolist()))
            if len(truths) != 1:
                raise ColumnBranch("a branch on a value the layouts of one structure do not share")
            return truths.pop()

    return Column
