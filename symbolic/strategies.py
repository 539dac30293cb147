"""Strategies as pure ``Graph -> Graph`` transforms.

Compose them as a visible pipeline::

    g = SequenceParallel(t)(TensorParallel(t)(base))

Each returns a new graph (``dataclasses.replace``) and records its name in
``graph.strategies``; degree 1 is the identity.

>>> from symbolic.dims import t
>>> TensorParallel(1).name
'tensor parallel (t=1)'
"""

from __future__ import annotations

import abc

from dataclasses import dataclass, replace

from symbolic import dims
from symbolic.expr import Expr, Min, const
from symbolic.graph import Block, Graph, Op
from symbolic.tensor import Tensor

__all__ = ["TensorParallel", "SequenceParallel", "SelectiveRecompute", "FullRecompute", "FlashAttention",
           "PipelineParallel", "Strategy"]

PARAM_ROLES = frozenset({"weight", "bias"})
SCORE_ROLE = "attention-scores"


class Strategy(abc.ABC):
    """Abstract: a frozen dataclass whose call maps a graph to a graph."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """How writeups name the transform."""

    @abc.abstractmethod
    def __call__(self, graph: Graph) -> Graph:
        """The transformed graph (a new one; ``graph`` is unchanged)."""


def _degree(value: int | Expr) -> Expr:
    return const(value)


@dataclass(frozen=True, slots=True)
class TensorParallel(Strategy):
    """Megatron tensor parallelism: every tensor with a ``tp_axis`` is split over t ranks.

    Column-parallel weights split their output features, row-parallel their input features;
    attention splits heads and the output layer the vocabulary (Shoeybi et al. 2019).
    """

    t: int | Expr

    @property
    def name(self) -> str:
        return "tensor parallel" if self.t == dims.t else f"tensor parallel (t={self.t})"

    def __call__(self, graph: Graph) -> Graph:
        t = _degree(self.t)
        if t == 1:
            return graph

        def split(tensor: Tensor) -> Tensor:
            return tensor.split(tensor.tp_axis, t) if tensor.tp_axis is not None else tensor

        return graph.map_blocks(lambda blk: blk.map_tensors(split), self.name)


@dataclass(frozen=True, slots=True)
class SequenceParallel(Strategy):
    """Sequence parallelism (Korthikanti et al. 2022 §4.2.2): activations that tensor
    parallelism leaves whole (norm and dropout regions, linear inputs) are split along s."""

    t: int | Expr

    @property
    def name(self) -> str:
        return "sequence parallel" if self.t == dims.t else f"sequence parallel (t={self.t})"

    def __call__(self, graph: Graph) -> Graph:
        t = _degree(self.t)
        if t == 1:
            return graph

        def split(tensor: Tensor) -> Tensor:
            if tensor.role in PARAM_ROLES or tensor.tp_axis is not None or tensor.seq_axis is None:
                return tensor
            return tensor.split(tensor.seq_axis, t)

        return graph.map_blocks(lambda blk: blk.map_tensors(split), self.name)


def _drop_saved(op: Op, roles: frozenset[str]) -> Op:
    return replace(op, saved=tuple(x for x in op.saved if x.role not in roles))


@dataclass(frozen=True, slots=True)
class SelectiveRecompute(Strategy):
    """Recompute the attention core (softmax, its dropout) in backward: the ``as^2`` tensors
    are not stored (Korthikanti et al. 2022 §5)."""

    @property
    def name(self) -> str:
        return "selective recompute"

    def __call__(self, graph: Graph) -> Graph:
        roles = frozenset({SCORE_ROLE})
        return graph.map_blocks(lambda blk: blk.map_ops(lambda op: _drop_saved(op, roles)), self.name)


@dataclass(frozen=True, slots=True)
class FullRecompute(Strategy):
    """Checkpoint each layer's input and recompute the layer in backward."""

    @property
    def name(self) -> str:
        return "full recompute"

    def __call__(self, graph: Graph) -> Graph:
        def checkpoint(blk: Block) -> Block:
            if blk.name != "layer":
                return blk
            ops = tuple(replace(op, saved=()) for op in blk.ops)
            keep = Op("checkpoint", "checkpoint", (), (blk.input,), blk.input, "layer input kept for recompute")
            return replace(blk, ops=(keep, *ops))

        return graph.map_blocks(checkpoint, self.name)


@dataclass(frozen=True, slots=True)
class FlashAttention(Strategy):
    """FlashAttention (Dao et al. 2022 §3.1; FA-2 §3.1.1): the s x s scores are never stored;
    backward keeps q, k, v, the output O and the fp32 row-wise logsumexp (b, a, s). ``kernel``
    ``sdpa`` names PyTorch's memory-efficient scaled_dot_product_attention, which saves the same."""

    kernel: str = "flash"

    @property
    def name(self) -> str:
        return "FlashAttention" if self.kernel == "flash" else "memory-efficient attention (sdpa)"

    def __call__(self, graph: Graph) -> Graph:
        def flash(op: Op) -> Op:
            if op.kind != "attention":
                return op
            q = next(x for x in op.saved if x.role == "q")
            lse = Tensor(f"{op.path}.logsumexp", q.shape[:3], _fp32(), role="softmax-stats",
                         tp_axis=q.tp_axis, seq_axis=q.seq_axis)
            kept = tuple(x for x in op.saved if x.role != SCORE_ROLE)
            return replace(op, kind="flash-attention", saved=(*kept, op.output, lse))

        return graph.map_blocks(lambda blk: blk.map_ops(flash), self.name)


def _fp32():
    from symbolic.dtypes import dtype

    return dtype("fp32")


@dataclass(frozen=True, slots=True)
class PipelineParallel(Strategy):
    """Pipeline parallelism over p stages, as seen by one stage (Narayanan et al. 2021).

    ``stage="first"`` (the most loaded under 1F1B, Korthikanti et al. 2022 §4.2.3) holds the
    embedding and l/p layers, with p micro-batches in flight (min(p, m) when m is given); the
    interleaved schedule with v virtual stages multiplies that by ``1 + (p-1)/(p v)``.
    ``stage="last"`` holds l/p layers, one micro-batch in flight, and the output layer.
    """

    p: int | Expr
    virtual: int | Expr | None = None
    micro_batches: int | Expr | None = None
    stage: str = "first"

    @property
    def name(self) -> str:
        degree = "" if self.p == dims.p else f"p={self.p}, "
        virtual = "" if self.virtual in (None, 1) else ("interleaved, " if self.virtual == dims.v
                                                        else f"interleaved v={self.virtual}, ")
        return f"pipeline parallel ({degree}{virtual}{self.stage} stage)"

    def in_flight(self) -> Expr:
        p = _degree(self.p)
        held = p if self.micro_batches is None else Min(p, _degree(self.micro_batches))
        if self.virtual not in (None, 1):  # Korthikanti et al. 2022 §4.2.3 (interleaved schedule)
            held = held * (1 + (p - 1) / (p * _degree(self.virtual)))
        return held

    def __call__(self, graph: Graph) -> Graph:
        p = _degree(self.p)
        if p == 1:
            return graph
        if self.stage not in ("first", "last"):
            raise ValueError(f"stage must be 'first' or 'last', not {self.stage!r}")
        first = self.stage == "first"
        kept = {"embed", "layer"} if first else {"layer", "head"}
        flight = self.in_flight() if first else const(1)
        blocks = []
        for blk in graph.blocks:
            if blk.name not in kept:
                continue
            if blk.name == "layer":
                blk = replace(blk, repeat=blk.repeat / p)
            blocks.append(replace(blk, in_flight=blk.in_flight * flight))
        note = ("first pipeline stage: embedding and l/p layers, p micro-batches in flight (1F1B)" if first
                else "last pipeline stage: l/p layers and the output layer")
        return replace(graph, blocks=tuple(blocks), strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note,))


