"""Rewrite closed forms into the shapes the literature prints.

SymPy's ``simplify`` is slow and its output unpredictable; these rewrites are cheap and
deterministic: expand, then factor a chosen monomial (``sbh``) or collect in a symbol (``l``).

>>> from memderive.symbolic.dims import a, b, h, s
>>> str(factor_out(34*s*b*h + 5*a*s**2*b, s*b*h))
'(b*h*s)*(5*a*s/h + 34)'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from memderive.symbolic.lazy import lazy

if TYPE_CHECKING:
    import sympy as sp
else:
    sp = lazy("sympy")


__all__ = ["closed_form", "factor_out", "collect_in"]


def closed_form(expr: Any, relations: Mapping[Any, Any] = {}) -> sp.Expr:
    """Apply size relations (``d_h -> h/a``) and expand into a canonical polynomial (SymPy).

    ``expr`` and the relations may be engine expressions (``symbolic.expr``) or SymPy ones.
    """
    rules = {sp.sympify(k): sp.sympify(v) for k, v in relations.items()}
    return sp.expand(sp.sympify(expr).xreplace(rules))


def factor_out(expr: Any, monomial: Any) -> sp.Expr:
    """``expr`` as ``monomial * (...)``, unevaluated, e.g. ``sbh(34 + 5as/h)``."""
    expr, monomial = sp.sympify(expr), sp.sympify(monomial)
    inner = sp.expand(sp.expand(expr) / monomial)
    if inner == 0:
        return sp.Integer(0)
    return sp.Mul(monomial, inner, evaluate=False)


def collect_in(expr: Any, symbol: Any) -> sp.Expr:
    """Group the terms of ``expr`` by powers of ``symbol``: ``l(12h^2 + 13h) + Vh + ...``."""
    return sp.collect(sp.expand(sp.sympify(expr)), sp.sympify(symbol))
