"""The one table of dimension symbols.

Every size that appears in a shape or a formula is declared here, once, with its
meaning and its LaTeX form. Nothing else in the codebase calls ``sp.Symbol``.

>>> from symbolic.dims import b, s, h
>>> b * s * h
b*h*s
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["Dim", "DIMS", "by_name", "sym", "b", "s", "h", "a", "a_kv", "d_h", "f", "l", "V", "n_ctx", "n_type",
           "n", "w", "l_w", "g", "t", "p", "d", "m", "v", "Psi"]


@dataclass(frozen=True, slots=True)
class Dim:
    """A named positive-integer size."""

    name: str
    meaning: str
    latex: str

    @property
    def symbol(self) -> sp.Symbol:
        return sp.Symbol(self.name, positive=True, integer=True)


DIMS: tuple[Dim, ...] = (
    # model sizes
    Dim("b", "micro-batch size (sequences)", "b"),
    Dim("s", "sequence length (tokens)", "s"),
    Dim("h", "hidden size", "h"),
    Dim("a", "attention (query) heads", "a"),
    Dim("a_kv", "key/value heads", "a_{kv}"),
    Dim("d_h", "head dimension", "d_{h}"),
    Dim("f", "FFN (MLP) width", "f"),
    Dim("l", "transformer layers", "l"),
    Dim("V", "vocabulary size", "V"),
    Dim("n_ctx", "learned position embeddings (max positions)", "n_{ctx}"),
    Dim("n_type", "token type embeddings", "n_{type}"),
    # inference
    Dim("n", "generated tokens", "n"),
    Dim("w", "sliding attention window", "w"),
    Dim("l_w", "layers with a sliding attention window", "l_{w}"),
    Dim("g", "quantization group size", "g"),
    # strategy degrees
    Dim("t", "tensor-parallel degree", "t"),
    Dim("p", "pipeline-parallel degree", "p"),
    Dim("d", "data-parallel degree", "d"),
    Dim("m", "micro-batches per step", "m"),
    Dim("v", "virtual pipeline stages per device", "v"),
    # aggregate: the parameter count, as papers write model-state formulas (ZeRO's Psi)
    Dim("Psi", "parameters held by one GPU", "\\Psi"),
)

_BY_NAME = {dim.name: dim for dim in DIMS}


def by_name(name: str) -> Dim:
    """Look a dimension up by its name; unknown names raise ``KeyError``."""
    return _BY_NAME[name]


def sym(name: str) -> sp.Symbol:
    """The SymPy symbol of a declared dimension."""
    return _BY_NAME[name].symbol


b, s, h, a, a_kv, d_h, f, l, V, n_ctx, n_type, n, w, l_w, g, t, p, d, m, v, Psi = (dim.symbol for dim in DIMS)
