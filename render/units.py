"""Numbers with units: exact integers shown as bytes, GB (10^9) and GiB (2^30), labelled.

>>> format_bytes(80 * 10**9)
'80,000,000,000 B = 80.00 GB = 74.51 GiB'
>>> parse_size("80GiB")
85899345920
"""

from __future__ import annotations

import re
from fractions import Fraction

__all__ = ["format_bytes", "format_count", "parse_size", "UNITS"]

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b|b)?\s*$", re.IGNORECASE)


def _fixed(value: Fraction, precision: int) -> str:
    scaled = round(value * 10**precision)
    whole, frac = divmod(abs(scaled), 10**precision)
    sign = "-" if scaled < 0 else ""
    return f"{sign}{whole:,}" + (f".{frac:0{precision}d}" if precision else "")


def format_bytes(n: int, precision: int = 2) -> str:
    """``n`` bytes, and the same in GB and GiB (exact rational arithmetic, rounded half-even)."""
    return f"{n:,} B = {_fixed(Fraction(n, 10**9), precision)} GB = {_fixed(Fraction(n, 2**30), precision)} GiB"


def format_count(n: int, precision: int = 2) -> str:
    """A parameter count with a short scale: ``6,738,415,616 (6.74 B)``."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if abs(n) >= scale:
            return f"{n:,} ({_fixed(Fraction(n, scale), precision)} {suffix})"
    return f"{n:,}"


def parse_size(text: str) -> int:
    """Parse a memory size people type: ``80GB``, ``80 GiB``, ``141 GB``, ``1.5TB``, ``1024``."""
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"cannot read size {text!r}; write e.g. 80GB (10^9 bytes) or 80GiB (2^30 bytes)")
    number, unit = match.groups()
    value = Fraction(number) * UNITS[(unit or "b").lower()]
    if value.denominator != 1:
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)
