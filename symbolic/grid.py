"""``Expr`` evaluated exactly over NumPy grids of sizes: integer terms summed into one polynomial first
(rounding an integer changes nothing), each fractional term (a ZeRO shard ``P/d``, an int4 byte count)
rounded up on its own, as ``Quantity.term_ints`` does; ``int64`` where a bound computed in Python
integers proves every intermediate value fits. A polynomial past int64 (FLOPs of long sequences) is a
``WideArray``: its value modulo 2^64 computed exactly in wrapping ``uint64`` arithmetic (a polynomial with
integer coefficients commutes with reduction modulo 2^64), and the multiple of 2^64 read off the same
polynomial evaluated in float64, whose error a bound in Python integers proves below 2^61 (so rounding
``(value_float - low) / 2^64`` to the nearest integer is exact). Only beyond about 2^100 (a bound the
float error cannot meet), or inside a ``Min``/``Max``/ceiling, does an ``object`` array of Python ints remain.

>>> import numpy as np
>>> from memderive.symbolic.dims import b, d, s
>>> plan = grid_plan([2 * b * s, 12 * b / d])
>>> plan.run({"b": np.array([[1], [2]]), "s": np.array([[3, 4]]), "d": 8}).tolist()  # 6 + ceil(12/8) = 8
[[8, 10], [15, 19]]
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from memderive.symbolic.errors import DerivationError
from memderive.symbolic.expr import Expr, Node, Sym
from memderive.symbolic.lazy import lazy

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy("numpy")

__all__ = ["GridPlan", "grid_plan", "GridError", "INT64_MAX", "WideArray", "rational"]

INT64_MAX = 2**63 - 1
_TWO64 = 2**64


class WideArray:
    """Exact integers past int64 over a grid, without Python objects per cell: ``hi * 2^64 + lo`` with
    ``hi`` int64 and ``lo`` uint64 arrays of one shape. Indexing a cell gives a Python int; a slice gives a
    ``WideArray``; ``tolist()`` gives nested Python ints, ``astype(object)`` an object array.

    >>> w = WideArray(np.array([1, -1]), np.array([5, 2**64 - 1], dtype=np.uint64))
    >>> w[0] == 2**64 + 5, w[1], w.tolist()
    (True, -1, [18446744073709551621, -1])
    """

    __slots__ = ("hi", "lo")
    __array_ufunc__ = None  # ``int64_array + wide`` comes here (__radd__), not to NumPy's object loop

    def __init__(self, hi: np.ndarray, lo: np.ndarray) -> None:
        hi, lo = np.broadcast_arrays(np.asarray(hi, dtype=np.int64), np.asarray(lo, dtype=np.uint64))
        self.hi, self.lo = hi, lo

    @staticmethod
    def of(values: Any) -> WideArray:
        """An int64 array or a Python int (any size) as a ``WideArray``."""
        if isinstance(values, WideArray):
            return values
        if isinstance(values, np.ndarray):
            return WideArray(values >> 63, values.astype(np.uint64))
        v = int(values)
        return WideArray(np.asarray(v >> 64), np.asarray(v & (_TWO64 - 1), dtype=np.uint64))

    shape = property(lambda self: self.hi.shape)
    ndim = property(lambda self: self.hi.ndim)
    size = property(lambda self: self.hi.size)
    #: Each cell is two 8-byte limbs; ``dtype`` says so (it is no NumPy dtype: no ``object`` cells).
    dtype = "int128"

    def __len__(self) -> int:
        return len(self.hi)

    def __getitem__(self, index: Any) -> Any:
        hi, lo = self.hi[index], self.lo[index]
        if np.ndim(hi) == 0:
            return (int(hi) << 64) + int(lo)
        return WideArray(hi, lo)

    def __setitem__(self, index: Any, values: Any) -> None:
        other = WideArray.of(values)
        self.hi[index], self.lo[index] = other.hi, other.lo

    def __add__(self, other: Any) -> Any:
        if isinstance(other, np.ndarray) and other.dtype == object:
            return self.astype(object) + other
        o = WideArray.of(other)
        lo = self.lo + o.lo
        return WideArray(self.hi + o.hi + (lo < self.lo), lo)

    __radd__ = __add__

    def broadcast_to(self, shape: tuple[int, ...]) -> WideArray:
        return WideArray(np.broadcast_to(self.hi, shape), np.broadcast_to(self.lo, shape))

    def reshape(self, *shape: Any) -> WideArray:
        return WideArray(self.hi.reshape(*shape), self.lo.reshape(*shape))

    def ravel(self) -> WideArray:
        return WideArray(self.hi.ravel(), self.lo.ravel())

    def copy(self) -> WideArray:
        return WideArray(self.hi.copy(), self.lo.copy())

    def max(self) -> int:
        """The largest value (exact): the largest high limb, then the largest low limb under it."""
        top = self.hi.max()
        return (int(top) << 64) + int(self.lo[self.hi == top].max())

    def __int__(self) -> int:
        """A 0-d grid's one value (a quantity the layouts of a plan share: ``int(wide)`` as of an int64 scalar)."""
        if self.ndim:
            raise TypeError(f"only a 0-d WideArray is one integer, not one of shape {self.shape}")
        return self[()]

    def tolist(self) -> Any:
        return self.astype(object).tolist()

    def astype(self, dtype: Any) -> np.ndarray:
        if dtype is not object:
            raise TypeError("a WideArray holds integers past int64: astype(object) gives Python ints")
        # np.asarray: a 0-d grid's product is a Python int, not an array (tolist, views need the array)
        return np.asarray(self.hi.astype(object) * _TWO64 + self.lo.astype(object), dtype=object)

    def __repr__(self) -> str:
        return f"WideArray({self.tolist()!r})"


class GridError(DerivationError):
    """An expression the grid cannot evaluate exactly (a term that divides by a Min/Max/ceiling)."""


def grid_plan(terms: list[Expr]) -> GridPlan:
    """The terms of one quantity, ready to evaluate over a grid (``GridPlan.run``); built once per list of term
    objects (a plan evaluates the terms of one derivation for many structures' layouts)."""
    key = tuple(map(id, terms))
    held = _PLANS.get(key)
    if held is None:
        held = _PLANS[key] = (tuple(terms), GridPlan.build(terms))  # the terms held: their ids stay theirs
        _bound(_PLANS)
    return held[1]


#: Memos keyed by object ids (expressions are immutable), each entry holding its objects; emptied past ``_MEMO``.
_PLANS: dict[tuple, tuple] = {}
_PREPARED: dict[tuple, tuple] = {}
_MEMO = 1 << 14


def _bound(memo: dict) -> None:
    if len(memo) > _MEMO:
        memo.clear()


class GridPlan:
    """One quantity, ready to evaluate: the integer terms summed into one polynomial, the fractional
    terms (rounded up one by one) kept apart. Two plans are equal when their sums are (``whole``)."""

    __slots__ = ("integral", "fractional", "_whole")

    def __init__(self, integral: tuple[Expr, ...], fractional: tuple[Expr, ...]) -> None:
        self.integral, self.fractional, self._whole = integral, fractional, None

    @staticmethod
    def build(terms: list[Expr]) -> GridPlan:
        integral: list[Expr] = []
        fractional: list[Expr] = []
        for term in terms:
            (integral if _integral(term) else fractional).append(term)
        return GridPlan(tuple(integral), tuple(fractional))

    @property
    def whole(self) -> Expr:
        """The integer terms' sum."""
        if self._whole is None:
            whole = Expr({})
            for term in self.integral:
                whole = whole + term
            self._whole = whole
        return self._whole

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GridPlan) and (self.whole, self.fractional) == (other.whole, other.fractional)

    def __hash__(self) -> int:
        return hash((self.whole, self.fractional))

    def __repr__(self) -> str:
        return f"GridPlan({self.whole!r}, {self.fractional!r})"

    def run(self, env: Mapping[str, np.ndarray]) -> Any:
        """The sum over the grid: the integer terms' sum (``whole``) as one polynomial, its coefficients prepared
        once per plan and the numbers bound (``_prepared``), evaluated once; each fractional term rounded up on its
        own."""
        total: Any = _rational(self.whole, env, wide=True)[0] if self.integral else 0
        for term in self.fractional:
            num, den = _rational(term, env)
            total = _sum(total, _ceil_div(num, den))
        return total


def _ceil_div(num: Any, den: Any) -> Any:
    """``num / den`` rounded up, exact: an int64 array over a denominator past int64 (NumPy's OverflowError) is
    divided in Python ints."""
    try:
        return -((-num) // den)
    except OverflowError:
        def exact(x: Any) -> Any:
            return x.astype(object) if isinstance(x, (np.ndarray, WideArray)) else x
        return -((-exact(num)) // exact(den))


def _sum(a: Any, b: Any) -> Any:
    """``a + b`` exact: an int64 array plus an int64 array or an integer, whose sum could pass int64, is added as a
    ``WideArray`` (each fits int64, their sum may not: 2^62 + 2^62 wrapped to -2^63 before)."""
    def largest(x: Any) -> int | None:  # |x| at most this, for an int64 array or an integer; else None
        if isinstance(x, np.ndarray):
            return _high(x) if x.dtype == np.int64 else None
        return abs(int(x)) if isinstance(x, (int, np.integer)) else None

    first, second = largest(a), largest(b)
    if first is not None and second is not None and (isinstance(a, np.ndarray) or isinstance(b, np.ndarray)) \
            and first + second > INT64_MAX:
        return WideArray.of(a) + b
    return a + b


def rational(x: Expr, env: Mapping[str, Any]) -> tuple[Any, Any]:
    """``x``'s exact value over the grid as ``(numerators, denominators)`` (integer arrays or ints; Python ints in
    ``object`` arrays past int64), unrounded: ``x`` = numerators / denominators cell by cell."""
    return _rational(x, env)


def _integral(x: Expr) -> bool:
    """Whole-valued at every size: integer coefficients, no division by a size, whole-valued nodes."""
    for mono, c in x.monomials():
        if type(c) is not int:
            return False
        for atom, e in mono:
            if e < 0 or (type(atom) is Node and atom.kind != "ceiling" and not all(map(_integral, atom.args))):
                return False
    return True


def _rational(x: Expr, env: Mapping[str, np.ndarray], wide: bool = False) -> tuple[Any, Any]:
    """``x`` over the grid as ``(numerators, denominators)``: integer arrays or ints. Division by a swept
    size (``l/p``, ``P/d``) moves into the denominator: each monomial is multiplied by the highest power
    of that size the term divides by. Sizes bound to one number fold into the coefficients, once per expression
    and such numbers (``_prepared``); the swept sizes are read at each call."""
    ints, den, shift, nodes = _prepare(x, env, _signature(env))
    values = {atom: _node(atom, env)[0] for atom in nodes}
    values.update({atom: env[atom.name] for mono in ints for atom, _ in mono if type(atom) is Sym})
    denominator: Any = den
    for atom, k in shift.items():
        denominator = denominator * env[atom.name] ** k
    return _polynomial(ints, values, wide and denominator == 1), denominator


def _signature(env: Mapping[str, Any]) -> tuple:
    """Which sizes are swept and the others' numbers: what ``_prepared`` depends on (read once per env object)."""
    if _LAST[0] is not env:
        _LAST[:] = [env, tuple(sorted((k, None if isinstance(v, np.ndarray) else v) for k, v in env.items()))]
    return _LAST[1]


_LAST: list[Any] = [None, ()]  # the last env (held) and its signature


def _prepare(x: Expr, env: Mapping[str, Any], signature: tuple) -> tuple[dict, int, dict, tuple]:
    key = (id(x), signature)
    held = _PREPARED.get(key)
    if held is None:
        held = _PREPARED[key] = (x, _prepared(x, env))  # the expression held: its id stays its own
        _bound(_PREPARED)
    return held[1]


def _prepared(x: Expr, env: Mapping[str, Any]) -> tuple[dict, int, dict, tuple]:
    """``_rational``'s work that depends only on which sizes are swept and the others' numbers: the integer
    coefficients over the swept atoms, the common denominator, the swept sizes divided by, the nodes over swept
    sizes (evaluated at each call)."""
    nodes: dict[Any, tuple[Any, Any]] = {}
    coeffs: dict[tuple, Fraction | int] = {}
    shift: dict[Any, int] = {}
    for mono, c in x.monomials():
        scaled: Fraction | int = c
        kept = []
        for atom, e in mono:
            if type(atom) is Node:
                if atom not in nodes:
                    nodes[atom] = _node(atom, env)
                vals, den = nodes[atom]
                if e < 0 or isinstance(den, np.ndarray):
                    raise GridError(f"cannot sweep: a term divides by {atom.kind}(...) or by a fraction in it")
                if not isinstance(vals, np.ndarray):  # one value over the grid: into the coefficient
                    scaled = scaled * Fraction(vals, den) ** e
                    continue
                scaled = scaled / Fraction(den) ** e if den != 1 else scaled
            else:
                value = env[atom.name]
                if not isinstance(value, np.ndarray):  # a size bound to one number: into the coefficient
                    scaled = scaled * Fraction(int(value)) ** e if e < 0 else scaled * int(value) ** e
                    continue
                if e < 0:
                    shift[atom] = max(shift.get(atom, 0), -e)
            kept.append((atom, e))
        key = tuple(kept)
        coeffs[key] = coeffs.get(key, 0) + scaled
    coeffs = {mono: c for mono, c in coeffs.items() if c}
    if shift:
        coeffs = {_shifted(mono, shift): c for mono, c in coeffs.items()}
    den = math.lcm(*(Fraction(c).denominator for c in coeffs.values())) if coeffs else 1
    ints = {mono: int(c * den) for mono, c in coeffs.items()}
    swept = tuple(atom for atom, (vals, _) in nodes.items() if isinstance(vals, np.ndarray))
    return ints, den, shift, swept


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


def _polynomial(coeffs: dict[tuple, int], values: Mapping[Any, Any], wide: bool = False) -> Any:
    """An integer polynomial over the grid, exact: int64 when a bound in Python ints proves it fits; with
    ``wide`` a ``WideArray`` while the float64 evaluation's error bound stays below 2^61; else Python ints."""
    if not coeffs:
        return 0
    if any(isinstance(v, np.ndarray) and v.dtype == object for v in values.values()):
        return _horner(coeffs, {a: v if isinstance(v, np.ndarray) else int(v) for a, v in values.items()})
    high = {atom: _high(v) if isinstance(v, np.ndarray) else abs(int(v)) for atom, v in values.items()}
    bound = sum(abs(c) * math.prod(high[atom] ** e for atom, e in mono) for mono, c in coeffs.items())
    if bound <= INT64_MAX:
        return _direct(coeffs, values) if _small(values) else _horner(coeffs, values)
    # float64 Horner: each of at most ``ops`` roundings errs by 2^-53 of a partial sum bounded by ``bound``
    # (coefficients rounded to float count as one more), so the error is below ops * 2^-52 * bound.
    ops = sum(2 + sum(e for _, e in mono) for mono in coeffs) + 2
    if wide and ops * bound < 2**113 and all(isinstance(v, np.ndarray) or abs(v) <= INT64_MAX
                                             for v in values.values()):
        return _wide(coeffs, {a: np.asarray(v, dtype=np.int64) for a, v in values.items()})
    values = {atom: v.astype(object) if isinstance(v, np.ndarray) else int(v) for atom, v in values.items()}
    return _direct(coeffs, values) if _small(values) else _horner(coeffs, values)


#: Arrays of at most this many cells (a plan's layouts of one structure) are summed monomial by monomial
#: (``_direct``): Horner's grouping saves passes over large grids and costs more than it saves on small ones.
SMALL = 4096


def _small(values: Mapping[Any, Any]) -> bool:
    return all(not isinstance(v, np.ndarray) or v.size <= SMALL for v in values.values())


def _direct(coeffs: Mapping[tuple, Any], values: Mapping[Any, Any]) -> Any:
    """The polynomial summed monomial by monomial (exact in int64 under ``_polynomial``'s bound, or in Python
    ints)."""
    total: Any = 0
    for mono, c in coeffs.items():
        term: Any = c
        for atom, e in mono:
            term = term * (values[atom] if e == 1 else values[atom] ** e)
        total = total + term
    return total


def _high(v: np.ndarray) -> int:
    """The largest absolute value of an array, once per array object (a plan evaluates many terms over the same
    columns)."""
    held = _HIGHS.get(id(v))
    if held is None or held[0] is not v:
        held = _HIGHS[id(v)] = (v, int(np.max(np.abs(v))))
        _bound(_HIGHS)
    return held[1]


_HIGHS: dict[int, tuple] = {}


def _wide(coeffs: dict[tuple, int], values: Mapping[Any, np.ndarray]) -> WideArray:
    """The polynomial as ``hi * 2^64 + lo``: ``lo`` exact modulo 2^64 (uint64 wraps), ``hi`` from float64."""
    with np.errstate(over="ignore"):
        low = _horner({m: np.uint64(c % _TWO64) for m, c in coeffs.items()},
                      {a: v.astype(np.uint64) for a, v in values.items()})
    approx = _horner({m: float(c) for m, c in coeffs.items()}, {a: v.astype(np.float64) for a, v in values.items()})
    low = np.asarray(low, dtype=np.uint64)
    high = np.rint((approx - low.astype(np.float64)) * (1.0 / _TWO64)).astype(np.int64)
    return WideArray(high, low)


def _horner(coeffs: Mapping[tuple, Any], values: Mapping[Any, Any]) -> Any:
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
    groups: dict[int, dict[tuple, Any]] = {}
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
