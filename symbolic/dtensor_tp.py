"""torchtitan's tensor parallelism as DTensor runs it: a column-parallel linear saves the gathered input.

torchtitan's ``apply_tp`` (9dec370 torchtitan/parallelisms/parallelize_llama.py; 238fa99
torchtitan/models/llama3/infra/parallelize.py) shards the sequence between the linears (``SequenceParallel`` norms,
``RowwiseParallel(output_layouts=Shard(1))`` for wo and w2) and gathers it before them:
``PrepareModuleInput(input_layouts=Shard(1), desired_input_layouts=Replicate())`` on the attention and the
feed-forward, ``ColwiseParallel(input_layouts=Shard(1))`` on the output layer. The gathered (``Replicate``) DTensor
is what wq, wk, wv (w1, w3; the output layer) read, and autograd saves it for their weight gradients as it is: the
whole sequence, one tensor per module. Megatron-LM saves the sequence shard instead and gathers it again in backward
(Korthikanti et al. 2022 §4.2.2), which ``strategies.SequenceParallel`` models; under torchtitan this transform
renames each column-parallel linear's saved input ``<input>:gathered`` without a sequence axis, so that sequence
parallelism leaves it whole (context parallelism still splits it: each rank gathers its own s/cp tokens).

Measured on CPU (torch 2.13, gloo, 2 ranks: ``benchmarks/titan_tp_saved.py``, a Llama block of h 128, 4 heads,
FFN 320, b 2, s 64): the 16-bit plan saves the attention's and the feed-forward's gathered input, 2 x 64 x 128 x 2 B =
32,768 B each (the sequence shard would be 16,384). torchao's Float8 plan (``float8.Float8Training(tp_plan=True)``)
saves their 8-bit casts, gathered, instead.

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dims import b, s, h, l
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> up = bb.linear("mlp/up", bb.input, 4 * h, bias=False, parallel="column")
>>> _ = bb.linear("mlp/down", up, h, bias=False, parallel="row")
>>> g = GatheredInputs()(Graph("mlp", (bb.build(repeat=l),)))
>>> [(x.name, x.seq_axis) for op in g.blocks[0].ops for x in op.saved]  # down's input is split by t, not s
[('in:gathered', None), ('mlp/up.out', 1)]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memderive.symbolic.graph import Graph, Op
from memderive.symbolic.strategies import Strategy

__all__ = ["GatheredInputs", "SOURCE"]

SOURCE = ("torchtitan apply_tp (9dec370 torchtitan/parallelisms/parallelize_llama.py; 238fa99 "
          "torchtitan/models/llama3/infra/parallelize.py): PrepareModuleInput(input_layouts=Shard(1), "
          "desired_input_layouts=Replicate()) before the column-parallel linears, whose autograd saves the gathered "
          "DTensor; measured on CPU, benchmarks/titan_tp_saved.py")


def _gathered(op: Op) -> Op:
    """``op`` saving its input as the gathered tensor, where it is a column-parallel linear that saves its input."""
    if not op.column_parallel or not op.inputs:
        return op
    x = op.inputs[0]
    saved = tuple(replace(t, name=f"{x}:gathered", seq_axis=None) if t.name == x else t for t in op.saved)
    saved_for = tuple((f"{x}:gathered" if name == x else name, grads) for name, grads in op.saved_for)
    return replace(op, saved=saved, saved_for=saved_for)


@dataclass(frozen=True, slots=True)
class GatheredInputs(Strategy):
    """torchtitan's (DTensor's) tensor parallelism: every column-parallel linear saves its gathered input (see the
    module docstring)."""

    @property
    def name(self) -> str:
        return "DTensor tensor parallelism (column-parallel linears save the gathered input)"

    def __call__(self, graph: Graph) -> Graph:
        note = ("torchtitan's tensor parallelism (DTensor): each column-parallel linear saves the input it read, "
                f"gathered over the sequence, not its sequence shard as Megatron-LM does ({SOURCE})")
        return graph.map_blocks(lambda blk: replace(blk, ops=tuple(map(_gathered, blk.ops))), self.name, note)
