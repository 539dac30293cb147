"""A value that hashes and compares by its key alone, so that ``functools.lru_cache`` memoizes a
function of the value once per key (the derivation cache of ``estimate``, the NumPy plans of ``sweep``).

>>> from functools import lru_cache
>>> @lru_cache(maxsize=8)
... def length(item: Keyed) -> int:
...     return len(item.value)
>>> length(Keyed("k", "abc")), length(Keyed("k", "a much longer value"))  # the same key: the first value's
(3, 3)
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Keyed"]


@dataclass(frozen=True, slots=True)
class Keyed:
    """``key`` (hashable: what the result depends on) and ``value`` (what the function reads; not compared)."""

    key: Hashable
    value: Any = field(compare=False)
