"""Numbers with units: exact integers shown as bytes, GB (10^9) and GiB (2^30), labelled.

>>> format_bytes(80 * 10**9)
'80,000,000,000 B = 80.00 GB = 74.51 GiB'
>>> parse_size("80GiB")
85899345920
>>> scaled_bytes(82_837_504)
('82.84 MB', '79.00 MiB')
>>> RenderOptions().merge(precision=3).precision
3
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from fractions import Fraction

from memderive.derivations.sizes import UNITS, parse_size

__all__ = ["format_bytes", "format_count", "parse_size", "scaled_bytes", "scaled_count", "scaled_flops", "RenderOptions",
           "UNITS",
           "DETAILS"]

def _fixed(value: Fraction, precision: int) -> str:
    scaled = round(value * 10**precision)
    whole, frac = divmod(abs(scaled), 10**precision)
    sign = "-" if scaled < 0 else ""
    return f"{sign}{whole:,}" + (f".{frac:0{precision}d}" if precision else "")


def format_bytes(n: int, precision: int = 2) -> str:
    """``n`` bytes, and the same in GB and GiB (exact rational arithmetic, rounded half-even);
    below a gigabyte in the largest units that keep a leading digit instead (never ``0.00 GB``).

    >>> format_bytes(78_643_200)
    '78,643,200 B = 78.64 MB = 75.00 MiB'
    >>> format_bytes(131_072)
    '131,072 B = 131.07 kB = 128.00 KiB'
    """
    if abs(n) < 10**9:
        decimal, binary = scaled_bytes(n, precision)
        return f"{n:,} B" if abs(n) < 1000 else f"{n:,} B = {decimal} = {binary}"
    return f"{n:,} B = {_fixed(Fraction(n, 10**9), precision)} GB = {_fixed(Fraction(n, 2**30), precision)} GiB"


def format_count(n: int, precision: int = 2) -> str:
    """A parameter count with its scale in words (never ``B``, which reads as bytes).

    >>> format_count(6_738_415_616)
    '6,738,415,616 (6.74 billion)'
    """
    return f"{n:,}" if abs(n) < 1000 else f"{n:,} ({scaled_count(n, precision, words=True)})"


def _scaled(n: int, base: int, names: tuple[str, ...], precision: int) -> str:
    for power in range(len(names) - 1, 0, -1):
        if abs(n) >= base**power:
            return f"{_fixed(Fraction(n, base**power), precision)} {names[power]}"
    return f"{n:,} {names[0]}"


def scaled_bytes(n: int, precision: int = 2) -> tuple[str, str]:
    """``n`` bytes in the largest decimal and binary units that keep a leading digit."""
    return (_scaled(n, 1000, ("B", "kB", "MB", "GB", "TB", "PB"), precision),
            _scaled(n, 1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB"), precision))


def scaled_flops(n: int, precision: int = 2) -> str:
    """FLOPs with an SI prefix: ``188.76 TFLOPs``."""
    return _scaled(n, 1000, ("FLOPs", "kFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs", "EFLOPs", "ZFLOPs"), precision)


def scaled_count(n: int, precision: int = 2, words: bool = False) -> str:
    """A count on a short scale: ``6.74 B`` (or ``6.74 billion``); plain below a thousand."""
    names = ("", "thousand", "million", "billion", "trillion") if words else ("", "K", "M", "B", "T")
    return _scaled(n, 1000, names, precision).strip()


#: Writeup detail, after handcalcs' modes: the formula only, formula = numbers = result, formula = result.
DETAILS = ("symbolic", "substituted", "numeric")


@dataclass(frozen=True, slots=True)
class RenderOptions:
    """How a writeup shows numbers; immutable, unknown settings are refused.

    Precedence: the defaults below, then the fields given to the constructor, then each
    ``merge(**overrides)`` in turn (the latest wins; an override of ``None`` keeps the value).

    Attributes:
        precision: decimals of the rounded GB/GiB (and short-scale count) figures; exact integers are
            always printed in full.
        detail: ``symbolic`` | ``substituted`` | ``numeric`` (see ``DETAILS``).
        units: ``both`` (GB and GiB), ``SI`` (GB) or ``IEC`` (GiB) for rounded byte figures.
        line_width: rough visible characters per line before a long sum is broken (0: never).
    """

    precision: int = 2
    detail: str = "substituted"
    units: str = "both"
    line_width: int = 72

    def __post_init__(self) -> None:
        for name in ("precision", "line_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= (12 if name == "precision"
                                                                                            else 10_000):
                raise ValueError(f"render setting {name} must be a small non-negative integer, got {value!r}")
        if self.detail not in DETAILS:
            raise ValueError(f"render setting detail must be one of {', '.join(DETAILS)}, got {self.detail!r}")
        if self.units not in ("both", "SI", "IEC"):
            raise ValueError(f"render setting units must be both, SI or IEC, got {self.units!r}")

    def merge(self, **overrides: object) -> RenderOptions:
        """A copy with ``overrides`` applied; ``TypeError`` names an unknown setting."""
        known = tuple(f.name for f in fields(self))
        for key in overrides:
            if key not in known:
                raise TypeError(f"Unknown setting {key!r}; render settings are {', '.join(known)}")
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def bytes_text(self, n: int) -> str:
        """Rounded figures of ``n`` bytes in the chosen units: ``16.21 GB / 15.09 GiB``."""
        si, iec = scaled_bytes(n, self.precision)
        return {"both": f"{si} / {iec}", "SI": si, "IEC": iec}[self.units]
