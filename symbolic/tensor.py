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
from memderive.symbolic.expr import Expr, Min, Size, const, prod

__all__ = ["Tensor", "merge_copies", "view_or_copy"]


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


def merge_copies(size: Size) -> Expr:
    """1 where ``reshape`` merging an axis of ``size`` elements with the next one copies, 0 where it is a view.

    ``reshape`` (and ``matmul``, which folds a 4-d operand to the 3-d one of ``bmm`` with it) returns a view
    when the merged axes' strides chain; a strided operand (a head-major view of a ``(b, s, a, d)`` output,
    a K/V head expanded with stride 0) breaks the chain at the leading axis unless that axis has size 1,
    whose stride never matters (PyTorch's ``computeStride``, aten/src/ATen/TensorUtils.cpp, skips size-1
    dimensions). For an integer ``size`` of at least 1: ``Min(size - 1, 1)``.

    >>> from memderive.symbolic.dims import b
    >>> from memderive.symbolic.expr import evaluate
    >>> [evaluate(merge_copies(b), {b: n}) for n in (1, 2, 7)]
    [0, 1, 1]
    """
    return Min(const(size) - 1, 1)


def view_or_copy(copy: Tensor, base: Tensor, lead: Size) -> tuple[Tensor, Tensor]:
    """What an operand that ``reshape`` copies when its leading axis of ``lead`` elements exceeds 1 holds:
    ``copy`` (its own storage) when it copies, the whole storage of ``base`` it is a view of when ``lead``
    is 1; one of the two pairs is empty. ``base`` keeps its name with ``:held`` (another tensor than the
    base itself, which backward may not need)."""
    c = merge_copies(lead)
    last = len(copy.shape) - 1
    own = replace(copy, shape=tuple(x * c if i == last else x for i, x in enumerate(copy.shape)))
    held = replace(base, name=f"{base.name}:held",
                   shape=tuple(x * (1 - c) if i == len(base.shape) - 1 else x for i, x in enumerate(base.shape)))
    return own, held
