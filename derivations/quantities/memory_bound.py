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
* **The optimizer step**, once per step over the parameters this GPU updates (its 1/(d cp) shard under ZeRO 1-3):
  AdamW as ``torch.optim.AdamW(foreach=True)`` runs it (torchtitan's default) with ``--kernels eager`` (``_multi_tensor_adam``: eight
  foreach kernels, 21 fp32 element reads and writes per parameter), as a fused kernel otherwise (apex/Transformer
  Engine ``FusedAdam``, ``torch.optim.AdamW(fused=True)``: parameter, gradient and both moments read, three
  written, 7), plus the gradient-norm clipping (``clip_grad_norm_``: a norm read and a scaling, 3) and, with the
  fp32 master copy outside ZeRO-3, the copy into the 16-bit weights (Megatron-LM's
  ``_copy_main_params_to_model_params``: 4 + 2 bytes).
* **DeepSpeed's fp32 gradient accumulation** (``--grad-sync deepspeed``: its engine with the bf16 optimizer, as
  BigScience's Megatron-DeepSpeed trained BLOOM), each micro-batch: ``BF16_Optimizer.update_hp_grads`` casts every
  16-bit gradient to fp32 and adds it into the fp32 gradients (the pipeline engine calls it after each backward).
* **ZeRO-3's copies** (FSDP2), each micro-batch: each all-gather's output copied out into the parameters
  (``foreach_all_gather_copy_out``: ``split_with_sizes_copy``, one read and one write of every gathered 16-bit
  parameter), for the forward and again for the backward (``reshard_after_forward=True``), and the gradients
  copied into the reduce-scatter's input (``foreach_reduce``: ``_chunk_cat``, a read and a write).

>>> round(EAGER_EXTRA["rms_norm"]["forward"].nbytes(2))  # eager RMSNorm forward: 36 bytes/element, fused 4
32
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memderive.derivations.hardware import GPU
from memderive.derivations.memo import per_graph
from memderive.derivations.quantity import Evaluated
from memderive.symbolic.derive import evaluate
from memderive.symbolic.formula import Citation

__all__ = ["STREAM_TRIAD", "STREAM_SOURCE", "achievable_bandwidth", "Moves", "EAGER_EXTRA", "FUSED_MOVES", "fused_elementwise_bytes", "EAGER_SOURCE", "OPTIMIZER_SOURCE", "FSDP_SOURCE", "eager_extra_bytes",
           "optimizer_bytes", "zero3_copy_bytes", "adam_moves", "layout_int", "fp32_accumulation_bytes",
           "DEEPSPEED_SOURCE"]

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


def achievable_bandwidth(hw: GPU) -> float:
    """Bytes/s the memory-bound kernels of a training step move on ``hw``: its memory bandwidth (a cluster's own
    figure where it gives one) times the Triad's measured fraction of the rated for that GPU kind (``STREAM_TRIAD``),
    the rated bandwidth where none is measured.

    >>> from memderive.derivations.hardware import gpu
    >>> round(achievable_bandwidth(gpu("a100-80gb")) / 1e9)  # 2,039 GB/s x 1.70 / 2.039
    1700
    >>> round(achievable_bandwidth(gpu("l40s")) / 1e9)  # not measured: its rated 864 GB/s
    864
    """
    measured = STREAM_TRIAD.get(hw.name)
    return hw.memory_bandwidth * measured[0] / measured[1] if measured else float(hw.memory_bandwidth)



@dataclass(frozen=True, slots=True)
class Moves:
    """Element reads plus writes per element of the op's tensor: ``act`` in its own dtype, ``fp32`` upcast."""

    act: int
    fp32: int = 0

    def nbytes(self, act_bytes: Any) -> Any:
        return self.act * act_bytes + 4 * self.fp32


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
    ("rotary", "rotary"): {"forward": 2, "recompute": 2, "input-grad": 2},
    ("silu-glu", "silu"): {"forward": 3, "recompute": 3, "input-grad": 5},
    ("gelu", "gelu"): {"forward": 2, "recompute": 2, "input-grad": 3},
    ("add", "add"): {"forward": 3, "recompute": 3},
    ("dropout", "dropout"): {"forward": 2, "recompute": 2, "input-grad": 2},
    ("attention", "softmax"): {"forward": 2, "recompute": 2, "input-grad": 3},
    ("attention", "dropout"): {"forward": 2, "recompute": 2, "input-grad": 2},
    ("cross_entropy", "cross_entropy"): {"forward": 2, "input-grad": 2},
    # mixture of experts: each routed expert's SwiGLU as the dense MLP's; the router's fp32 softmax over E
    ("experts", "silu"): {"forward": 3, "recompute": 3, "input-grad": 5},
    ("router", "softmax"): {"forward": 2, "recompute": 2, "input-grad": 3},
}
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
    name = f.name.rsplit(" ", 1)[-1]
    if op.kind == "experts" and name == "glu" and f.operands[0].name.endswith(".weighted"):
        return TOKEN_MOVES.get(f.phase)
    return FUSED_MOVES.get((op.kind, name), {}).get(f.phase)


def _elementwise_bytes(graph: Any, moves_of: Any) -> Any:
    """Bytes over the graph's elementwise terms: each term's operand (its elements in its dtype, times the block's
    repeats and the op's share) times ``moves_of(block, op, term)`` (element reads plus writes, or a ``Moves``;
    None or 0: the term moves nothing)."""
    total: Any = 0
    for blk in graph.blocks:
        for op in blk.ops:
            for f in op.flops:
                moves = moves_of(blk, op, f) if f.kind == "elementwise" else None
                if not moves:
                    continue
                x = f.operands[0]
                per = moves.nbytes(x.dtype.nbytes) if isinstance(moves, Moves) else moves * x.dtype.nbytes
                total += blk.repeat * op.share * x.numel * per
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
    """HBM bytes of one optimizer step on one GPU (AdamW/Adam over all its parameters, none offloaded); 0 for the
    other optimizers, fine-tuning and offload (not modelled: said in the time model's note)."""
    o = est.options
    if (o.optimizer not in ("adamw", "adam") or o.offload or o.offload_params or o.lora_rank is not None
            or o.train_only or o.freeze_embeddings or o.base_dtype is not None):
        return 0
    state = 2 if o.precision == "pure" else 4  # torchtune's pure bf16 keeps the states 16-bit
    params = est.number("parameters_per_gpu")
    shard = -(-params // (o.dp * o.cp)) if o.zero >= 1 else params  # FSDP pads the last shard: the ceiling
    copy = 6 if o.precision == "master" and o.zero != 3 else 0  # fp32 main params into the 16-bit model's
    return shard * (adam_moves(o.kernels == "eager") * state + copy)


def zero3_copy_bytes(est: Evaluated) -> Any:
    """HBM bytes of one micro-batch's ZeRO-3 copies on one GPU: the forward's and the backward's all-gather outputs
    copied out into the parameters, and the gradients copied into the reduce-scatter's input, a read and a write of
    every 16-bit parameter the GPU gathers each (6 moves); 0 without ZeRO-3."""
    o = est.options
    if o.zero != 3 and not o.offload_params:  # FSDP's CPU offload gathers and reduces as ZeRO-3 does
        return 0
    width = 4 if o.dtype == "fp32" else 2
    return est.number("parameters_per_gpu") * 6 * width


def fp32_accumulation_bytes(est: Evaluated) -> Any:
    """HBM bytes of one micro-batch's fp32 gradient accumulation under ``--grad-sync deepspeed`` on one GPU:
    ``hp_grad.add_(lp.grad.to(fp32))``, the cast (r 2, w 4) and the add (r 4 + 4, w 4), 18 bytes per parameter of
    the first stage (``parameters_per_gpu``); 0 otherwise, and in fp32 (no 16-bit gradient to upcast). Under fp16
    (DeepSpeed's FP16 optimizer, no fp32 gradients) autograd adds each micro-batch's gradient into the 16-bit
    ``.grad`` (PyTorch's AccumulateGrad, ``variable.grad += new_grad``): r 2 + 2, w 2, 6 bytes per parameter."""
    o = est.options
    if o.grad_sync != "deepspeed" or o.dtype == "fp32":
        return 0
    return est.number("parameters_per_gpu") * (6 if o.dtype == "fp16" else 18)
