"""HBM bytes of torchao's tensorwise Float8 casts (``--fp8 tensorwise``), which the time model had left untimed.

Dynamic tensorwise scaling needs the amax of the whole tensor before any element can be scaled
(``hp_tensor_to_float8_dynamic``: ``tensor_to_scale``, an amax reduction, then ``to_fp8_no_autograd``), so each cast
is a pass of its own after the tensor is written: it reads the 16-bit tensor and writes its 8-bit copy, 2 + 1 bytes
per element. NOTE(torchao_casts): a lower bound: the amax is taken as fused into the kernel that wrote the tensor
(torch.compile's Inductor fuses reductions into their producer; eager adds a 2-byte read), and the copies the fp8
GEMMs' layouts need (``addmm_float8_unwrapped``'s ``contiguous``) are left out.

Per Float8 linear and micro-batch (torchao 0.18.0, as the memory side reads it: ``symbolic.float8.SAVED_NOTE``;
``TORCHAO_CASTS``):

* forward: its input, once per distinct input (a module's q, k, v or gate, up read one cast), and its weight;
  again where the op is recomputed;
* backward: its output gradient (``cast_output_to_float8_in_bw``), and, without torchtitan's Float8 tensor
  parallelism, the saved 16-bit input cast again for the weight gradient, once per distinct input (torchao of
  December 2024, eab345c: manual_float8_matmul_with_args_in_float8 saved the 8-bit input and weight; that pass,
  about a quarter of the 8B FSDP rows' cast bytes, did not run there); the weight is cast once per forward;
* under the Float8 TP plan (``Options.float8_tp_plan``): ``PrepareFloat8ModuleInput`` casts a column-parallel
  module's input on its sequence shard (1/t of the gathered rows), ``Float8RowwiseParallel`` a row-parallel one's
  sharded input, both then saved in 8 bits (no cast in backward); ``NoopFwToFloat8BwDynamic`` casts a
  column-parallel output gradient as it is and a row-parallel one on its sequence shard, before the gather.
"""

from __future__ import annotations

from typing import Any

from memderive.derivations.memo import per_graph
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.derivations.quantity import Evaluated
from memderive.symbolic.dims import t as tp_degree
from memderive.symbolic.float8 import is_float8, param_in, tp_planned
from memderive.symbolic.formula import Citation

__all__ = ["TORCHAO_CASTS", "torchao_cast_bytes"]

TORCHAO_CASTS = Citation("torchao-float8", "float8_scaling_utils.hp_tensor_to_float8_dynamic, "
                         "float8_linear.matmul_with_hp_or_float8_args, float8_tensor_parallel.py "
                         "(PrepareFloat8ModuleInput, Float8RowwiseParallel, NoopFwToFloat8BwDynamic)")


def torchao_cast_bytes(est: Evaluated) -> Any:
    """HBM bytes of one micro-batch's torchao tensorwise casts on one GPU of the first pipeline stage (the layout's
    graph), 0 under any other ``--fp8`` (module docstring)."""
    if est.options.fp8 != "tensorwise":
        return 0
    form = _cast_form(est.graph, planned=est.options.float8_tp_plan)
    return layout_int(form, est.values) if form else 0


@per_graph
def _cast_form(graph: Any, planned: bool) -> Any:
    """``torchao_cast_bytes``' expression, once per graph and plan (``planned``: the Float8 TP plan applies, to
    the linears ``tp_planned`` names; a Float8 head outside it casts its gathered 16-bit input as it is)."""
    total: Any = 0
    plan = tp_planned(graph) if planned else frozenset()  # the linears the Float8 TP plan takes (not the head)
    for blk in graph.blocks:
        inputs: dict[Any, Any] = {}  # the forward's input casts, by input: (elements, passes)
        recast: dict[Any, Any] = {}  # the backward's input casts for the weight gradient, by input
        for op in blk.ops:
            if not is_float8(graph, blk.name, op):
                continue
            rows, weight = next(f.operands for f in op.flops if f.kind == "matmul" and f.phase == "forward")
            passes = 2 if any(f.kind == "matmul" and f.phase == "recompute" for f in op.flops) else 1
            column = weight.tp_axis == 0
            in_plan = param_in(blk.name, op, plan)
            width = op.output.dtype.nbytes + 1  # read the 16-bit tensor, write its 8-bit copy
            scale = blk.repeat * op.share * width
            key = op.inputs[0] if op.inputs else rows.name
            x = rows.numel * weight.shape[-1] / (tp_degree if in_plan and column else 1)
            inputs[key] = (scale * x, max(passes, inputs.get(key, (0, 0))[1]))
            if not in_plan:
                recast[key] = scale * x
            grad = rows.numel * weight.shape[-2] / (tp_degree if in_plan and not column else 1)
            total += scale * (passes * weight.numel + grad)
        total += sum(n * passes for n, passes in inputs.values()) + sum(recast.values())
    return total
