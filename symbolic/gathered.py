"""What a sequence-parallel all-gather of a quantized tensor sends (``Gathered``): torchtitan's Float8 tensor
parallelism (``symbolic.float8.TP_GATHERS``) and Transformer Engine's fp8 linears (``symbolic.te_float8.SP_GATHERS``)
both gather 8-bit tensors where 16-bit training gathers 16-bit ones; ``derivations.quantities.timing`` times them."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from memderive.symbolic.dtypes import dtype

__all__ = ["Gathered"]

FP8 = dtype("fp8")


@dataclass(frozen=True, slots=True)
class Gathered:
    """What a sequence-parallel all-gather of a quantized tensor sends, per element of the tensor: ``copies`` layouts
    of its 8-bit data (one byte per element each), each with its one-byte scales, one per ``block`` elements
    (``block`` None: one scale per tensor, which every rank already holds and none sends). ``input``: the copies the
    forward's all-gather of a column-parallel linear's input sends; ``grad``: those the backward's all-gather of a
    row-parallel linear's output gradient sends. The reduce-scatters (a row-parallel output, a column-parallel
    input's gradient) stay in the activations' 16 bits.

    >>> Gathered(1, 2, block=32).width(2)  # MXFP8's gradient: row- and column-wise data, a scale per 32 each
    Fraction(33, 16)
    """

    input: int
    grad: int
    block: int | None = None
    data: int | Fraction = FP8.nbytes  # bytes per element of each copy's data (NVFP4: 1/2, two elements a byte)

    def width(self, copies: int) -> Fraction:
        """Bytes per element of the gathered tensor for ``copies`` layouts.

        >>> Gathered(1, 2, block=16, data=Fraction(1, 2)).width(2)  # NVFP4's gradient: 4-bit data, a scale per 16
        Fraction(9, 8)
        """
        return copies * (self.data + (Fraction(1, self.block) if self.block else Fraction(0)))
