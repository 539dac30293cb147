"""The Mamba-2 mixer as Megatron-Core trains it: the ops of one hybrid layer's state space mixer.

Megatron-Core's ``MambaMixer`` (megatron/core/ssm/mamba_mixer.py, ``forward`` and the memory-efficient training path
``_ssm_training``, ``MAMBA_MIXER``) over Dao & Gu's Mamba-2 (arXiv:2405.21060 §7), with mamba_ssm's kernels
(``MAMBA_SSM``):

* ``mixer/in_proj``: a column-parallel linear ``h -> 2 d_in + 2 n_g d_st + n_sh`` (z, x, B, C, dt in one output,
  ``zxBCdt``; the layer's norm fused in, Transformer Engine's ``LayerNormColumnParallelLinear``); saves its input.
* ``mixer/conv1d`` and ``mixer/scan``: one autograd function, ``mamba_split_conv1d_scan_combined``
  (``MambaSplitConv1dScanCombinedFn``): the depthwise causal convolution (kernel d_cv, bias, SiLU) over the
  conv_dim = d_in + 2 n_g d_st channels of x, B and C, then the chunked scan (chunks of s_ch tokens, dt softplus with
  dt_bias, the D skip) gated by silu(z). It saves (``ctx.save_for_backward``) the projection ``zxbcdt`` (the
  ``rearrange(...).contiguous()`` copy from Megatron's (s, b) order), the ungated output ``out_x`` (b, s, d_in) and
  the fp32 ``A = -exp(A_log.float())`` and ``dt_bias.float()`` (n_sh each); its backward runs the convolution again.
* ``mixer/norm``: ``ExtendedRMSNorm``, mamba_ssm's gated RMSNorm (``LayerNormFn``) over groups of d_in / n_g, called
  without a gate: saves its input (the gated output, a ``contiguous`` copy back in (s, b) order) and an fp32 rstd
  per group (``ngroups * M``).
* ``mixer/out_proj``: a row-parallel linear ``d_in -> h``; saves its input.

Tensor parallelism splits d_in, the n_g groups and the n_sh heads over t ranks (each rank scans its own heads).

FLOPs, read off the kernels the function runs (``MAMBA_SSM`` ``_mamba_chunk_scan_combined_fwd`` and ``_bwd``), per
token: the convolution 2 d_cv per channel and SiLU; the scan's products per head ``chunk_state`` (B^T x into the
chunk's state, 2 d_st d_sh), ``chunk_scan`` (the chunk's own tokens, (C B^T) x over its s_ch positions, 2 s_ch d_sh,
and the passed state, C states, 2 d_st d_sh), per group ``bmm_chunk`` (C B^T, 2 s_ch d_st); backward per head ``dstates``,
``dx`` (2 s_ch d_sh + 2 d_st d_sh), ``db``, ``dC`` (2 d_st d_sh each), ``dcb`` and ``ddAcs`` (2 s_ch d_sh each), per group
two ``bmm_chunk_bwd`` (2 s_ch d_st each), and again (phase ``recompute``, as FlashAttention's) ``bmm_chunk``,
``chunk_state`` and the convolution. The products are counted over the whole s_ch x s_ch chunk (the kernels skip the
blocks above the diagonal), as eager attention's are over s x s. Their HBM traffic is ``quantities.memory_bound``'s
(``FUSED_MOVES``: the tensor families each kernel reads and writes).

>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import dtype
>>> from memderive.symbolic.ops import BlockBuilder
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = mamba2_mixer(bb, bb.input, proj_bias=False, conv_bias=True)
>>> [op.path for op in bb.ops]
['mixer/in_proj', 'mixer/conv1d', 'mixer/scan', 'mixer/norm', 'mixer/out_proj']
>>> sum(x.nbytes for op in bb.ops for x in op.saved if x.seq_axis is not None)  # per layer, 16-bit activations
10*b*d_in*s + 4*b*d_st*n_g*s + 2*b*h*s + 4*b*n_g*s + 2*b*n_sh*s
"""

from __future__ import annotations

from memderive.symbolic.dims import b, d_cv, d_in, d_sh, d_st, n_g, n_sh, s, s_ch
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Flop, Op
from memderive.symbolic.ops import ELEMENTWISE, PARAM_DTYPE, BlockBuilder, pointwise_flops
from memderive.symbolic.tensor import Tensor

__all__ = ["MAMBA_MIXER", "MAMBA_SSM", "CONV_DIM", "PROJECTION", "mamba2_mixer"]

MAMBA_MIXER = Citation("megatron-mamba-mixer", "megatron/core/ssm/mamba_mixer.py (d98e8a6): forward, _ssm_training "
                       "(mamba_split_conv1d_scan_combined, then self.norm(y)), ExtendedRMSNorm(d_inner_local_tp, "
                       "group_size=d_inner_local_tp // ngroups_local_tp), in_proj column-parallel, out_proj "
                       "row-parallel")
MAMBA_SSM = Citation("mamba-ssm-ssd", "mamba_ssm/ops/triton/ssd_combined.py (e9594ce): "
                     "MambaSplitConv1dScanCombinedFn.forward (save_for_backward(zxbcdt, conv1d_weight, conv1d_bias, "
                     "out_x, A, D, dt_bias, ...)), _mamba_chunk_scan_combined_fwd (chunk_cumsum, chunk_state, "
                     "state_passing, bmm_chunk, chunk_scan), _mamba_chunk_scan_combined_bwd; "
                     "ops/triton/layernorm_gated.py LayerNormFn (save_for_backward(x, weight, bias, mean, rstd, z))")

FP32 = dtype("fp32")
#: The channels the causal convolution sees: x, B and C.
CONV_DIM = d_in + 2 * n_g * d_st
#: ``in_proj``'s output: z, x, B, C and dt.
PROJECTION = 2 * d_in + 2 * n_g * d_st + n_sh


def _param(name: str, *shape: object) -> Tensor:
    return Tensor(name, tuple(shape), PARAM_DTYPE, role="bias" if name.endswith("bias") else "weight", tp_axis=0)


def _per(path: str, name: str, rows: Tensor, coef: object, phase: str = "forward") -> Flop:
    return Flop(f"{path} {name}", (rows,), coef, phase=phase)


def _moves(path: str, name: str, x: Tensor, phases: tuple[str, ...] = ("forward", "input-grad")) -> tuple[Flop, ...]:
    """Terms that carry a tensor family's HBM traffic (``memory_bound.FUSED_MOVES``), no FLOPs of their own."""
    return tuple(Flop(f"{path} {name}", (x,), 0, "elementwise", phase) for phase in phases)


def mamba2_mixer(bb: BlockBuilder, x: Tensor, *, proj_bias: bool, conv_bias: bool) -> Tensor:
    """The mixer's ops over the normed input ``x`` (b, s, h); returns ``out_proj``'s output (module docstring)."""
    act, lead = bb.act, x.shape[:-1]
    projected = bb.linear("mixer/in_proj", x, PROJECTION, bias=proj_bias, parallel="column")

    path = "mixer/conv1d"
    params = (_param(f"{path}.weight", CONV_DIM, 1, d_cv), *((_param(f"{path}.bias", CONV_DIM),) if conv_bias else ()))
    conv = Tensor(f"{path}.out", (*lead, CONV_DIM), act, tp_axis=2, seq_axis=1)
    per_channel = 2 * d_cv + 1 + ELEMENTWISE["silu"]  # the taps' multiply-adds, the bias, SiLU
    flops = (Flop(f"{path} conv1d", (conv,), per_channel, "elementwise"),
             Flop(f"{path} conv1d", (conv,), 2 * per_channel, "elementwise", "input-grad"),
             Flop(f"{path} conv1d", (conv,), per_channel, "elementwise", "recompute"),  # MAMBA_SSM: backward reruns it
             *(Flop(f"{path} d{w.name}", (conv,), 2 * d_cv if w.role == "weight" else 1, "elementwise", "weight-grad",
                    w.name) for w in params))
    bb.add_op(Op(path, "conv1d", params, (), conv, flops=flops, inputs=(projected.name,)))

    path = "mixer/scan"
    params = (_param(f"{path}.dt_bias", n_sh), _param(f"{path}.A_log", n_sh), _param(f"{path}.D", n_sh))
    saved = (Tensor(f"{path}.zxbcdt", (*lead, PROJECTION), act, tp_axis=2, seq_axis=1),
             Tensor(f"{path}.out_x", (*lead, d_in), act, tp_axis=2, seq_axis=1),
             Tensor(f"{path}.A", (n_sh,), FP32, role="ssm-params", tp_axis=0),
             Tensor(f"{path}.dt_bias_fp32", (n_sh,), FP32, role="ssm-params", tp_axis=0))
    out = Tensor(f"{path}.out", (*lead, d_in), act, tp_axis=2, seq_axis=1)
    heads = Tensor(f"{path}.head_rows", (*lead, n_sh), act, role="rows", tp_axis=2)
    groups = Tensor(f"{path}.group_rows", (*lead, n_g), act, role="rows", tp_axis=2)
    state, intra, pair = 2 * d_st * d_sh, 2 * s_ch * d_sh, 2 * s_ch * d_st
    flops = (_per(path, "B^T x (chunk_state)", heads, state), _per(path, "C B^T (bmm_chunk)", groups, pair),
             _per(path, "(C B^T) x (chunk_scan)", heads, intra), _per(path, "C states (chunk_scan)", heads, state),
             _per(path, "dstates, dB, dC", heads, 3 * state, "input-grad"),
             _per(path, "dx (chunk_scan_chunk_state_bwd_dx)", heads, intra + state, "input-grad"),
             _per(path, "dCB, ddA (chunk_scan_bwd_dcb, ddAcs)", heads, 2 * intra, "input-grad"),
             _per(path, "dB, dC (bmm_chunk_bwd)", groups, 2 * pair, "input-grad"),
             _per(path, "C B^T (bmm_chunk)", groups, pair, "recompute"),
             _per(path, "B^T x (chunk_state)", heads, state, "recompute"),
             # the gate silu(z) and its product, the D skip
             *pointwise_flops(path, "silu", out), *pointwise_flops(path, "glu", out),
             *pointwise_flops(path, "skip", out),
             # HBM traffic of the tensor families the kernels read and write (memory_bound.FUSED_MOVES)
             *_moves(path, "x-io", out), *_moves(path, "bc-io", Tensor(f"{path}.BC", (*lead, 2 * n_g * d_st), act,
                                                                         tp_axis=2)),
             *_moves(path, "cb-io", Tensor(f"{path}.CB", (*lead, n_g, s_ch), FP32, tp_axis=2)),
             *_moves(path, "states-io", Tensor(f"{path}.states", (b, s / s_ch, n_sh, d_sh, d_st), FP32, tp_axis=2)))
    bb.add_op(Op(path, "ssd", params, saved, out, flops=flops, inputs=(projected.name,)))

    path = "mixer/norm"
    weight = _param(f"{path}.weight", d_in)
    rstd = Tensor(f"{path}.rstd", (*lead, n_g), FP32, role="norm-stats", tp_axis=2, seq_axis=1)
    copy = Tensor(f"{path}.in", (*lead, d_in), act, tp_axis=2, seq_axis=1)  # y back in (s, b) order, contiguous
    normed = Tensor(f"{path}.out", (*lead, d_in), act, tp_axis=2, seq_axis=1)
    bb.add_op(Op(path, "group_rms_norm", (weight,), (copy, rstd), normed,
               flops=pointwise_flops(path, "rms_norm", normed, (weight,)), inputs=(out.name,)))
    return bb.linear("mixer/out_proj", normed, x.shape[-1], bias=proj_bias, parallel="row")
