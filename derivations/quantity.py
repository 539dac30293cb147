"""A derived quantity: a breakdown by graph node, its closed form and its exact value; and what a
reader of an estimate's quantities needs of it (``Evaluated``: ``derivations.estimate.Estimate`` is one)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from memderive.symbolic.derive import Breakdown, evaluate
from memderive.symbolic.expr import Expr, named_values
from memderive.symbolic.formula import Citation
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options
from memderive.symbolic.simplify import closed_form

__all__ = ["Quantity", "Evaluated", "exact_int"]


def exact_int(value: Any, what: str) -> int:
    """An exact integer; a fractional byte count (int4 odd sizes) rounds up, never silently down.

    ``value`` is an ``int``/``Fraction`` (the engine's numbers) or a SymPy rational (render/).
    """
    if isinstance(value, int | Fraction) and not isinstance(value, bool):
        return math.ceil(value)
    if getattr(value, "is_Rational", False):
        return math.ceil(Fraction(int(value.p), int(value.q)))
    raise ValueError(f"{what} did not evaluate to a number: {value}")


@dataclass(frozen=True, slots=True)
class Quantity:
    """``key`` names it in JSON; ``breakdown`` keeps one term per producing node.

    ``form`` rewrites the closed form into the literature's shape (e.g. factor ``sbh``); it runs
    on SymPy expressions, only when ``closed_form()`` is asked for.
    """

    key: str
    title: str
    breakdown: Breakdown
    relations: Mapping[Expr, Expr]
    citation: Citation | None = None
    assumptions: tuple[str, ...] = ()
    form: object = field(default=None, compare=False)

    @property
    def unit(self) -> str:
        return self.breakdown.unit

    def closed_form(self) -> Any:
        """The SymPy closed form in the literature's shape (imports SymPy)."""
        expr = closed_form(self.breakdown.total, self.relations)
        return self.form(expr) if callable(self.form) else expr

    def formula(self) -> str:
        """The closed form as text without SymPy: relations applied, expanded (equal to ``closed_form()``
        as mathematics, not always in its shape: ``form`` rewrites are SymPy's)."""
        return str(self.breakdown.total.subs(self.relations))

    def value(self, values: Mapping[Any, int]) -> int:
        """The sum of ``term_ints``: each node holds whole bytes (a ZeRO shard of P/d parameters
        is ceil(P/d) of them), so the rows add up to the total shown."""
        return sum(value for _, value in self.term_ints(values))

    def value_where(self, values: Mapping[Any, int], keep: Any) -> int:
        """The sum of the ``term_ints`` whose path ``keep`` accepts."""
        return sum(value for path, value in self.term_ints(values) if keep(path))

    def term_ints(self, values: Mapping[Any, int]) -> list[tuple[str, int]]:
        """Each term's value in whole units (rounded up): the one rounding rule of every total and row."""
        named = named_values(values)  # keyed by name once, not once per term
        return [(t.path, exact_int(evaluate(t.expr, named), t.path)) for t in self.breakdown.terms]

    def term_values(self, values: Mapping[Any, int]) -> list[tuple[str, Any, int]]:
        """``term_ints`` with each term's closed form (SymPy), for tables."""
        return [(t.path, closed_form(t.expr, self.relations), value)
                for t, (_, value) in zip(self.breakdown.terms, self.term_ints(values))]


class Evaluated(Protocol):
    """An estimate as the modules below ``derivations.estimate`` read it (times, checks): the model, the
    options, the values bound to the symbols and each quantity by key. ``Estimate`` satisfies it, so
    these modules need not import the pipeline that imports them."""

    @property
    def model(self) -> Model: ...

    @property
    def options(self) -> Options: ...

    @property
    def values(self) -> Mapping[Expr, int]: ...

    def quantity(self, key: str) -> Quantity: ...

    def number(self, key: str) -> int: ...
