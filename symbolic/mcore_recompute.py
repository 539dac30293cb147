"""Megatron-Core's per-module selective recompute as a pure ``Graph -> Graph`` strategy.

``recompute_granularity='selective'`` recomputes the modules named in ``recompute_modules`` in backward
(NVIDIA/Megatron-LM at d98e8a6, megatron/core/transformer/transformer_config.py L560-585: default
``["core_attn"]``; the CLI's ``--recompute-modules``). Each module, read off the code, as it acts on a layer of
the graph (Megatron-Core with Transformer Engine: ``gpt_layer_specs.py`` L258-336):

* ``core_attn``: ``symbolic.strategies.SelectiveRecompute`` for the unfused core (its ``as^2`` tensors, Korthikanti
  et al. 2022); a fused core (Transformer Engine's flash or cuDNN fused attention, ``flash-attention`` ops) runs under
  ``tensor_parallel.checkpoint`` whatever the backend (attention.py L392-395 ``checkpoint_core_attention``, L1555-1564,
  L446-495 ``_checkpointed_attention_forward``): ``CheckpointFunction`` runs the kernel under ``no_grad`` and saves
  only its arguments, q, k, v (tensor_parallel/random.py L616-628; the mask type is a CPU tensor, L493), so the
  kernel's own saves go: its output and softmax statistics (TE's ``FusedAttnFunc`` L1655-1664 saves q, k, v,
  ``out`` and ``aux_ctx_tensors``, the softmax stats; flash-attn's ``FlashAttnFunc`` ``out`` and ``softmax_lse``);
  in backward the forward kernel runs once more (random.py L658-668), before the kernel's own backward. The output
  stays saved where the output projection saves its input (``linear_proj(core_attn_out)``, L1628): counted
  once. Legacy Megatron-LM (and Megatron-DeepSpeed, built on it) never checkpointed the flash path
  (megatron/legacy/model/transformer.py at 532ad926b4 L818-832: ``if not self.use_flash_attn``).
* ``layernorm``: ``input_layernorm`` and ``pre_mlp_layernorm`` run under ``CheckpointWithoutOutput``
  (transformer_layer.py L475-530, L712-723, L818-832): the norm runs under ``no_grad`` and only its input is saved
  (tensor_parallel/random.py L748-800, ``_save_args_to_ctx``); once the next module has saved the output,
  ``discard_output_and_register_recompute`` frees its storage (random.py L970-990: ``resize_(0)``) and a hook
  recomputes it when backward reaches that module. So the norm's statistics and its output (saved by the linears
  or router that read it, in 16 or 8 bits) go; the norm's forward runs once more in backward. Only a norm that is
  a module of its own is recomputed (``if not isinstance(self.input_layernorm, IdentityOp)``, L476): Transformer
  Engine's spec fuses the input norm into ``linear_qkv`` and a dense MLP's into ``linear_fc1``
  (``TELayerNormColumnParallelLinear``, gpt_layer_specs.py L258-262, L319-336), which save ``ln_out`` themselves;
  the MoE layer's pre-MLP norm and MLA's input norm are ``TENorm`` modules. In the graph: a norm reading the
  residual stream is fused where every op that saves its output (in that share of the layers) is a column-parallel
  linear, and a module of its own otherwise.
* ``moe_act``: the routed experts' activation (``bias_act_func``: the weighted SwiGLU or GeGLU) runs under
  ``CheckpointWithoutOutput`` (moe/experts.py L1019-1030): its inputs (fc1's output and the probs) stay saved, its
  output, fc2's input, is freed after fc2 and recomputed (the activation's elementwise forward once more).
* ``mlp``: a dense layer's MLP under ``tensor_parallel.checkpoint`` (transformer_layer.py L537-539, L992-1012):
  the checkpoint saves its input, the residual stream before the fused pre-MLP norm, and nothing inside; the MLP's
  whole forward (norm, fc1, activation, fc2) runs again. MoE layers are left as they are (``if not
  self.is_moe_layer``).
* ``moe``: the whole MoE layer (router, dispatch, experts, shared experts) under ``tensor_parallel.checkpoint``
  (moe/moe_layer.py L247-251, L701-718): its input, the pre-MLP norm's output, is saved; the router, the
  all-to-alls and the experts run again.
* ``shared_experts``: the shared experts under ``tensor_parallel.checkpoint`` (moe/moe_layer.py L252-255, L517-529):
  their input saved, their forward again.

* ``mla_up_proj``: MLA's up projections and rotary (``qkv_up_proj_and_rope_apply``) under
  ``CheckpointWithoutOutput`` (multi_latent_attention.py L171-174, L983-987, L455-458): its inputs, the compressed
  query and key/value and the rotary key, are saved; Transformer Engine's spec fuses the q and kv norms into the up
  projections (``TELayerNormColumnParallelLinear``, gpt_layer_specs.py L246-255, ``q_layernorm=IdentityOp``), so
  their statistics and outputs are inside; its outputs, the query, key and value the attention kernel saves, are
  freed once the attention has run and recomputed before its backward. In the graph: the attention sublayer's ops
  between the down projections (linears whose weight tensor parallelism does not split: Megatron-Core's duplicated
  ``linear_q_down_proj``/``linear_kv_down_proj``) and the attention kernel.

What each module recomputes is marked on its ops as forward FLOPs of phase ``recompute`` (``Op.recomputed``), so the
time model (matmuls and memory-bound work) counts it.

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dims import b, s, h, E, k, l
>>> from memderive.symbolic.dtypes import dtype
>>> from memderive.symbolic.graph import Graph
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> x = bb.rms_norm("norm2", bb.input)
>>> _ = bb.router("moe/router", x, E, k, bias=False)
>>> _ = bb.experts("moe/experts", x, E, k, 4 * h, kind="gelu", bias=False)
>>> g = ModuleRecompute(("layernorm", "moe_act"))(Graph("moe", (bb.build(repeat=l),)))
>>> [(op.path, [t.name for t in op.saved]) for op in g.block("layer").ops][:2]
[('norm2', ['in']), ('moe/router', ['moe/router.scores', 'moe/router.indices', 'moe/router.top_weights', 'moe/router.top_sum'])]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memderive.symbolic.expr import Expr, const, total
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.mtp_layer import EH_PROJ, MTP_BLOCK, MTP_NORMS
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.tensor import Tensor

__all__ = ["ModuleRecompute", "MODULES", "SOURCE", "CORE_ATTN_SOURCE", "CHECKPOINTED"]

#: Megatron-Core's recompute modules of a transformer layer (transformer_config.py L1944-1962 ``allowed_modules``,
#: less the GatedDeltaNet and hyper-connection ones).
MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")
SOURCE = ("Megatron-LM d98e8a6 megatron/core/transformer/transformer_layer.py L470-539 (layernorm, mlp), "
          "moe/experts.py L269-271, L1019-1030 (moe_act), moe/moe_layer.py L247-255 (moe, shared_experts), "
          "multi_latent_attention.py L171-174, L455-458, L983-987 (mla_up_proj), tensor_parallel/random.py L748-990 "
          "(CheckpointWithoutOutput)")
#: core_attn over a fused kernel (``_core_attn``): Megatron-Core and Transformer Engine's lines.
CORE_ATTN_SOURCE = ("Megatron-LM d98e8a6 megatron/core/transformer/attention.py L392-395, L446-495, L1555-1564 "
                    "(core_attn: tensor_parallel.checkpoint of the attention kernel, any backend), "
                    "tensor_parallel/random.py L616-628, L658-668 (CheckpointFunction saves its arguments, reruns "
                    "the forward in backward); TransformerEngine d0067d0 pytorch/attention/dot_product_attention/"
                    "backends.py L1655-1664 (FusedAttnFunc saves q, k, v, out, softmax stats)")
#: The name suffix of a fused kernel's forward run again by the checkpoint (timed at the forward kernel's rate:
#: ``quantities.efficiency.gemm_products``), apart from the kernel's own backward recompute of ``q k^T``.
CHECKPOINTED = " (checkpointed forward again)"
NORMS = ("rms_norm", "layer_norm")
#: The attention kernels' op kinds (``symbolic.ops``, ``symbolic.strategies.FlashAttention``).
ATTENTION_KINDS = ("attention", "flash-attention", "sdpa")


def _saves(op: Op, name: str) -> bool:
    return any(x.name == name for x in op.saved)


def _is_or_copy(x: Tensor, name: str) -> bool:
    """``x`` is tensor ``name`` or one of Transformer Engine's 8-bit copies of it (``name:fp8``, its scales)."""
    return x.name == name or x.name.startswith(name + ":")


def _saves_or_copy(op: Op, name: str) -> bool:
    return any(_is_or_copy(x, name) for x in op.saved)


def _without(op: Op, name: str) -> Op:
    """``op`` no longer saving tensor ``name`` nor its 8-bit copies (``name:fp8``, Transformer Engine's)."""
    return replace(op, saved=tuple(x for x in op.saved if not _is_or_copy(x, name)))


def _split(op: Op, share: Expr) -> tuple[Op | None, Op]:
    """``op`` as (the rest of the layers, ``share`` of them): the rest None when ``share`` is all of ``op``'s."""
    if const(share) == const(op.share):
        return None, op
    return replace(op, share=const(op.share) - const(share)), replace(op, path=f"{op.path}[recomputed]", share=share)


def _pre_norms(blk: Block) -> list[Op]:
    """The norms that read the residual stream (the layer's input or a residual add): Megatron's ``input_layernorm``
    and ``pre_mlp_layernorm``, not the norms inside attention (q/k norms) or after a sublayer."""
    # an MTP layer's eh_proj output is its TransformerLayer's input (``symbolic.mtp_layer``)
    stream = {blk.input.name} | {op.output.name for op in blk.ops if op.kind == "add" or op.path == EH_PROJ}
    return [op for op in blk.ops if op.kind in NORMS and op.inputs and op.inputs[0] in stream
            and op.path not in MTP_NORMS]  # an MTP layer's own: no recompute module names them


def _replace_op(ops: tuple[Op, ...], path: str, new: tuple[Op | None, ...]) -> tuple[Op, ...]:
    out: list[Op] = []
    for op in ops:
        out.extend((x for x in new if x is not None) if op.path == path else (op,))
    return tuple(out)


def _layernorm(blk: Block) -> Block:
    """Each pre-norm that is a module of its own (in some share of the layers) recomputed there: its statistics and
    its output no longer saved, its input kept by the checkpoint."""
    ops = blk.ops
    for norm in _pre_norms(blk):
        if norm.path.endswith("[recomputed]"):  # already inside the mlp module's checkpoint
            continue
        out = norm.output.name
        groups: dict[Expr, list[Op]] = {}
        for op in ops:
            if op.path != norm.path and _saves_or_copy(op, out):  # the copies are the linears' (te_float8)
                groups.setdefault(const(op.share), []).append(op)
        separate = [share for share, readers in groups.items() if not all(op.column_parallel for op in readers)]
        if not separate:
            continue  # fused into a TELayerNormColumnParallelLinear: IdentityOp, nothing recomputed
        rest, part = _split(norm, total(separate))
        part = replace(part, saved=tuple(x for x in part.saved if x.name in norm.inputs), saved_for=()).recomputed()
        ops = _replace_op(ops, norm.path, (rest, part))
        ops = tuple(_without(op, out) if const(op.share) in separate and op.path != part.path else op for op in ops)
    return replace(blk, ops=ops)


def _moe_act(op: Op) -> Op:
    """The routed experts' activation under ``CheckpointWithoutOutput``: its output (fc2's input, and an unfused
    activation's own output) no longer saved, nor gpt-oss's clamped copy of fc1's output (the clamp runs in the
    checkpoint's no-grad forward), its elementwise forward again."""
    if op.kind != "experts":
        return op
    dropped = (f"{op.path}.hidden", f"{op.path}.act", f"{op.path}.fc1_clamped")  # the clamp runs under no_grad
    again = tuple(replace(f, phase="recompute") for f in op.flops
                  if f.phase == "forward" and f.kind == "elementwise" and not f.name.endswith("+bias")
                  and not f.operands[0].name.endswith(".weighted"))  # the scaling term is the tokens' movement
    return replace(op, saved=tuple(x for x in op.saved if x.name.split(":")[0] not in dropped),  # fp8 casts too
                   flops=op.flops + again)


def _core_attn(blk: Block) -> Block:
    """Each fused attention kernel under ``tensor_parallel.checkpoint``: saved, its arguments only (q, k, v); its
    output and softmax statistics no longer saved by it (the output projection still saves the output); its forward
    once more in backward. An unfused core is ``SelectiveRecompute``'s."""
    known = {x.name: x for op in blk.ops for x in (*op.saved, op.output)}

    def per_op(op: Op) -> Op:
        if op.kind != "flash-attention":
            return op
        kept = tuple(x for x in op.saved if x.name in op.inputs)
        extra = tuple(replace(known[name], role="activation") for name in op.inputs
                      if name in known and all(x.name != name for x in kept))
        again = tuple(replace(f, name=f.name + CHECKPOINTED, phase="recompute") for f in op.flops
                      if f.phase == "forward")
        return replace(op, saved=(*kept, *extra), saved_for=(), flops=op.flops + again)

    return blk.map_ops(per_op)


def _checkpointed(ops: tuple[Op, ...], region: list[Op], kept: Tensor) -> tuple[Op, ...]:
    """``region`` under ``tensor_parallel.checkpoint`` of input ``kept``: nothing but ``kept`` saved inside, every
    op's forward again."""
    paths = {op.path for op in region}
    first = region[0].path

    def inside(op: Op) -> Op:
        saved = tuple(x for x in op.saved if x.name == kept.name)
        if op.path == first and not any(_saves(r, kept.name) for r in region):
            saved = (kept,)  # the checkpoint's own save of its input
        return replace(op, saved=saved, saved_for=()).recomputed()

    return tuple(inside(op) if op.path in paths else op for op in ops)


def _region(ops: tuple[Op, ...], prefix: str) -> list[Op]:
    return [op for op in ops if op.path.startswith(prefix) and op.kind != "dropout"]


def _mlp(blk: Block) -> Block:
    """A dense MLP and its fused pre-MLP norm under one checkpoint of the residual stream (in the share of the
    layers that hold a dense MLP)."""
    ops = blk.ops
    region = _region(ops, "mlp/")
    if not region:
        return blk
    share = const(region[0].share)
    norm = next((n for n in _pre_norms(blk) if any(_saves(op, n.output.name) for op in region)), None)
    if norm is None:
        kept = next(x for x in region[0].saved)
    else:
        kept = next(x for x in norm.saved if x.name == norm.inputs[0])
        rest, part = _split(norm, share)
        ops = _replace_op(ops, norm.path, (rest, part))
        region = [part, *_region(ops, "mlp/")]
    return replace(blk, ops=_checkpointed(ops, region, kept))


def _moe(blk: Block, prefix: str) -> Block:
    """The MoE layer (``moe/``) or its shared experts (``moe/shared``) under one checkpoint of the pre-MLP norm's
    output."""
    region = _region(blk.ops, prefix)
    if not region:
        return blk
    norm = next((n for n in _pre_norms(blk) if any(_saves_or_copy(op, n.output.name) for op in region)), None)
    if norm is None:
        return blk
    return replace(blk, ops=_checkpointed(blk.ops, region, norm.output))


def _mla_region(blk: Block) -> list[Op]:
    """MLA's up projections, their fused norms and the rotary ops: the attention sublayer's ops but its kernel, the
    latent split, the down projections (no tensor-parallel split) and the output projection (row-parallel)."""
    if not any(op.kind == "kv-latent" for op in blk.ops):
        return []

    def split_weight(op: Op) -> set[int | None]:
        return {x.tp_axis for x in op.params if x.role == "weight"}

    return [op for op in blk.ops if op.path.startswith("attn/")
            and op.kind not in (*ATTENTION_KINDS, "kv-latent", "attention-sinks", "dropout")
            and not (op.kind == "linear" and split_weight(op) & {None, 1})]


def _mla_up_proj(blk: Block) -> Block:
    """MLA's up projections and rotary under ``CheckpointWithoutOutput``: what they make (named ``<op path>.*``)
    saved by no op, the attention kernel's q, k, v included; their inputs from outside saved; their forward again."""
    region = _mla_region(blk)
    if not region:
        return blk
    made = tuple(f"{op.path}." for op in region)
    known = {x.name: x for op in blk.ops for x in (*op.saved, op.output, *op.cached)}
    paths = {op.path for op in region}
    kept = {x.name for op in blk.ops for x in op.saved if not x.name.startswith(made)}

    def per_op(op: Op) -> Op:
        saved = tuple(x for x in op.saved if not x.name.startswith(made))
        if op.path not in paths:
            return replace(op, saved=saved)
        # an input from outside that no op saves (the rotary key): the checkpoint's own save
        extra = tuple(replace(known[name], role="activation") for name in op.inputs
                      if not name.startswith(made) and name not in kept and name in known)
        return replace(op, saved=(*saved, *extra), saved_for=()).recomputed()

    return blk.map_ops(per_op)


@dataclass(frozen=True, slots=True)
class ModuleRecompute(Strategy):
    """Megatron-Core's selective recompute of ``modules`` (any of ``MODULES``; ``core_attn`` here acts on fused
    attention kernels, the unfused core is ``SelectiveRecompute``'s) in every layer; see the module's docstring."""

    modules: tuple[str, ...]

    def __post_init__(self) -> None:
        unknown = [m for m in self.modules if m not in MODULES]
        if unknown:
            raise ValueError(f"ModuleRecompute: {', '.join(unknown)} not one of {', '.join(MODULES)}")

    @property
    def name(self) -> str:
        return f"Megatron-Core recompute modules ({', '.join(self.modules)})"

    def _layer(self, blk: Block) -> Block:
        if blk.name not in ("layer", MTP_BLOCK):  # an MTP layer's transformer layer reads the same recompute modules
            return blk
        if "moe" in self.modules:  # the whole MoE layer: its shared experts and activation inside it
            blk = _moe(blk, "moe/")
        elif "shared_experts" in self.modules:
            blk = _moe(blk, "moe/shared")
        if "moe_act" in self.modules and "moe" not in self.modules:
            blk = blk.map_ops(_moe_act)
        if "mlp" in self.modules:
            blk = _mlp(blk)
        if "layernorm" in self.modules:
            blk = _layernorm(blk)
        if "core_attn" in self.modules:  # before mla_up_proj, which frees the q, k, v the checkpoint holds
            blk = _core_attn(blk)
        if "mla_up_proj" in self.modules:
            blk = _mla_up_proj(blk)
        return blk

    def __call__(self, graph: Graph) -> Graph:
        source = ", ".join(((SOURCE,) if set(self.modules) - {"core_attn"} else ()) +
                           ((CORE_ATTN_SOURCE,) if "core_attn" in self.modules else ()))
        return graph.map_blocks(self._layer, self.name, f"{self.name}: {source}")
