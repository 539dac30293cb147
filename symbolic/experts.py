"""Graph views of a mixture of experts: the parameters one token uses, and expert parallelism.

Routed experts are the ops of kind ``experts``; their parameter tensors lead with the expert axis
``(E, ...)``. ``ActiveExperts`` keeps k of the E (a token's path through the model);
``ExpertParallel`` divides the E experts over ``ep`` ranks.

>>> from memderive.symbolic.dims import E, h, k
>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dtypes import dtype
>>> from memderive.symbolic.graph import Graph
>>> from memderive.symbolic.derive import parameters
>>> bb = BlockBuilder("layer", (1, 1, h), dtype("bf16"))
>>> _ = bb.experts("moe/experts", bb.input, E, k, 4 * h, kind="swiglu", bias=False)
>>> g = Graph("toy", (bb.build(),))
>>> parameters(g).total, parameters(ActiveExperts()(g)).total
(12*E*h**2, 12*h**2*k)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from memderive.symbolic import dims
from memderive.symbolic.expr import ceiling
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.tensor import Tensor

__all__ = ["ActiveExperts", "ExpertParallel", "ExpertCapacity", "EXPERTS", "BUFFER", "has_experts", "expert_ops"]

#: The op kind whose parameters are the routed experts, expert axis first.
EXPERTS = "experts"
#: The role of the tensors an expert computes on its tokens (inputs, MLP tensors, outputs).
BUFFER = "expert-buffer"


def has_experts(graph: Graph) -> bool:
    return any(op.kind == EXPERTS for _, op in graph.ops())


def expert_ops(graph: Graph) -> list[str]:
    """Block-qualified paths (``layer/moe/experts``) of the routed-expert ops."""
    return [f"{blk.name}/{op.path}" for blk, op in graph.ops() if op.kind == EXPERTS]


def _on_experts(graph: Graph, fn: Any, name: str, *assumptions: str) -> Graph:
    def per_op(op: Op) -> Op:
        return replace(op, params=tuple(fn(x) for x in op.params)) if op.kind == EXPERTS else op

    def per_block(blk: Block) -> Block:
        return blk.map_ops(per_op)

    return graph.map_blocks(per_block, name, *assumptions)


@dataclass(frozen=True, slots=True)
class ActiveExperts(Strategy):
    """The parameters a token uses: in every MoE layer k of the E routed experts (the router,
    shared experts, attention, embeddings and head stay whole). ``input_embedding=False`` also leaves
    out the embedding tables, a lookup rather than a product (the gpt-oss model card's count), unless the
    head shares the weight (tied: it is then the unembedding, which such counts keep).

    >>> from memderive.symbolic.derive import parameters
    >>> from memderive.symbolic.dims import V, h
    >>> from memderive.symbolic.dtypes import dtype
    >>> from memderive.symbolic.ops import BlockBuilder
    >>> bb = BlockBuilder("embed", (1, 1), dtype("bf16"))
    >>> _ = bb.embedding("tokens", bb.input, V, h)
    >>> g = Graph("toy", (bb.build(),))
    >>> parameters(ActiveExperts()(g)).total, parameters(ActiveExperts(input_embedding=False)(g)).total
    (V*h, 0)
    """

    input_embedding: bool = True

    @property
    def name(self) -> str:
        return "active parameters (k of E routed experts)"

    def __call__(self, graph: Graph) -> Graph:
        def keep_k(x: Tensor) -> Tensor:
            return replace(x, shape=(dims.k, *x.shape[1:]))

        active = _on_experts(graph, keep_k, self.name)
        if self.input_embedding:
            return active
        return active.map_blocks(lambda blk: blk.map_ops(lambda op: _untied_dropped(blk.name, op, graph)),
                                 "input embedding not counted")


def _untied_dropped(block: str, op: Op, graph: Graph) -> Op:
    """An embedding op without the tables no other op reads (a tied head reads ``embed/tokens.weight``)."""
    if op.kind != "embedding":
        return op
    read = {w for blk, other in graph.ops() if other.kind != "embedding" for _, ws in other.saved_for for w in ws}
    return replace(op, params=tuple(x for x in op.params if f"{block}/{x.name}" in read))


@dataclass(frozen=True, slots=True)
class ExpertParallel(Strategy):
    """Expert parallelism (GShard, Lepikhin et al. 2020 §2.2; Megatron-Core MoE): each of ep ranks
    holds E/ep routed experts, their gradients and optimizer states; tokens travel to their experts
    by all-to-all, so on average a rank's experts see as many token-expert pairs as without it
    (activations unchanged)."""

    ep: Any

    @property
    def name(self) -> str:
        return "expert parallel" if self.ep == dims.ep else f"expert parallel (ep={self.ep})"

    def __call__(self, graph: Graph) -> Graph:
        if self.ep == 1:
            return graph
        return _on_experts(graph, lambda x: x.split(0, self.ep), self.name)


@dataclass(frozen=True, slots=True)
class ExpertCapacity(Strategy):
    """A capacity factor c (GShard, Lepikhin et al. 2020 §2.2; Megatron-Core ``moe_expert_capacity_factor``
    with padding): each of the E experts computes on a buffer of ``C = ceil(c k b s / E)`` token slots,
    padded when fewer tokens arrive, so the expert buffers hold E C rows instead of the b s k token-expert
    pairs. Tokens beyond C are dropped (not modelled: the buffers are full either way)."""

    factor: Any  # a Fraction, e.g. Fraction(5, 4)

    @property
    def name(self) -> str:
        return f"expert capacity factor {self.factor}"

    def __call__(self, graph: Graph) -> Graph:
        def pad(x: Tensor) -> Tensor:
            if x.role != BUFFER:
                return x
            bsz, seq, top_k, *rest = x.shape
            slots = ceiling(self.factor * top_k * bsz * seq / dims.E)
            tp_axis = None if x.tp_axis is None else x.tp_axis - 1
            return replace(x, shape=(dims.E, slots, *rest), tp_axis=tp_axis, seq_axis=1)

        def per_op(op: Op) -> Op:
            return op.map_tensors(pad) if op.kind == EXPERTS else op

        return graph.map_blocks(lambda blk: blk.map_ops(per_op), self.name,
                                f"experts padded to capacity C = ceil({self.factor} k b s / E) tokens each")
