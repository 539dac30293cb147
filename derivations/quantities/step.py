"""The step timeline of an estimate: its recipe read off the options, its peak as a quantity.

``step_recipe`` says how a step holds model states and updates them (``symbolic.timeline.StepRecipe``)
for these options: 16-bit weights and gradients with an fp32 master copy and fp32 AdamW states under
``--dtype bf16``/``fp16`` (Megatron-LM's ``Float16OptimizerWithFloat16Params``), fp32 everything under
``--dtype fp32``; under ``--precision pure`` no master and torch's optimizer states in the weights' dtype
(torchtune's ``dtype: bf16``); with ``--optimizer-in-backward`` each parameter is updated from its
post-accumulate-grad hook and its gradient freed at once (torchtune's ``optimizer_in_bwd``); ZeRO-1 shards the master copy and the optimizer states over the d ranks; torch's
foreach AdamW (its default on CUDA) makes one state-sized temporary per parameter in the update;
``--loss-chunks N`` (under ``--implementation hf``) runs the output layer and the loss per chunk of the
sequence, as torchtune's ``CEWithChunkedOutputLoss`` (``symbolic.hf_programs.chunked_loss``).
``peak_bytes`` is the high-water mark of allocated memory, what ``torch.cuda.max_memory_allocated``
reports after the step (each block rounded up to 512 bytes by the CUDA caching allocator); the
``total_bytes`` of ``quantities.training`` stays the sum of model states and saved activations.

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("gpt2", mode="train", batch=1, seq=1024)
>>> t = timeline_of(e)
>>> t.peak_at, t.peak_bytes < e.number("total_bytes") + 2 * 2**30
('optimizer step', True)
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from memderive.derivations.memo import Keyed
from memderive.derivations.options import TE_FP8, Options
from memderive.derivations.quantities.model_states import OPTIMIZERS, master_bytes, zero_ranks
from memderive.derivations.quantity import Quantity
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.formula import Citation
from memderive.symbolic.timeline import StepRecipe, Timeline, step_timeline

__all__ = ["step_recipe", "not_covered", "runs_calls", "timeline_of", "peak_quantity", "peak_citation", "ALLOCATOR_BLOCK",
           "PEAK_CITATION"]

#: The CUDA caching allocator rounds every allocation up to a multiple of 512 bytes
#: (``c10/cuda/CUDACachingAllocator.cpp``: ``kMinBlockSize = 512``, ``round_size``).
ALLOCATOR_BLOCK = {"cuda": 512, "cpu": 1}
PEAK_CITATION = Citation("pytorch-autograd-engine", "the node order, validate_outputs, gradient accumulation", also=(
    Citation("pytorch-derivatives", "each node's saved tensors and backward"),
    Citation("pytorch-adam", "_multi_tensor_adam: exp_avg_sq_sqrt"),
    Citation("pytorch-caching-allocator", "kMinBlockSize = 512")))
#: The code each implementation's calls are read off (``symbolic.hf_programs``), by family.
PROGRAM_CITATIONS = {"llama": Citation("transformers-llama", "LlamaRMSNorm, LlamaAttention, LlamaMLP, apply_rotary_pos_emb"),
                     "gpt": Citation("transformers-gpt2", "GPT2Attention, GPT2MLP, Conv1D")}
LOSS_CITATION = Citation("transformers-loss-utils", "ForCausalLMLoss")
MASTER_CITATION = Citation("megatron-fp16-optimizer", "_copy_model_grads_to_main_grads")
#: How many state-sized temporaries each optimizer's update makes per parameter (torch's foreach AdamW:
#: ``exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs)``; SGD with momentum updates in place;
#: bitsandbytes' 8-bit Adam is one fused kernel).
UPDATE_TEMPORARIES = {"adamw": 1, "adam": 1, "adam-8bit": 0, "sgd-momentum": 0, "sgd": 0}
STATE_DTYPES = {"adamw": ("fp32", "fp32"), "adam": ("fp32", "fp32"), "adam-8bit": ("int8", "int8"),
                "sgd-momentum": ("fp32",), "sgd": ()}


def not_covered(opts: Options) -> str | None:
    """Why the step timeline does not describe these options (None: it does)."""
    reasons = [(opts.pp > 1, "pipeline stages (micro-batches in flight)"), (opts.zero >= 2, f"ZeRO stage {opts.zero}"),
               (opts.offload, "ZeRO-Offload"), (opts.offload_params, "FSDP parameter offload"), (opts.recompute not in ("none", "full") or opts.recompute == "full" and opts.implementation_kind != "hf",
                f"{opts.recompute} recompute" + (" outside --implementation hf" if opts.recompute == "full" else "")),
               (opts.base_dtype in ("nf4", "int8"), f"a {opts.base_dtype} base"), (opts.ep > 1, "expert parallelism"),
               (opts.optimizer not in UPDATE_TEMPORARIES, f"the {opts.optimizer} optimizer ("
                + ("factored states and their update temporaries" if opts.optimizer == "adafactor"
                   else "states paged to the CPU") + ")"),
               (opts.precision == "autocast", "torch.autocast (the 16-bit casts are not ops of the graph yet)"),
               (opts.loss_chunks > 1 and opts.implementation_kind != "hf",
                "chunked cross-entropy outside --implementation hf (the loss is one fused call there)"),
               (opts.loss_chunks > 1 and opts.seq is not None and opts.seq % opts.loss_chunks != 0,
                f"chunked cross-entropy over {opts.seq} tokens in {opts.loss_chunks} chunks of unequal size"),
               (opts.compile, "torch.compile (the partitioned graphs' recompute in backward)"),
               (opts.grad_buffer != "param", f"--grad-buffer {opts.grad_buffer} (Megatron-LM's gradient buffers)"),
               (opts.precision_aware_optimizer, "Megatron-Core's precision-aware optimizer"),
               (opts.fp8 in TE_FP8, f"--fp8 {opts.fp8} (Transformer Engine's weight workspaces)")]
    missing = [why for flag, why in reasons if flag]
    return None if not missing else "the step timeline does not model " + ", ".join(missing)


def step_recipe(opts: Options, values: Any, device: str = "cuda") -> StepRecipe:
    """The recipe of ``opts`` (``values`` binds d for ZeRO-1's shards): the weights' dtype, a master copy
    and the states' dtypes by ``--precision`` (``quantities.model_states``: under ``pure`` torch's optimizers
    keep their states in the weights' dtype), the update in backward by ``--optimizer-in-backward``."""
    weight = dtype("fp32" if opts.precision == "autocast" else opts.dtype)
    master = dtype("fp32") if master_bytes(opts.dtype, opts.precision) else None
    like = OPTIMIZERS[opts.optimizer].like_param and opts.precision == "pure"
    states = tuple(weight if like else dtype(x) for x in STATE_DTYPES[opts.optimizer])
    shard = int(zero_ranks(opts.cp).evaluate(values)) if opts.zero >= 1 else 1
    fused = opts.optimizer_impl == "fused"  # torch keeps the step counts of fused Adam on the device
    return StepRecipe(weight=weight, master=master, states=states, step_scalars=(device == "cpu" or fused)
                      and bool(states), update=opts.optimizer_impl, temporaries=UPDATE_TEMPORARIES[opts.optimizer],
                      in_backward=opts.optimizer_in_backward, granularity=ALLOCATOR_BLOCK[device],
                      state_shards=shard, recompute=opts.recompute == "full")


def timeline_of(est: Any, device: str = "cuda") -> Timeline:
    """The step timeline of a training estimate (memoized per structure and values)."""
    return _timeline(Keyed(_key(est, device), (est, device)))


def _key(est: Any, device: str) -> tuple:
    return (repr(est.model), est.options, tuple(sorted((str(k), v) for k, v in est.values.items())), device)


@lru_cache(maxsize=64)
def _timeline(item: Keyed) -> Timeline:
    est, device = item.value
    return step_timeline(est.graph, est.values, step_recipe(est.options, est.values, device), est.options.timeline)


def runs_calls(graph: Any) -> bool:
    """Whether the graph's ops run their ATen calls one by one (``symbolic.hf_programs``: transformers'
    LLaMA-style and GPT-2 code), rather than as one fused call each."""
    return any(op.program for blk in graph.blocks for op in blk.ops)


def peak_citation(est: Any, recipe: StepRecipe) -> Citation:
    """What the peak rests on: autograd, the update, the allocator; transformers' code when the graph runs
    it call by call; Megatron-LM's gradient copy when there is an fp32 master copy."""
    extra: list[Citation] = []
    if runs_calls(est.graph):
        family = getattr(est.model.arch, "family", "")
        extra += [PROGRAM_CITATIONS.get(family, PROGRAM_CITATIONS["llama"]), LOSS_CITATION]
    if recipe.master is not None:
        extra.append(MASTER_CITATION)
    if est.graph.float8:
        extra += [Citation("torchao-float8", "matmul_with_hp_or_float8_args: the casts and scaled matmuls"),
                  Citation("torchtitan-float8", "linears whose dims divide by 16")]
    return Citation(PEAK_CITATION.key, PEAK_CITATION.locus, also=(*PEAK_CITATION.also, *extra))


def peak_quantity(est: Any, timeline: Timeline) -> Quantity:
    """``peak_bytes``: the tensors alive at the step's high-water mark, one term per (what, op, tensor)
    (memoized with the timeline: one estimate's peak is one object)."""
    return _peak(Keyed(_key(est, "cuda"), (est, timeline)))


@lru_cache(maxsize=64)
def _peak(item: Keyed) -> Quantity:
    est, timeline = item.value
    notes = (f"the high-water mark of allocated memory during one training step, at {timeline.peak_at}",
             "allocated memory as torch.cuda.max_memory_allocated counts it: every tensor, each rounded up to "
             "512 bytes by the CUDA caching allocator; no CUDA context, workspaces or allocator reserve",
             "the step: forward with the loss, loss.backward(), the optimizer step, zero_grad(set_to_none=True)")
    return Quantity("peak_bytes", "Peak allocated memory per GPU (high-water mark of the step)",
                    timeline.live_at_peak, est.graph.relations,
                    peak_citation(est, step_recipe(est.options, est.values)), notes)
