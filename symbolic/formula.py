"""Published formulas as values: an expression with its citation and assumptions.

A ``Citation`` names a work by its reference key (an entry of ``memderive.derivations.references``, where the
authors, title, year and arXiv id, URL or repository file live once) and the place in it: table, equation,
section or function. The engine only carries keys; ``derivations.references.cite`` writes them out.

>>> c = Citation("korthikanti-2022", "Eq. 1, Table 2")
>>> c.keys(), str(c)
(('korthikanti-2022',), '[korthikanti-2022] Eq. 1, Table 2')
>>> both = Citation("shazeer-2019", "one K/V head", also=(Citation("ainslie-2023", "G K/V heads"),))
>>> both.keys()
('shazeer-2019', 'ainslie-2023')
>>> Citation("Korthikanti et al. 2022", "arXiv:2205.05198")
Traceback (most recent call last):
...
ValueError: a Citation names a reference key (lower-case words joined by '-', e.g. 'korthikanti-2022'; see memderive.derivations.references), got 'Korthikanti et al. 2022'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Citation", "Formula"]

_KEY = re.compile(r"[a-z][a-z0-9]*(?:[-.][a-z0-9]+)*")


@dataclass(frozen=True, slots=True)
class Citation:
    """A reference ``key``, the ``locus`` in that work, and ``also``: further works the statement rests on."""

    key: str
    locus: str = ""  # table / equation / section / function
    also: tuple[Citation, ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _KEY.fullmatch(self.key):
            raise ValueError("a Citation names a reference key (lower-case words joined by '-', e.g. "
                             f"'korthikanti-2022'; see memderive.derivations.references), got {self.key!r}")
        if not all(isinstance(c, Citation) for c in self.also):
            raise TypeError("Citation.also holds Citations")

    def parts(self) -> tuple[Citation, ...]:
        """One citation per work, in order, each without ``also``."""
        return (Citation(self.key, self.locus),) + tuple(p for c in self.also for p in c.parts())

    def keys(self) -> tuple[str, ...]:
        return tuple(p.key for p in self.parts())

    def __str__(self) -> str:
        return "; ".join(f"[{p.key}] {p.locus}".rstrip() for p in self.parts())


@dataclass(frozen=True, slots=True)
class Formula:
    name: str
    expr: Any  # a symbolic.expr.Expr (graph-derived) or a SymPy expression (the checker's)
    source: Citation
    assumptions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.source, Citation):
            raise TypeError(f"formula {self.name!r} needs a Citation")
