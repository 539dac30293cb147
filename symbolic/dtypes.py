"""Element types and their sizes in bytes (exact: ``int``, or a ``Fraction`` for int4's 1/2 byte; NF4's
4-bit codes are 1/2 byte too, its quantization constants are counted by the quantized weights' rule)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = ["DType", "DTYPES", "dtype"]


@dataclass(frozen=True, slots=True)
class DType:
    name: str
    nbytes: int | Fraction

    def __str__(self) -> str:
        return self.name


DTYPES: dict[str, DType] = {
    name: DType(name, size)
    for name, size in (
        ("fp32", 4), ("fp16", 2), ("bf16", 2), ("fp8", 1), ("int8", 1),
        ("int4", Fraction(1, 2)), ("nf4", Fraction(1, 2)), ("mxfp4", Fraction(1, 2)), ("bool", 1), ("int32", 4), ("int64", 8),
    )
}
_ALIASES = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "float8": "fp8", "float": "fp32", "uint8": "int8"}


def dtype(name: str | DType) -> DType:
    """Look up a dtype by name (``bf16``, ``float16``, ...).

    >>> dtype("bfloat16").nbytes
    2
    """
    if isinstance(name, DType):
        return name
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    return DTYPES[key]
