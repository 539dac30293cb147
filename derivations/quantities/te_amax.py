"""Transformer Engine's amax all-reduces under fp8 (``--fp8 te-delayed | te-current | te-nvfp4``): each a blocking
NCCL all-reduce of a few bytes, on the micro-batch's critical path, timed at NCCL's own latency for its group
(``Cluster.tiny_all_reduce``, ``nccl_cost.latency_s``). Read in the code that runs:

* **Delayed scaling** (``DELAYED_AMAX``). Megatron-Core wraps each model chunk's forward in one ``fp8_autocast``
  (transformer_block.py: the outer context under the delayed recipe) with ``fp8_group`` its amax reduction group;
  at the context's exit Transformer Engine concatenates the chunk's amaxes and all-reduces them (``fp8_autocast_exit``
  -> ``reduce_and_update_fp8_tensors(forward=True)`` -> ``torch.distributed.all_reduce(..., async_op=False)``), and
  the backward of the chunk's first fp8 module, the last to run, does the same for the gradients' amaxes
  (``reduce_and_update_bwd_fp8_tensors``, set where ``is_first_fp8_module()``). Two calls per chunk per micro-batch.
  The group (``get_amax_reduction_group(with_context_parallel=True)``): the stage's tensor-, data- and
  context-parallel ranks (``_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP``), as Megatron-Core built it from May 2023 and
  again from 0.9 on; the tensor- and context-parallel ranks only under ``--tp-only-amax-red``, as Megatron-Core 0.8
  ran by default (``AMAX_GROUP_HISTORY``). TE's ``DelayedScaling.reduce_amax`` defaults to True; Megatron-Core's
  ``TEDelayedScaling`` leaves it.
* **Current scaling and NVFP4 under sequence parallelism** (``SP_AMAX``). A column-parallel linear's input
  quantizer and a row-parallel linear's output-gradient quantizer all-reduce the local shard's amax over the
  tensor-parallel group before the cast, so the gathered tensor has one scale (``with_amax_reduction``,
  ``amax_reduction_group = tp_group``; the C++ quantizer's ``allreduce(...)->wait()``): per decoder layer one per
  column-parallel module in the forward (its input: the fused qkv's, the MLP's first linear's; again where full
  recompute or a selective recompute of the module reruns it) and one per row-parallel linear in the backward, per
  micro-batch, on the stage that holds the most layers. A module's column-parallel linears that read one input (the
  fused qkv; gate and up, Megatron's one linear_fc1) quantize it once; a MoE layer's shared experts are a module of
  their own beside a dense layer's MLP. MXFP8's block scales need none.

Not timed: delayed scaling under full recompute, where Transformer Engine 2.2 on re-enters ``fp8_autocast`` for
each checkpointed segment's rerun (distributed.py, the checkpoint's backward), a forward reduction more per segment
and its first module's backward one (counted here as without recompute: two per chunk); torchao's Float8 amax
reductions under tensor parallelism (torchtitan); the routed experts' grouped linears; a GPU NCCL's tables do not
cover. The calls' bytes (an fp32 amax per fp8 tensor, a few kilobytes a chunk) are nothing beside their latency.
"""

from __future__ import annotations

from typing import Any

from memderive.derivations.columns import maximum
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.tp_overlap import tp_traffic
from memderive.derivations.quantity import Evaluated
from memderive.symbolic import dims
from memderive.symbolic.derive import evaluate
from memderive.symbolic.formula import Citation
from memderive.symbolic.pipeline_layout import rank_chunks

__all__ = ["AMAX_GROUP_HISTORY", "DELAYED_AMAX", "SP_AMAX", "amax_calls", "amax_micro_s", "busiest_stage_layers"]

DELAYED_AMAX = Citation("te-fp8-delayed-amax", "transformer_engine/pytorch/fp8.py (v1.9): fp8_autocast_exit -> "
                        "reduce_and_update_fp8_tensors(forward=True), reduce_tensor_across_group_op_max "
                        "(all_reduce, async_op=False); module/linear.py: reduce_and_update_bwd_fp8_tensors "
                        "(is_first_fp8_module) -> reduce_and_update_fp8_tensors(forward=False)",
                        also=(Citation("megatron-transformer-block", "TransformerBlock.forward: fp8_autocast("
                                       "fp8_group=get_amax_reduction_group(with_context_parallel=True)), the outer "
                                       "context under the delayed recipe"),))
#: Which ranks Megatron-Core's amax reduction group holds, by release.
AMAX_GROUP_HISTORY = Citation("megatron-parallel-state", "get_amax_reduction_group: tensor, data and context "
                              "parallel ranks (120300178d, 2023-05-19); tensor and context only (2e429097dd, "
                              "2024-07-25, core_r0.8.0); reverted (98abe37866, 2024-09-06, core_r0.9.0 on); "
                              "tp_only_amax_red: tensor and context only")
SP_AMAX = Citation("te-sp-amax", "transformer_engine/pytorch/module/linear.py (v2.2-v2.17: "
                   "_customize_quantizers_float8_current_scaling, from v2.8 _nvfp4; v2.18: "
                   "set_quantizer_amax_reduction_group): sequence_parallel and column -> input quantizer, row -> "
                   "grad_output quantizer with_amax_reduction over tp_group; csrc/quantizer.cpp: "
                   "amax_reduction_group->allreduce(...)->wait() (NVFP4: allreduce_coalesced)")


def busiest_stage_layers(est: Evaluated) -> Any:
    """Decoder layers on the pipeline stage that holds the most (``Options.stage_layers``; under
    ``--pipeline-layout`` the rank whose chunks hold the most), cell by cell on a plan's columns."""
    opts, layers = est.options, est.values[dims.l]
    if opts.pipeline_layout is not None:
        chunks = opts.layout_chunks()
        return max(sum(c.layers for c in rank_chunks(chunks, r)) for r in range(opts.pp))
    if not opts.uneven_stages:  # l/p each (p a column of a plan's layouts)
        return layers // opts.pp
    return maximum(*(x for x in opts.stage_layers(layers) if x is not None))


def amax_calls(est: Evaluated, recompute_share: Any = 0, modules: bool = False) -> tuple[tuple[Any, Any], ...]:
    """``(calls per micro-batch on a GPU of the busiest stage, ranks of each call's group)`` of the run's Transformer
    Engine amax all-reduces (module docstring): none without a TE recipe that reduces amaxes. ``recompute_share``:
    the share of the layers full recompute reruns (``timing.full_share``); ``modules``: selective recompute, whose
    rerun linears (those with recompute matmuls in the graph: ``mlp``, ``shared_experts``, ``mla_up_proj``'s)
    quantize their inputs again."""
    opts = est.options
    ranks = opts.tp * opts.cp
    if opts.fp8 == "te-delayed":
        group = ranks if opts.tp_only_amax_red else ranks * opts.dp
        return ((2 * (opts.virtual_stages or 1), group),)
    if opts.fp8 not in ("te-current", "te-nvfp4") or not opts.sp or opts.tp == 1:
        return ()
    columns: dict[tuple[str, str], tuple[Any, bool]] = {}  # one module's input, quantized once for its GEMMs
    rows: Any = 0
    for c in tp_traffic(est.graph.block("layer"), experts=False):
        if c.kind == "row":
            rows += c.op.share
        elif c.kind == "column":  # a module's linears reading one input (Megatron's fused qkv, fc1), its rerun
            columns.setdefault((c.key, c.op.path.rsplit("/", 1)[0]), (c.op.share, modules and c.redone))
    forward = sum((share * (2 if again else 1) for share, again in columns.values()), 0)
    once = sum((share for share, _ in columns.values()), 0)
    per_layer = (evaluate(forward + rows, est.values), evaluate(once, est.values))
    layers = busiest_stage_layers(est)
    return ((layers * (float(per_layer[0]) + float(per_layer[1]) * recompute_share), opts.tp),)


def amax_micro_s(est: Evaluated, cluster: Cluster, recompute_share: Any = 0, modules: bool = False) -> Any:
    """Seconds of one micro-batch's amax all-reduces on a GPU of the busiest stage: ``amax_calls``' calls at
    ``Cluster.tiny_all_reduce`` of their group (its ranks adjacent: Megatron-Core's tp-cp-dp order)."""
    return sum((calls * cluster.tiny_all_reduce(group, 1)  # a group of one: 0.0
                for calls, group in amax_calls(est, recompute_share, modules)), 0.0)
