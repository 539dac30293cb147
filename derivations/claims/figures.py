"""Figures as notes print them: digit groups, decimals, exponents, magnitude suffixes, units and percents.

A *figure* is a number as written, with the precision its last printed digit implies: ``12.9B`` is
12.9 x 10^9 to within 0.05 x 10^9; ``110M`` is 1.1 x 10^8 to within 5 x 10^6 (the trailing zero of an
integer before a suffix is not significant); a plain integer (``39,976,960``, ``4096``) is exact. The
checker compares a figure with ours by that half unit (``derivations.claims.check``: verdict ``rounded``).

* digit groups ``39,976,960``, our printer's ``4{,}096`` and Python's ``16_000``; decimals ``0.5898``;
  exponents ``8e9``;
* magnitudes after a number: ``K M B T`` (B is a billion in a count, bytes in a byte count; a letter that
  starts a product, ``96 B s``, stays a letter), ``thousand million billion trillion bn``, and ``万 亿``;
* units: ``B KB kB MB GB TB KiB MiB GiB TiB bytes 字节 bits elements params FLOPs``; ``%``.

>>> read_number("39,976,960 params", 0)[0].value, read_number("12.9", 0)[0].half
(39976960, Fraction(1, 20))
>>> magnitude("B", counting=True), magnitude("B", counting=False)
(1000000000, None)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

__all__ = ["Figure", "read_number", "magnitude", "MAGNITUDES", "WORDS", "UNITS", "BYTE_SCALES", "figure_text",
           "SCALE_NAMES", "decimal_text"]

#: digit groups of three (``39,976,960``, ``4{,}096``), a decimal part, an exponent (``8e9``, ``1.5E-3``)
_NUMBER = re.compile(r"(?P<int>\d{1,3}(?:(?:,|\{,\})\d{3})+(?![\d])|\d+(?:_\d+)+(?![\d_])|\d+)(?P<frac>\.\d+)?"
                     r"(?:(?P<exp>[eE][+-]?\d{1,3})(?![A-Za-z0-9_]))?|(?P<bare>\.\d+)")
#: single letters after a number that scale it (in a count; ``B`` in a byte count is the unit)
MAGNITUDES = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
#: magnitude words (any case) and Chinese magnitudes
WORDS = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12, "bn": 10**9,
         "万": 10**4, "亿": 10**8}
#: byte units that scale the number before them (SI and binary)
BYTE_SCALES = {"B": 1, "KB": 10**3, "kB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
#: SI byte units and the binary unit some notes mean by them (``128 KB`` for 131,072 bytes)
BINARY = {"KB": "KiB", "kB": "KiB", "MB": "MiB", "GB": "GiB", "TB": "TiB"}
#: unit words: what they count and the factor into that unit
UNITS: dict[str, tuple[str, Fraction | int]] = {
    **{k: ("bytes", v) for k, v in BYTE_SCALES.items()},
    "bytes": ("bytes", 1), "byte": ("bytes", 1), "字节": ("bytes", 1),
    "bits": ("bits", 1), "bit": ("bits", 1), "elements": ("elements", 1), "params": ("elements", 1),
    "parameters": ("elements", 1), "FLOPs": ("FLOPs", 1), "flops": ("FLOPs", 1), "FLOP": ("FLOPs", 1)}
SCALE_NAMES = {10**3: "K", 10**6: "M", 10**9: "B", 10**12: "T", 10**4: "万", 10**8: "亿"}


@dataclass(frozen=True, slots=True)
class Figure:
    """A number as written: its exact value, the half unit of its last printed digit, and the digits
    after the point (for printing ours the same way)."""

    value: Fraction | int
    half: Fraction | int
    written: str
    decimals: int = 0

    def scaled(self, factor: Fraction | int, written: str) -> Figure:
        """The figure times a magnitude or unit (``12.9`` and ``B``): an integer mantissa's trailing
        zeros are not significant once it is scaled (``110M`` is 1.1 x 10^8 to 5 x 10^6)."""
        half = self.half
        if half == 0:
            digits = self.written.replace(",", "").replace("{,}", "")
            zeros = len(digits) - len(digits.rstrip("0")) if digits.strip("0") else 0
            half = Fraction(10**zeros, 2)
        return Figure(_tidy(self.value * factor), _tidy(half * factor), written, self.decimals)


def _tidy(value: Fraction | int) -> Fraction | int:
    """A whole Fraction as an int (``8e9`` is 8000000000)."""
    return int(value) if isinstance(value, Fraction) and value.denominator == 1 else value


def read_number(text: str, i: int) -> tuple[Figure, int]:
    """The number starting at ``i`` and where it ends; ``8e9`` and ``12.9`` carry their precision.

    >>> read_number("8e9", 0)[0]
    Figure(value=8000000000, half=500000000, written='8e9', decimals=0)
    """
    match = _NUMBER.match(text, i)
    if match is None:
        raise ValueError(f"no number at {i}")
    written = match.group()
    if match.group("bare"):
        frac = match.group("bare")
        return Figure(Fraction(frac), Fraction(1, 2 * 10 ** (len(frac) - 1)), written, len(frac) - 1), match.end()
    digits = match.group("int").replace("{,}", "").replace(",", "").replace("_", "")  # 16_000: Python's separators
    frac = match.group("frac") or ""
    value = Fraction(digits + frac) if frac else int(digits)
    decimals = len(frac) - 1 if frac else 0
    half: Fraction | int = Fraction(1, 2 * 10**decimals) if frac else 0
    figure = Figure(value, half, written, decimals)
    if match.group("exp"):
        power = int(match.group("exp")[1:])
        mantissa = Figure(value, half, digits + frac, decimals)
        figure = mantissa.scaled(Fraction(10) ** power, written)
    return figure, match.end()


def magnitude(letter: str, counting: bool, known: bool = False) -> int | None:
    """The scale of a single letter after a number, or None when it is a symbol or a unit: ``B`` is
    a billion in a count (``counting``) and the byte unit otherwise; a letter the claim's table knows
    (ZeRO's ``K`` in model states) stays that symbol outside counts."""
    if letter not in MAGNITUDES:
        return None
    if letter == "B" and not counting:
        return None
    if known and not counting:
        return None
    return MAGNITUDES[letter]


def figure_text(value: Fraction | int, like: Figure | None, scale: int = 1, suffix: str = "") -> str:
    """``value`` printed as the figure ``like`` is: ``37.55 x 10^9`` as ``38B`` next to ``37B``.

    >>> figure_text(Fraction(3753, 100) * 10**9, Figure(37 * 10**9, 5 * 10**8, "37B"), 10**9, "B")
    '38B'
    """
    decimals = like.decimals if like is not None else 0
    shown = Fraction(value) / scale
    rounded = round(shown, decimals) if decimals else round(shown)
    body = f"{float(rounded):,.{decimals}f}" if decimals else f"{int(rounded):,}"
    return body + suffix


def decimal_text(value: Fraction | int) -> str:
    """A rational as a decimal when it has one (``0.005898``), else as a fraction.

    >>> decimal_text(Fraction(2949, 500000)), decimal_text(Fraction(1, 3))
    ('0.005898', '1/3')
    """
    value = Fraction(value)
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return str(value)
    places = max(twos, fives)
    return f"{value.numerator * 10**places // value.denominator / 10**places:.{places}f}" if places < 16 else str(value)
