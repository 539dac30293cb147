"""The SymPy symbols of ``symbolic.dims`` (positive integers), for code that works in SymPy: the checker
(``derivations/claims``), ``symbolic.simplify`` and render/ printing. Graph code uses ``symbolic.dims``.

>>> from symbolic.dims_sympy import a_kv, h
>>> (2 * a_kv * h).is_positive, str(a_kv)
(True, 'a_kv')
"""

from __future__ import annotations

import sympy as sp

from symbolic.dims import DIMS

__all__ = ["SYMBOLS", "b", "s", "h", "a", "a_kv", "d_h", "f", "l", "V", "n_ctx", "n_type", "n", "w", "l_w", "g",
           "t", "p", "d", "m", "v", "Psi"]

#: ``{name: SymPy symbol}`` for every declared dimension.
SYMBOLS: dict[str, sp.Symbol] = {dim.name: dim.symbol for dim in DIMS}

b, s, h, a, a_kv, d_h, f, l, V, n_ctx, n_type, n, w, l_w, g, t, p, d, m, v, Psi = SYMBOLS.values()
