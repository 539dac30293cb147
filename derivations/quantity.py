"""A derived quantity: a breakdown by graph node, its closed form and its exact value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import sympy as sp

from symbolic.derive import Breakdown, evaluate
from symbolic.formula import Citation
from symbolic.simplify import closed_form

__all__ = ["Quantity", "exact_int"]


def exact_int(value: sp.Expr, what: str) -> int:
    """An exact integer; a fractional byte count (int4 odd sizes) rounds up, never silently down."""
    if not value.is_Rational:
        raise ValueError(f"{what} did not evaluate to a number: {value}")
    return int(sp.ceiling(value))


@dataclass(frozen=True, slots=True)
class Quantity:
    """``key`` names it in JSON; ``breakdown`` keeps one term per producing node.

    ``form`` rewrites the closed form into the literature's shape (e.g. factor ``sbh``).
    """

    key: str
    title: str
    breakdown: Breakdown
    relations: Mapping[sp.Symbol, sp.Expr]
    citation: Citation | None = None
    assumptions: tuple[str, ...] = ()
    form: object = field(default=None, compare=False)

    @property
    def unit(self) -> str:
        return self.breakdown.unit

    def closed_form(self) -> sp.Expr:
        expr = closed_form(self.breakdown.total, self.relations)
        return self.form(expr) if self.form is not None else expr

    def value(self, values: Mapping[sp.Symbol, int]) -> int:
        """The sum of ``term_ints``: each node holds whole bytes (a ZeRO shard of P/d parameters
        is ceil(P/d) of them), so the rows add up to the total shown."""
        return sum(value for _, value in self.term_ints(values))

    def term_ints(self, values: Mapping[sp.Symbol, int]) -> list[tuple[str, int]]:
        """Each term's value in whole units (rounded up): the one rounding rule of every total and row."""
        return [(t.path, exact_int(evaluate(t.expr, values), t.path)) for t in self.breakdown.terms]

    def term_values(self, values: Mapping[sp.Symbol, int]) -> list[tuple[str, sp.Expr, int]]:
        """``term_ints`` with each term's closed form, for tables."""
        return [(t.path, closed_form(t.expr, self.relations), value)
                for t, (_, value) in zip(self.breakdown.terms, self.term_ints(values))]
