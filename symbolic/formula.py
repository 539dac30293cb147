"""Published formulas as values: an expression with its citation and assumptions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Citation", "Formula"]


@dataclass(frozen=True, slots=True)
class Citation:
    authors: str
    where: str  # arXiv id or URL
    locus: str = ""  # table / equation / section

    def __str__(self) -> str:
        return ", ".join(x for x in (self.authors, self.where, self.locus) if x)


@dataclass(frozen=True, slots=True)
class Formula:
    name: str
    expr: Any  # a symbolic.expr.Expr (graph-derived) or a SymPy expression (the checker's)
    source: Citation
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.source, Citation):
            raise TypeError(f"formula {self.name!r} needs a Citation")
