"""Megatron-Core's EP all-to-all overlap (``--moe-a2a-overlap``: ``--overlap-moe-expert-parallel-comm``): how much
of a step's expert-parallel all-to-alls stays exposed when one micro-batch's forward runs beside another's backward.

The schedule (``A2A_OVERLAP_SOURCE``). ``combined_1f1b_schedule_for_no_pipelining`` (p = 1): the first
micro-batch's forward alone, then micro-batch i's backward beside micro-batch i + 1's forward, then the last
backward alone. Interleaved (p > 1 needs virtual stages: ``TransformerConfig.__post_init__`` asserts
``virtual_pipeline_model_parallel_size`` is set), ``combined_1f1b_schedule_for_interleaved_pipelining`` pairs the
steady 1F1B phase's forward and backward of two model-chunk micro-batches; the warmup forwards and the cooldown
backwards run alone, and the warmup holds one more (``get_pp_rank_microbatches``: ``num_warmup_microbatches += 1``
under the overlap): on the first stage (p - 1) 2 + (v - 1) p + 1 of the m v.

Per layer (``TransformerLayerSchedulePlan.run``): each micro-batch's nodes wait on that micro-batch's one CUDA
event, the communication nodes run on a second stream, so the two chains interleave as

    comm: combine_bwd(B) | dispatch_fwd(F)  | dispatch_bwd(B) | combine_fwd(F)
    comp: attn_fwd(F)    | mlp_bwd(B)       | mlp_fwd(F)      | attn_bwd(B)

(``attn``: the norms, attention and router; ``mlp``: the routed experts, their weight gradients with it), and the
four phases are in series (each waits on both events), so what stays exposed of one layer is
max(0, combine - attn_fwd) + max(0, dispatch - mlp_bwd) + max(0, dispatch - mlp_fwd) + max(0, combine - attn_bwd).
Dispatch and combine move the same bytes (``expert_parallel_s``), so each is a quarter of the layer's four.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memderive.derivations.columns import maximum, where
from memderive.derivations.memo import per_graph
from memderive.derivations.quantities.compute import HARDWARE
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph

#: Megatron-Core's EP A2A overlap: the schedule, the per-layer pairing and what it refuses.
A2A_OVERLAP_SOURCE = Citation("megatron-core-a2a-overlap", "combined_1f1b.py combined_1f1b_schedule_for_no_pipelining, "
                              "_for_interleaved_pipelining; model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run")

_BACKWARD = ("input-grad", "weight-grad", "recompute")  # FlashAttention reruns its forward in backward


@per_graph
def _halves_form(graph: Graph) -> tuple[Any, Any, Any, Any, Any]:
    """(attention forward, attention backward, experts forward, experts backward, all) hardware matmul FLOPs of one
    micro-batch, read off the graph: the MoE blocks' ``experts`` ops are the mlp node, the rest of those blocks the
    attn node (the norms, attention, router; shared experts, none on the runs that set the overlap, counted with
    it); all: every block's, the embedding's and the head's too."""
    attn_f = attn_b = mlp_f = mlp_b = whole = 0
    for blk in graph.blocks:
        moe = any(op.kind == "experts" for op in blk.ops)
        for op in blk.ops:
            for f in op.flops:
                if f.kind != "matmul" or f.phase not in HARDWARE:
                    continue
                count = blk.repeat * op.share * f.count
                whole += count
                if not moe:
                    continue
                if op.kind == "experts":
                    mlp_f, mlp_b = (mlp_f + count, mlp_b) if f.phase == "forward" else (mlp_f, mlp_b + count)
                elif f.phase == "forward":
                    attn_f += count
                elif f.phase in _BACKWARD:
                    attn_b += count
    return attn_f, attn_b, mlp_f, mlp_b, whole


def overlapped_ep_s(graph: Graph, values: Mapping[Any, int], compute_s: Any, a2a_s: Any, micro_batches: Any,
                    pp: Any, virtual: Any) -> Any:
    """Exposed expert-parallel all-to-all time of one step under ``--moe-a2a-overlap`` (the module's schedule):
    ``compute_s`` one micro-batch's compute on the stage (forward and backward), ``a2a_s`` its four all-to-alls
    in series (dispatch and combine, forward and backward); the compute split as the graph's matmul FLOPs split
    (``_halves_form``). A pair (one chunk's forward beside another's backward) exposes, per 1/v of a micro-batch,
    max(0, q - attn_fwd) + max(0, q - mlp_bwd) + max(0, q - mlp_fwd) + max(0, q - attn_bwd), q = a2a_s / 4; a
    micro-batch chunk alone exposes its two all-to-alls, the first stage's w = 2 (p - 1) + (v - 1) p + 1 warmup
    forwards and w cooldown backwards (p = 1: w = 1)."""
    attn_f, attn_b, mlp_f, mlp_b, whole = (layout_int(x, values) if x else 0 for x in _halves_form(graph))
    if not whole:
        return micro_batches * a2a_s
    per_flop = compute_s / whole
    return exposed_s(a2a_s, (attn_f * per_flop, mlp_b * per_flop, mlp_f * per_flop, attn_b * per_flop),
                     micro_batches, pp, virtual)


def exposed_s(a2a_s: Any, behind: tuple[Any, Any, Any, Any], micro_batches: Any, pp: Any, virtual: Any) -> Any:
    """``overlapped_ep_s`` given the four computations each quarter of ``a2a_s`` hides behind, in the order of
    ``TransformerLayerSchedulePlan.run``'s phases (attn_fwd, mlp_bwd, mlp_fwd, attn_bwd), per micro-batch (each a
    number, or a column of the layouts of one structure, ``derivations.columns``).

    >>> exposed_s(10.0, (1.0, 6.0, 3.0, 2.0), 4, 1, 1)  # p 1: 3 pairs expose 1.5 + 0 + 0 + 0.5 each, 2 alone 5 each
    16.0
    """
    q = a2a_s / 4
    pair = sum(maximum(0.0, q - c) for c in behind)
    warmup = 2 * (pp - 1) + (virtual - 1) * pp + 1  # p 1 (v 1): 1, the first forward
    chunks = micro_batches * virtual
    alone = where(warmup < chunks, warmup, chunks)  # forwards alone, and as many backwards alone
    return ((chunks - alone) * pair + alone * a2a_s) / virtual
