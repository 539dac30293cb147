"""Memory sizes as people type them (``80GB``, ``2 GiB``) and as a command line writes them back.

>>> parse_size("80GiB"), size_text(2 * 2**30), size_text(500 * 10**6), size_text(1234)
(85899345920, '2GiB', '500MB', '1234B')
"""

from __future__ import annotations

import re
from fractions import Fraction

from memderive.symbolic.errors import shown

__all__ = ["UNITS", "SIZE_FORMS", "parse_size", "size_text"]

UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
#: ASCII digits only (``int`` would read full-width ``８０``), spaces but no newline, at most 30 digits
_SIZE = re.compile(r"\A[ \t]*([0-9]{1,30}(?:\.[0-9]{1,30})?)[ \t]*([kmgt]i?b|b)?[ \t]*\Z", re.IGNORECASE)
#: The forms a size is written in, for error messages.
SIZE_FORMS = "a number with a unit: 80GB (10^9 bytes), 80GiB (2^30 bytes), 512MB, 1.5TB, 4096B"
#: Units a size is written back in, largest first (binary before decimal at one scale).
_WRITTEN = ("TiB", "TB", "GiB", "GB", "MiB", "MB", "KiB", "kB")


def parse_size(text: str, option: str = "size", bare: str | None = None) -> int:
    """Parse a memory size people type: ``80GB``, ``80 GiB``, ``141 GB``, ``1.5TB``, ``4096B``.

    A number without a unit is refused (``80`` could be bytes, GB or GiB), unless ``bare`` names the
    unit the option reads it in (e.g. ``"GB"``); ``0`` needs no unit.

    >>> parse_size("80", bare="GB")
    80000000000
    >>> parse_size("80")
    Traceback (most recent call last):
    ...
    ValueError: size '80' has no unit; write a number with a unit: 80GB (10^9 bytes), 80GiB (2^30 bytes), 512MB, 1.5TB, 4096B
    """
    match = _SIZE.match(str(text))
    if not match:
        raise ValueError(f"cannot read {option} {shown(text)}; write {SIZE_FORMS}, in ASCII digits (at most 30)")
    number, unit = match.groups()
    if unit is None and Fraction(number) != 0:
        if bare is None:
            raise ValueError(f"{option} {shown(text)} has no unit; write {SIZE_FORMS}")
        unit = bare
    value = Fraction(number) * UNITS[(unit or "b").lower()]
    if value.denominator != 1:
        raise ValueError(f"size {shown(text)} is not a whole number of bytes")
    return int(value)


def size_text(n: int) -> str:
    """``n`` bytes in the largest unit that writes it whole (``parse_size`` reads it back to ``n``); 0 is ``0``."""
    if n == 0:
        return "0"
    unit = next((u for u in _WRITTEN if n % UNITS[u.lower()] == 0), "B")
    return f"{n // UNITS[unit.lower()]}{unit}"
