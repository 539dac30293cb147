"""The layouts of one structure as columns: one derivation, each number of every layout evaluated at once.

``plan`` compares thousands of layouts that share a few hundred structures (``estimate.structure_key``: what fixes
the graph). ``layout_columns`` groups rows by structure and gives, per group, a ``LayoutColumns``: an estimate
(``quantity.Evaluated``) whose options and values hold, for each field the rows vary (b, t, p, d, m, v, cp), a
``Column`` (a NumPy ``object`` array of the rows' Python ints). Its numbers are the grid evaluation
(``symbolic.grid``) of the structure's closed forms, exact. The time model (``quantities.timing.step_time``) then
runs once per group on the columns: the same code ``estimate --gpu`` runs on one layout, each cell computed by the
same Python operation (object arrays apply Python's ``+``, ``*``, ``/`` cell by cell), so a row's time equals
``estimate``'s to the bit.

A plain ``if`` on a column holds when every row agrees (``Column.__bool__``) and raises ``ColumnBranch``
otherwise; branches that differ row by row go through ``derivations.columns`` (``where``, ``maximum``, ``minimum``).

>>> import numpy as np
>>> c = column([2, 4, 8])
>>> bool(c > 1), (c * 3 / 4).tolist(), type(c[0]).__name__
(True, [1.5, 3.0, 6.0], 'int')
>>> bool(c > 2)
Traceback (most recent call last):
...
memderive.derivations.columns.ColumnBranch: a branch on a value the layouts of one structure do not share
"""

from __future__ import annotations

import itertools
import operator
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

from memderive.derivations.columns import ColumnBranch, column_class, is_column, where
from memderive.derivations.estimate import SWITCHES, Estimate, estimate, stage_derivations, structure_key
from memderive.derivations.models.model import Model
from memderive.derivations.option_table import OPTIONS
from memderive.derivations.options import Options, derived
from memderive.derivations.quantity import Quantity, exact_int
from memderive.symbolic.derive import evaluate
from memderive.symbolic.expr import const
from memderive.symbolic.grid import INT64_MAX, GridError, grid_plan, rational
from memderive.symbolic.lazy import lazy

np = lazy("numpy")

__all__ = ["ColumnBranch", "ColumnOptions", "ColumnValues", "LayoutColumns", "column", "layout_columns",
           "cells", "options_view"]


#: A column's type in annotations: the class itself (``column_class()``) is built on first use, with NumPy.
Column = Any


def column(values: Sequence[Any]) -> Column:
    """``values`` (Python numbers) as a ``Column``."""
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out.view(column_class())


def cells(x: Any, n: int) -> list[Any]:
    """The ``n`` rows' values of a column or of one value shared by all (a Python number each)."""
    return list(x) if is_column(x) else [x] * n


def _int64(x: Any) -> bool:
    """An int64 array, or a Python int whose value and negation int64 holds."""
    if isinstance(x, np.ndarray):
        return x.dtype == np.int64
    return isinstance(x, int) and -INT64_MAX <= x <= INT64_MAX


def _as_column(values: Any) -> Any:
    """A grid result (int, int64 array, ``WideArray``, object array) as a Python int or a ``Column`` of them."""
    if isinstance(values, int) or np.ndim(values) == 0:
        return int(values)
    return values.astype(object).view(column_class())


class ColumnOptions:
    """``Options`` of the rows of one structure: ``columns`` for the fields the rows vary, the representative's
    value for the rest; its methods and properties are ``Options``' own, run on the columns. ``dataclasses.replace``
    works on it (``__dataclass_fields__``), as the time model replaces fields (``whole_model``)."""

    __dataclass_fields__ = Options.__dataclass_fields__

    def __init__(self, **values: Any) -> None:
        columns = {k: v for k, v in values.items() if is_column(v)}
        rep = Options(**{k: (v[0] if k in columns else v) for k, v in values.items()})
        object.__setattr__(self, "_rep", rep)
        object.__setattr__(self, "_columns", columns)

    @staticmethod
    def of(rep: Options, columns: Mapping[str, Column]) -> ColumnOptions:
        out = object.__new__(ColumnOptions)
        object.__setattr__(out, "_rep", rep)
        object.__setattr__(out, "_columns", dict(columns))
        return out

    def __getattr__(self, name: str) -> Any:
        """A column, a property or method of ``Options`` run on the columns, or the representative's value; kept in
        the instance's ``__dict__`` (it is frozen), so that the next read is a plain attribute's."""
        columns = object.__getattribute__(self, "_columns")
        if name in columns:
            value = columns[name]
        else:
            attr = getattr(Options, name, None)
            if isinstance(attr, property):
                value = attr.fget(self)
            elif isinstance(attr, types.FunctionType):
                value = types.MethodType(attr, self)
            else:
                value = getattr(object.__getattribute__(self, "_rep"), name)
        self.__dict__[name] = value
        return value

    def derived(self, **changes: Any) -> ColumnOptions:
        """``options.derived``: the representative's options derived, the columns of the fields changed dropped."""
        columns = {k: v for k, v in self._columns.items() if k not in changes}
        columns.update((k, v) for k, v in changes.items() if is_column(v))
        rep = derived(self._rep, **{k: (v[0] if is_column(v) else v) for k, v in changes.items()})
        return ColumnOptions.of(rep, columns)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("ColumnOptions is frozen")

    def __repr__(self) -> str:
        return f"ColumnOptions({self._rep!r}, columns={sorted(self._columns)})"


class ColumnValues(dict):
    """Symbol -> value of the rows of one structure (a ``Column`` where the rows differ); ``whole`` evaluates an
    expression as ``int(evaluate(expr, values))`` does, for every row at once."""

    def __init__(self, values: Mapping[Any, Any], n: int) -> None:
        super().__init__(values)
        self.n = n
        self.env = {k.name: (np.asarray(list(v), dtype=np.int64) if is_column(v) else v) for k, v in values.items()}
        # equal values (the rows of the ZeRO stages of one layout, say) share one key: results are memoized by it
        key = tuple(sorted((k, (v.tobytes(),) if isinstance(v, np.ndarray) else v) for k, v in self.env.items()))
        if key not in _ENV_KEYS:
            if len(_ENV_KEYS) > _MEMO:
                _ENV_KEYS.clear()
                _RESULTS.clear()
            _ENV_KEYS[key] = next(_KEY_IDS)
        self.key = _ENV_KEYS[key]

    def rows(self) -> Iterator[dict[Any, Any]]:
        """Each row's values as ``estimate`` binds them (for what the grid cannot evaluate)."""
        for i in range(self.n):
            yield {k: (v[i] if is_column(v) else v) for k, v in self.items()}

    def whole(self, expr: Any) -> Any:
        """``int(evaluate(expr, row))`` of every row (truncated toward zero)."""
        return _memo(("whole", id(expr), self.key), expr, lambda: self._whole(expr))

    def _whole(self, expr: Any) -> Any:
        try:
            num, den = rational(const(expr), self.env)
        except GridError:
            return _as_column(np.array([int(evaluate(expr, row)) for row in self.rows()], dtype=object))
        if _int64(num) and _int64(den) and (isinstance(num, np.ndarray) or isinstance(den, np.ndarray)):
            # int64 (the grid proved the numerators fit): truncated in int64, then Python ints, as below
            return np.where((num >= 0) == (den > 0), num // den, -((-num) // den)).astype(object).view(column_class())
        num, den = _as_column(num), _as_column(den)
        if not is_column(num) and not is_column(den):
            return int(Fraction(num, den))
        return where((num >= 0) == (den > 0), num // den, -((-num) // den))

    def ceiled(self, exprs: Sequence[Any], what: str) -> Any:
        """The sum of each expression rounded up (``Quantity.value``'s rule) of every row."""
        try:
            plan = grid_plan([const(x) for x in exprs])
            return _memo(("ceiled", id(plan), self.key), plan, lambda: _as_column(plan.run(self.env)))
        except GridError:
            return _as_column(np.array([sum(exact_int(evaluate(x, row), what) for x in exprs)
                                        for row in self.rows()], dtype=object))


#: Interned keys of ``ColumnValues`` (their sizes and columns) and results by (what, object id, key), each entry
#: holding its object (so that the id stays its own); emptied past ``_MEMO`` entries.
_ENV_KEYS: dict[tuple, int] = {}
_KEY_IDS = itertools.count()  # never reused, so that a key emptied from _ENV_KEYS matches no held result
_RESULTS: dict[tuple, tuple] = {}
_MEMO = 1 << 15


def _memo(key: tuple, held: Any, compute: Any) -> Any:
    """``compute()`` once per key; a column result is made read-only, since callers share it."""
    hit = _RESULTS.get(key)
    if hit is None:
        if len(_RESULTS) > _MEMO:
            _RESULTS.clear()
        value = compute()
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
        hit = _RESULTS[key] = (held, value)
    return hit[1]


class ColumnQuantity:
    """A ``Quantity`` read over the rows of one structure."""

    def __init__(self, quantity: Quantity) -> None:
        self.quantity = quantity
        self.key = quantity.key
        self.breakdown = quantity.breakdown

    def value(self, values: ColumnValues) -> Any:
        return values.ceiled([t.expr for t in self.breakdown.terms], self.key)

    def value_where(self, values: ColumnValues, keep: Any) -> Any:
        """``Quantity.value_where`` of every row: the kept terms, each rounded up, summed in one evaluation."""
        return values.ceiled([t.expr for t in self.breakdown.terms if keep(t.path)], self.key)

    def term_ints(self, values: ColumnValues) -> list[tuple[str, Any]]:
        return [(t.path, values.ceiled([t.expr], t.path)) for t in self.breakdown.terms]


class LayoutColumns:
    """The rows of one structure (and, with uneven stages, one reported stage) as one estimate of columns."""

    def __init__(self, est: Estimate, columns: Mapping[str, Column], n: int) -> None:
        self.structure = est  # the representative row's estimate (its graph and quantities are every row's)
        self.model, self.graph, self.quantities = est.model, est.graph, est.quantities
        self.options = ColumnOptions.of(est.options, columns)
        values = dict(est.values)
        for o in OPTIONS:
            if o.name in columns and o.symbol is not None and o.dim in values:
                values[o.dim] = columns[o.name]
        self.values = ColumnValues(values, n)
        self.n = n

    def quantity(self, key: str) -> ColumnQuantity:
        return ColumnQuantity(self.structure.quantity(key))

    def take(self, keep: Sequence[int]) -> LayoutColumns:
        """The rows at positions ``keep`` (of this structure and stage)."""
        columns = {name: column([c[k] for k in keep]) for name, c in self.options._columns.items()}
        return LayoutColumns(self.structure, columns, len(keep))

    def number(self, key: str) -> Any:
        return self.quantity(key).value(self.values)


def options_view(base: Options, row: Mapping[str, Any]) -> Options:
    """``replace(base, **row)`` without ``Options``' checks, for reading the structure key (each group's
    representative row is checked, as ``estimate`` checks it)."""
    return derived(base, **row)


def layout_columns(model: Model, base: Options, rows: Sequence[Mapping[str, Any]]
                   ) -> Iterator[tuple[list[int], LayoutColumns]]:
    """The rows (``Options`` fields over ``base``) grouped by structure (``estimate.structure_key``): (their
    indices, their columns). With uneven pipeline stages a group splits further by the stage ``estimate`` reports
    (the most ``total_bytes``, the first of equal ones)."""
    groups: dict[tuple, list[int]] = {}
    keys: dict[tuple, tuple] = {}
    # rows that differ only in values the key reads through a switch (estimate.SWITCHES: m given or not, d, cp, ep
    # > 1), with equal switches, share a structure: the key read once for them, off a view of base and the row
    switches = {} if base.compile else SWITCHES
    names: Any = None
    for i, row in enumerate(rows):
        if names is None or row.keys() != names:  # the fields of the rows (a plan's rows all have the same)
            names, fields = row.keys(), tuple(row)
            kept = [k for k in fields if k not in switches]
            plain = operator.itemgetter(*kept) if kept else (lambda _: ())
            read = [(k, switches[k]) for k in fields if k in switches]
        short = (fields, plain(row), *[f(row[k]) for k, f in read])
        if short not in keys:
            keys[short] = structure_key(model, options_view(base, row))
        groups.setdefault(keys[short], []).append(i)
    for indices in groups.values():
        rep = estimate(model, replace(base, **rows[indices[0]]))
        columns = {}
        members = [rows[i] for i in indices]
        for name in rows[indices[0]]:
            values = list(map(operator.itemgetter(name), members))
            if values.count(values[0]) != len(values):
                columns[name] = column(values)
        stages = stage_derivations(model, rep.options)
        if len(stages) == 1:
            yield indices, LayoutColumns(rep, columns, len(indices))
            continue
        # estimate's max(stages, key=total_bytes), row by row
        everyone = LayoutColumns(rep, columns, len(indices))
        totals = [ColumnQuantity(next(q for q in qs if q.key == "total_bytes")).value(everyone.values)
                  for _, qs in stages]
        best, most = 0, totals[0]
        for j, t in enumerate(totals[1:], 1):
            more = t > most
            best, most = where(more, j, best), where(more, t, most)
        chosen = cells(best, len(indices))
        for j, (graph, quantities) in enumerate(stages):
            mine = [k for k, c in enumerate(chosen) if c == j]
            if mine:
                est = Estimate(rep.model, rep.options, graph, quantities, rep.values)
                sub = {name: column([c[k] for k in mine]) for name, c in columns.items()}
                yield [indices[k] for k in mine], LayoutColumns(est, sub, len(mine))
