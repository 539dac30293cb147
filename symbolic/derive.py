"""Sum a graph into closed forms, keeping a breakdown by node path.

A ``Breakdown`` is an ordered tuple of ``Term(path, expr)``; its ``total`` is their sum, so the
parts add up to the total by construction. ``path`` names the node that produced the term
(``layer/attn/qkv``): that is the provenance a writeup shows.

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.graph import Graph
>>> from memderive.symbolic.dims import b, s, h, l
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.linear("fc", bb.input, h, bias=False)
>>> parameters(Graph("toy", (bb.build(repeat=l),))).total
h**2*l
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from typing import TYPE_CHECKING, Any

from memderive.symbolic.expr import Expr, Number, const
from memderive.symbolic.expr import total as _sum
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.tensor import Tensor
from memderive.symbolic.lazy import lazy

if TYPE_CHECKING:
    import sympy as sp
else:
    sp = lazy("sympy")

__all__ = ["Term", "Breakdown", "parameters", "activations", "flops", "evaluate", "per_block", "TRAINING_PHASES"]

#: The phases of a training step without recompute: what model FLOPs (MFU) count.
TRAINING_PHASES = ("forward", "input-grad", "weight-grad")


@dataclass(frozen=True, slots=True)
class Term:
    path: str
    expr: Expr


@dataclass(frozen=True, slots=True)
class Breakdown:
    """Ordered terms of a quantity; ``unit`` is ``elements`` or ``bytes``."""

    terms: tuple[Term, ...]
    unit: str

    @property
    def total(self) -> Expr:
        return _sum(term.expr for term in self.terms)

    def where(self, keep: Callable[[str], bool]) -> Breakdown:
        return Breakdown(tuple(t for t in self.terms if keep(t.path)), self.unit)

    def scaled(self, factor: Expr | Number) -> Breakdown:
        return Breakdown(tuple(Term(t.path, t.expr * factor) for t in self.terms), self.unit)

    def grouped(self, depth: int) -> Breakdown:
        """Merge terms by the first ``depth`` components of their path, in order."""
        merged: dict[str, Expr] = {}
        for term in self.terms:
            key = "/".join(term.path.split("/")[:depth])
            merged[key] = merged.get(key, const(0)) + term.expr
        return Breakdown(tuple(Term(k, e) for k, e in merged.items()), self.unit)

    def __add__(self, other: Breakdown) -> Breakdown:
        if self.unit != other.unit:
            raise ValueError(f"cannot add {self.unit} to {other.unit}")
        return Breakdown(self.terms + other.terms, self.unit)


def _op_params(op: Op) -> Expr:
    return _sum(t.numel for t in op.params)


def parameters(graph: Graph, blocks: Iterable[str] | None = None, per_repeat: bool = False) -> Breakdown:
    """Parameter count (elements), one term per op that owns parameters."""
    terms = []
    for blk in graph.blocks:
        if blocks is not None and blk.name not in blocks:
            continue
        scale = const(1) if per_repeat else blk.repeat
        terms += [Term(f"{blk.name}/{op.path}", scale * op.share * _op_params(op)) for op in blk.ops if op.params]
    return Breakdown(tuple(terms), "elements")


def _unique_saved(block: Block, ignore_roles: frozenset[str]) -> list[tuple[Op, Tensor]]:
    """Each saved tensor once, attributed to the first op that saves it."""
    seen: set[str] = set()
    out = []
    for op in block.ops:
        for tensor in op.saved:
            if tensor.name in seen or tensor.role in ignore_roles:
                continue
            seen.add(tensor.name)
            out.append((op, tensor))
    return out


def _tensor_shares(block: Block) -> dict[str, Expr]:
    """The fraction of the block's repeats that hold each saved tensor: 1 when an op of every repeat
    saves it, else the sum of the distinct shares of the ops that save it (a norm output read by the
    dense MLP of ``l_d`` layers and by the router of the other ``l - l_d`` is in every layer)."""
    shares: dict[str, list[Expr]] = {}
    for op in block.ops:
        for tensor in op.saved:
            got = shares.setdefault(tensor.name, [])
            if const(op.share) not in got:
                got.append(const(op.share))
    return {name: const(1) if const(1) in got else _sum(got) for name, got in shares.items()}


def activations(graph: Graph, ignore_roles: Iterable[str] = (), blocks: Iterable[str] | None = None,
                per_repeat: bool = False) -> Breakdown:
    """Bytes autograd holds for backward, one term per op that saves something.

    A block contributes ``repeat * in_flight`` copies (``per_repeat`` drops ``repeat``).
    ``ignore_roles`` drops tensors a published profile neglects (e.g. ``norm-stats``).
    """
    ignore = frozenset(ignore_roles)
    terms: list[Term] = []
    for blk in graph.blocks:
        if blocks is not None and blk.name not in blocks:
            continue
        scale = blk.in_flight * (const(1) if per_repeat else blk.repeat)
        by_op: dict[str, Expr] = {}
        shares = _tensor_shares(blk)
        for op, tensor in _unique_saved(blk, ignore):
            by_op[op.path] = by_op.get(op.path, const(0)) + shares[tensor.name] * tensor.nbytes
        terms += [Term(f"{blk.name}/{path}", scale * expr) for path, expr in by_op.items()]
    return Breakdown(tuple(terms), "bytes")


def flops(graph: Graph, *, kinds: Iterable[str] = ("matmul",), phases: Iterable[str] = ("forward",),
          frozen: Iterable[str] = (), blocks: Iterable[str] | None = None, per_repeat: bool = False) -> Breakdown:
    """FLOPs of one micro-batch through ``graph``, one term per op and phase.

    Paths are ``block/op/phase`` (``layer/attn/qkv/weight-grad``). A block contributes ``repeat``
    times its ops' terms (``per_repeat`` drops it; micro-batches in flight do not multiply work).
    ``frozen`` names parameters (``attn/qkv.weight`` or ``layer/attn/qkv.weight``) whose
    weight-gradient terms are dropped, besides the graph's own frozen ones (``graph.frozen``).

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h, l
    >>> from memderive.symbolic.dtypes import dtype
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.linear("fc", bb.input, h, bias=False)
    >>> g = Graph("toy", (bb.build(repeat=l),))
    >>> step = ("forward", "input-grad", "weight-grad")
    >>> flops(g).total, flops(g, phases=step).total, flops(g, phases=step, frozen=["fc.weight"]).total
    (2*b*h**2*l*s, 6*b*h**2*l*s, 4*b*h**2*l*s)
    """
    kinds, phases, frozen = frozenset(kinds), tuple(phases), frozenset(frozen) | graph.frozen
    terms: list[Term] = []
    for blk in graph.blocks:
        if blocks is not None and blk.name not in blocks:
            continue
        scale = 1 if per_repeat else blk.repeat
        for op in blk.ops:
            for phase in phases:
                count = [x.count for x in op.flops if x.phase == phase and x.kind in kinds
                         and not (x.param is not None and (x.param in frozen or f"{blk.name}/{x.param}" in frozen))]
                if count:
                    terms.append(Term(f"{blk.name}/{op.path}/{phase}", scale * op.share * _sum(count)))
    return Breakdown(tuple(terms), "FLOPs")


def saved_tensors(block: Block, ignore_roles: Iterable[str] = ()) -> list[tuple[Op, Tensor]]:
    """The tensors a block saves, each once (for writeups and tests)."""
    return _unique_saved(block, frozenset(ignore_roles))


def per_block(breakdown: Breakdown, block: str) -> Expr:
    return breakdown.where(lambda path: path.split("/")[0] == block).total


def evaluate(expr: Any, values: Mapping[Any, int]) -> Any:
    """Substitute integer sizes exactly (no floats); raises if a symbol is left unbound.

    An expression (or number) gives an ``int``/``Fraction``; a SymPy expression (a closed form in
    render/ or the checker) gives a SymPy number, substituted by symbol name.

    >>> from memderive.symbolic.dims import h, l
    >>> evaluate(l * (12 * h**2 + 13 * h), {h: 768, l: 12})
    85054464
    """
    if isinstance(expr, Expr | int | Fraction):
        return const(expr).evaluate(values)

    by_name = {getattr(k, "name", k): v for k, v in values.items()}
    expr = sp.sympify(expr)
    result = expr.xreplace({x: sp.Integer(by_name[x.name]) for x in expr.free_symbols if x.name in by_name})
    free = result.free_symbols
    if free:
        names = ", ".join(sorted(str(x) for x in free))
        raise ValueError(f"no value for {names}; give it with the model or the options")
    return result
