"""Exact sweeps: every quantity of ``estimate`` over a grid of step sizes and layouts, as NumPy arrays.

``sweep(model, batch=range(1, 1001), seq=range(128, 131073, 128), mode="train")`` derives the model once
per structure (``derivations.estimate`` caches derivations), binds every size that is not swept, and
evaluates each node's term as a polynomial over the grid with NumPy: integer terms are summed as one
polynomial first (rounding an integer changes nothing), each fractional term (a ZeRO shard ``P/d``, an
int4 byte count) is rounded up on its own, as ``Quantity.term_ints`` does, so every entry equals
``estimate(...).number(key)`` at that point, to the byte. Arrays are ``int64`` where a bound computed in
Python integers proves every intermediate value fits, else ``object`` arrays of Python ints.

The step sizes ``batch``, ``seq`` and ``new_tokens`` are array axes; the layout degrees ``tp``, ``pp``,
``dp`` and ``micro_batches`` are looped over (each combination is checked as ``estimate`` checks it).

>>> out = sweep("gpt2", mode="train", batch=[1, 2], seq=[512, 1024])
>>> out["total_bytes"].shape, int(out["total_bytes"][1, 0])
((2, 2), 2899173376)
>>> estimate("gpt2", mode="train", batch=2, seq=512).number("total_bytes")
2899173376
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from memderive.derivations.estimate import estimate, resolve_model, structure_key
from memderive.derivations.options import Options, OptionsError
from memderive.symbolic.dims import b, n, s
from memderive.symbolic.expr import Expr, _Node, _Sym

__all__ = ["sweep", "SWEEPABLE", "SweepError"]

#: Options that may be given as 1-D sequences; the first three are array axes, the others loops.
SWEEPABLE = ("batch", "seq", "new_tokens", "tp", "pp", "dp", "micro_batches")
AXES = {"batch": b, "seq": s, "new_tokens": n}
_INT64_MAX = 2**63 - 1
_PLANS: dict[tuple, dict[str, _Plan]] = {}


class SweepError(OptionsError):
    """A sweep that cannot be evaluated as asked (bad sequences, an option that cannot be swept)."""


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence | range | np.ndarray) and not isinstance(value, str)


def _grid_values(name: str, value: Any) -> np.ndarray:
    items = list(np.asarray(value).ravel().tolist()) if isinstance(value, np.ndarray) else list(value)
    if not items:
        raise SweepError(f"--{name.replace('_', '-')}: the sweep is empty; give at least one value")
    low = 0 if name == "new_tokens" else 1
    for x in items:
        if isinstance(x, bool) or not isinstance(x, int) or x < low:
            raise SweepError(f"--{name.replace('_', '-')} values must be whole numbers >= {low}, got {x!r}")
    if max(items) > _INT64_MAX:
        raise SweepError(f"--{name.replace('_', '-')} values must be below 2^63")
    return np.asarray(items, dtype=np.int64)


def sweep(model: Any, options: Options | None = None, **kwargs: Any) -> dict[str, np.ndarray]:
    """Every quantity of ``estimate(model, ...)`` over the grid of the sequence-valued options.

    Args:
        model: anything ``estimate`` accepts.
        options: base ``Options`` (its fields are overridden by ``kwargs``).
        **kwargs: ``Options`` fields; any of ``SWEEPABLE`` may be a 1-D sequence.

    Returns:
        ``{quantity key: array}``, axes in the keyword order of the sequence-valued options.
    """
    fields = asdict(options) if options is not None else {}
    swept = [k for k, v in kwargs.items() if _is_sequence(v)]
    for k in swept:
        if k not in SWEEPABLE:
            raise SweepError(f"{k} cannot be swept; sweep any of {', '.join(SWEEPABLE)}")
    grids = {k: _grid_values(k, kwargs[k]) for k in swept}
    fields.update({k: v for k, v in kwargs.items() if k not in grids})
    resolved = resolve_model(model)
    shape = tuple(len(grids[k]) for k in swept)
    loops = [k for k in swept if k not in AXES]
    axes = [k for k in swept if k in AXES]
    out: dict[str, np.ndarray] = {}
    if not loops:  # one layout: the arrays as evaluated (a quantity constant along an axis is a broadcast view)
        sub = _evaluate(resolved, fields, grids, axes)
        return {key: _full(values, shape) for key, values in sub.items()}
    for combo in itertools.product(*(range(len(grids[k])) for k in loops)):
        point = {**fields, **{k: int(grids[k][i]) for k, i in zip(loops, combo)}}
        sub = _evaluate(resolved, point, {k: grids[k] for k in axes}, axes)
        where = dict(zip(loops, combo))
        index = tuple(where.get(k, slice(None)) for k in swept)
        for key, values in sub.items():
            _place(out, key, shape, index, values)
    return out


def _full(values: Any, shape: tuple[int, ...]) -> np.ndarray:
    if isinstance(values, np.ndarray):
        return values if values.shape == shape else np.broadcast_to(values, shape)
    wide = abs(int(values)) > _INT64_MAX
    return np.broadcast_to(np.array(values, dtype=object if wide else np.int64), shape)


def _place(out: dict[str, np.ndarray], key: str, shape: tuple[int, ...], index: tuple, values: Any) -> None:
    arr = out.get(key)
    wide = values.dtype == object if isinstance(values, np.ndarray) else abs(int(values)) > _INT64_MAX
    dtype = object if wide else np.int64
    if arr is None:
        arr = out[key] = np.empty(shape, dtype=dtype)
    elif dtype is object and arr.dtype != object:
        arr = out[key] = arr.astype(object)
    arr[index] = values


def _evaluate(model: Any, point: dict[str, Any], axes: dict[str, np.ndarray], order: list[str]) -> dict[str, Any]:
    """The quantities at one layout, over the step-size axes (checked at their extremes, as estimate checks)."""
    probe = {**point, **{k: int(v.max()) for k, v in axes.items()}}
    try:
        options = Options(**probe)
    except TypeError as exc:
        raise OptionsError(str(exc)) from None
    est = estimate(model, options)
    symbols = {AXES[k] for k in axes}
    bound = {k: v for k, v in est.values.items() if k not in symbols}
    key = (structure_key(est.model, options), tuple(sorted((x.name, v) for x, v in bound.items())),
           tuple(order))
    plans = _PLANS.get(key)
    if plans is None:
        plans = _PLANS[key] = {q.key: _Plan.build([t.expr.subs(bound) for t in q.breakdown.terms])
                               for q in est.quantities}
    env = {AXES[k].name: axes[k].reshape([-1 if j == i else 1 for j in range(len(order))])
           for i, k in enumerate(order)}
    return {k: plan.run(env) for k, plan in plans.items()}


@dataclass(frozen=True, slots=True)
class _Plan:
    """One quantity, ready to evaluate: the integer terms summed into one polynomial, the fractional
    terms (rounded up one by one) kept apart."""

    whole: Expr
    fractional: tuple[Expr, ...]

    @staticmethod
    def build(terms: list[Expr]) -> _Plan:
        whole = Expr({})
        fractional = []
        for term in terms:
            if _integral(term):
                whole = whole + term
            else:
                fractional.append(term)
        return _Plan(whole, tuple(fractional))

    def run(self, env: Mapping[str, np.ndarray]) -> Any:
        total = _rational(self.whole, env)[0]
        for term in self.fractional:
            num, den = _rational(term, env)
            total = total + (-((-num) // den))
        return total


def _integral(x: Expr) -> bool:
    """Whole-valued at every size: integer coefficients, no division by a size, whole-valued nodes."""
    for mono, c in x._t.items():
        if type(c) is not int:
            return False
        for atom, e in mono:
            if e < 0 or (type(atom) is _Node and atom.kind != "ceiling" and not all(map(_integral, atom.args))):
                return False
    return True


def _rational(x: Expr, env: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
    """``x`` over the grid as ``(numerators, denominators)``: integer arrays or ints. Division by a swept
    size (``l/p``, ``P/d``) moves into the denominator: each monomial is multiplied by the highest power
    of that size the term divides by."""
    nodes: dict[Any, tuple[Any, Any]] = {}
    coeffs: dict[tuple, Fraction | int] = {}
    shift: dict[Any, int] = {}
    for mono, c in x._t.items():
        scaled: Fraction | int = c
        for atom, e in mono:
            if type(atom) is _Node:
                if atom not in nodes:
                    nodes[atom] = _node(atom, env)
                den = nodes[atom][1]
                if e < 0 or isinstance(den, np.ndarray):
                    raise SweepError(f"cannot sweep: a term divides by {atom.kind}(...) or by a fraction in it")
                scaled = scaled / Fraction(den) ** e if den != 1 else scaled
            elif e < 0:
                shift[atom] = max(shift.get(atom, 0), -e)
        coeffs[mono] = scaled
    if shift:
        coeffs = {_shifted(mono, shift): c for mono, c in coeffs.items()}
    den = math.lcm(*(Fraction(c).denominator for c in coeffs.values())) if coeffs else 1
    ints = {mono: int(c * den) for mono, c in coeffs.items()}
    values = {atom: vals for atom, (vals, _) in nodes.items()}
    values.update({atom: env[atom.name] for mono in ints for atom, _ in mono if type(atom) is _Sym})
    denominator: Any = den
    for atom, k in shift.items():
        denominator = denominator * env[atom.name] ** k
    return _polynomial(ints, values), denominator


def _shifted(mono: tuple, shift: Mapping[Any, int]) -> tuple:
    powers = dict(mono)
    for atom, k in shift.items():
        powers[atom] = powers.get(atom, 0) + k
    return tuple((atom, e) for atom, e in powers.items() if e)


def _node(atom: _Node, env: Mapping[str, np.ndarray]) -> tuple[Any, Any]:
    parts = [_rational(arg, env) for arg in atom.args]
    if atom.kind == "ceiling":
        num, den = parts[0]
        return -((-num) // den), 1
    if all(isinstance(d, int) for _, d in parts):
        den: Any = math.lcm(*(d for _, d in parts))
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
    if bound > _INT64_MAX:
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
