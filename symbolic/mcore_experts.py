"""Megatron-Core's MoE layer as what it saves for backward: ``--implementation megatron`` (the default).

The graph's ``router`` and ``experts`` ops (``symbolic.ops.BlockBuilder``) save what transformers' eager expert loop
saves. Megatron-Core runs them as ``TopKRouter`` (router.py), ``MoEAlltoAllTokenDispatcher`` (token_dispatcher.py,
``permute``/``unpermute`` of moe_utils.py) and ``TEGroupedMLP`` (experts.py), with the routing probabilities applied
inside the fused weighted SwiGLU (since MCore v0.13). Each saved tensor below is named after the node that saves it;
line numbers are NVIDIA/Megatron-LM at d98e8a6 and NVIDIA/TransformerEngine at d0067d0:

router (``router_gating_linear``, then ``topk_routing_with_score_function``, moe_utils.py):

* ``x``: the gating linear's input, ``RouterGatingLinearFunction`` ``ctx.save_for_backward(inp, weight, bias)``
  (moe_utils.py:1382); ``moe_router_dtype`` None (transformer_config.py:811): the logits in the input's dtype.
* ``topk_indices`` (b, s, k) int64: ``torch.topk`` (moe_utils.py:879) saves its indices; the ``zeros_like(logits)
  .scatter(1, top_indices, probs)`` that spreads the probabilities back to E columns (moe_utils.py:954) saves the
  same tensor.
* top-k first (``moe_router_pre_softmax`` False, the k weights sum to 1: ``Moe.renormalize``): ``probs`` (b, s, k)
  fp32, the output ``torch.softmax(scores, dim=-1, dtype=torch.float32)`` saves (moe_utils.py:914); the logits
  themselves are not kept. Softmax first (``moe_router_pre_softmax``, ``renormalize`` False): ``scores`` (b, s, E)
  fp32 (moe_utils.py:902), top-k of them (its indices).
* no auxiliary loss: ``moe_aux_loss_coeff`` defaults to 0.0 (transformer_config.py:875), and ``_apply_aux_loss``
  returns the probs untouched then (router.py:419), so the fp32 scores over E for the loss
  (``compute_routing_scores_for_aux_loss``, moe_utils.py:997) are not made.

experts (the dispatcher's ``permute``, ``TEGroupedMLP.forward``, the dispatcher's ``unpermute``):

* ``permute_index`` (b, s, E) int64: ``permuted_probs = probs.T.contiguous().reshape(-1)[flat_sorted]``
  (moe_utils.py:478) saves ``flat_sorted``, the first b s k entries of the argsort of the (E, b s) routing map
  (moe_utils.py:473-474): a view that keeps the whole argsort, E b s entries, alive (measured,
  ``tests/test_mcore_experts.py``).
* ``sorted_indices`` (b s k,) int64: ``tokens.index_select(0, sorted_indices)`` (moe_utils.py:486) saves it; the
  unpermute's ``scatter_add_(0, sorted_indices.unsqueeze(1).expand(-1, hidden), permuted_tokens)`` (moe_utils.py:615)
  saves a view of it. The unpermute gets no probs (token_dispatcher.py:891): the expert outputs are not scaled there,
  and ``scatter_add_``'s backward keeps only its index, not the source.
* ``gathered`` (b, s, k, h): fc1's input, saved by TE's ``GroupedLinear`` for the weight gradient
  (grouped_linear.py:556-564; experts.py:932).
* gated (SwiGLU, gpt-oss's quick-GeGLU): ``fc1_out`` (b, s, k, 2 f_e) and ``weights`` (b, s, k, 1) in the
  activations' dtype (``probs.type_as(logits)``, moe_utils.py:936): ``weighted_bias_swiglu_impl``
  (experts.py:966, Megatron-LM's ``--bias-swiglu-fusion`` default, arguments.py:2895) is ``WeightedSwiGLUFunction``,
  ``ctx.save_for_backward(input_for_backward, weights)`` (fused_bias_swiglu.py:270; ``WeightedQuickGeGLUFunction``
  the same, fused_bias_geglu.py:327). silu(gate) and the scaled product are recomputed in backward.
* clamped (gpt-oss: ``activation_func_clamp_value`` 7.0, Megatron-Bridge v0.2.0 gpt_oss_provider.py L84), under
  ``--framework megatron`` (``clamp_copy``): also ``fc1_clamped`` (b, s, k, 2 f_e). ``weighted_bias_quick_geglu_impl``
  (fused_bias_geglu.py L424-432 at 0d8e0714, Megatron-Bridge v0.2.0's Megatron-LM, as at core_v0.15.0; called by
  experts.py L923-931) clamps the two halves of fc1's output eagerly, ``x_glu.clamp(max=7)`` and
  ``x_linear.clamp(-7, 7)``, each saving its input (PyTorch's ``clamp_backward(grad, self, min, max)``): views that
  keep fc1's whole output alive; the fused function then saves the ``torch.cat`` of the clamped halves, a second
  tensor of that size (L379). Measured, ``tests/test_mcore_experts.py``. Under ``moe_act`` recompute the clamp runs
  inside ``CheckpointWithoutOutput``'s no-grad forward: neither is made, fc1's output is the checkpoint's input.
  Other frameworks this graph stands in for do not make the copy: NeMo AutoModel's ``quick_geglu_deepep``
  (nemo_automodel.components.moe) is ``torch.compile``d, its clamps inside the compiled region.
* not gated: ``act_in`` (fc1's output, saved by the activation), ``act`` and ``weights`` (saved by
  ``intermediate_parallel * permuted_probs``, experts.py:1015).
* ``hidden`` (b, s, k, f_e): fc2's input (the scaled activation), saved by TE's ``GroupedLinear``
  (experts.py:1028). fc2's output goes to the unpermute's ``scatter_add_``: not kept.

What the eager loop saves and Megatron-Core does not: silu(gate) (``act``), the unscaled expert outputs
(``expert_out``), the scaled ones (``weighted``); the router's E-wide fp32 scores (top-k first) and the renormalised
weights and their sum. The permute here is the unfused one (``moe_permute_fusion`` defaults to False,
transformer_config.py:941); TE's fused permute saves an int32 row map instead of the two int64 indices.

>>> from memderive.symbolic.dims import E, h, k, b, s
>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.router("moe/router", bb.input, E, k, bias=False)
>>> _ = bb.experts("moe/experts", bb.input, E, k, 4 * h, kind="swiglu", bias=False)
>>> [x.name.split(".")[1] for x in megatron_router(bb.ops[-2]).saved[1:]]
['topk_indices', 'probs']
>>> [x.name.split(".")[1] for x in megatron_experts(bb.ops[-1]).saved]
['permute_index', 'sorted_indices', 'gathered', 'fc1_out', 'weights', 'hidden']
"""

from __future__ import annotations

from dataclasses import replace

from memderive.symbolic.dtypes import dtype
from memderive.symbolic.graph import Graph, Op
from memderive.symbolic.tensor import Tensor

__all__ = ["megatron_moe", "megatron_router", "megatron_experts", "MCORE_MOE", "GROUPED_SOURCE", "grouped_inputs"]

FP32 = dtype("fp32")

MCORE_MOE = ("routed experts as Megatron-Core saves them (TopKRouter, the alltoall dispatcher's unfused permute and "
             "scatter_add unpermute, TEGroupedMLP with the probs applied in its fused weighted SwiGLU: "
             "symbolic/mcore_experts.py); no auxiliary loss (moe_aux_loss_coeff 0.0)")


#: What TE's GroupedLinear (``TEGroupedMLP``'s linear_fc1 and linear_fc2) saves under an fp8 or fp4 recipe
#: (``te_float8.TEFloat8``), read at TransformerEngine v2.9 (the Megatron-Bridge 25.11 container's; the same at v2.12).
GROUPED_SOURCE = (
    "TransformerEngine v2.9 module/grouped_linear.py _GroupedLinear.forward: the input split per expert and quantized "
    "(L127 tex.split_quantize(inp_view, m_splits, input_quantizers), one quantizer, so one per-tensor scale, per "
    "expert), then L204 inputmat.update_usage(rowwise_usage=False, columnwise_usage=True) and L231 "
    "ctx.save_for_backward(*inputmats, *weights_fp8, *weights, *biases) (the same at v2.12, L149, L238): the "
    "column-wise casts (Float8: its transpose on Hopper, its data where non-TN "
    "GEMMs run, one byte per element either way; MXFP8 and NVFP4: column-wise data and 1-byte scales per 32 or 16), "
    "the cached weight workspaces (L141 module.get_weight_workspace, cache_name f'weight{i}': "
    "te_float8.workspace_terms) "
    "and the parameters themselves, nothing new; save_original_input (L200 inputmats[0] = inp; Megatron-LM core_v0.15.0 "
    "moe/experts.py L808-815: fc2 under moe_act recompute) saves the 16-bit input, the checkpoint's discarded output; "
    "the output in the activations' dtype (L157 torch.empty(..., dtype=activation_dtype)): fc1's output, which the fused "
    "weighted SwiGLU saves, stays 16-bit (activation_func_fp8_input_store False, transformer_config.py, not set by "
    "Megatron-Bridge's recipes). Megatron-Core's Fp8Padding (core_v0.15.0 experts.py L817-820, L859-866; TE "
    "module/fp8_padding.py L117) pads each expert's rows to a multiple of 16 (32 under MXFP8) before fc1")


def grouped_inputs(op: Op) -> tuple[str, ...]:
    """The names of the two tensors that ``TEGroupedMLP``'s GroupedLinears save for their weight gradients (fc1's
    input, the permuted tokens; fc2's input, the scaled activation) in ``op`` as ``megatron_experts`` rewrote it,
    or () for an experts op it did not (transformers' loop)."""
    names = {x.name for x in op.saved}
    if f"{op.path}.sorted_indices" not in names:
        return ()
    return tuple(n for n in (f"{op.path}.gathered", f"{op.path}.hidden") if n in names)


def _named(op: Op, suffix: str) -> Tensor:
    return next(x for x in op.saved if x.name == f"{op.path}.{suffix}")


def _renamed(x: Tensor, op: Op, suffix: str, **changes: object) -> Tensor:
    return replace(x, name=f"{op.path}.{suffix}", **changes)


def megatron_router(op: Op) -> Op:
    """The router op as ``TopKRouter`` saves it (see the module's docstring)."""
    x, indices = op.saved[0], _named(op, "indices")
    renormalize = any(t.name == f"{op.path}.top_weights" for t in op.saved)
    if renormalize:  # top-k of the logits, softmax over the k (moe_utils.py:911-914)
        kept = (x, _renamed(indices, op, "topk_indices"), _renamed(indices, op, "probs", dtype=FP32))
    else:  # softmax over E first, top-k of the scores (moe_utils.py:902-910)
        kept = (x, _named(op, "scores"), _renamed(indices, op, "topk_indices"))
    return replace(op, saved=kept, note=(op.note + "; " if op.note else "") + "Megatron-Core TopKRouter")


def megatron_experts(op: Op, clamp_copy: bool = False) -> Op:
    """The experts op as Megatron-Core's dispatcher and ``TEGroupedMLP`` save it (see the module's docstring);
    ``clamp_copy``: a clamped activation (gpt-oss) keeps fc1's output and its clamped copy, as Megatron-Core's
    eager clamp before the fused function does."""
    tokens, gathered, hidden, weights = (_named(op, n) for n in ("tokens", "gathered", "hidden", "weights"))
    experts = op.params[0].shape[0]  # the routing map's columns: every expert, whatever the rank holds
    index = (_renamed(tokens, op, "permute_index", shape=(*tokens.shape[:-1], experts)),
             _renamed(tokens, op, "sorted_indices"))
    names = {x.name.rsplit(".", 1)[1] for x in op.saved}
    weights = replace(weights, dtype=hidden.dtype)  # probs.type_as(logits)
    if "gate" in names:  # WeightedSwiGLUFunction: fc1's output (gate and up) and the probs
        gate = _named(op, "gate")
        fc1 = _renamed(gate, op, "fc1_out", shape=(*gate.shape[:-1], 2 * gate.shape[-1]))
        mlp: tuple[Tensor, ...] = (fc1, weights)
        if clamp_copy and any(f.name == f"{op.path} clamp" for f in op.flops):  # the clamps keep fc1's output
            mlp = (fc1, _renamed(fc1, op, "fc1_clamped"), weights)
    else:  # activation(fc1) saves fc1's output; (* permuted_probs) saves the activation and the probs
        act_in = _named(op, "act_in")
        mlp = (act_in, _renamed(act_in, op, "act"), weights)
    return replace(op, saved=(*index, gathered, *mlp, hidden),
                   note=(op.note + "; " if op.note else "") + "Megatron-Core TEGroupedMLP, alltoall dispatcher")


def megatron_moe(graph: Graph, clamp_copy: bool = False) -> Graph:
    """Every router and experts op of ``graph`` as Megatron-Core saves them (``clamp_copy``: ``megatron_experts``');
    a graph without experts is returned as it is."""
    if not any(op.kind == "experts" for _, op in graph.ops()):
        return graph

    def per_op(op: Op) -> Op:
        if op.kind == "router":
            return megatron_router(op)
        return megatron_experts(op, clamp_copy) if op.kind == "experts" else op

    return replace(graph, blocks=tuple(blk.map_ops(per_op) for blk in graph.blocks),
                   assumptions=graph.assumptions + (MCORE_MOE,))
