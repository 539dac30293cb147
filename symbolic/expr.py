"""The expression API graph-building code uses: sizes, arithmetic, min/max, products and sums.

Graph code (ops, architectures, strategies, quantities) writes shapes and terms with the dimension
symbols of ``symbolic.dims``, plain Python arithmetic (``+ - * /``, ``**`` by an integer),
``fractions.Fraction`` or ``int`` for constants, and the helpers below; never ``sympy`` directly.
That keeps one graph description readable by both interpreters: exact numbers for estimates, and
closed forms for printing and checking (NOTE(memderive): issue 10 gives this module its own
SymPy-free backend; until then the helpers forward to SymPy).

>>> from symbolic.dims import h, s
>>> prod((s, h, 2))
2*h*s
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Min", "Max", "prod", "total", "const"]


def Min(*args: Any) -> Any:  # noqa: N802 (reads as the math function)
    """The smallest of two or more sizes, kept symbolic while a symbol is free."""
    import sympy

    return sympy.Min(*args)


def Max(*args: Any) -> Any:  # noqa: N802
    """The largest of two or more sizes."""
    import sympy

    return sympy.Max(*args)


def prod(factors: Iterable[Any]) -> Any:
    """The product of sizes (1 for none): a tensor's element count from its shape."""
    out: Any = 1
    for x in factors:
        out = out * x
    return const(out)


def total(terms: Iterable[Any]) -> Any:
    """The sum of terms (0 for none)."""
    out: Any = 0
    for x in terms:
        out = out + x
    return const(out)


def const(value: Any) -> Any:
    """An exact constant as an expression (``int`` or ``Fraction`` in, expression out)."""
    import sympy

    return sympy.sympify(value)
