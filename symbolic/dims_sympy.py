"""The SymPy symbols of ``symbolic.dims`` (positive integers), for code that works in SymPy: the checker
(``derivations/claims``), ``symbolic.simplify`` and render/ printing. Graph code uses ``symbolic.dims``.

Every name declared in ``symbolic.dims.DIMS`` is importable from here (``from memderive.symbolic.dims_sympy import h``).

>>> from memderive.symbolic.dims_sympy import a_kv, h
>>> (2 * a_kv * h).is_positive, str(a_kv)
(True, 'a_kv')
"""

from __future__ import annotations

from functools import cache
from typing import Any

from memderive.symbolic.dims import DIMS

__all__ = ["SYMBOLS", "symbols", *(dim.name for dim in DIMS)]  # noqa: F822, PLE0604 (SYMBOLS: __getattr__)


@cache
def symbols() -> dict[str, Any]:
    """``{name: SymPy symbol}`` for every declared dimension (``SYMBOLS``), built on first use: importing this
    module imports no SymPy; reading a symbol does."""
    return {dim.name: dim.symbol for dim in DIMS}


def __getattr__(name: str) -> Any:
    if name == "SYMBOLS":
        return symbols()
    try:
        return symbols()[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
