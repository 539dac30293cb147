"""torchtitan's op-level selective activation checkpointing as a pure ``Graph -> Graph`` strategy.

torchtitan wraps each transformer block in ``checkpoint_wrapper`` with a selective-checkpoint policy
(``torchtitan/parallelisms/parallelize_llama.py``, ``_apply_ac_to_transformer_block`` with
``selective_ac_option = 'op'``, the setting of ``train_configs/llama3_8b.toml``): the outputs of the ops in
``_save_list`` are kept (``CheckpointPolicy.MUST_SAVE``), every other op is recomputed in backward
(``PREFER_RECOMPUTE``). The list holds ``aten.mm`` (but every second one: the policy counts mms and drops
the even-numbered), the fused attention kernels (``_scaled_dot_product_flash_attention``,
``_scaled_dot_product_efficient_attention``) and ``_c10d_functional.reduce_scatter_tensor``. So between
forward and backward a layer holds:

* its input (the non-reentrant checkpoint keeps the wrapped call's arguments);
* the outputs of mms 1, 3, 5, ... in forward order; a fused q/k/v projection is counted as the three mms
  torchtitan's model runs (``wq``, ``wk``, ``wv``: its outputs have the widths of the attention's q, k, v),
  so for a LLaMA layer (q, k, v, o, gate, up, down) the outputs of q, v, gate and down are kept;
* the fused attention kernel's outputs: the attention output and the fp32 logsumexp;
* under sequence parallelism, the reduce-scattered output of each row-parallel linear (b, s/t, h); the mm
  before it keeps its whole (b, s, h) partial sum when it is an odd one.

Float8 linears (torchao's ``Float8Linear``, ``--fp8`` under torchtitan) run ``aten._scaled_mm``, which the policy
saves always: torchtitan b5bcd76 ``torchtitan/distributed/activation_checkpoint.py`` ``_get_default_save_ops`` takes
``get_default_op_list().compute_intensive_ops`` (PyTorch's ``torch/_functorch/partitioners.py``: ``aten.mm``, ...,
``aten._scaled_mm``), and only ``aten.mm`` / ``aten.linear`` are counted for "every second mm"
(``mm_ops``); so every Float8 linear's 16-bit output is kept, none recomputed, and the 16-bit linears between them
count among themselves. The rowwise recipes' scales come from ``aten.amax`` (not in the list), recomputed.

Eager attention (``aten.bmm``, softmax) is not in the list and is recomputed; so are norms, rotary, the
activation and every other pointwise op. The FLOPs recomputed are every op's forward but the kept mms' and
the fused attention's (the fused q/k/v projection recomputes only its k part).

>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import dtype
>>> from memderive.symbolic.graph import Graph
>>> from memderive.symbolic.ops import BlockBuilder
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> y = bb.linear("mlp/fc2", bb.activation("mlp/act", bb.linear("mlp/fc1", bb.input, 4 * h, bias=False), "gelu"),
...               h, bias=False)
>>> layer = OpSelectiveRecompute()(Graph("mlp", (bb.build(),))).block("layer")
>>> [(op.path, [t.name for t in op.saved]) for op in layer.ops if op.saved]  # mm 2 (fc2) is recomputed
[('checkpoint', ['in']), ('mlp/fc1', ['mlp/fc1.out'])]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memderive.symbolic.float8 import param_in
from memderive.symbolic.graph import Block, Flop, Graph, Op
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.tensor import Tensor

__all__ = ["OpSelectiveRecompute", "FUSED_ATTENTION"]

#: Attention ops whose kernel is one of the fused ``_scaled_dot_product_*`` calls in ``_save_list``.
FUSED_ATTENTION = frozenset({"flash-attention", "sdpa"})
_KEPT_ATTENTION_ROLES = frozenset({"attention-output", "softmax-stats"})


def _mm_outputs(op: Op, attention: Op | None) -> tuple[Tensor, ...]:
    """The outputs of the mms a linear op runs: one, or three for a fused q/k/v projection."""
    if not op.path.endswith("/qkv") or attention is None:
        return (op.output,)
    by_role = {t.role: t for t in attention.saved}
    return tuple(replace(by_role[role], name=f"{op.path}.{role}_proj") for role in ("q", "k", "v"))


def _row_parallel(op: Op) -> bool:
    return op.kind == "linear" and bool(op.params) and op.params[0].tp_axis == 1


def _recompute_flops(op: Op, kept: frozenset[str], parts: tuple[Tensor, ...]) -> Op:
    """``op`` with the forward FLOPs it runs again in backward: none for a kept mm or fused attention, the
    dropped parts of a fused projection's weight, all of them otherwise."""
    if op.kind in FUSED_ATTENTION:
        return op
    if op.kind != "linear":
        return op.recomputed()
    dropped = [t for t in parts if t.name not in kept]
    if len(dropped) == len(parts):
        return op.recomputed()
    if not dropped:
        return op
    forward = next(x for x in op.flops if x.phase == "forward" and x.kind == "matmul")
    rows, weight = forward.operands
    again = tuple(Flop(forward.name, (rows, Tensor(f"{weight.name}[{t.name}]", (t.shape[1] * t.shape[3], weight.shape[1]),
                                                    weight.dtype, role=weight.role, tp_axis=weight.tp_axis)),
                       forward.coef, "matmul", "recompute") for t in dropped)
    return replace(op, flops=op.flops + again)


@dataclass(frozen=True, slots=True)
class OpSelectiveRecompute(Strategy):
    """torchtitan's op-level selective checkpointing of every layer (see the module docstring);
    ``sequence_parallel``: the reduce-scatters of sequence parallelism follow the row-parallel linears."""

    sequence_parallel: bool = False

    @property
    def name(self) -> str:
        return "op-level selective recompute"

    def _checkpoint(self, blk: Block, float8: frozenset[str] = frozenset()) -> Block:
        """``float8``: the weights (``block/param``) of Float8 linears, whose ``aten._scaled_mm`` outputs the
        policy always saves and does not count among the mms."""
        if blk.name != "layer":
            return blk
        attention = next((op for op in blk.ops if op.kind in FUSED_ATTENTION), None)
        parts = {op.path: _mm_outputs(op, attention) for op in blk.ops if op.kind == "linear"}
        scaled = {op.path for op in blk.ops if param_in(blk.name, op, float8)}
        mms = [t for op in blk.ops if op.path not in scaled for t in parts.get(op.path, ())]
        odd = frozenset(t.name for t in mms[0::2]) | {t.name for path in scaled for t in parts[path]}
        ops = (Op("checkpoint", "checkpoint", (), (blk.input,), blk.input, "layer input kept for recompute"),
               *(_recompute_flops(replace(op, saved=self._kept(op, odd, parts.get(op.path, ())), saved_for=()), odd,
                                  parts.get(op.path, ())) for op in blk.ops))
        return replace(blk, ops=ops)

    def _kept(self, op: Op, odd: frozenset[str], parts: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
        """What the policy keeps of ``op``'s outputs: its odd-numbered mms' (whole over the sequence: the
        partial sum before a reduce-scatter), its reduce-scatter's, a fused attention's out and logsumexp."""
        if op.kind in FUSED_ATTENTION:
            return tuple(t for t in op.saved if t.role in _KEPT_ATTENTION_ROLES)
        kept = [replace(t, seq_axis=None) if self.sequence_parallel and t.tp_axis is None else t
                for t in parts if t.name in odd]
        if self.sequence_parallel and _row_parallel(op):
            kept.append(replace(op.output, name=f"{op.path}.reduce_scatter"))
        return tuple(kept)

    def __call__(self, graph: Graph) -> Graph:
        note = (("op-level selective recompute with Float8 linears: the policy saves every aten._scaled_mm output "
                 "(torchtitan's save ops take PyTorch's compute_intensive_ops, _scaled_mm among them), so each Float8 "
                 "linear's 16-bit output is kept and not recomputed",) if graph.float8 else ())
        return graph.map_blocks(lambda blk: self._checkpoint(blk, graph.float8), self.name, *note)
