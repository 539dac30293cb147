"""Transformer Engine's fp8 linears under Megatron-Core: what they save for backward and what they keep.

Megatron-Core's layer linears are Transformer Engine modules (``TELayerNormColumnParallelLinear`` for the fused
norm and qkv or fc1, ``TERowParallelLinear`` for proj and fc2); under ``fp8_autocast`` each quantizes its input
and its weight and runs its three GEMMs in 8 bits. What changes in memory, read off TransformerEngine at commit
d0067d0d (``TE`` below: transformer_engine/pytorch/...):

* **the input saved for the weight gradient is the 8-bit cast, not the 16-bit input**
  (``module/linear.py`` L604-621: ``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``, then
  ``saved_inputmat = inputmat``; ``module/layernorm_linear.py`` L475-487: the fused norm writes ``ln_out`` in
  8 bits and drops its row-wise data). Under sequence parallelism the local shard is saved (rowwise for
  Float8, which cannot gather column-wise data; column-wise for MXFP8), one byte per element either way. Beside
  the data: a per-tensor fp32 ``_scale_inv`` (``tensor/float8_tensor.py`` L423-429) for delayed and current
  scaling; for MXFP8 one 1-byte E8M0 scale per 32 elements (``tensor/mxfp8_tensor.py`` L164-176:
  ``columnwise`` scale_inv ``[prod(shape[:-1]) // 32, shape[-1]]``, padded to multiples of [4, 128]);
* the 16-bit tensor the linear read is no longer saved **by the linear**: where nothing else saves it (fc2's
  input, the norms' outputs) it is freed; the attention's output stays saved by the attention
  (``DotProductAttention`` saves ``out``), so under delayed scaling attn/proj adds its 8-bit copy beside it;
* **except the attention's output projection under current scaling and MXFP8**: Megatron-Core (Transformer Engine
  >= 2.6) calls ``set_save_original_input(self.linear_proj)`` when ``config.fp8 and config.fp8_recipe !=
  'delayed'`` (Megatron-LM d98e8a6 megatron/core/transformer/attention.py L428-444; MLA's the same,
  multi_latent_attention.py L240-251), whatever the recompute: proj saves the 16-bit attention output itself
  (TE module/linear.py L597-598 ``if save_original_input: inputmat = inp``; the forward casts row-wise only,
  L393-397, L428-436; the backward quantizes the saved input column-wise again, L1175-1180). Delayed scaling keeps
  the 8-bit copy (linear.py L310-326: ``save_original_input`` refused with ``Float8Quantizer``). So without
  recompute proj adds nothing beside a fused kernel's saved ``out``, and with ``core_attn`` checkpointed (the
  kernel's ``out`` no longer saved) or an unfused core (whose last bmm saves its inputs, not its output) proj holds
  2 bytes per element, not 1. Megatron's other ``set_save_original_input``
  calls: the experts' fc2 under ``moe_act`` recompute (moe/experts.py L269-284: its 16-bit input is the
  checkpoint's output, discarded after fc2 and recomputed, so nothing is saved for it, ``mcore_recompute``; fc2's
  second cast timed in ``memory_bound``) and fc1 under expert offloading (not modelled), MLA's down projections under
  ``layernorm`` recompute (their saved norm output is recomputed either way, ``mcore_recompute``). The shared
  experts' fc1 gets the same treatment as proj, on the same condition (moe/shared_experts.py L147-161: the
  pre-MLP norm's output is saved by the router, so fc1 saves it as it is, not an 8-bit copy beside it; not set
  under ``shared_experts`` recompute, whose checkpoint saves only its input). Dense mlp.py calls none (fc2 keeps
  its cast).

* **NVFP4** (``te-nvfp4``, ``NVFP4BlockScaling``, common/recipe/__init__.py L489-609): every layer linear's three
  GEMMs in 4 bits (E2M1; attention not quantized, ``fp8_dpa = False``). A quantized tensor's usage is packed 2
  elements a byte with one E4M3 scale (1 byte) per 16 elements along the GEMM's reduction and one fp32 amax per
  usage (tensor/nvfp4_tensor.py L273-307 ``get_scale_shape``: rowwise ``[M, K / 16]``, columnwise ``[K, M / 16]``,
  padded to multiples of [128, 4]; L365-399 ``inner_tensor_specs``: ``_rowwise_data`` / ``_columnwise_data``
  ``shape[-1] // 2`` uint8, ``_amax_rowwise`` / ``_amax_columnwise`` one fp32 each). The input saved for the
  weight gradient is its columnwise usage (random-Hadamard-transformed, ``fp4_quant_fwd_inp``): n / 2 + n / 16 + 4
  bytes; the weights' 16x16 2D scaling (``fp4_quant_fwd_weight``) keeps the 1D scale layout. Megatron-Core sets
  ``save_original_input`` on proj under fp4 as under current scaling (attention.py L428-444: ``config.fp4``).

* **the routed experts** (Megatron-Core's ``TEGroupedMLP``, two TE ``GroupedLinear``s, ``mcore_experts.GROUPED_SOURCE``):
  fc1's input (the permuted tokens) and fc2's input (the scaled activation) are split per expert, quantized and
  saved column-wise as the dense linears' are, one per-tensor scale (and NVFP4 amax) per expert; fc1's output, the
  fused weighted SwiGLU's saved input, stays in the activations' dtype. The expert weights' 8-bit caches are
  ``workspace_terms``' (one per expert: ``cache_name=f"weight{i}"``).

``TEFloat8`` rewrites the graph's linears so; ``workspace_terms`` derives the buffers Megatron keeps across
micro-batches and steps (``te_fp8_buffers`` in ``quantities.training``).

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dims import b, s, h, l
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.linear("fc", bb.input, h, bias=False)
>>> g = TEFloat8("te-delayed")(Graph("toy", (bb.build(repeat=l),)))
>>> [(x.name, x.nbytes) for x in g.blocks[0].ops[0].saved]
[('in:fp8', b*h*s), ('in:fp8.scale_inv', 4)]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.expr import const
from memderive.symbolic.gathered import Gathered
from memderive.symbolic.graph import Graph, Op
from memderive.symbolic.mcore_experts import GROUPED_SOURCE, grouped_inputs
from memderive.symbolic.mcore_recompute import ATTENTION_KINDS
from memderive.symbolic.tensor import Tensor

__all__ = ["TE_RECIPES", "TEFloat8", "te_float8", "te_linears", "workspace_terms", "SOURCE", "MEGATRON_AMAX_HISTORY",
           "SP_GATHERS", "SP_SOURCE", "sp_gathered", "te_weight_elements", "PARAM_GATHER_SOURCE",
           "FSDP_PARAM_GATHER_SOURCE", "BLOCK"]

#: Transformer Engine's fp8 recipes under Megatron-Core (--fp8; ``derivations.options.TE_FP8``): DelayedScaling,
#: Float8CurrentScaling, MXFP8BlockScaling, NVFP4BlockScaling (transformer_engine/common/recipe; NVFP4 is
#: Megatron-Core's --fp4-format e2m1 --fp4-recipe nvfp4, Megatron-Bridge's bf16_with_nvfp4_mixed).
TE_RECIPES = ("te-delayed", "te-current", "te-mxfp8", "te-nvfp4")
SOURCE = ("TransformerEngine d0067d0d transformer_engine/pytorch/module/linear.py L604-621 (the input saved "
          "column-wise in 8 bits), module/layernorm_linear.py L475-487 (ln_out), tensor/float8_tensor.py L423-429 "
          "(_data, _transpose, _scale_inv), tensor/mxfp8_tensor.py L84-93, L164-176 (data and 1-byte scales per 32), "
          "tensor/nvfp4_tensor.py L273-307, L365-399 (4-bit data 2 a byte, 1-byte E4M3 scales per 16, an fp32 amax)")
#: Megatron-Core's default amax history (megatron/core/transformer/transformer_config.py:
#: ``fp8_amax_history_len: int = 1``; Transformer Engine's own DelayedScaling default is 1024,
#: transformer_engine/common/recipe/__init__.py L255).
MEGATRON_AMAX_HISTORY = 1
#: The blocks whose linears are Transformer Engine modules (Megatron's embedding and output layer are not).
_NOT_TE = ("embed", "head")
#: The output layer's op path: in the head, and in an MTP layer, which runs the head's output layer (models.mtp).
_OUTPUT_LAYER = "lm_head"
FP8, FP32, E8M0 = dtype("fp8"), dtype("fp32"), dtype("int8")  # E8M0 scales: one byte (torch.uint8 in TE)
FP4 = DType("fp4", Fraction(1, 2))  # NVFP4's E2M1 data, two elements a byte (uint8 in TE)
#: Elements per one-byte block scale of TE's block-scaled recipes (MXFP8's E8M0, NVFP4's E4M3).
BLOCK = {"te-mxfp8": 32, "te-nvfp4": 16}

SP_SOURCE = ("TransformerEngine v2.9 (70f5366): module/linear.py _Linear.forward L175-207 (a column-parallel input "
             "quantized on its sequence shard, row-wise only for Float8 quantizers, then gather_along_first_dim with "
             "the quantizer set row-wise), L330 and L385-390 (the gathered copy freed, the local shard saved), L344 "
             "(the row-parallel output reduce-scattered in the GEMM's 16-bit dtype), _Linear.backward L569 (the "
             "gradient's quantizer row- and column-wise), L639-666 (the input re-gathered for the weight gradient, "
             "async behind the dgrad GEMM: Float8 row-wise, MXFP8 column-wise), L735-744 (the input gradient "
             "reduce-scattered in 16 bits); module/layernorm_linear.py L232-266, L646-676 (the same for the norm's "
             "output); module/base.py grad_output_preprocess L1145-1192 (a row-parallel output gradient quantized, "
             "then gathered); distributed.py _all_gather_fp8 L903-984 (the 8-bit _data gathered, 'Assume scaling "
             "factors are identical across ranks': no scale sent; the transpose made after), _all_gather_mxfp8 "
             "L1445-1570 (each usage the quantizer asks for gathered, its data and its 1-byte scales per 32); "
             "_all_gather_nvfp4 (TransformerEngine d0067d0d distributed.py L1332-1480: each usage's 4-bit data and "
             "its unpadded 1-byte scales per 16 gathered, the amax carried over, not sent); "
             "linear.py _customize_quantizers_float8_current_scaling L1649-1672 (current scaling's amax reduced over "
             "the TP group, so the ranks' scales agree); tensor/float8_tensor.py supports_only_rowwise_all_gather; "
             "module/base.py initialize_ub L288-298, L412-416 (--tp-comm-overlap: every all-gather buffer uint8 "
             "under fp8, the reduce-scatters' in the activations' dtype unless a user config sets fp8_buf on "
             "proj_fprop or fc2_fprop; Megatron-LM megatron/training/initialize.py passes the FP8 mode under --fp8)")


def _data(recipe: str) -> DType:
    """The dtype of a recipe's quantized data: NVFP4's 4 bits, every other recipe's 8."""
    return FP4 if recipe == "te-nvfp4" else FP8


#: Per recipe, what each sequence-parallel all-gather of a TE linear sends (``SP_SOURCE``): the forward's input
#: all-gather one copy (the quantizer set row-wise before it); the backward's output-gradient all-gather the
#: gradient's two usages (dgrad row-wise, wgrad column-wise), one where the quantizer gathers row-wise data only
#: (``supports_only_rowwise_all_gather``: Float8 data is gathered, its transpose made after; the block-scaled
#: recipes gather each usage asked for, with its one-byte scales, ``BLOCK``; Float8's per-tensor fp32 scale_inv is
#: not sent). The input's re-gather for the weight gradient (one copy) runs behind the dgrad GEMM and is not among
#: them.
SP_GATHERS = {recipe: Gathered(1, 2 if recipe in BLOCK else 1, block=BLOCK.get(recipe), data=_data(recipe).nbytes)
              for recipe in TE_RECIPES}


def te_linears(graph: Graph) -> list[tuple[Any, Op]]:
    """The (block, op) pairs of ``graph`` that Megatron-Core builds as Transformer Engine linears: every linear
    and expert op of the layers (not the embedding, not the output layer)."""
    return [(blk, op) for blk, op in graph.ops() if blk.name not in _NOT_TE and op.kind in ("linear", "experts")
            and op.path != _OUTPUT_LAYER]


def sp_gathered(graph: Graph) -> frozenset[str]:
    """The weights (``block/param``) of the Transformer Engine linears whose sequence-parallel all-gathers move
    their quantized tensors (``SP_GATHERS``): every linear of the layers (``te_linears``; the experts' GroupedLinear
    gathers nothing over tensor parallelism itself)."""
    return frozenset(f"{blk.name}/{p.name}" for blk, op in te_linears(graph) if op.kind == "linear"
                     for p in op.params if p.role == "weight")


@dataclass(frozen=True, slots=True)
class TEFloat8:
    """Transformer Engine's fp8 recipe ``recipe`` over the layers' linears: each linear's saved input becomes its
    8-bit cast and its scales (names ``<input>:fp8``, ``<input>:fp8.scale_inv``); Megatron-Core's experts ops
    (TE's GroupedLinear, ``mcore_experts.GROUPED_SOURCE``) their fc1's and fc2's inputs' casts, a per-tensor scale
    per expert."""

    recipe: str

    def __post_init__(self) -> None:
        if self.recipe not in TE_RECIPES:
            raise ValueError(f"Transformer Engine fp8 recipe must be one of {', '.join(TE_RECIPES)}, not "
                             f"{self.recipe!r}")

    @property
    def name(self) -> str:
        return f"Transformer Engine fp8 ({self.recipe})"

    @property
    def _suffix(self) -> str:
        return _data(self.recipe).name

    def _scale(self, x: Tensor, gemms: tuple[Any, ...] = ()) -> list[Tensor]:
        """The scales saved beside ``x``'s cast: one fp32 ``_scale_inv`` (delayed, current scaling), or the block
        recipes' column-wise scale_inv, one byte per 32 (MXFP8) or 16 (NVFP4) rows of each column: rows * k / block
        bytes (put on the last axis, so that tensor, sequence and context parallelism split it as they split
        ``x``), and NVFP4's fp32 ``_amax_columnwise``. ``gemms``: the shape of one quantized tensor per GEMM (a
        GroupedLinear's experts, ``mcore_experts.GROUPED_SOURCE``): a per-tensor scale and amax each."""
        name = f"{x.name}:{self._suffix}.scale_inv"
        role = "fp8-scale" if gemms else x.role  # the experts' per-expert scales: no token axis to split
        if self.recipe not in BLOCK:
            return [Tensor(name, gemms, FP32, role=role)]
        scales = [replace(x, name=name, shape=(*x.shape[:-1], x.shape[-1] / BLOCK[self.recipe]), dtype=E8M0)]
        return scales + ([Tensor(f"{x.name}:fp4.amax", gemms, FP32, role=role)] if self.recipe == "te-nvfp4"
                         else [])

    def _op(self, op: Op, original: bool = False) -> Op:
        """``op`` saving its inputs' 8-bit (NVFP4: 4-bit) casts, or (``original``) its inputs as they are; an experts
        op (Megatron-Core's ``TEGroupedMLP``, ``symbolic.mcore_experts``) its two GroupedLinears' inputs' casts,
        one per expert (``mcore_experts.grouped_inputs``)."""
        if op.kind == "experts":
            return self._grouped(op)
        if op.kind != "linear" or original:
            return op
        casts = {x.name: self._cast(x) for x in op.saved if x.name in op.inputs}
        saved = tuple(t for x in op.saved for t in casts.get(x.name, [x]))
        saved_for = tuple((n, grads) for name, grads in op.saved_for
                          for n in ([t.name for t in casts[name]] if name in casts else [name]))
        return replace(op, saved=saved, saved_for=saved_for)

    def _cast(self, x: Tensor, gemms: tuple[Any, ...] = ()) -> list[Tensor]:
        """``x``'s quantized data (``<x>:fp8`` or ``<x>:fp4``) and its scales (``_scale``)."""
        return [replace(x, name=f"{x.name}:{self._suffix}", dtype=_data(self.recipe)), *self._scale(x, gemms)]

    def _grouped(self, op: Op) -> Op:
        """The experts op with what TE's ``_GroupedLinear.forward`` saves for the weight gradient: each of fc1's and
        fc2's inputs split per expert and quantized (``tex.split_quantize``), kept column-wise only
        (``update_usage(rowwise_usage=False, columnwise_usage=True)``): the recipe's data bytes per element and its
        scales (``_scale``), one per-tensor scale per expert of the op (``GROUPED_SOURCE``)."""
        inputs = grouped_inputs(op)
        if not inputs:  # not Megatron-Core's experts (hf's loop): left as it is
            return op
        experts = (op.params[0].shape[0],)
        casts = {x.name: self._cast(x, experts) for x in op.saved if x.name in inputs}
        return replace(op, saved=tuple(t for x in op.saved for t in casts.get(x.name, [x])))

    def saves_original(self, blk: Any, op: Op) -> bool:
        """Whether Megatron-Core sets ``save_original_input`` on linear ``op`` of ``blk`` under this recipe (current
        scaling and MXFP8; never delayed scaling): the attention's output projection (its input an attention
        kernel's output) and the shared experts' fc1 (its input saved by a router in the same layers)."""
        if self.recipe == "te-delayed" or op.kind != "linear" or not op.inputs:
            return False
        x = op.inputs[0]
        return any(o.kind in ATTENTION_KINDS and o.output.name == x for o in blk.ops) or any(
            o.kind == "router" and const(o.share) == const(op.share) and any(t.name == x for t in o.saved)
            for o in blk.ops)

    def __call__(self, graph: Graph) -> Graph:
        blocks = tuple(blk if blk.name in _NOT_TE else replace(
            blk, ops=tuple(op if op.path == _OUTPUT_LAYER else self._op(op, self.saves_original(blk, op))
                           for op in blk.ops)) for blk in graph.blocks)
        experts = any(op.kind == "experts" for _, op in te_linears(graph))
        note = (f"fp8: Transformer Engine {self.recipe} (Megatron-Core's layer linears): each saves its input's "
                "8-bit cast and its scales for the weight gradient instead of the 16-bit input (" + SOURCE + ")"
                + ("; block scales unpadded (TE pads them to multiples of 128 rows and 4 or 128 columns: exact when "
                   "the tokens per GPU and the linears' sides are multiples of 128)" if self.recipe in BLOCK
                   else "")
                + ("; NVFP4: 4-bit data two a byte, a 1-byte E4M3 scale per 16 elements and an fp32 amax per usage"
                   if self.recipe == "te-nvfp4" else "")
                + ("" if self.recipe == "te-delayed" else "; the attention's output projection and the shared "
                   "experts' fc1 save their 16-bit inputs (Megatron-Core's set_save_original_input, attention.py "
                   "L428-444, moe/shared_experts.py L147-161, Transformer Engine >= 2.6)")
                + ("; the routed experts' GroupedLinears save fc1's and fc2's inputs quantized column-wise, one "
                   "per-tensor scale per expert (of the E: 4 (E - E/ep) bytes over where expert parallel), fc1's "
                   "output 16-bit for the fused SwiGLU; Fp8Padding's rows (each expert's tokens to a multiple of "
                   f"{16 if self.recipe != 'te-mxfp8' else 32}) not counted: none under balanced routing where "
                   "b s k ep / E is a multiple, fewer than that many per local expert otherwise (" + GROUPED_SOURCE
                   + ")" if experts else "")
                + "; fp8 attention is not modelled")
        return replace(graph, blocks=blocks, strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note,))


def workspace_terms(graph: Graph, recipe: str, transpose: bool,
                    amax_history: int = MEGATRON_AMAX_HISTORY,
                    shards: tuple[Any, Any] | None = None) -> list[tuple[str, Any]]:
    """The fp8 buffers Megatron-Core keeps per Transformer Engine linear, as ``(path, bytes)`` over the block's
    repeats:

    * ``weight_workspace``: the 8-bit weight TE caches across micro-batches (Megatron passes
      ``is_first_microbatch``, megatron/core/extensions/transformer_engine.py ``TELinear.forward``; TE
      ``module/linear.py`` L1958 ``cache_name = "weight"``, L479 re-quantized on the first micro-batch only),
      row-wise for the forward and column-wise for the input gradient (L467 ``columnwise_usage =
      is_grad_enabled and inp.requires_grad``). Delayed and current scaling: ``_data`` and, where the GPU runs
      only TN fp8 GEMMs (Hopper, Ada; ``transpose``), a ``_transpose`` copy, plus a 4-byte ``_scale_inv``
      (``tensor/float8_tensor.py`` L423-429; ``utils.py`` L658-663 ``is_non_tn_fp8_gemm_supported``: compute
      capability 10.x, 11.x, 13+). MXFP8: row-wise and column-wise data and their 1-byte scales per 32 elements
      (``tensor/mxfp8_tensor.py`` L84-93): 2 n k + n k / 16;
    * ``amax_history`` (delayed scaling only): per module and GEMM, the forward's 3 and the backward's 2
      quantizers' fp32 ``scale`` and ``amax_history_len`` x quantizers fp32 history
      (``quantization.py`` L1436-1442 ``DelayedScalingRecipeState``; ``module/base.py`` L1139: 3 per GEMM
      forward, 2 backward): 4 x 5 x (amax_history + 1) bytes per GEMM. One module per distinct input and share
      of the layers (Megatron's fc1 is one module for gate and up; a dense MLP's and the shared experts' fc1 are
      two; the experts' GroupedLinear has one GEMM per local expert).

    Under ZeRO-3 too: Megatron-Core's ZeRO-3 is Megatron-FSDP, which TE does not see as FSDP2 (L1958 ``cache_name =
    None if (is_first_microbatch is None or self.is_fsdp2) else "weight"``; ``is_fsdp2``, module/base.py L1037-1047,
    asks torch's ``_get_module_fsdp_state``, distributed.py L2112-2140: torch's ``fully_shard`` state, which
    Megatron-FSDP's own hooks do not register, megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py).
    Megatron still passes ``is_first_microbatch`` (pipeline_parallel/schedules.py L496-497 ``set_is_first_microbatch``
    on the FSDP wrapper, a ``MegatronModule``: transformer/module.py L114-134, over every submodule;
    extensions/transformer_engine.py L1338-1345), and Megatron-FSDP releases only the gathered 16-bit buckets and,
    with fp8 primary weights (``--fp8-param-gather``: ``shards`` below), their transposes (megatron_fsdp.py L623-633,
    L1102-1112): TE's ``_fp8_workspaces["weight"]`` (linear.py L2068-2071), the whole per-TP-rank weight quantized
    from the gathered one, stays across micro-batches and steps. ``disable_parameter_transpose_cache`` (False by
    default, transformer_config.py L1175) would turn it off; Megatron never sets it for FSDP.

    ``shards`` (the ranks the layers' linears are sharded over, the routed experts' over theirs): the same weights as
    Megatron-FSDP's fp8 primary weights (``--fp8-param-gather`` under ZeRO-3, ``FSDP_PARAM_GATHER_SOURCE``): each
    rank holds 1/ranks of each weight's 8-bit data in the uint8 model-weight buffer and each tensor's 4-byte
    ``_scale_inv``; nothing else persists (the gathered bucket and a transpose made from it are released after the
    module runs).
    """
    modules: dict[tuple, list] = {}  # (block, what) -> [block, path, repeats, elements, GEMMs]
    for blk, op in te_linears(graph):
        for w in (p for p in op.params if p.role == "weight"):
            gemms = const(1)
            for side in w.shape[:-2]:  # the experts' leading axis: one GEMM per local expert
                gemms = gemms * side
            key = (blk.name, op.inputs, const(op.share)) if op.kind == "linear" else (blk.name, op.path, w.name)
            path = op.path if op.kind == "linear" else w.name  # the experts' two GroupedLinears: a term each
            row = modules.setdefault(key, [blk.name, path, blk.repeat * op.share, const(0), gemms])
            row[3] = row[3] + (w.numel if shards is None else w.numel / shards[op.kind == "experts"])
    terms: list[tuple[str, Any]] = []
    for block, path, repeats, data, gemms in modules.values():
        if recipe == "te-mxfp8":
            ws = 2 * data + data / 32 + data / 32
        elif recipe == "te-nvfp4":  # both usages: 4-bit data, an E4M3 scale per 16, an fp32 amax each
            ws = 2 * (data / 2 + data / 16) + 2 * FP32.nbytes * gemms
        else:
            ws = (2 if transpose and shards is None else 1) * data + FP32.nbytes * gemms
        terms.append((f"{block}/{path}/weight_workspace", repeats * ws))
        if recipe == "te-delayed":
            terms.append((f"{block}/{path}/amax_history", repeats * gemms * FP32.nbytes * 5 * (amax_history + 1)))
    return terms


#: Megatron-Core's fp8 primary weights (``--fp8-param-gather``; Megatron-Bridge v0.1.0rc3, v0.2.0 and v0.3.0 set it in
#: every fp8 recipe but the blockwise one, src/megatron/bridge/training/mixed_precision.py v0.2.0 L218, L237, L251-252,
#: L266-267, L289), read at Megatron-LM d98e8a6 and TransformerEngine d0067d0d.
PARAM_GATHER_SOURCE = (
    "Megatron-LM d98e8a6: megatron/core/fp8_utils.py get_fp8_context L832-881 (is_init: fp8_model_init with the "
    "recipe, entered per layer by transformer/transformer_block.py L355-359: the layers' TE modules only, not the "
    "embedding or the output layer); distributed/param_and_grad_buffer.py L81-89, L921-923 (a TE quantized "
    "parameter's buffer is uint8), L1160-1190 (MXFP8 under the distributed optimizer: one shared buffer in the "
    "gradients' dtype, param_data a 16-bit view of it), L1245-1290 (a Float8Tensor's _data remapped into the uint8 "
    "param_data; an MXFP8 parameter keeps its own storage under reuse_grad_buf_for_mxfp8_param_ag), L303-343 "
    "(_post_param_sync: MXFP8 quantized from the gathered 16-bit bucket, copy_tensors_to_quantized_params; Float8 "
    "post_all_gather_processing); optimizer/distrib_optimizer.py L2825-2850 (quantize_param_shard of the fp32 main "
    "shard), L2904-2930 (_copy_main_params_to_param_buffer, MXFP8: the fp32 shard into the 16-bit param buffer); "
    "optimizer/optimizer.py L800-808. TransformerEngine d0067d0d: module/base.py quantize_weight L835-846 (a "
    "QuantizedTensor weight is used as it is: no workspace), tensor/utils.py quantize_master_weights L285-291 "
    "(the fp32 master shard cast to the 16-bit dtype first), post_all_gather_processing L1404-1436 (Float8Tensor: "
    "_create_transpose where only TN fp8 GEMMs run; MXFP8: nothing, its row- and "
    "column-wise data kept), _cast_master_weights_to_fp8_current_scaling L466-590 (amax of the master shard, "
    "all-reduced, then the cast), _cast_master_weights_to_fp8_mxfp8_scaling L1015-1148")
#: The same weights under Megatron-FSDP (ZeRO-3 under Megatron-Core: ``--fp8-param-gather --zero 3``; Megatron-Bridge's
#: set_megatron_fsdp_overrides, scripts/performance/utils/helpers.py v0.2.0, keeps the fp8 recipes' fp8_param_gather
#: and sets keep_fp8_transpose_cache False), read at Megatron-LM 0d8e0714 (Megatron-Core 0.15).
FSDP_PARAM_GATHER_SOURCE = (
    "Megatron-LM 0d8e0714: megatron/core/distributed/fsdp/src/megatron_fsdp/param_and_grad_buffer.py "
    "_init_each_parameter_group_buffers L1811-1820 (a Float8Tensor group: its model-weight buffer uint8, sharded, "
    "its gradient bf16, fp32 under grad_reduce_in_fp32), L2143-2147 (the uint8 buffer), "
    "copy_main_weights_to_model_weights L2486-2551 (each step: the fp32 main shard quantized into the uint8 shard, "
    "quantize_param_shard, dense and expert groups apart); megatron_fsdp.py release_module_parameters L492-504 (the "
    "gathered bucket released after a module runs and, keep_fp8_transpose_cache False, each Float8Tensor's "
    "_transpose dropped with it), L853-862 (the same after a forward of a module outside the FSDP units)")


def te_weight_elements(graph: Graph, keep: Callable[[str], bool] | None = None, per_repeat: bool = False) -> Any:
    """Elements of the weights of ``graph``'s Transformer Engine linears (``te_linears``) over the blocks' repeats
    (``per_repeat``: one repeat's, as ``derive.parameters``) and each op's share of them: what ``--fp8-param-gather``
    builds as fp8 tensors (``PARAM_GATHER_SOURCE``); ``keep``: only the ops whose ``block/path`` it keeps. Biases
    and norms stay 16-bit (TE quantizes the modules' weights only).

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h, l
    >>> from memderive.symbolic.dtypes import dtype
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.linear("fc", bb.input, 4 * h, bias=True)
    >>> te_weight_elements(Graph("toy", (bb.build(repeat=l),)))
    4*h**2*l
    """
    total = const(0)
    for blk, op in te_linears(graph):
        if keep is None or keep(f"{blk.name}/{op.path}"):
            repeats = const(1) if per_repeat else blk.repeat
            total = total + repeats * op.share * sum((w.numel for w in op.params if w.role == "weight"), const(0))
    return total


def te_float8(graph: Graph, recipe: str) -> Graph:
    """``TEFloat8(recipe)(graph)``, as ``per_graph`` memoizes it (once per base graph and recipe)."""
    return TEFloat8(recipe)(graph)
