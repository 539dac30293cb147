"""``Expr`` evaluated exactly over NumPy grids of sizes: integer terms summed into one polynomial first
(rounding an integer changes nothing), each fractional term (a ZeRO shard ``P/d``, an int4 byte count)
rounded up on its own, as ``Quantity.term_ints`` does; ``int64`` where a bound computed in Python
integers proves every intermediate value fits, else ``object`` arrays of Python ints.

>>> import numpy as np
>>> from memderive.symbolic.dims import b, d, s
>>> plan = grid_plan([2 * b * s, 12 * b / d])
>>> plan.run({"b": np.array([[1], [2]]), "s": np.array([[3, 4]]), "d": 8}).tolist()  # 6 + ceil(12/8) = 8
[[8, 10], [15, 19]]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from memderive.symbolic.errors import DerivationError
from memderive.symbolic.expr import Expr, Node, Sym

__all__ = ["GridPlan", "grid_plan", "GridError", "INT64_MAX"]

INT64_MAX = 2**63 - 1


class GridError(DerivationError):
    """An expression the grid cannot evaluate exactly (a term that divides by a Min/Max/ceiling)."""


def grid_plan(terms: list[Expr]) -> GridPlan:
    """The terms of one quantity, ready to evaluate over a grid (``GridPlan.run``)."""
    return GridPlan.build(terms)


@dataclass(frozen=True, slots=True)
class GridPlan:
    """One quantity, ready to evaluate: the integer terms summed into one polynomial, the fractional
    terms (rounded up one by one) kept apart."""

    whole: Expr
    fractional: tuple[Expr, ...]

    @staticmethod
    def build(terms: list[Expr]) -> GridPlan:
        whole = Expr({})
        fractional = []
        for term in terms:
            if _integral(term):
                whole = whole + term
            else:
                fractional.append(term)
        return GridPlan(whole, tuple(fractional))

    def run(self, env: Mapping[str, np.ndarray]) -> Any:
        total = _rational(self.whole, env)[0]
        for term in self.fractional:
            num, den = _rational(term, env)
            total = total + (-((-num) // den))
        return total


def _integral(x: Expr) -> bool:
    """Whole-valued at every size: integer coefficients, no division by a size, whole-valued nodes."""
    for mono, c in x.monomials():
        if type(c) is not int:
            return False
        for atom, e in mono:
            if e < 0 or (type(atom) is Node and atom.kind != "ceiling" and not all(map(_integral, atom.args))):
                return False
    return True


def _rational(x: Expr, env: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
    """``x`` over the grid as ``(numerators, denominators)``: integer arrays or ints. Division by a swept
    size (``l/p``, ``P/d``) moves into the denominator: each monomial is multiplied by the highest power
    of that size the term divides by."""
    nodes: dict[Any, tuple[Any, Any]] = {}
    coeffs: dict[tuple, Fraction | int] = {}
    shift: dict[Any, int] = {}
    for mono, c in x.monomials():
        scaled: Fraction | int = c
        for atom, e in mono:
            if type(atom) is Node:
                if atom not in nodes:
                    nodes[atom] = _node(atom, env)
                den = nodes[atom][1]
                if e < 0 or isinstance(den, np.ndarray):
                    raise GridError(f"cannot sweep: a term divides by {atom.kind}(...) or by a fraction in it")
                scaled = scaled / Fraction(den) ** e if den != 1 else scaled
            elif e < 0:
                shift[atom] = max(shift.get(atom, 0), -e)
        coeffs[mono] = scaled
    if shift:
        coeffs = {_shifted(mono, shift): c for mono, c in coeffs.items()}
    den = math.lcm(*(Fraction(c).denominator for c in coeffs.values())) if coeffs else 1
    ints = {mono: int(c * den) for mono, c in coeffs.items()}
    values = {atom: vals for atom, (vals, _) in nodes.items()}
    values.update({atom: env[atom.name] for mono in ints for atom, _ in mono if type(atom) is Sym})
    denominator: Any = den
    for atom, k in shift.items():
        denominator = denominator * env[atom.name] ** k
    return _polynomial(ints, values), denominator


def _shifted(mono: tuple, shift: Mapping[Any, int]) -> tuple:
    powers = dict(mono)
    for atom, k in shift.items():
        powers[atom] = powers.get(atom, 0) + k
    return tuple((atom, e) for atom, e in powers.items() if e)


def _node(atom: Node, env: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
    parts = [_rational(arg, env) for arg in atom.args]
    if atom.kind == "ceiling":
        num, under = parts[0]
        return -((-num) // under), 1
    den: Any
    if all(isinstance(d, int) for _, d in parts):
        den = math.lcm(*(d for _, d in parts))
    else:
        den = math.prod(d for _, d in parts)
    scaled = [num * (den // d) for num, d in parts]
    pick = np.minimum if atom.kind == "Min" else np.maximum
    out = scaled[0]
    for other in scaled[1:]:
        out = pick(out, other)
    return out, den


def _polynomial(coeffs: dict[tuple, int], values: Mapping[Any, Any]) -> Any:
    """An integer polynomial over the grid, exact: int64 when a bound in Python ints proves it fits."""
    if not coeffs:
        return 0
    high = {atom: int(np.max(np.abs(v))) if isinstance(v, np.ndarray) else abs(int(v)) for atom, v in values.items()}
    bound = sum(abs(c) * math.prod(high[atom] ** e for atom, e in mono) for mono, c in coeffs.items())
    if bound > INT64_MAX:
        values = {atom: v.astype(object) if isinstance(v, np.ndarray) else int(v) for atom, v in values.items()}
    return _horner(coeffs, values)


def _horner(coeffs: dict[tuple, int], values: Mapping[Any, Any]) -> Any:
    """Group by the powers of the atom with the fewest distinct powers (ties: the longest axis), so that
    the inner sums stay on fewer axes and the full grid is touched once per power."""
    atoms = {atom for mono in coeffs for atom, _ in mono}
    if not atoms:
        return sum(coeffs.values())

    def cost(atom: Any) -> tuple[int, int]:
        powers = {dict(mono).get(atom, 0) for mono in coeffs}
        size = values[atom].size if isinstance(values[atom], np.ndarray) else 1
        return len(powers), -size

    pivot = min(atoms, key=cost)
    groups: dict[int, dict[tuple, int]] = {}
    for mono, c in coeffs.items():
        powers = dict(mono)
        e = powers.pop(pivot, 0)
        rest = tuple(item for item in mono if item[0] != pivot)
        groups.setdefault(e, {})[rest] = c
    total: Any = 0
    for e, sub in sorted(groups.items()):
        inner = _horner(sub, values)
        total = total + (inner if e == 0 else values[pivot] ** e * inner)
    return total
