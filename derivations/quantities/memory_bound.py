"""Memory-bound work of a training step beside its matmuls (``efficiency``), each as the
bytes its kernels move through HBM over the bandwidth a streaming kernel reaches on that GPU (``achievable_bandwidth``:
BabelStream's Triad, measured on the A100 80GB, H100 SXM and H200; the rated bandwidth, a lower bound on the time,
on the others).

* **Unfused elementwise kernels** (``--kernels eager``: PyTorch without torch.compile, as torchtitan's benchmark
  configs run, ``compile = false``). Megatron-LM's norms, activations and rotary
  embeddings are fused kernels: one read of the inputs and one write of the output. Eager PyTorch runs each
  operation of the module's code as its own kernel, every intermediate a round trip through HBM, and in fp32 where
  the code upcasts. ``EAGER_EXTRA`` holds, per op kind and phase, the element reads and writes eager kernels make
  beyond the fused kernel's, counted from the modules' code (torchtitan ``torchtitan/models/norms.py`` RMSNorm,
  ``models/llama/model.py`` ``apply_rotary_emb`` and ``FeedForward``; transformers' ``LlamaRMSNorm`` is the same
  code). Ops whose eager form is already one kernel (``F.layer_norm``, ``F.gelu``, dropout, residual adds) and the
  cross-entropy (Megatron's is eager too: ``FUSED_MOVES`` holds it) add nothing.
* **Fused elementwise kernels** (``FUSED_MOVES``, every run): one read of each input and one write of each output.
* **The optimizer step**, once per step over the parameters this GPU updates (its 1/(d cp) shard under ZeRO 1-3,
  the routed experts' over their expert data-parallel group: ``optimizer_shard``):
  AdamW as ``torch.optim.AdamW(foreach=True)`` runs it (torchtitan's default) with ``--kernels eager`` (``_multi_tensor_adam``: eight
  foreach kernels, 21 fp32 element reads and writes per parameter), as a fused kernel otherwise (apex/Transformer
  Engine ``FusedAdam``, ``torch.optim.AdamW(fused=True)``: parameter, gradient and both moments read, three
  written, 7), plus the gradient-norm clipping (``clip_grad_norm_``: a norm read and a scaling, 3) and, with the
  fp32 master copy outside ZeRO-3, the copy into the 16-bit weights (Megatron-LM's
  ``_copy_main_params_to_model_params``: 4 + 2 bytes). Under ``--precision-aware-optimizer``, Transformer Engine's
  FusedAdam at the widths the run keeps (``precision_aware.PrecisionAware.step_bytes``).
* **DeepSpeed's fp32 gradient accumulation** (``--grad-sync deepspeed``: its engine with the bf16 optimizer, as
  BigScience's Megatron-DeepSpeed trained BLOOM), each micro-batch: ``BF16_Optimizer.update_hp_grads`` casts every
  16-bit gradient to fp32 and adds it into the fp32 gradients (the pipeline engine calls it after each backward).
* **ZeRO-3's copies** (FSDP2), each micro-batch: each all-gather's output copied out into the parameters
  (``foreach_all_gather_copy_out``: ``split_with_sizes_copy``, one read and one write of every gathered 16-bit
  parameter), for the forward and again for the backward (``reshard_after_forward=True``), and the gradients
  copied into the reduce-scatter's input (``foreach_reduce``: ``_chunk_cat``, a read and a write).
* **Transformer Engine's fp8 quantization** (``--fp8 te-delayed | te-current | te-mxfp8 | te-nvfp4``,
  ``fp8_cast_bytes``): per layer linear, each micro-batch, its input's cast (forward, again in a recompute) and its
  output gradient's (backward), row-wise for one GEMM and column-wise for the weight gradient, and once per step its weight's
  (``CAST_SOURCE``; NOTE(fp8_casts) below).

>>> round(EAGER_EXTRA["rms_norm"]["forward"].nbytes(2))  # eager RMSNorm forward: 36 bytes/element, fused 4
32
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from memderive.derivations.columns import where
from memderive.derivations.hardware import GPU, kernels_of
from memderive.derivations.memo import per_graph
from memderive.derivations.options import TE_FP8
from memderive.derivations.quantities.expert_states import expert_zero_ranks
from memderive.derivations.quantities.model_states import (pipelined_fsdp2, reduced_gradient_width,
                                                            second_state_elements)
from memderive.derivations.quantities.precision_aware import aware_step_bytes
from memderive.derivations.quantity import Evaluated
from memderive.symbolic.derive import evaluate
from memderive.symbolic.experts import expert_ops
from memderive.symbolic.expr import const
from memderive.symbolic.dims import t as tp_degree
from memderive.symbolic.formula import Citation
from memderive.symbolic.te_float8 import BLOCK, TEFloat8, te_linears, te_weight_elements

__all__ = ["STREAM_TRIAD", "STREAM_SOURCE", "achievable_bandwidth", "Moves", "EAGER_EXTRA", "FUSED_MOVES", "fused_elementwise_bytes", "EAGER_SOURCE",
           "UNFUSED_MOVES", "MCORE_UNFUSED_SOURCE", "unfused_framework_bytes", "runs_unfused",
           "LOCAL_SORT_MOVES", "LOCAL_SORT_SOURCE", "sorts_by_local_expert", "FP8_PAD_MOVES", "FP8_PAD_SOURCE",
           "pads_for_fp8", "OPTIMIZER_SOURCE", "FSDP_SOURCE", "eager_extra_bytes",
           "optimizer_bytes", "MUON_STEP_BYTES", "muon_step_bytes", "optimizer_shard", "zero3_copy_bytes", "MEGATRON_FSDP_BUFFERS", "adam_moves", "layout_int", "fp32_accumulation_bytes",
           "DEEPSPEED_SOURCE", "fp8_cast_bytes", "CAST_SOURCE", "fp8_gathered_elements", "MAMBA_SSM_MOVES"]

EAGER_SOURCE = Citation("torchtitan-norms", "RMSNorm, op by op", also=(
    Citation("torchtitan-llama3-8b-toml", "norm_type = 'rmsnorm', compile = false"),
    Citation("torchtitan-h100-benchmarks", "Table 1: FSDP 5,762 TPS/GPU, FSDP + torch.compile 6,667")))
OPTIMIZER_SOURCE = Citation("pytorch-adam", "_multi_tensor_adam (foreach) and _fused_adam", also=(
    Citation("torchtitan-optimizer", "'foreach': not fused, fused False"),
    Citation("megatron-fp16-optimizer", "_copy_main_params_to_model_params")))
DEEPSPEED_SOURCE = Citation("deepspeed-pipe-engine", "_exec_backward_pass: update_hp_grads after each micro-batch; "
                            "_exec_reduce_grads: buffered_allreduce_fallback of the fp32 gradients; "
                            "_exec_reduce_tied_grads", also=(Citation("deepspeed-bf16-optimizer", "update_hp_grads"),))
FSDP_SOURCE = Citation("pytorch-fsdp2-collectives", "foreach_all_gather_copy_out, foreach_reduce (_chunk_cat)")
STREAM_SOURCE = Citation("azure-ai-benchmarking-guide", "Azure_Results ND_A100_v4, ND_H100_v5 and ND_H200_v5: HBM "
                         "Bandwidth (BabelStream), Triad 1.70, 2.97 and 4.15 TB/s")

#: The HBM bandwidth a streaming kernel reaches, (measured TB/s, the GPU's rated TB/s): BabelStream's Triad
#: (``a[i] = b[i] + s * c[i]``: two reads and a write per element, as the elementwise kernels here) on Azure's ND A100
#: v4 (A100-SXM4-80GB, rated 2.039), ND H100 v5 (H100 80GB HBM3, 3.35) and ND H200 v5 (H200 141GB, 4.8); its Copy
#: (one read, one write) reads 1.61, 2.90 and 4.01, its Add the Triad's. Other GPUs: not measured there.
STREAM_TRIAD: dict[str, tuple[float, float]] = {
    "a100-80gb": (1.70, 2.039),
    "h100-sxm": (2.97, 3.35),
    "h200": (4.15, 4.8),
}
#: GPUs not measured there whose HBM is of a measured GPU's kind: that GPU's Triad fraction of its rated bandwidth
#: stands in. The GH200's 141 GB of HBM3e at 4.8 TB/s is the H200's memory; its 96 GB of HBM3 at 4.0 is HBM3 as the
#: H100 SXM's (at another rated speed).
STREAM_STAND_IN = {"gh200-141gb": "h200", "gh200-96gb": "h100-sxm"}


def achievable_bandwidth(hw: GPU) -> float:
    """Bytes/s the memory-bound kernels of a training step move on ``hw``: its memory bandwidth (a cluster's own
    figure where it gives one) times the Triad's measured fraction of the rated for that GPU kind (``STREAM_TRIAD``),
    the rated bandwidth where none is measured.

    >>> from memderive.derivations.hardware import gpu
    >>> round(achievable_bandwidth(gpu("a100-80gb")) / 1e9)  # 2,039 GB/s x 1.70 / 2.039
    1700
    >>> round(achievable_bandwidth(gpu("l40s")) / 1e9)  # not measured: its rated 864 GB/s
    864
    >>> round(achievable_bandwidth(gpu("gh200-96gb")) / 1e9)  # 4,000 GB/s x the H100's HBM3 fraction, 2.97 / 3.35
    3546
    """
    measured = STREAM_TRIAD.get(kernels_of(hw)) or STREAM_TRIAD.get(STREAM_STAND_IN.get(hw.name, ""))
    return hw.memory_bandwidth * measured[0] / measured[1] if measured else float(hw.memory_bandwidth)



@dataclass(frozen=True, slots=True)
class Moves:
    """Element reads plus writes per element of the op's tensor: ``act`` in its own dtype, ``fp32`` upcast, ``byte``
    one-byte (bool masks)."""

    act: int
    fp32: int = 0
    byte: int = 0

    def nbytes(self, act_bytes: Any) -> Any:
        return self.act * act_bytes + 4 * self.fp32 + self.byte


#: Reads and writes eager kernels make beyond a fused kernel's, per element of the op's tensor, by phase
#: (``recompute`` repeats the forward). NOTE(fsdptime): counted from the code, op by op:
#: RMSNorm ``self._norm(x.float()).type_as(x) * self.weight``, ``_norm = x * rsqrt(x.pow(2).mean(-1) + eps)``:
#: forward float (r 1 act, w 1 fp32), pow (r w fp32), mean (r fp32), mul (r w fp32), type_as (r fp32, w act),
#: * weight (r w act) = 4 act + 7 fp32; fused: r x, w y = 2 act. Input gradient: g * weight (r w act), type_as's
#: (r act, w fp32), g * rsqrt (r w fp32), (g * x).sum (r 2 w 1 fp32, then r 1), mean's expand (w fp32), pow's 2 x g
#: (r 2 w 1 fp32), the two gradients of x summed (r 2 w 1 fp32), float's (r fp32, w act) = 4 act + 16 fp32; fused:
#: r g, x, w dx = 3 act. Weight gradient (g * out).sum: r 2 w 1 act, r 1 act = 4; fused: inside the same kernel.
#: Rotary (torchtitan ``apply_rotary_emb``): x.float() (r act, w fp32), the complex product (r w fp32), type_as
#: (r fp32, w act) = 2 act + 4 fp32 each way; fused: 2 act. SwiGLU ``silu(a) * b`` per element of a: forward silu
#: (r w) and the product (r 2 w 1) = 5, fused 3; backward the product's two gradients (r 2 w 1 each) and silu's
#: (r 2 w 1) = 9, fused (r g, a, b, w da, db) 5.
EAGER_EXTRA: dict[str, dict[str, Moves]] = {
    "rms_norm": {"forward": Moves(2, 7), "recompute": Moves(2, 7), "input-grad": Moves(1, 16),
                 "weight-grad": Moves(4)},
    "rotary": {"forward": Moves(0, 4), "recompute": Moves(0, 4), "input-grad": Moves(0, 4)},
    "silu-glu": {"forward": Moves(2), "recompute": Moves(2), "input-grad": Moves(4)},
}
#: The silu-glu op declares a term for the gate's silu and one for the product, both over (b, s, f): the extra
#: moves ride on the silu term alone.
_SKIP = ("glu",)


#: Reads and writes a fused elementwise kernel makes per element of the term's tensor, by (op kind, term) and phase
#: (``recompute`` repeats the forward): one read of each input, one write of each output, as the fused kernels
#: Megatron-LM, Transformer Engine, Apex and torch.compile run them. NOTE(fused_moves): norms r x w y (2), input
#: gradient r g, x w dx (3), the weight gradient inside the same kernel; rotary r x w y each way (2); SwiGLU per
#: element of a: r a, b w y (3), backward r g, a, b w da, db (5; the glu term rides on silu's); GELU (Megatron's fused
#: bias-GELU) r x w y (2), r g, x w dx (3); residual add r 2 w 1 (3); dropout r x w y (2) each way, its one-byte mask
#: left out; the unfused core's softmax (Megatron's fused scale-mask-softmax) r scores w probs (2), r probs, g w dx
#: (3), its dropout (2); the vocabulary-parallel cross-entropy r logits w (2) each way. FlashAttention's softmax
#: stays on chip (none); a linear's bias add runs in the GEMM's epilogue or the bias-GELU (none).
FUSED_MOVES: dict[tuple[str, str], dict[str, int]] = {
    **{(norm, norm): {"forward": 2, "recompute": 2, "input-grad": 3} for norm in ("rms_norm", "layer_norm")},
    **{("rotary", rope): {"forward": 2, "recompute": 2, "input-grad": 2} for rope in ("rotary", "rotary-yarn")},
    ("silu-glu", "silu"): {"forward": 3, "recompute": 3, "input-grad": 5},
    ("gelu", "gelu"): {"forward": 2, "recompute": 2, "input-grad": 3},
    # squared ReLU: Megatron-Core's squared_relu, torch.pow(F.relu(x), 2) under jit_fuser (torch.compile from torch
    # 2.2: megatron/core/jit.py), one pointwise kernel: r x w y, backward r g, x w dx (as the fused GELU)
    ("relu2", "relu2"): {"forward": 2, "recompute": 2, "input-grad": 3},
    ("add", "add"): {"forward": 3, "recompute": 3},
    ("dropout", "dropout"): {"forward": 2, "recompute": 2, "input-grad": 2},
    ("attention", "softmax"): {"forward": 2, "recompute": 2, "input-grad": 3},
    ("attention", "dropout"): {"forward": 2, "recompute": 2, "input-grad": 2},
    ("cross_entropy", "cross_entropy"): {"forward": 2, "input-grad": 2},
    # mixture of experts: each routed expert's SwiGLU as the dense MLP's; the router's fp32 softmax over E
    ("experts", "silu"): {"forward": 3, "recompute": 3, "input-grad": 5},
    ("router", "softmax"): {"forward": 2, "recompute": 2, "input-grad": 3},
    # the Mamba-2 mixer (symbolic.mamba, MAMBA_SSM_MOVES): its group RMSNorm as the norms; the causal convolution
    # (its backward's rerun of the forward is a term of phase recompute); the scan's tensor families
    ("group_rms_norm", "rms_norm"): {"forward": 2, "recompute": 2, "input-grad": 3},
    ("conv1d", "conv1d"): {"forward": 2, "recompute": 2, "input-grad": 3},
    ("ssd", "x-io"): {"forward": 5, "recompute": 5, "input-grad": 17},
    ("ssd", "bc-io"): {"forward": 2, "recompute": 2, "input-grad": 7},
    ("ssd", "cb-io"): {"forward": 2, "recompute": 2, "input-grad": 6},
    ("ssd", "states-io"): {"forward": 4, "recompute": 4, "input-grad": 11},
}
#: NOTE(ssd_moves): the Mamba-2 mixer's kernels (mamba_ssm ops/triton/ssd_combined.py, causal_conv1d), each reading
#: its inputs once and writing its outputs once, per element of each tensor family. Convolution: forward r xBC w
#: out (2), backward r xBC, dout w dx (3). Over x's (b, s, d_in): forward chunk_state r x, chunk_scan r x, z w out,
#: out_x (5); backward chunk_state again r x, chunk_scan_bwd_dz r x, z, out_x, dout w dz, dout (6), dstates, dx,
#: dC, dcb, ddAcs r dout (5), dx, db, dcb, ddAcs r x (4), w dx (1) = 17. Over B and C together (b, s, 2 n_g d_st):
#: forward chunk_state r B, bmm_chunk r B, C, chunk_scan r C (2 per element of the pair); backward bmm_chunk and
#: chunk_state again (1.5), dstates r C, dx r B, db w dB, dC r C w dC (2.5), the two bmm_chunk_bwd r B, C and the
#: residuals, w dB, dC (3) = 7. Over C B^T, fp32 (b, s/s_ch, n_g, s_ch, s_ch): forward w, r (2); backward w again, dx
#: and ddAcs r, dcb w dCB, the two bmm_chunk_bwd r dCB (6). Over the chunk states, fp32 (b, s/s_ch, n_sh, d_sh, d_st):
#: forward chunk_state w, state_passing r w, chunk_scan r (4); backward chunk_state and state_passing again (3),
#: dstates w, state_passing_bwd r 2 w 2, dx, db, dC r (11). The per-head dt and its cumulative sums (n_sh per
#: token) are left out.
MAMBA_SSM_MOVES = Citation("mamba-ssm-ssd", "ops/triton/ssd_combined.py _mamba_chunk_scan_combined_fwd and _bwd: "
                           "the tensors each kernel reads and writes")
#: NOTE(token_moves): the movement of each token-expert pair's h-vector, read off the experts op's scaling term on its
#: scaled outputs (b, s, k, h), per element: forward, the dispatcher's permute into expert order (an index_select:
#: r x w y, 2) and the unpermute's scatter_add back to the tokens (r y w out, 2) = 4; backward, their transposes, the
#: gradient gathered (2) and scatter-added (2) = 4. The routing probabilities scale the expert outputs inside the
#: fused SwiGLU (Megatron-Core since v0.13, the README's 'moving the probs multiplication from unpermutation to
#: activation function of GroupedMLP'; NeMo AutoModel's WeightedSwiGLUFunction), not in a pass of their own; the
#: unpermute's product of older Megatron-Core (v0.8: r x w y, r g x w dx) is not counted (``TOKEN_MOVES_SOURCE``).
TOKEN_MOVES = {"forward": 4, "recompute": 4, "input-grad": 4}
TOKEN_MOVES_SOURCE = Citation("megatron-moe-dispatcher", "moe_utils.py permute (index_select), unpermute "
                              "(scatter_add)", also=(Citation("megatron-moe-readme", "MCore v0.13: probs applied in the "
                                                                               "GroupedMLP's activation"),))


MCORE_UNFUSED_SOURCE = Citation("megatron-core-0.15-experts", "megatron/core/fusions/fused_bias_geglu.py "
                                "weighted_bias_quick_geglu_impl (the clamp before the fused function); "
                                "megatron/core/transformer/moe/experts.py TEGroupedMLP._apply_bias (fc2's bias, "
                                "skip_bias_add=True); megatron/core/models/common/embeddings/rope_utils.py "
                                "_apply_rotary_pos_emb_bshd (YaRN unfused)", also=(
    Citation("transformer-engine-2.9-grouped-linear", "GroupedLinear: fc1's bias in the grouped GEMM, its gradient "
             "fused with the wgrad GEMM"),))

#: Passes a framework's own code runs as separate PyTorch kernels around its fused ones, beyond ``FUSED_MOVES``
#: (every run pays them, whatever ``--kernels``), by framework, (op kind, term) and phase, per element of the term's
#: elements (its FLOPs over its coefficient: a bias term's rows x width). NOTE(unfused_moves): Megatron-Core 0.15
#: (Megatron-Bridge 0.2.0's pin) with Transformer Engine 2.9 runs gpt-oss's experts (``TEGroupedMLP.forward``,
#: ``bias_activation_fusion`` True, quick-GeGLU, ``activation_func_clamp_value`` 7) as:
#: * the clamp, eager before ``WeightedQuickGeGLUFunction`` (``weighted_bias_quick_geglu_impl``): per element of the
#:   gate, forward ``x_glu.clamp(max=7)`` r 1 w 1, ``x_linear.clamp(-7, 7)`` r 1 w 1, ``torch.cat`` r 2 w 2 = 8;
#:   backward (``clamp_backward``) the up's ``self >= min`` r 1 w 1 byte, ``self <= max`` r 1 w 1 byte,
#:   ``logical_and_`` r 2 w 1 byte, ``where`` r grad 1 + mask byte w 1; the gate's ``self <= max`` r 1 w 1 byte,
#:   ``where`` r 1 + byte w 1; the chunk's gradient ``cat`` r 2 w 2 = 11 + 8 bytes (aten ops counted under
#:   ``TorchDispatchMode`` on CPU, views left out); the fused function after it reads and writes as
#:   ``FUSED_MOVES``' SwiGLU;
#: * fc2's bias (``skip_bias_add=True``), per local expert ``t + b * p``, then ``torch.cat`` (``_apply_bias``): per
#:   element of fc2's output, forward ``b * p`` w 1, the add r 2 w 1, the cat r 1 w 1 = 6; backward the product's
#:   two gradients (``g * p`` r 1 w 1 summed r 1, ``g * b`` r 1 w 1 summed r 1) and the split's gradient ``cat``
#:   r 1 w 1 = 8. fc1's bias is TE's (``GroupedLinear``, returned by no one): in the GEMM's epilogue, its gradient
#:   in the wgrad GEMM's (none).
#: * YaRN's rotary embedding unfused: Megatron-LM (arguments.py validate_args: ``position_embedding_type != 'rope'``
#:   sets ``apply_rope_fusion = False``) and Megatron-Bridge 0.2.0 (utils/fusions.py
#:   validate_rope_fusion_compatibility, called by GPTModelProvider.provide; gpt-oss's provider sets 'yarn') run
#:   ``_apply_rotary_pos_emb_bshd`` (rope_utils.py), per element of q and k: forward ``t * cos_`` r 1 w 1, the
#:   rotate_half's neg r w of half and cat r 1 w 1, ``* sin_`` r 1 w 1, the add r 2 w 1, the cat with the empty
#:   ``t_pass`` r 1 w 1 = 12; backward the two products r 1 w 1 each, the neg (1), the chunk's cat (2), the two
#:   gradients of t summed (3), the empty t_pass's ``slice_backward`` (zeros, w 1) added (3) = 14 (the cos/sin
#:   tables, per position only, left out); the fused kernel's 2 and 2 (``FUSED_MOVES``) are already counted.
UNFUSED_MOVES: dict[str, dict[tuple[str, str], dict[str, Moves]]] = {
    "megatron": {
        ("experts", "clamp"): {"forward": Moves(8), "recompute": Moves(8), "input-grad": Moves(11, byte=8)},
        ("experts", "down_bias"): {"forward": Moves(6), "recompute": Moves(6), "weight-grad": Moves(8)},
        ("rotary", "rotary-yarn"): {"forward": Moves(10), "recompute": Moves(10), "input-grad": Moves(12)},
    },
}


#: NOTE(local_sort): Megatron-Core's all-to-all dispatcher sorts the tokens it received by local expert where a GPU
#: holds more than one (``num_local_experts > 1``), after the dispatch's all-to-all (``dispatch_postprocess``,
#: "Permutation 2"), and unsorts the experts' outputs before the combine's (``combine_preprocess``): dropless,
#: ``sort_chunks_by_idxs`` (TE's fused ``moe_sort_chunks_by_index`` under ``moe_permute_fusion``, split and
#: ``torch.cat`` otherwise); dropped and padded to capacity, ``view(ep, E/ep, C, h).transpose(0, 1).contiguous()``.
#: Each is a copy of the received (token, expert) rows, r 1 w 1 = 2 per element of the (b, s, k, h) rows the
#: experts scale (``TOKEN_MOVES``' term), the two of them 4; backward their gradients copied back the same way (the
#: fused kernel's inverse, ``cat``'s of the split, ``reshape`` of the transposed gradient), 4; a recompute repeats the
#: forward (``LOCAL_SORT_SOURCE``). The probabilities sorted beside them (one fp32 per row, not per h) are left out.
#: Not the flex (DeepEP) dispatcher's: its one permute after the dispatch sorts by expert (``TOKEN_MOVES``).
LOCAL_SORT_MOVES = {"forward": 4, "recompute": 4, "input-grad": 4}
#: NOTE(fp8_padding): under fp8 Megatron-Core's TEGroupedMLP pads each local expert's rows to a multiple of 16 (32
#: under MXFP8) before fc1 and unpads fc2's output (core_v0.15.0 experts.py L817-820, L859-866, L957-958, whatever
#: the dispatcher). TE's Fp8Padding returns its input untouched only where every expert's count is already a multiple
#: (module/fp8_padding.py L117-122); otherwise ``fused_multi_row_padding`` copies all the rows into a new buffer
#: (L36-39: r 1 w 1), and Fp8Unpadding copies fc2's output back (fp8_unpadding.py: r 1 w 1); backward each copies
#: the gradient the other way: 4 moves forward, 4 backward per element of the (b, s, k, h) rows, a recompute's
#: forward again (``FP8_PAD_SOURCE``). Dropless routing makes the counts data-dependent: the chance that all E/ep
#: are multiples of 16 is 16^-(E/ep), so the copies are counted; dropped and padded to capacity, each count is
#: the fixed C ep etp (the published rows' 4,096, a multiple): not counted (an unaligned capacity would copy too).
#: Megatron-Bridge 0.2.0 sets no ``moe_router_padding_for_fp8`` (the router's padding that would align them).
FP8_PAD_MOVES = {"forward": 4, "recompute": 4, "input-grad": 4}
FP8_PAD_SOURCE = Citation("megatron-core-0.15-experts", "megatron/core/transformer/moe/experts.py TEGroupedMLP "
                          "L817-820, L859-866, L957-958 (Fp8Padding, Fp8Unpadding under config.fp8)", also=(
    Citation("transformer-engine-2.9-grouped-linear", "module/fp8_padding.py L36-39 (fused_multi_row_padding into a "
             "new buffer), L117-122 (skipped where every split is aligned); module/fp8_unpadding.py L36-38 (fused_multi_row_unpadding), L114-120 (skipped likewise)"),))
LOCAL_SORT_SOURCE = Citation("megatron-moe-dispatcher", "core_v0.15.0 megatron/core/transformer/moe/token_dispatcher.py "
                             "MoEAlltoAllTokenDispatcher.dispatch_postprocess L667-698 (Permutation 2: sort tokens by "
                             "local expert), combine_preprocess L713-734 (Unpermutation 2); moe_utils.py "
                             "sort_chunks_by_idxs")


def unfused_framework_bytes(est: Evaluated) -> Any:
    """HBM bytes of one micro-batch's passes the framework's code runs unfused (``UNFUSED_MOVES``), Megatron-Core's
    all-to-all dispatcher's sort by local expert (``LOCAL_SORT_MOVES``, where ``sorts_by_local_expert``) and its fp8
    padding of the routed rows (``FP8_PAD_MOVES``, where ``pads_for_fp8``), on one GPU of the first pipeline stage
    (the layout's graph, as ``fused_elementwise_bytes``); 0 for a framework without any. Cell by cell on columns
    of layouts (the local experts E/ep differ with ep)."""
    total = _unfused(est)
    out = layout_int(total, est.values) if total else 0
    if _sorts(est):
        sort = layout_int(_token_copy_form(est.graph, moves=tuple(LOCAL_SORT_MOVES.items())), est.values)
        out = out + where(sorts_by_local_expert(est), sort, 0)
    if pads_for_fp8(est):
        out = out + layout_int(_token_copy_form(est.graph, moves=tuple(FP8_PAD_MOVES.items())), est.values)
    return out


def runs_unfused(est: Evaluated) -> bool:
    """Whether the framework's code runs any pass of the layout's graph unfused (``UNFUSED_MOVES``: Megatron-Core's,
    ``MCORE_UNFUSED_SOURCE``) or copies the routed rows (``LOCAL_SORT_MOVES`` where the dispatcher could hold more
    than one expert a GPU, ``FP8_PAD_MOVES``), so that the time note names them."""
    return bool(_unfused(est)) or _sorts(est) or pads_for_fp8(est)


def pads_for_fp8(est: Evaluated) -> bool:
    """Whether Megatron-Core's TEGroupedMLP copies the routed rows into and out of Fp8Padding's buffer
    (``FP8_PAD_MOVES``): under ``--framework megatron`` with a Transformer Engine fp8 recipe and dropless routing
    (no ``--capacity-factor``), on a model with routed experts."""
    o = est.options
    routed = est.model.sizes.get("E", 0) > 0
    return routed and o.framework == "megatron" and o.fp8 in TE_FP8 and o.capacity_factor is None


def _sorts(est: Evaluated) -> bool:
    """Whether Megatron-Core's all-to-all dispatcher runs the layers' routed experts (``--framework megatron``,
    ``--moe-dispatcher alltoall``, more than one routed expert): ``sorts_by_local_expert`` then says where."""
    o = est.options
    return o.framework == "megatron" and o.moe_dispatcher == "alltoall" and est.model.sizes.get("E", 0) > 1


def sorts_by_local_expert(est: Evaluated) -> Any:
    """Whether Megatron-Core's all-to-all dispatcher sorts each layer's tokens by local expert (``LOCAL_SORT_MOVES``):
    where it runs (``_sorts``) with more than one routed expert per GPU (E / ep > 1; at ep 1 too: the sort runs
    whatever the expert-parallel size); cell by cell on a column of ep degrees."""
    return _sorts(est) and est.model.sizes["E"] // est.options.ep > 1


def _unfused(est: Evaluated) -> Any:
    """``_unfused_form`` of the layout's graph under its framework; 0 for a framework without any."""
    framework = est.options.framework
    return _unfused_form(est.graph, framework=framework) if framework in UNFUSED_MOVES else 0


@per_graph
def _token_copy_form(graph: Any, moves: tuple[tuple[str, int], ...]) -> Any:
    """The bytes of copies of the routed rows (``moves``: element reads plus writes by phase, ``LOCAL_SORT_MOVES``,
    ``FP8_PAD_MOVES``), once per graph: on the routed experts' scaling term, as ``TOKEN_MOVES``."""
    table = dict(moves)
    return _elementwise_bytes(graph, lambda blk, op, f: table.get(f.phase) if _routed_rows(op, f) else None)


@per_graph
def _unfused_form(graph: Any, framework: str) -> Any:
    """``unfused_framework_bytes``' expression, once per graph and framework: each term of ``UNFUSED_MOVES`` over its
    elements (a bias term's rows times the bias, its name the bias's: ``down_bias``) in the activations' dtype."""
    table = UNFUSED_MOVES[framework]

    def moves_of(blk: Any, op: Any, f: Any) -> Moves | None:
        name = f.name.rsplit(" ", 1)[-1]
        if name == "+bias" and len(f.operands) == 2:
            name = f.operands[1].name.rsplit(".", 2)[-2]  # experts' ``{path}.down_bias.one_expert``
        return table.get((op.kind, name), {}).get(f.phase)

    return _elementwise_bytes(graph, moves_of, every_operand=True)


def fused_elementwise_bytes(est: Evaluated) -> Any:
    """HBM bytes of one micro-batch's elementwise kernels, fused (``FUSED_MOVES``), on one GPU of the first
    pipeline stage (the layout's graph, as ``eager_extra_bytes``); the eager kernels' extra is on top of these."""
    total = _fused_form(est.graph)
    return layout_int(total, est.values) if total else 0


@per_graph
def _fused_form(graph: Any) -> Any:
    """``fused_elementwise_bytes``' expression, once per graph."""
    return _elementwise_bytes(graph, _fused_moves)


def _fused_moves(blk: Any, op: Any, f: Any) -> int | None:
    """Element reads plus writes of one elementwise term, fused (``FUSED_MOVES``; a routed expert's scaling of its
    outputs carries its tokens' movement, ``TOKEN_MOVES``)."""
    if _routed_rows(op, f):
        return TOKEN_MOVES.get(f.phase)
    return FUSED_MOVES.get((op.kind, f.name.rsplit(" ", 1)[-1]), {}).get(f.phase)


def _routed_rows(op: Any, f: Any) -> bool:
    """Whether ``f`` is the routed experts' scaling of their outputs, the term on the (b, s, k, h) rows that carries
    the tokens' movement (``TOKEN_MOVES``) and Megatron-Core's copies of them (``_token_copy_form``)."""
    return op.kind == "experts" and f.name.rsplit(" ", 1)[-1] == "glu" and f.operands[0].name.endswith(".weighted")


def _elementwise_bytes(graph: Any, moves_of: Any, every_operand: bool = False) -> Any:
    """Bytes over the graph's elementwise terms: each term's operand (its elements in its dtype, times the block's
    repeats and the op's share) times ``moves_of(block, op, term)`` (element reads plus writes, or a ``Moves``;
    None or 0: the term moves nothing). ``every_operand``: the term's elements are the product of all its operands'
    (a bias term's rows times the bias), in the first one's dtype."""
    total: Any = 0
    for blk in graph.blocks:
        for op in blk.ops:
            for f in op.flops:
                moves = moves_of(blk, op, f) if f.kind == "elementwise" else None
                if not moves:
                    continue
                x = f.operands[0]
                per = moves.nbytes(x.dtype.nbytes) if isinstance(moves, Moves) else moves * x.dtype.nbytes
                elements = x.numel
                for y in f.operands[1:] if every_operand else ():
                    elements = elements * y.numel
                total += blk.repeat * op.share * f.share * elements * per  # f.share: a recompute of some layers
    return total


def layout_int(expr: Any, values: Mapping[Any, int]) -> Any:
    """``int(evaluate(expr, values))``; over the layouts of one structure (``search.columns.ColumnValues``), of
    each at once."""
    whole = getattr(values, "whole", None)
    return int(evaluate(expr, values)) if whole is None else whole(expr)


def eager_extra_bytes(est: Evaluated) -> Any:
    """Extra HBM bytes of one micro-batch's unfused elementwise kernels on one GPU of the first pipeline stage (the
    layout's graph: each op's tensors as the rank holds them), frozen weights' gradient terms left out."""
    total = _eager_form(est.graph)
    return layout_int(total, est.values) if total else 0


@per_graph
def _eager_form(graph: Any) -> Any:
    """``eager_extra_bytes``' expression, once per graph (the layouts of one structure share it)."""
    def moves_of(blk: Any, op: Any, f: Any) -> Moves | None:
        if f.name.rsplit(" ", 1)[-1] in _SKIP:
            return None
        if f.param is not None and (f.param in graph.frozen or f"{blk.name}/{f.param}" in graph.frozen):
            return None
        return EAGER_EXTRA.get(op.kind, {}).get(f.phase)

    return _elementwise_bytes(graph, moves_of)


def adam_moves(eager: bool) -> int:
    """fp32 element reads and writes per parameter of one AdamW step (weight decay on) and its gradient clipping.

    Foreach (``torch.optim.adam._multi_tensor_adam``, AdamW's): p *= 1 - lr wd (r w), lerp_(m, g) (r 2 w 1),
    v *= beta2 (r w), addcmul_(v, g, g) (r 3 w 1), sqrt(v) (r w), div_ (r w), add_ eps (r w), addcdiv_(p, m, denom)
    (r 3 w 1) = 21; fused: r p, g, m, v, w p, m, v = 7. Clipping (``clip_grad_norm_``): the norm (r 1) and the
    scaling (r w) = 3.

    >>> adam_moves(True), adam_moves(False)
    (24, 10)
    """
    return (21 if eager else 7) + 3


def optimizer_bytes(est: Evaluated) -> Any:
    """HBM bytes of one optimizer step on one GPU (AdamW/Adam over all its parameters, none offloaded; Muon's
    elementwise work, ``muon_step_bytes``); 0 for the other optimizers, fine-tuning and offload (not modelled: said
    in the time model's note)."""
    o = est.options
    if o.optimizer == "muon" and not (o.lora_rank is not None or o.train_only or o.freeze_embeddings):
        return muon_step_bytes(est)
    if (o.optimizer not in ("adamw", "adam") or o.offload or o.offload_params or o.lora_rank is not None
            or o.train_only or o.freeze_embeddings or o.base_dtype is not None):
        return 0
    state = 2 if o.precision == "pure" else 4  # torchtune's pure bf16 keeps the states 16-bit
    params = est.number("parameters_per_gpu")
    shard = optimizer_shard(est, params, lambda: _routed_held(est)) if o.zero >= 1 else params
    if o.precision_aware_optimizer:  # Transformer Engine's FusedAdam at the states' own widths
        return shard * aware_step_bytes(o)
    copy = 6 if o.precision == "master" and o.zero != 3 else 0  # fp32 main params into the 16-bit model's
    return shard * (adam_moves(o.kernels == "eager") * state + copy)


#: HBM bytes per owned element of one Muon step outside the Newton-Schulz products, fp32 master and momentum
#: (OrthogonalizedOptimizer.step, Emerging-Optimizers, ``muon_step.NS_CITATION``; Megatron-Core's Float16OptimizerWithFloat16Params):
#: decoupled weight decay p.add_(p) r 4 w 4; exp_avg.lerp_(grad) r 4 + 4 w 4; Nesterov grad.lerp(exp_avg) r 4 + 4
#: w 4; F.normalize (the norm r 4, the division r 4 w 4); the cast to bf16 r 4 w 2 and back r 2 w 4; the scale and
#: extra scale (two multiplications) r 4 w 4 each; p.add_(update) r 4 + 4 w 4; the main params copied into the
#: 16-bit model r 4 w 2; the gradient clipping's norm r 4 and scaling r 4 w 4.
MUON_STEP_BYTES = 8 + 12 + 12 + 12 + 6 + 6 + 16 + 12 + 6 + 12


def muon_step_bytes(est: Evaluated) -> Any:
    """HBM bytes of one Muon step on one GPU outside its Newton-Schulz products (``MUON_STEP_BYTES`` per
    element Muon owns; Adam's fused step and main-param copy, ``adam_moves``, per element it does not), over the
    GPU's share under ``--zero 1`` (the layer-wise optimizer's whole parameters per rank, counted as the mean rank's,
    ``optimizer_shard``)."""
    o, graph = est.options, est.graph
    routed = set(expert_ops(graph))
    in_experts = lambda blk, op, x: f"{blk.name}/{op.path}" in routed  # noqa: E731
    params = est.number("parameters_per_gpu")
    adam = layout_int(second_state_elements(graph, "muon"), est.values)
    adam_routed = layout_int(second_state_elements(graph, "muon", in_experts), est.values) if routed else 0
    shard = (lambda n, r: optimizer_shard(est, n, r)) if o.zero else (lambda n, r: n)  # noqa: E731
    return (shard(params - adam, lambda: _routed_held(est) - adam_routed) * MUON_STEP_BYTES
            + shard(adam, lambda: adam_routed) * (adam_moves(o.kernels == "eager") * 4 + 6))


def _routed_held(est: Evaluated) -> Any:
    """The routed experts' terms of ``parameters_per_gpu`` (0 without them), for ``optimizer_shard``'s ``routed``:
    evaluated only where their shard is apart."""
    routed = set(expert_ops(est.graph))
    return est.quantity("parameters_per_gpu").value_where(est.values, lambda path: path in routed) if routed else 0


def optimizer_shard(est: Evaluated, n: Any, routed: Callable[[], Any]) -> Any:
    """The elements of ``n`` (``routed()`` of them the routed experts', called only under expert parallelism or
    folding) whose optimizer step one GPU runs under ZeRO: the rest over the d x cp ranks, the routed experts' over
    their own expert data-parallel group
    (``expert_states.expert_zero_ranks``, the ranks the memory shards their states over: Megatron-Core's
    distributed optimizer shards the expert buffers over ``intra_expt_dp_group``); each the ceiling (FSDP pads the
    last shard)."""
    o = est.options
    ranks = o.dp * o.cp
    if not (o.ep > 1 or o.folded):
        return -(-n // ranks)
    held = routed()
    return -(-(n - held) // ranks) + -(-held // layout_int(expert_zero_ranks(o), est.values))


#: Megatron-FSDP copies no gathered weight out and no fused GEMM's gradient in: it all-gathers each bucket into the
#: buffer its parameters' data point into, and reduce-scatters the gradient bucket their main_grad views fill.
MEGATRON_FSDP_BUFFERS = Citation("megatron-fsdp-buffer", "AllGatherPipeline.async_bucket_gather: "
                                 "wbuf.fetch_bucket(set_param_data=True), all_gather_into_tensor(output_tensor="
                                 "bucket.data, ...); GradReducePipeline._bucket_group_gradient_reduce: "
                                 "reduce_scatter_tensor(output=grad_shard, input=bucket.data), then local_grad += "
                                 "reduced_grad")


def zero3_copy_bytes(est: Evaluated) -> Any:
    """HBM bytes of one micro-batch's ZeRO-3 copies on one GPU: the forward's and the backward's all-gather outputs
    copied out into the parameters, and the gradients copied into the reduce-scatter's input, a read and a write of
    every 16-bit parameter the GPU gathers each (6 moves); 0 without ZeRO-3. Megatron-FSDP (ZeRO-3 under
    ``--framework megatron``, no parameter offload) gathers into the parameters' own bucket and reduce-scatters from
    the gradients' own (``MEGATRON_FSDP_BUFFERS``): what it moves is the reduced shard added into the rank's gradient
    shard, a read of both and a write of one, 3 moves of the rank's shard (``optimizer_shard``: ceil(P / (dp cp))
    elements, the routed experts' over their own expert data-parallel ranks) in the gradient buffer's dtype. Not
    counted: the gradients no fused GEMM writes into main_grad (the word embeddings, the norms), which its
    post-backward hook copies in each micro-batch (megatron_fsdp.py at 0d8e0714 L528-532: param.main_grad.copy_(
    param.grad)), and the shard's scaling where the reduction does not average (gradient_reduce_preprocessing)."""
    o = est.options
    if o.zero != 3 and not o.offload_params:  # FSDP's CPU offload gathers and reduces as ZeRO-3 does
        return 0
    params = est.number("parameters_per_gpu")
    if o.megatron_fsdp:
        return optimizer_shard(est, params, lambda: _routed_held(est)) * 3 * reduced_gradient_width(o)
    width = 4 if o.dtype == "fp32" else 2
    return params * 6 * width


def fp32_accumulation_bytes(est: Evaluated) -> Any:
    """HBM bytes of one micro-batch's fp32 gradient accumulation under ``--grad-sync deepspeed`` on one GPU:
    ``hp_grad.add_(lp.grad.to(fp32))``, the cast (r 2, w 4) and the add (r 4 + 4, w 4), 18 bytes per parameter of
    the first stage (``parameters_per_gpu``); 0 otherwise, and in fp32 (no 16-bit gradient to upcast). Under fp16
    (DeepSpeed's FP16 optimizer, no fp32 gradients) autograd adds each micro-batch's gradient into the 16-bit
    ``.grad`` (PyTorch's AccumulateGrad, ``variable.grad += new_grad``): r 2 + 2, w 2, 6 bytes per parameter.

    FSDP2 under pipeline stages (``pipelined_fsdp2``: torchtitan, reduce dtype fp32) with a 16-bit --dtype: each
    micro-batch's post_backward, gradient sync off, upcasts the first micro-batch's 16-bit gradient to fp32
    (``to_accumulated_grad_if_needed``: r 2, w 4) and adds each later one into it (``accumulate_unsharded_grad_if_
    needed``, fp32 += bf16: r 4 + 2, w 4): (6 + 10 (m - 1))/m bytes per parameter and micro-batch
    (``PIPELINED_FSDP2_CITATION``)."""
    o = est.options
    if o.dtype == "fp32":
        return 0
    if o.grad_sync == "deepspeed":
        return est.number("parameters_per_gpu") * (6 if o.dtype == "fp16" else 18)
    if not pipelined_fsdp2(o.framework, o.pp, o.zero):
        return 0
    m = o.micro_batches or 1
    return est.number("parameters_per_gpu") * (6 + 10 * (m - 1)) / m


CAST_SOURCE = Citation("te-fp8-casts", "quantize_impl, rmsnorm_fwd's Impl, grad_output_preprocess, _all_gather_fp8, "
                       "TELinear.forward")
#: The kinds of norm TE fuses into the following linear (``TELayerNormColumnParallelLinear``: qkv and fc1).
_NORMS = ("rms_norm", "layer_norm")


def _quantize(n: Any, width: Any, recipe: str, transpose: bool, row: bool, col: bool) -> Any:
    """HBM bytes of one TE quantization of ``n`` elements of ``width`` bytes into the usages asked (``row``: the
    data a forward or dgrad GEMM reads; ``col``: the weight gradient's). NOTE(fp8_casts): current scaling first
    reads the tensor for its amax (``nvte_compute_amax``), then casts (``nvte_quantize_v2``): r 2 w; delayed scaling
    casts with the scale it holds and takes the amax in the same kernel: r w. The cast writes one byte per element
    per copy: delayed and current scaling one ``_data`` serving both usages where non-TN fp8 GEMMs run (Blackwell),
    the data and its ``_transpose`` on Hopper (``transpose``; one kernel, cast_transpose); MXFP8 row-wise and
    column-wise data, each with its one-byte E8M0 scale per 32 elements, from one read. NVFP4 (``te-nvfp4``): its
    per-tensor fp32 scale is the tensor's amax, read first as current scaling's (the column-wise usage's after the
    random Hadamard transform, ``with_post_rht_amax``, taken by the same pass: TransformerEngine d0067d0d
    csrc/quantizer.cpp L2630-2645 ``nvte_hadamard_transform_amax``), then one cast (the RHT fused in it,
    L2700-2712 ``nvte_quantize_with_hadamard_transform``: row-wise, and RHT then column-wise) writes each usage
    asked: 4-bit data, half a byte per element, and a 1-byte E4M3 scale per 16 (``te_float8.BLOCK``): r 2 w
    (1/2 + 1/16) per usage."""
    reads = width * n * (2 if recipe in ("te-current", "te-nvfp4") else 1)
    if recipe == "te-mxfp8":
        return reads + (int(row) + int(col)) * (n + n / 32)
    if recipe == "te-nvfp4":
        return reads + (int(row) + int(col)) * (n / 2 + n / 16)
    return reads + n * ((int(row) + int(col)) if transpose else 1)


def _module_casts(recipe: str, transpose: bool, width: Any, x: Any, g: Any, fused: bool, gather_in: Any,
                  gather_grad: Any, passes: Any, original: bool = False) -> Any:
    """HBM bytes of one TE linear module's activation casts in one micro-batch: its input ``x`` elements quantized
    in each of ``passes`` forwards (1, 2 with a recompute), its output gradient ``g`` once in the backward.

    NOTE(fp8_casts): ``fused``: the input is a norm's output and TE's LayerNormLinear writes it (rmsnorm_fwd):
    delayed scaling's norm writes the 8-bit data itself (FULLY_FUSED: 1 byte where the 16-bit norm, counted in
    ``FUSED_MOVES``, writes ``width``), its transpose a kernel of its own (r 1 w 1 on Hopper); current scaling's norm
    takes the amax as it writes the 16-bit output (FUSED_NORM_AMAX_FP8), then one cast (r w); MXFP8's norm writes
    16 bits (UNFUSED), then the cast as any. ``gather_in``/``gather_grad`` not 1: sequence parallelism all-gathers the
    column-parallel linear's input (forward) or the row-parallel one's output gradient (backward) over that many
    ranks: delayed and current scaling quantize the local shard row-wise only (fp8 column-wise data cannot be
    gathered, ``_all_gather_fp8``) and transpose the gathered tensor where needed (r 1 w 1, in the backward); MXFP8
    quantizes the local shard both ways and gathers both. Every other input is cast in full by the linear: fc2's is the
    16-bit output of Megatron's fused bias-SwiGLU (megatron/core/fusions/fused_bias_swiglu.py; TE's LayerNormMLP and
    op fuser, which would fuse it, are not Megatron-Core's default layer spec), proj's the attention's 16-bit output
    (fp8 attention not modelled). ``original``: the module saves its 16-bit input (proj and the shared experts' fc1
    under current scaling and MXFP8: ``te_float8.TEFloat8.saves_original``): each forward casts it (its local
    shard) row-wise only (TE linear.py L393-397, L428-436), the backward casts the saved input again (L954-972):
    column-wise (L1175-1180), or, gathered under sequence parallelism with delayed or current scaling, the local
    shard row-wise, its gathered transpose where needed (as above); MXFP8 column-wise, then gathered."""
    def cast(n: Any, split: Any, norm: bool, saved: bool = False) -> tuple[Any, Any]:
        """(bytes per pass, bytes once in the backward) of quantizing n elements, all-gathered over ``split``;
        ``saved``: the 16-bit input saved (``original``)."""
        local, both = n / split, split == 1 or recipe in BLOCK  # the block-scaled recipes gather each usage
        if saved:
            per = _quantize(local, width, recipe, transpose, True, False)
            if both:
                return per, _quantize(local, width, recipe, transpose, False, True)
            return per, per + (2 * n if transpose else 0)
        if norm and recipe == "te-delayed":  # the norm writes 8 bits, not 16; the transpose its own kernel
            return -(width - 1) * local, (2 * n if transpose else 0)
        if norm and recipe == "te-current":  # the amax taken by the norm: one cast
            per = _quantize(local, width, "te-delayed", transpose, True, both)
        else:
            per = _quantize(local, width, recipe, transpose, True, both)
        return per, (0 if both or not transpose else 2 * n)
    per, once = cast(x, gather_in, fused, original)
    grad, after = cast(g, gather_grad, False)
    return passes * per + once + grad + after


def fp8_cast_bytes(est: Evaluated, transpose: bool) -> tuple[Any, Any]:
    """HBM bytes of Transformer Engine's fp8 quantization on one GPU of the first pipeline stage (the layout's
    graph): (each micro-batch's, each step's); (0, 0) but under ``--fp8 te-*``. ``transpose``: the GPU runs only TN
    fp8 GEMMs (``options.te_transposes``). The weights are quantized once per step, row- and column-wise, their
    16-bit module copy read: Megatron-Core passes ``is_first_microbatch`` (``disable_parameter_transpose_cache``
    False by default) and TE caches the 8-bit weights across micro-batches unless the module is under PyTorch's
    FSDP2 (linear.py ``cache_name = None if (is_first_microbatch is None or self.is_fsdp2)``; base.py ``is_fsdp2``:
    torch's ``_get_module_fsdp_state``). NOTE(fp8_casts): so under ``--zero 3`` too, which with TE's recipes is
    Megatron-FSDP, not torch's fully_shard; the memory side (``te_float8.workspace_terms``) holds the same cached
    8-bit weights (``CAST_SOURCE``). Under ``--fp8-param-gather`` the weights are fp8 primary tensors, quantized from
    the fp32 main shard once per step (``_primary_cast``); under Megatron-FSDP (--zero 3), which releases each
    gathered bucket and its Float8Tensors' transposes after the module runs (``te_float8.FSDP_PARAM_GATHER_SOURCE``),
    the transpose Hopper's backward needs is made again from the gathered weight in every micro-batch."""
    o = est.options
    if o.fp8 not in TE_FP8:
        return 0, 0
    micro, weights = _cast_form(est.graph, recipe=o.fp8, transpose=transpose, gathered=bool(o.sp))
    per_micro = layout_int(micro, est.values) if micro else 0
    if o.fsdp_fp8_params:  # Megatron-FSDP drops each transpose with its bucket: one per micro-batch
        n = layout_int(_te_weights(est.graph), est.values)
        return per_micro + (2 * n if transpose else 0), _primary_cast(est, False)
    if _fp8_primary(o):
        return per_micro, _primary_cast(est, transpose)
    return per_micro, (layout_int(weights, est.values) if weights else 0)


def _fp8_primary(o: Any) -> bool:
    """Whether the layers' linear weights are fp8 primary tensors, gathered and cast as such: ``--fp8-param-gather``
    with delayed or current scaling, not MXFP8 (``fp8_gathered_elements``)."""
    return bool(o.fp8_param_gather) and o.fp8 != "te-mxfp8"


_te_weights = per_graph(te_weight_elements)


@per_graph
def _routed_te_weights(graph: Any) -> Any:
    """``te_weight_elements`` of the routed experts' ops alone (``symbolic.experts.expert_ops``)."""
    routed = set(expert_ops(graph))
    return te_weight_elements(graph, lambda path: path in routed)


def fp8_gathered_elements(est: Evaluated, routed: bool = False) -> Any:
    """The weight elements one GPU's data-parallel all-gather moves in 8 bits, not 16 (``routed``: of the routed
    experts alone, gathered over their own group): the layers' linear weights under ``--fp8-param-gather`` with
    delayed or current scaling (their _data in the uint8 parameter buffer); 0 otherwise, and under MXFP8, whose
    bucket is gathered in 16 bits through the gradient buffer and quantized after (``te_float8.PARAM_GATHER_SOURCE``:
    param_and_grad_buffer.py L1160-1190, L303-343)."""
    if not _fp8_primary(est.options):
        return 0
    return layout_int((_routed_te_weights if routed else _te_weights)(est.graph), est.values)


def _primary_cast(est: Evaluated, transpose: bool) -> Any:
    """``fp8_cast_bytes``' step part under ``--fp8-param-gather`` with delayed or current scaling: no 16-bit module
    weight to cast; after the optimizer, TE's ``quantize_master_weights`` casts the rank's fp32 main shard (1/(d cp)
    of the layers' linear weights, the routed experts' over their own group: ``optimizer_shard``, as
    ``optimizer_bytes``) to 16 bits
    (L285-291: the copy ``optimizer_bytes`` counts, into a temporary now), then quantizes it row-wise into the uint8
    buffer (current scaling an amax pass first, its amax all-reduced); after the all-gather,
    ``post_all_gather_processing`` makes each whole weight's transpose where only TN fp8 GEMMs run (r 1 w 1).
    MXFP8's step cast is the 16-bit gathered weight quantized both ways, as without the option
    (``te_float8.PARAM_GATHER_SOURCE``)."""
    o = est.options
    n = layout_int(_te_weights(est.graph), est.values)
    shard = optimizer_shard(est, n, lambda: layout_int(_routed_te_weights(est.graph), est.values))
    width = 2  # the master shard cast to Megatron's 16-bit model dtype first (quantize_master_weights)
    return _quantize(shard, width, o.fp8, False, True, False) + (2 * n if transpose else 0)


@per_graph
def _cast_form(graph: Any, recipe: str, transpose: bool, gathered: bool) -> tuple[Any, Any]:
    """``fp8_cast_bytes``' (micro-batch, step) expressions, once per graph: one module per distinct input of a
    block's linears in the same share of its layers (Megatron's fused qkv, fc1 of gate and up; a dense MLP's fc1 and
    the shared experts' read the same norm output in different layers), one per weight of an expert op (GroupedLinear's
    fc1 and fc2); ``gathered``: sequence parallelism (over the t tensor-parallel ranks, t > 1 by the options).
    Under ``moe_act`` recompute (the experts' activation recomputed, their GEMMs not) Megatron sets
    ``save_original_input`` on the experts' fc2 (moe/experts.py L269-276; TE grouped_linear.py L462, L541, L1030:
    row-wise cast forward, the saved 16-bit input cast again in the backward); delayed scaling refuses it
    (transformer_config.py L2000-2006, as ``Options`` does)."""
    split = tp_degree if gathered else 1
    modules: dict[tuple, dict[str, Any]] = {}
    for blk, op in te_linears(graph):
        params = {p.name: p for p in op.params}
        for f in op.flops:
            if f.kind != "matmul" or f.phase not in ("forward", "recompute"):
                continue
            rows, w = f.operands
            param = params[w.name.removesuffix(".one_expert")]
            key = ((blk.name, op.inputs, const(op.share)) if op.kind == "linear" else
                   (blk.name, op.path, param.name))
            row = modules.setdefault(key, {"blk": blk, "op": op, "x": rows.numel * w.shape[-1], "g": 0, "w": {},
                                           "recompute": 0, "axis": param.tp_axis,
                                           "fc2": const(w.shape[-2]) == const(op.output.shape[-1])})
            if f.phase == "recompute":  # the share of the layers that rerun it (Megatron's block method: some)
                row["recompute"] = f.share
            else:
                row["g"] += rows.numel * w.shape[-2]
                row["w"][param.name] = param.numel
    micro: Any = 0
    weights: Any = 0
    for row in modules.values():
        blk, op = row["blk"], row["op"]
        width = op.output.dtype.nbytes  # the 16-bit activations (and Megatron's 16-bit module weights)
        linear = op.kind == "linear"
        fused = linear and bool(op.inputs) and op.inputs[0] in norms_of(blk)
        gather_in = split if linear and row["axis"] == 0 else 1
        gather_grad = split if linear and row["axis"] == 1 else 1
        scale = blk.repeat * op.share
        original = TEFloat8(recipe).saves_original(blk, op) or (
            op.kind == "experts" and recipe != "te-delayed" and row["fc2"] and not row["recompute"]
            and any(f.kind != "matmul" and f.phase == "recompute" for f in op.flops))  # moe_act: fc2's input saved
        micro += scale * _module_casts(recipe, transpose, width, row["x"], row["g"], fused, gather_in, gather_grad,
                                       1 + row["recompute"], original)
        weights += scale * _quantize(sum(row["w"].values()), width, recipe, transpose, True, True)
    return micro, weights


def norms_of(blk: Any) -> set[str]:
    """Names of the outputs of ``blk``'s norms (the inputs TE's LayerNormLinear writes itself)."""
    return {o.output.name for o in blk.ops if o.kind in _NORMS}
