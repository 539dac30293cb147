"""The SymPy symbols of ``symbolic.dims`` (positive integers), for code that works in SymPy: the checker
(``derivations/claims``), ``symbolic.simplify`` and render/ printing. Graph code uses ``symbolic.dims``.

Every name declared in ``symbolic.dims.DIMS`` is importable from here (``from memderive.symbolic.dims_sympy import h``).

>>> from memderive.symbolic.dims_sympy import a_kv, h
>>> (2 * a_kv * h).is_positive, str(a_kv)
(True, 'a_kv')
"""

from __future__ import annotations

from typing import Any

import sympy as sp

from memderive.symbolic.dims import DIMS

#: ``{name: SymPy symbol}`` for every declared dimension.
SYMBOLS: dict[str, sp.Symbol] = {dim.name: dim.symbol for dim in DIMS}

__all__ = ["SYMBOLS", *SYMBOLS]  # noqa: PLE0604


def __getattr__(name: str) -> Any:
    try:
        return SYMBOLS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
