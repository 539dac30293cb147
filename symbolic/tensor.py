"""Immutable tensors with symbolic shapes.

>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import dtype
>>> x = Tensor("x", (b, s, h), dtype("bf16"), seq_axis=1)
>>> x.nbytes
2*b*h*s
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memderive.symbolic.dtypes import DType
from memderive.symbolic.expr import Expr, Size, const, prod

__all__ = ["Tensor"]


@dataclass(frozen=True, slots=True)
class Tensor:
    """A tensor: name, symbolic shape, element type and how parallelism splits it.

    Attributes:
        name: unique within its block (e.g. ``attn/qkv.in``); equal names are one tensor.
        shape: one expression per axis, e.g. ``(b, a, s, d_h)``.
        dtype: element type (bytes per element may be fractional, e.g. int4).
        role: what the tensor is (``weight``, ``bias``, ``input``, ``softmax``, ``dropout-mask``,
            ``norm-stats``, ...); strategies and profiles select tensors by role.
        tp_axis: axis split across tensor-parallel ranks (heads, FFN width or vocab), or None
            when every rank holds it whole.
        seq_axis: the sequence axis of an activation; sequence parallelism splits it when the
            tensor is not already split by tensor parallelism.
    """

    name: str
    shape: tuple[Size, ...]  # stored as expressions
    dtype: DType
    role: str = "activation"
    tp_axis: int | None = None
    seq_axis: int | None = None

    def __post_init__(self) -> None:
        if not all(type(x) is Expr for x in self.shape):
            object.__setattr__(self, "shape", tuple(const(x) for x in self.shape))
        for axis in (self.tp_axis, self.seq_axis):
            if axis is not None and not -len(self.shape) <= axis < len(self.shape):
                raise ValueError(f"{self.name}: axis {axis} outside shape {self.shape}")

    @property
    def numel(self) -> Expr:
        return prod(self.shape)

    @property
    def nbytes(self) -> Expr:
        return self.numel * self.dtype.nbytes

    def split(self, axis: int, degree: Size) -> Tensor:
        """The per-rank shard when ``axis`` is divided among ``degree`` ranks."""
        shape = list(self.shape)
        shape[axis] = const(shape[axis]) / degree
        return replace(self, shape=tuple(shape))
