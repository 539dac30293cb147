"""Model states under expert parallelism (the layouts it needs: ``models.resolve.check_expert_layout``).

With ``ep`` > 1 each GPU holds E/ep of every MoE layer's routed experts; ZeRO shards the dense
parameters' states over the d data-parallel ranks as before, and the experts' over the d/ep ranks
that hold the same experts (Megatron-Core's expert data-parallel group; DeepSpeed-MoE, Rajbhandari
et al. 2022 §5). ``ep`` must divide both d and E. Under MoE parallel folding (``--etp`` other than the tp) the
experts' grid etp x ep x edp folds the t x d ranks of a stage (d x cp under context parallelism), so the
expert data-parallel group has edp = t d / (etp ep) ranks (Megatron-Core parallel_state:
``expert_data_parallel_size = world_size // (etp * ep * pp)``).

>>> from memderive.derivations.options import Options
>>> from memderive.derivations.models.presets import preset
>>> from memderive.derivations.estimate import estimate
>>> e = estimate("mixtral-8x7b", mode="train", batch=1, seq=8, dp=8, ep=8, zero=1)
>>> [t.path for t in e.quantity("model_state_bytes").breakdown.terms][3:]
['model_states/experts/weights', 'model_states/experts/gradients', 'model_states/experts/optimizer']
"""

from __future__ import annotations

from typing import Any

from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.dims import ep, etp, t
from memderive.symbolic.experts import expert_ops, has_experts
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph

from memderive.derivations.options import Options
from memderive.derivations.quantities.parameters import graph_parameters
from memderive.derivations.quantities.precision_aware import precision_aware
from memderive.derivations.quantities.model_states import (layer_wise_largest, offloaded_breakdown, pipelined_fsdp2,
                                                           second_state_elements, states_breakdown, zero_ranks)
from memderive.symbolic.expr import Max, const

__all__ = ["EP_CITATION", "expert_split_states", "expert_zero_ranks"]

EP_CITATION = Citation("lepikhin-2020", "experts sharded over ranks",
                       also=(Citation("rajbhandari-2022", "expert data parallelism"),))


def _renamed(breakdown: Breakdown, part: str) -> Breakdown:
    return Breakdown(tuple(Term(t.path.replace("/", f"/{part}/", 1), t.expr) for t in breakdown.terms), "bytes")


def expert_zero_ranks(opts: Options) -> Any:
    """The ranks ZeRO (Megatron-Core's distributed optimizer) shards the routed experts' states over: the expert
    data-parallel group, d/ep of the d (x cp) ranks (``zero_ranks``), t/etp times as many under MoE parallel
    folding: edp = t d cp / (etp ep); ``zero_ranks`` without expert parallelism.

    >>> from memderive.derivations.options import Options
    >>> expert_zero_ranks(Options(dp=4, ep=2)), expert_zero_ranks(Options(tp=2, dp=4, ep=2, etp=1))
    (d/ep, d*t/(ep*etp))
    """
    expert_dp = zero_ranks(opts.cp) / ep if opts.ep > 1 else zero_ranks(opts.cp)
    if opts.folded:  # the expert grid folds the t tensor-parallel ranks too: edp = t d / (etp ep)
        expert_dp = expert_dp * t / etp
    return expert_dp


def _busiest_rank(states: Breakdown, graph: Graph, opts: Options, routed: set[str] | None = None) -> Breakdown:
    """Under Muon's layer-wise distributed optimizer (``--optimizer muon --zero 1``), what the rank dealt the largest
    parameter holds beyond the mean rank's 1/d: max(0, that parameter's main params and moments - the mean), the
    dense parameters' and the routed experts' apart (``model_states.layer_wise_largest``); empty otherwise."""
    if not opts.layer_wise:
        return Breakdown((), "bytes")
    parts = [("", lambda blk, op, x: routed is None or f"{blk.name}/{op.path}" not in routed)]
    if routed:
        parts.append(("experts/", lambda blk, op, x: f"{blk.name}/{op.path}" in routed))
    terms = []
    for part, keep in parts:
        mean = next(t.expr for t in states.terms if t.path == f"model_states/{part}optimizer")
        largest = layer_wise_largest(graph, opts.dtype, opts.precision, keep)
        terms.append(Term(f"model_states/{part}layer_wise_busiest_rank", Max(const(0), largest - mean)))
    return Breakdown(tuple(terms), "bytes")


def expert_split_states(graph: Graph, opts: Options) -> tuple[Breakdown, Breakdown | None]:
    """Model states per GPU (and what ZeRO-Offload moves to the CPU): the dense parameters' over the d ranks
    (d x cp under context parallelism, ``zero_ranks``), the routed experts' over 1/ep of them. Without experts,
    one breakdown over d (x cp) as before."""
    params = graph_parameters(graph)
    d = zero_ranks(opts.cp)
    args = (opts.dtype, opts.optimizer, opts.zero)
    whole = pipelined_fsdp2(opts.framework, opts.pp, opts.zero)  # FSDP2 under pipeline stages
    on_gpu = lambda n, dp, f: states_breakdown(n, *args, dp, opts.offload, f, opts.precision,  # noqa: E731
                                               opts.grad_buffer, precision_aware(opts), whole)
    on_cpu = lambda n, dp, f: offloaded_breakdown(n, *args, dp, f, opts.precision, opts.grad_buffer)  # noqa: E731
    if not has_experts(graph):
        f = second_state_elements(graph, opts.optimizer)
        states = on_gpu(params.total, d, f)
        return states + _busiest_rank(states, graph, opts), on_cpu(params.total, d, f) if opts.offload else None
    routed = set(expert_ops(graph))
    dense, experts = params.where(lambda p: p not in routed).total, params.where(lambda p: p in routed).total
    f_dense = second_state_elements(graph, opts.optimizer, lambda blk, op, x: f"{blk.name}/{op.path}" not in routed)
    f_experts = second_state_elements(graph, opts.optimizer, lambda blk, op, x: f"{blk.name}/{op.path}" in routed)
    expert_dp = expert_zero_ranks(opts)
    states = on_gpu(dense, d, f_dense) + _renamed(on_gpu(experts, expert_dp, f_experts), "experts")
    states = states + _busiest_rank(states, graph, opts, routed)
    if not opts.offload:
        return states, None
    return states, on_cpu(dense, d, f_dense) + _renamed(on_cpu(experts, expert_dp, f_experts), "experts")
