"""transformers' routed experts, ``eager`` or ``grouped_mm``, as what each saves for backward.

transformers (``integrations/moe.py``, v5.24) runs a family's ``*Experts`` module through
``config._experts_implementation``; ``grouped_mm`` is the default
(``PreTrainedModel.get_correct_experts_implementation``), ``eager`` the module's own loop.

The graph's ``experts`` op is the eager loop (``symbolic.ops.BlockBuilder.experts``): per expert,
``torch.where`` of its mask (token and top-k slot indices, int64), the gathered inputs, the MLP's
tensors, the expert outputs, the routing weights they are scaled by and the scaled outputs that
``index_add_`` scatters back. ``grouped_mm_experts_forward`` sorts the b s k token-expert pairs by
expert instead: ``hidden_states[perm // k]`` saves its int64 index, ``sample_weights[perm]`` the
permutation, ``grouped_mm`` the int32 offsets (E,) beside its input, and ``weighted_out[inv_perm]``
the inverse permutation; the per-token sum of the scaled outputs is a ``view(...).sum(1)``, which
saves nothing: the scaled outputs (b, s, k, h) are not held.

>>> from memderive.symbolic.dims import E, h, k, b, s
>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.experts("moe/experts", bb.input, E, k, 4 * h, kind="swiglu", bias=False)
>>> [x.name.split(".")[1] for x in grouped_mm(bb.ops[-1]).saved]  # doctest: +NORMALIZE_WHITESPACE
['gather_index', 'perm', 'offsets', 'gathered', 'gate', 'act', 'up', 'hidden', 'expert_out', 'weights',
 'inv_perm']
"""

from __future__ import annotations

from dataclasses import replace

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.graph import Op
from memderive.symbolic.kernel_choices import EXPERTS_KERNELS
from memderive.symbolic.tensor import Tensor

__all__ = ["EXPERTS_KERNELS", "grouped_mm", "routing_dtype", "clamped_glu"]

INT32, INT64 = dtype("int32"), dtype("int64")


def _named(op: Op, suffix: str) -> Tensor:
    return next(x for x in op.saved if x.name == f"{op.path}.{suffix}")


def grouped_mm(op: Op) -> Op:
    """The experts op as ``grouped_mm_experts_forward`` runs it (see the module's docstring)."""
    tokens = _named(op, "tokens")
    index = tuple(replace(tokens, name=f"{op.path}.{name}") for name in ("gather_index", "perm", "inv_perm"))
    experts = op.params[0].shape[0]
    offsets = Tensor(f"{op.path}.offsets", (experts,), INT32, role="token-ids")
    kept = tuple(x for x in op.saved if x.name.rsplit(".", 1)[1] not in ("tokens", "slots", "weighted"))
    if any(p.role == "bias" for p in op.params):  # gate_up_proj_bias[expert_ids_g], down_proj_bias[expert_ids_g]
        index += (replace(tokens, name=f"{op.path}.expert_ids"),)
    return replace(op, saved=(index[0], index[1], offsets, *kept, *index[2:]),
                   note=(op.note + "; " if op.note else "") + "grouped_mm_experts_forward (sorted by expert)")


def routing_dtype(op: Op, dt: DType) -> Op:
    """The routing weights the experts' outputs are scaled by, saved in ``dt`` (Mixtral's router returns
    its fp32 top-k values uncast: ``expert_out * weights`` saves them in fp32)."""
    weights = _named(op, "weights")
    return replace(op, saved=tuple(replace(x, dtype=dt) if x is weights else x for x in op.saved))



def clamped_glu(op: Op) -> Op:
    """gpt-oss's experts (``GptOssExperts._apply_gate``): ``gate, up = gate_up[..., ::2], gate_up[..., 1::2]``;
    ``gate.clamp(max=limit)`` and ``up.clamp(-limit, limit)`` save their inputs, views of the whole gate_up output
    (2 f_e wide); ``glu = gate * torch.sigmoid(gate * alpha)`` saves the clamped gate and the sigmoid;
    ``(up + 1) * glu`` saves both factors. In place of SwiGLU's gate, act(gate) and up (the product, the
    down projection's input, is saved by both)."""
    gate = _named(op, "gate")
    width = gate.shape[-1]
    made = [replace(gate, name=f"{op.path}.gate_up_out", shape=(*gate.shape[:-1], 2 * width))]
    made += [replace(gate, name=f"{op.path}.{name}") for name in ("gate_clamped", "sigmoid", "glu", "up_plus_one")]
    saved: list[Tensor] = []
    for x in op.saved:
        suffix = x.name.rsplit(".", 1)[1]
        if suffix == "gate":
            saved += made
        elif suffix not in ("act", "up"):
            saved.append(x)
    return replace(op, saved=tuple(saved), note=(op.note + "; " if op.note else "") + "clamped SwiGLU (gpt-oss)")
