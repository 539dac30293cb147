"""The engine's expressions: exact Laurent polynomials over sizes, without SymPy.

An ``Expr`` is an immutable sum of monomials with exact ``int``/``Fraction`` coefficients. A monomial
is a product of atoms raised to integer powers (negative allowed: ``h/t``, ``(p - 1)/(p*v)``). An
atom is a dimension symbol (``symbolic.dims``) or a ``Min``/``Max``/``ceiling`` node of expressions
(a sliding window ``min(s + n, w)``, a pipeline's ``min(p, m)``, quantization scales
``ceil(h/g)``). Numbers come from ``evaluate`` (exact ``int``/``Fraction``, Python ints never
wrap); closed forms from ``to_sympy`` (the only place SymPy is imported, lazily); ``str`` prints a
SymPy-like form without SymPy.

Rules for graph code (ops, architectures, strategies, quantities, estimate, options, search):

* build with the symbols of ``symbolic.dims`` and plain ``+ - * /`` and ``**`` by an ``int``;
  constants are ``int`` or ``fractions.Fraction`` (never floats, never ``sp.Integer``);
* divide only by a number or a monomial (``x / (p*v)``); anything else raises ``ValueError``;
* use ``Min``, ``Max``, ``ceiling``, ``prod``, ``total`` and ``const`` from here, never ``sympy``;
* evaluate with ``Expr.evaluate(values)`` / ``symbolic.derive.evaluate`` / ``Quantity.value``;
  substitute with ``Expr.subs``; print closed forms with ``Quantity.closed_form()`` (SymPy) or
  ``str`` (no SymPy); convert with ``to_sympy`` only in printing and checking code.

>>> from memderive.symbolic.dims import a, h, s, t
>>> prod((s, h, 2))
2*h*s
>>> x = 2 * s * h / t + Min(s, 4096) * a
>>> x
a*Min(4096, s) + 2*h*s/t
>>> x.evaluate({s: 8192, h: 4096, a: 32, t: 8})
8519680
>>> (h**2 * (h + 1)).subs({h: 2**40}) == 2**120 + 2**80
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any
from memderive.symbolic.lazy import lazy

if TYPE_CHECKING:
    import sympy as sp
else:
    sp = lazy("sympy")

__all__ = ["Expr", "NamedValues", "named_values", "Number", "Size", "Sym", "Node", "Atom", "Min", "Max", "ceiling",
           "prod", "total", "const", "symbol", "to_sympy", "evaluate", "is_expr", "shifted_nonnegative"]

Number = int | Fraction
_NUMBER = (int, Fraction)


def _norm(c: Number) -> Number:
    """A coefficient with integer value as an ``int``."""
    if type(c) is Fraction and c.denominator == 1:
        return c.numerator
    return c


def _pow(v: Number, e: int) -> Number:
    if e >= 0:
        return v**e
    if v == 0:
        raise ZeroDivisionError("a size of 0 under a negative power")
    return _norm(Fraction(1) / v**-e) if type(v) is int else _norm(v**e)


class Sym:
    """A dimension symbol (an atom)."""

    __slots__ = ("name", "key")

    def __init__(self, name: str) -> None:
        self.name, self.key = name, (0, name)

    def __eq__(self, other: object) -> bool:
        return type(other) is Sym and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def value(self, vals: Mapping[str, Any]) -> Any:
        try:
            return vals[self.name]
        except KeyError:
            raise _Unbound(self.name) from None

    def symbols(self) -> set[str]:
        return {self.name}


class _Unbound(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class Node:
    """``Min``/``Max``/``ceiling`` of expressions (an atom); ``evaluate=False`` keeps the argument
    order SymPy shows for an unevaluated ``Max`` (see ``to_sympy``)."""

    __slots__ = ("kind", "args", "evaluate", "key", "_hash")

    def __init__(self, kind: str, args: tuple[Expr, ...], evaluate: bool = True) -> None:
        self.kind, self.args, self.evaluate = kind, args, evaluate
        self.key = (1, kind, not evaluate, tuple(x.sort_key() for x in args))
        self._hash = hash(self.key)

    def __eq__(self, other: object) -> bool:
        return type(other) is Node and other.key == self.key

    def __hash__(self) -> int:
        return self._hash

    def value(self, vals: Mapping[str, Any]) -> Number:
        values = [x._value(vals) for x in self.args]
        if self.kind == "Min":
            return min(values)
        if self.kind == "Max":
            return max(values)
        return math.ceil(values[0])

    def rebuild(self, args: list[Expr]) -> Expr:
        """The node with new arguments, evaluated as SymPy's ``xreplace`` does (unchanged: kept as is)."""
        if tuple(args) == self.args:
            return Expr({((self, 1),): 1})
        if self.kind == "ceiling":
            return ceiling(args[0])
        return _minmax(self.kind, args)

    def symbols(self) -> set[str]:
        return set().union(*(x._names() for x in self.args))


Atom = Sym | Node
Mono = tuple  # tuple[tuple[Atom, int], ...], sorted by atom key


def _item_key(item: tuple[Atom, int]) -> tuple:
    return item[0].key


_PRODUCTS: dict[tuple[Mono, Mono], Mono] = {}  # graphs multiply the same monomials over and over


def _mono_mul(m1: Mono, m2: Mono) -> Mono:
    if not m1:
        return m2
    if not m2:
        return m1
    out = _PRODUCTS.get((m1, m2))
    if out is None:
        powers: dict[Atom, int] = dict(m1)
        for atom, e in m2:
            powers[atom] = powers.get(atom, 0) + e
        out = tuple(sorted(((x, e) for x, e in powers.items() if e), key=_item_key))
        if len(_PRODUCTS) < 100_000:
            _PRODUCTS[(m1, m2)] = out
    return out


class Expr:
    """An immutable exact Laurent polynomial (see the module docstring)."""

    __slots__ = ("_t", "_hash", "_sp")

    def __init__(self, terms: dict[Mono, Number]) -> None:
        self._t = terms  # never mutated after construction
        self._hash: int | None = None
        self._sp: Any = None

    # --- construction -----------------------------------------------------------------------
    @staticmethod
    def lift(x: Any) -> Expr:
        if isinstance(x, Expr):
            return x
        if isinstance(x, _NUMBER) and not isinstance(x, bool):
            return Expr({(): _norm(x)} if x else {})
        raise TypeError(f"not an exact size: {x!r} ({type(x).__name__}); use int, Fraction or symbolic.dims")

    # --- inspection -------------------------------------------------------------------------
    @property
    def is_number(self) -> bool:
        return not self._t or (len(self._t) == 1 and () in self._t)

    @property
    def number(self) -> Number:
        """The value of a constant expression."""
        if not self.is_number:
            raise ValueError(f"{self} is not a number")
        return self._t.get((), 0)

    @property
    def name(self) -> str:
        """The name of a bare symbol."""
        if len(self._t) == 1:
            ((mono, c),) = self._t.items()
            if c == 1 and len(mono) == 1 and mono[0][1] == 1 and type(mono[0][0]) is Sym:
                return mono[0][0].name
        raise ValueError(f"{self} is not a symbol")

    @property
    def is_symbol(self) -> bool:
        return len(self._t) == 1 and self._single_sym()

    def _single_sym(self) -> bool:
        ((mono, c),) = self._t.items()
        return c == 1 and len(mono) == 1 and mono[0][1] == 1 and type(mono[0][0]) is Sym

    @property
    def is_monomial(self) -> bool:
        return len(self._t) == 1

    @property
    def free_symbols(self) -> set[Expr]:
        """The symbols in the expression (inside ``Min``/``Max``/``ceiling`` too)."""
        return {symbol(name) for name in self._names()}

    def _names(self) -> set[str]:
        out: set[str] = set()
        for mono in self._t:
            for atom, _ in mono:
                out |= atom.symbols()
        return out

    def terms(self) -> list[tuple[Number, Expr]]:
        """``(coefficient, monomial)`` pairs in printing order."""
        return [(c, Expr({mono: 1})) for mono, c in self._ordered()]

    def monomials(self) -> list[tuple[Mono, Number]]:
        """``(monomial, coefficient)`` pairs as stored: a monomial is a tuple of ``(atom, power)`` pairs
        (an atom a ``Sym`` or a ``Node``), for compilers of expressions (``symbolic.grid``).

        >>> from memderive.symbolic.dims import h, t
        >>> [([(atom.name, e) for atom, e in mono], c) for mono, c in (3 * h / t).monomials()]
        [([('h', 1), ('t', -1)], 3)]
        """
        return list(self._t.items())

    def expand(self) -> Expr:
        """Itself: an expression is always kept expanded (``sympy.expand`` compatibility)."""
        return self

    def has_minmax(self) -> bool:
        return any(type(atom) is Node and atom.kind != "ceiling" for mono in self._t for atom, _ in mono)

    def sort_key(self) -> tuple:
        return tuple((tuple((atom.key, e) for atom, e in mono), c) for mono, c in
                     sorted(self._t.items(), key=lambda item: tuple((a.key, e) for a, e in item[0])))

    # --- arithmetic -------------------------------------------------------------------------
    def __add__(self, other: Any) -> Expr:
        if not isinstance(other, Expr):
            if not isinstance(other, _NUMBER) or isinstance(other, bool):
                return NotImplemented
            if not other:
                return self
            other = Expr({(): _norm(other)})
        if not other._t:
            return self
        if not self._t:
            return other
        out = dict(self._t)
        for mono, c in other._t.items():
            v = out.get(mono, 0) + c
            if v:
                out[mono] = _norm(v)
            else:
                out.pop(mono, None)
        return Expr(out)

    __radd__ = __add__

    def __neg__(self) -> Expr:
        return Expr({mono: -c for mono, c in self._t.items()})

    def __pos__(self) -> Expr:
        return self

    def __sub__(self, other: Any) -> Expr:
        if not isinstance(other, Expr | int | Fraction):
            return NotImplemented
        return self + (-Expr.lift(other))

    def __rsub__(self, other: Any) -> Expr:
        if not isinstance(other, _NUMBER):
            return NotImplemented
        return Expr.lift(other) + (-self)

    def __mul__(self, other: Any) -> Expr:
        if not isinstance(other, Expr):
            if not isinstance(other, _NUMBER) or isinstance(other, bool):
                return NotImplemented
            if not other:
                return Expr({})
            if other == 1:
                return self
            return Expr({mono: _norm(c * other) for mono, c in self._t.items()})
        if len(self._t) == 1 and len(other._t) == 1:  # monomials: shapes, scales
            ((m1, c1),) = self._t.items()
            ((m2, c2),) = other._t.items()
            return Expr({_mono_mul(m1, m2): _norm(c1 * c2)})
        if len(other._t) < len(self._t):
            self, other = other, self
        out: dict[Mono, Number] = {}
        for m1, c1 in self._t.items():
            for m2, c2 in other._t.items():
                mono = _mono_mul(m1, m2)
                v = out.get(mono, 0) + c1 * c2
                if v:
                    out[mono] = _norm(v)
                else:
                    out.pop(mono, None)
        return Expr(out)

    __rmul__ = __mul__

    def _inverse(self) -> Expr:
        if len(self._t) != 1:
            raise ValueError(f"cannot divide by {self}: divide only by a number or a monomial "
                             "(a product of sizes); write the sum as separate terms")
        ((mono, c),) = self._t.items()
        return Expr({tuple((atom, -e) for atom, e in mono): _norm(Fraction(1) / c)})

    def __truediv__(self, other: Any) -> Expr:
        if isinstance(other, _NUMBER) and not isinstance(other, bool):
            if not other:
                raise ZeroDivisionError("division of a size by 0")
            return self * (Fraction(1) / other)
        if not isinstance(other, Expr):
            return NotImplemented
        return self * other._inverse()

    def __rtruediv__(self, other: Any) -> Expr:
        if not isinstance(other, _NUMBER) or isinstance(other, bool):
            return NotImplemented
        return self._inverse() * other

    def __pow__(self, e: Any) -> Expr:
        if not isinstance(e, int) or isinstance(e, bool):
            return NotImplemented
        if len(self._t) == 1:
            ((mono, c),) = self._t.items()
            return Expr({tuple((atom, k * e) for atom, k in mono): _pow(c, e)})
        if e < 0:
            return (self ** -e)._inverse()
        out = Expr({(): 1})
        for _ in range(e):
            out = out * self
        return out

    # --- comparison and hashing -------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Expr):
            return self._t == other._t
        if isinstance(other, _NUMBER):
            return self.is_number and self.number == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.number) if self.is_number else hash(frozenset(self._t.items()))
        return self._hash

    def __bool__(self) -> bool:
        return bool(self._t)

    def __int__(self) -> int:
        return int(self.number)

    # --- substitution and evaluation --------------------------------------------------------
    def subs(self, mapping: Mapping[Any, Any]) -> Expr:
        """Replace symbols (keys: symbols or names) by numbers or expressions, exactly."""
        repl = {_key_name(k): Expr.lift(v) for k, v in mapping.items()}
        return self._subs(repl)

    xreplace = subs

    def _subs(self, repl: Mapping[str, Expr]) -> Expr:
        numbers = {k: x.number for k, x in repl.items() if x.is_number}
        if len(numbers) == len(repl):
            return self._subs_numbers(numbers, repl)
        out = Expr({})
        for mono, c in self._t.items():
            x: Expr = Expr({(): c})
            for atom, e in mono:
                if type(atom) is Sym:
                    base = repl.get(atom.name)
                    if base is None:
                        x = x * Expr({((atom, e),): 1})
                        continue
                else:
                    base = atom.rebuild([arg._subs(repl) for arg in atom.args])
                x = x * base**e
            out = out + x
        return out

    def _subs_numbers(self, numbers: Mapping[str, Number], repl: Mapping[str, Expr]) -> Expr:
        """``_subs`` when every value is a number: coefficients absorb the bound powers directly."""
        out: dict[Mono, Number] = {}
        for mono, c in self._t.items():
            rest: list[tuple[Atom, int]] = []
            moved = False
            for i, (atom, e) in enumerate(mono):
                if type(atom) is Sym:
                    value = numbers.get(atom.name)
                    if value is None:
                        rest.append((atom, e))
                    else:
                        c = c * _pow(value, e)
                    continue
                node = atom.rebuild([arg._subs(repl) for arg in atom.args])
                if node.is_number:
                    c = c * _pow(node.number, e)
                    continue
                inner = _single_node(node)
                if inner is None:  # a node that became a sum: multiply out, then bind what follows
                    head = Expr({tuple(sorted(rest, key=_item_key)): c}) * node**e
                    tail = Expr({mono[i + 1:]: 1})._subs_numbers(numbers, repl)
                    for m, v in (head * tail)._t.items():
                        out[m] = out.get(m, 0) + v
                    c = 0
                    break
                moved = moved or inner is not atom
                rest.append((inner, e))
            if not c:
                continue
            key = tuple(sorted(rest, key=_item_key)) if moved else tuple(rest)
            out[key] = out.get(key, 0) + c
        return Expr({m: _norm(v) for m, v in out.items() if v})

    def evaluate(self, values: Mapping[Any, Any]) -> Number:
        """The exact value (``int`` or ``Fraction``) with every symbol bound by ``values`` (``named_values``
        converts a mapping once for many evaluations)."""
        vals = values if type(values) is NamedValues else {_key_name(k): v for k, v in values.items()}
        try:
            return _norm(self._value(vals))
        except _Unbound:
            missing = sorted(self._names() - set(vals))
            raise ValueError(f"no value for {', '.join(missing)}; give it with the model or the options") from None

    def _value(self, vals: Mapping[str, Any]) -> Number:
        """The exact value: integer numerators and denominators multiplied out and summed over one common
        denominator, reduced once at the end (a ``Fraction`` per operation costs a gcd each); a value that
        is neither ``int`` nor ``Fraction`` takes ``_value_mixed``'s general arithmetic."""
        num, den = 0, 1
        for mono, c in self._t.items():
            n, d = (c, 1) if type(c) is int else (c.numerator, c.denominator)
            for atom, e in mono:
                v = atom.value(vals)
                if type(v) is int:
                    vn, vd = v, 1
                elif type(v) is Fraction:
                    vn, vd = v.numerator, v.denominator
                else:
                    return self._value_mixed(vals)
                if e < 0:
                    if vn == 0:
                        raise ZeroDivisionError("a size of 0 under a negative power")
                    vn, vd, e = vd, vn, -e
                n *= vn if e == 1 else vn**e
                if vd != 1:
                    d *= vd**e
            if d == den:
                num += n
            elif d == 1:
                num += n * den
            else:
                num, den = num * d + n * den, den * d
        return num if den == 1 else _norm(Fraction(num, den))

    def _value_mixed(self, vals: Mapping[str, Any]) -> Number:
        total: Number = 0
        for mono, c in self._t.items():
            x = c
            for atom, e in mono:
                x = x * _pow(atom.value(vals), e)
            total += x
        return total

    # --- printing ---------------------------------------------------------------------------
    def _ordered(self) -> list[tuple[Mono, Number]]:
        """Terms in SymPy's print order: lex on exponents of the symbols (sorted by name), highest first."""
        gens = sorted({atom for mono in self._t for atom, _ in mono}, key=_gen_key)
        index = {atom: i for i, atom in enumerate(gens)}

        def key(item: tuple[Mono, Number]) -> tuple:
            vec = [0] * len(gens)
            for atom, e in item[0]:
                vec[index[atom]] = e
            return tuple(vec)

        return sorted(self._t.items(), key=key, reverse=True)

    def __str__(self) -> str:
        if not self._t:
            return "0"
        out = ""
        ordered = self._ordered()
        if ordered[0][1] < 0 and ordered[-1][0] == () and ordered[-1][1] > 0:  # SymPy's 1 - h, not -h + 1
            ordered.insert(0, ordered.pop())
        for i, (mono, c) in enumerate(ordered):
            text = _print_term(mono, abs(c))  # type: ignore[arg-type]
            if i == 0:
                out = ("-" if c < 0 else "") + text
            else:
                out += (" - " if c < 0 else " + ") + text
        return out

    __repr__ = __str__

    def _sympy_(self) -> Any:
        """SymPy's conversion hook: ``sympy.sympify(expr)`` and mixed arithmetic work."""
        return to_sympy(self)


#: What graph code may write where a size goes: an expression or an exact number.
Size = Expr | int | Fraction


def _gen_key(atom: Atom) -> tuple:
    return atom.key


def _atom_str(atom: Atom) -> str:
    if isinstance(atom, Sym):
        return atom.name
    args = sorted(atom.args, key=lambda x: (not x.is_number, len(x._t) + sum(len(m) for m in x._t), x.sort_key()))
    return f"{atom.kind}({', '.join(str(x) for x in args)})"


def _factor_str(atom: Atom, e: int) -> str:
    base = _atom_str(atom)
    return base if e == 1 else f"{base}**{e}"


def _print_term(mono: Mono, c: Number) -> str:
    """One term, coefficient ``c > 0``: ``3*h**2*s/(2*t)``."""
    num_c = c.numerator if type(c) is Fraction else c
    den_c = c.denominator if type(c) is Fraction else 1
    num = [] if num_c == 1 else [str(num_c)]
    den = [] if den_c == 1 else [str(den_c)]
    for atom, e in sorted(mono, key=lambda item: _gen_key(item[0])):
        (num if e > 0 else den).append(_factor_str(atom, abs(e)))
    top = "*".join(num) or "1"
    if not den:
        return top
    bottom = den[0] if len(den) == 1 else "(" + "*".join(den) + ")"
    return f"{top}/{bottom}"


class NamedValues(dict):
    """Sizes keyed by symbol name, as ``Expr.evaluate`` reads them (``named_values``)."""

    __slots__ = ()


def named_values(values: Mapping[Any, Any]) -> NamedValues:
    """``values`` (keyed by symbols, their names or SymPy symbols) keyed by name, once: ``Expr.evaluate`` of many
    expressions under the same sizes then skips the conversion.

    >>> from memderive.symbolic.dims import h, l
    >>> (l * h).evaluate(named_values({h: 3, l: 4}))
    12
    """
    if type(values) is NamedValues:
        return values
    return NamedValues({_key_name(k): v for k, v in values.items()})


def _key_name(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, Expr):
        return key.name
    name = getattr(key, "name", None)  # a SymPy symbol of a dimension
    if isinstance(name, str):
        return name
    raise TypeError(f"not a symbol: {key!r}")


_SYMBOLS: dict[str, Expr] = {}


def symbol(name: str) -> Expr:
    """The expression of one size symbol (``symbolic.dims`` declares them; use those)."""
    x = _SYMBOLS.get(name)
    if x is None:
        x = _SYMBOLS[name] = Expr({((Sym(name), 1),): 1})
    return x


def is_expr(x: Any) -> bool:
    return isinstance(x, Expr)


def const(value: Any) -> Expr:
    """An exact constant (``int``/``Fraction``) or an expression, as an expression."""
    return Expr.lift(value)


def _minmax(kind: str, args: Iterable[Any], evaluate: bool = True) -> Expr:
    flat: list[Expr] = []
    for x in map(Expr.lift, args):
        atom = _single_node(x)
        if atom is not None and atom.kind == kind and atom.evaluate == evaluate:
            flat.extend(atom.args)
        else:
            flat.append(x)
    if not flat:
        raise ValueError(f"{kind} needs at least one argument")
    numbers = [x.number for x in flat if x.is_number]
    pick = min if kind == "Min" else max
    rest = list(dict.fromkeys(x for x in flat if not x.is_number))
    if numbers:
        rest.append(Expr.lift(pick(numbers)))
    if evaluate:
        rest = _undominated(kind, rest)
    if len(rest) == 1:
        return rest[0]
    rest.sort(key=lambda x: x.sort_key())
    return Expr({((Node(kind, tuple(rest), evaluate), 1),): 1})


def _undominated(kind: str, args: list[Expr]) -> list[Expr]:
    """Drop arguments another one surely beats: their difference is a sum of terms of one sign
    (sizes are positive), as SymPy's ``Min``/``Max`` decide for positive symbols."""
    wins = {False} if kind == "Min" else {True}  # the sign of (y - x) with which y replaces x
    return [x for x in args if not any(y is not x and {c > 0 for c in (y - x)._t.values()} == wins for y in args)]


def _single_node(x: Expr) -> Node | None:
    if len(x._t) == 1:
        ((mono, c),) = x._t.items()
        if c == 1 and len(mono) == 1 and mono[0][1] == 1 and type(mono[0][0]) is Node:
            return mono[0][0]
    return None


def Min(*args: Any, evaluate: bool = True) -> Expr:  # noqa: N802 (reads as the math function)
    """The smallest of two or more sizes, kept symbolic while a symbol is free.

    >>> from memderive.symbolic.dims import n, s, w
    >>> Min(s + n, w).subs({s: 100, n: 28, w: 4096})
    128
    """
    return _minmax("Min", args, evaluate)


def Max(*args: Any, evaluate: bool = True) -> Expr:  # noqa: N802
    """The largest of two or more sizes (``evaluate=False``: SymPy keeps the arguments as given)."""
    return _minmax("Max", args, evaluate)


def ceiling(x: Any) -> Expr:
    """The smallest integer at least ``x`` (quantization groups ``ceil(h/g)``).

    >>> from memderive.symbolic.dims import g, h
    >>> ceiling(h / g).subs({h: 4096, g: 100})
    41
    """
    x = Expr.lift(x)
    if x.is_number:
        return Expr.lift(math.ceil(x.number))
    return Expr({((Node("ceiling", (x,)), 1),): 1})


def prod(factors: Iterable[Any]) -> Expr:
    """The product of sizes (1 for none): a tensor's element count from its shape."""
    out = Expr({(): 1})
    for x in factors:
        out = out * x
    return out


def total(terms: Iterable[Any]) -> Expr:
    """The sum of terms (0 for none)."""
    out = Expr({})
    for x in terms:
        out = out + x
    return out


def shifted_nonnegative(x: Expr) -> bool:
    """Whether ``x``, with every symbol ``z`` written ``1 + z``, expands to terms with nonnegative
    coefficients only (powers ``(1 + z)**-k`` and ``Min``/``Max`` nodes kept whole): then ``x >= 0``
    for all sizes >= 1. The test ``sympy.expand(x.xreplace({z: z + 1}))`` makes, without SymPy.

    >>> from memderive.symbolic.dims import h, s
    >>> shifted_nonnegative(h * s - h), shifted_nonnegative(h - s)
    (True, False)
    """
    acc: dict[tuple, Number] = {}
    for mono, c in Expr.lift(x)._t.items():
        partial: dict[tuple, Number] = {(): c}
        rest = []
        for atom, e in mono:
            if type(atom) is not Sym or e < 0:
                rest.append((atom.key, e))
                continue
            grown: dict[tuple, Number] = {}
            for key, value in partial.items():
                for k in range(e + 1):
                    new = key + ((atom.name, k),) if k else key
                    grown[new] = grown.get(new, 0) + value * math.comb(e, k)
            partial = grown
        for key, value in partial.items():
            full = (key, tuple(rest))
            acc[full] = acc.get(full, 0) + value
    return all(value >= 0 for value in acc.values())


def evaluate(x: Any, values: Mapping[Any, Any]) -> Number:
    """``x`` (an expression or a number) at ``values``, exactly."""
    if isinstance(x, Expr):
        return x.evaluate(values)
    if isinstance(x, _NUMBER):
        return x
    raise TypeError(f"not an expression: {x!r}")


def to_sympy(x: Any) -> Any:
    """The SymPy form (integer, positive symbols; ``Min``/``Max``/``ceiling``); imports SymPy."""
    if isinstance(x, _NUMBER) and not isinstance(x, bool):
        return sp.Integer(x) if type(x) is int else sp.Rational(x.numerator, x.denominator)
    if not isinstance(x, Expr):
        return sp.sympify(x)
    if x._sp is None:
        terms = []
        for mono, c in x._t.items():
            factors = [_sympy_atom(atom) ** e for atom, e in mono]
            terms.append(sp.Mul(to_sympy(c), *factors))
        x._sp = sp.Add(*terms)
    return x._sp


def _sympy_atom(atom: Atom) -> Any:
    if isinstance(atom, Sym):
        return sp.Symbol(atom.name, positive=True, integer=True)
    args = [to_sympy(x) for x in atom.args]
    if atom.kind == "ceiling":
        return sp.ceiling(args[0])
    fn = sp.Min if atom.kind == "Min" else sp.Max
    if atom.evaluate:
        return fn(*args)
    return fn(*sorted(args, key=sp.default_sort_key), evaluate=False)
