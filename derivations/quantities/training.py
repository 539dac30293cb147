"""Training quantities per GPU: parameters held, activations (one layer and all), model states, the
peak total and, when fine-tuning, trainable parameters and weights; what is offloaded to CPU memory.

The graph is transformed in a fixed order (``transformed``): fine-tuning (adapters, frozen weights)
first, then the layout strategies, then ``RequiresGrad`` (what frozen weights no longer need saved).

>>> from memderive.derivations.models.presets import preset
>>> from memderive.derivations.options import Options
>>> model = preset("gpt2")
>>> graph, quantities = train_quantities(model, Options(mode="train", batch=1, seq=8), model.graph())
>>> [q.key for q in quantities]
['parameters_per_gpu', 'activation_bytes_per_layer', 'activation_bytes', 'model_state_bytes', 'total_bytes']
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from memderive.derivations.memo import applied, per_graph
from memderive.derivations.models.model import Model
from memderive.derivations.options import PROFILES, TE_FP8, Options, derived, te_transposes
from memderive.derivations.quantities.activation_offload import (ACTIVATION_OFFLOAD_CITATION, activation_offload,
                                                                  activation_offload_note)
from memderive.derivations.quantities.expert_states import expert_split_states, expert_zero_ranks
from memderive.derivations.quantities.finetune import (INT8_CITATION, LORA_CITATION, QLORA_CITATION, dequantized_weight,
                                                       finetune_notes, finetune_states, finetune_steps)
from memderive.derivations.quantities.model_states import (ADAFACTOR_CITATION, CP_ZERO_CITATION, GRAD_BUFFER_CITATIONS,
                                                           MUON_CITATION, MUON_NOTE,
                                                           OFFLOAD_CITATION, OFFLOAD_HOST_NOTE, OPTIMIZERS,
                                                           PIPELINED_FSDP2_CITATION, PIPELINED_FSDP2_NOTE, ZERO_CITATION,
                                                           STEP_ONLY, offload_gradient_widths, offload_host_citation,
                                                           pipelined_fsdp2, state_widths, zero_ranks)
from memderive.derivations.quantities.precision_aware import PRECISION_AWARE_CITATION, PRECISION_AWARE_NOTE
from memderive.derivations.quantities.parameters import graph_parameters
from memderive.derivations.quantities.param_offload import (MTP_UNIT_NOTE, PARAM_OFFLOAD_CITATION, PARAM_OFFLOAD_NOTES,
                                                            gathered_weights, largest_kind, offload_params_states)
from memderive.derivations.quantity import Quantity
from memderive.symbolic.derive import Breakdown, Term, activations
from memderive.symbolic import dims
from memderive.symbolic.dims import b, h, s
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.expr import Max, const
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph
from memderive.symbolic.strategies import RequiresGrad
from memderive.symbolic.experts import expert_ops
from memderive.symbolic.te_float8 import (FSDP_PARAM_GATHER_SOURCE, PARAM_GATHER_SOURCE, te_weight_elements,
                                          workspace_terms)
from memderive.symbolic.simplify import factor_out

__all__ = ["train_quantities", "transformed", "one_layer", "KORTHIKANTI"]

KORTHIKANTI = Citation("korthikanti-2022", "Eq. 1, Table 2")
#: What total_bytes is: a sum, not a moment of the step.
SUM_NOTE = ("total_bytes is a sum: every model state and every saved activation counted at once; the step's "
            "high-water mark, a moment, is peak_bytes")


def _sbh_factored(expr: Any) -> Any:
    return factor_out(expr, s * b * h)


def transformed(base: Graph, opts: Options, model: Model, stage: str = "first") -> Graph:
    """Fine-tuning transforms (adapters, frozen weights) first, then the layout (``stage``: the pipeline stage
    seen), then what frozen weights no longer need saved (``RequiresGrad`` sees the final graph)."""
    steps = [*finetune_steps(model, opts), *opts.strategies(stage)]
    return applied(base, steps + ([RequiresGrad()] if opts.finetuning else []))  # once per graph and steps


def one_layer(graph: Graph, ignore: tuple[str, ...]) -> Breakdown:
    """Activations of one layer for one micro-batch (once per graph and profile)."""
    return _one_layer(graph, ignore=tuple(ignore))


@per_graph
def _one_layer(graph: Graph, ignore: tuple[str, ...]) -> Breakdown:
    layer = replace(graph.block("layer"), in_flight=const(1))
    return activations(replace(graph, blocks=(layer,)), ignore, per_repeat=True)


def _recompute_working_set(base: Graph, opts: Options, stored: Breakdown, ignore: tuple[str, ...],
                           model: Model, graph: Graph) -> Breakdown:
    """Backward rebuilds one layer at a time: at the peak, that layer's recomputed activations
    (what it would save without recompute, less what recompute already keeps) add to the stored ones; a uniform
    group of n layers (Megatron's --recompute-num-layers) is rebuilt at once from its one checkpoint, n layers'. Under
    core_attn's checkpoint of a fused kernel (``mcore_recompute``) the rerun writes a new output beside the one
    linear_proj keeps (random.py: ``outputs = ctx.run_function(*detached_inputs)``, alive for the kernel's backward);
    where linear_proj keeps only an 8-bit copy (Transformer Engine's delayed scaling) the rebuilt output is already
    in the layer's recomputed activations, not counted twice."""
    plain = one_layer(transformed(base, derived(opts, recompute="none"), model), ignore).total
    rerun = const(0)
    if opts.core_attn_checkpointed:
        layer = graph.block("layer").ops
        kept = {x.name for op in layer for x in op.saved}
        rerun = sum((op.share * op.output.nbytes for op in layer if op.kind == "flash-attention"
                     and op.output.name in kept), const(0))
    group = min(opts.recompute_layers, _chunk_layers(model, opts)) if opts.recompute == "full" and \
        opts.recompute_method == "uniform" else 1
    working = plain * group - stored.total + rerun
    if model.arch.hybrid is not None:  # the largest layer kind's, not the average layer's (each kind rebuilt whole)
        working = largest_kind(working)
    return Breakdown((Term("recompute/working_layer", working),), "bytes")


def _chunk_layers(model: Model, opts: Options) -> int:
    """The decoder layers of a model chunk, l/(p v): Megatron's TransformerBlock of one virtual stage, whose own
    layers recompute.py's ``checkpointed_forward`` counts (even stages: Options refuses the methods with others)."""
    return model.sizes["l"] // (opts.pp * (opts.virtual_stages or 1))


def _some_layers_checkpointed(base: Graph, opts: Options, acts: Breakdown, ignore: tuple[str, ...], model: Model,
                              stage: str) -> Breakdown:
    """The activations when Megatron's full recompute checkpoints some layers only (megatron/core/recompute.py
    ``checkpointed_forward``; ``acts``: every layer checkpointed, the graph's). Uniform groups of n layers keep one
    checkpoint per group: ceil(c/n) of a chunk's c layers (the last group shorter where n does not divide c, one group
    where n > c, as Megatron runs them), so the decoder layers' kept tensors ceil(c/n)/c of ``acts``'. Block
    checkpoints ``recompute_share``
    of each chunk's layers: those keep their checkpoint, the others save what they save without recompute (the
    same layout's graph without it, its layers as many and as many micro-batches in flight)."""
    layers = acts.where(lambda path: path.split("/")[0] == "layer")
    rest = acts.where(lambda path: path.split("/")[0] != "layer")
    if opts.recompute_method == "uniform":
        chunk = _chunk_layers(model, opts)
        return rest + layers.scaled(Fraction(-(-chunk // opts.recompute_layers), chunk))
    share = opts.recompute_share()
    plain = transformed(base, derived(opts, recompute="none"), model, stage)
    saved = _activations(plain, ignore_roles=tuple(ignore), blocks=("layer",))
    return rest + layers.scaled(share) + Breakdown(tuple(Term(f"not_checkpointed/{t.path}", t.expr * (1 - share))
                                                         for t in saved.terms), "bytes")


def _states(graph: Graph, opts: Options) -> tuple[Breakdown, Breakdown | None, Breakdown | None]:
    """GPU model states, what is offloaded or paged to CPU memory (None: nothing) and, when some
    parameters are frozen or the optimizer is paged, the trainable parameters."""
    if opts.offload_params:
        gpu, host = offload_params_states(graph, opts)
        return gpu, host, None
    if opts.finetuning or OPTIMIZERS[opts.optimizer].paged:
        states, cpu, trainable = finetune_states(graph, opts)
        return states, cpu if cpu.terms else None, trainable
    states, cpu = expert_split_states(graph, opts)  # routed experts' states over d/ep ranks (d without experts)
    return states, cpu, None


#: What the ZeRO-3 gathered-weight terms of the total model (``param_offload.gathered_weights``).
ZERO3_GATHERED_NOTE = (
    "ZeRO-3: beside the 1/d shards, the gathered weights of the root (embeddings, final norm, head: FSDP does not "
    "reshard the root after forward) and of the one layer computing (each layer its own unit, as torchtitan and "
    "torchtune wrap it); a next layer prefetched on another stream and a layer's unsharded gradient before its "
    "reduce-scatter are not counted")


def _step_only(path: str) -> bool:
    """A term that lives in the optimizer step only (``model_states.STEP_ONLY``), an expert part's too."""
    return path.rsplit("/", 1)[-1] in STEP_ONLY


def _held_states(states: Breakdown, acts: Breakdown) -> Breakdown:
    """The model states the sum holds beside ``acts`` (the activations and the other buffers of forward and
    backward). The fp32 copy of 16-bit gradients (``--grad-buffer param+fp32``) lives only in the optimizer step:
    Megatron-LM's train_step calls optimizer.zero_grad() (set_to_none) before the next forward, and the step runs
    after the backward has freed the activations; so it adds only what it exceeds them by: the sum is
    max(16-bit states + activations, states with the copy). So do the precision-aware optimizer's fp32 copies of
    its states (``quantities.precision_aware``)."""
    copy = states.where(_step_only)
    if not copy.terms:
        return states
    held = states.where(lambda path: not _step_only(path))
    step = Max(const(0), copy.total - acts.total)
    only_gradients = all(t.path.endswith("fp32_gradient_copy") for t in copy.terms)
    name = "fp32_gradient_copy" if only_gradients else "fp32_copies"  # the precision-aware optimizer's states too
    return held + Breakdown((Term(f"optimizer_step/{name}_over_activations", step),), "bytes")


def _states_citation(opts: Options) -> Citation:
    if opts.offload_params:
        return PARAM_OFFLOAD_CITATION
    also = ((ADAFACTOR_CITATION,) if OPTIMIZERS[opts.optimizer].factored else ()) + (
        (MUON_CITATION,) if OPTIMIZERS[opts.optimizer].muon else ()) + (
        (PIPELINED_FSDP2_CITATION,) if pipelined_fsdp2(opts.framework, opts.pp, opts.zero) else ()) + (
        (GRAD_BUFFER_CITATIONS[opts.grad_buffer],) if opts.grad_buffer != "param" else ()) + (
        (CP_ZERO_CITATION,) if opts.zero and opts.cp > 1 else ()) + (
        (PRECISION_AWARE_CITATION,) if opts.precision_aware_optimizer else ())
    return Citation(ZERO_CITATION.key, ZERO_CITATION.locus, also=also) if also else ZERO_CITATION


#: What each gradient buffer models (``--grad-buffer``; ``quantities.model_states``).
GRAD_BUFFER_NOTES = {
    "param": (),
    "fp32": ("gradients: an fp32 buffer, 4 bytes per parameter, accumulated over the micro-batches and reduced in "
             "fp32, sharded from ZeRO stage 2 (Megatron-LM's main_grad: arguments.py forces "
             "accumulate_allreduce_grads_in_fp32 under --bf16; DeepSpeed's BF16_Optimizer with grad_accum_dtype "
             "fp32); Megatron-LM's docs give 18 bytes per parameter, 6 + 12/d with the distributed optimizer",),
    "param+fp32": ("gradients: a 16-bit buffer and the optimizer's fp32 copy of it, made each step by "
                   "main_grad.float() (Megatron-LM under --fp16) and sharded with the optimizer states; "
                   "Megatron-LM's docs give 20 bytes per parameter, 4 + 16/d with the distributed optimizer; the copy "
                   "lives in the optimizer step only, so total_bytes adds only what it exceeds the activations by",),
}


def _states_notes(opts: Options) -> tuple[str, ...]:
    """What the gradients and the optimizer's states are, when they are not ZeRO's 2 and K bytes per parameter."""
    if opts.offload_params:
        return PARAM_OFFLOAD_NOTES + ((MTP_UNIT_NOTE,) if opts.mtp_layers else ())
    grads = GRAD_BUFFER_NOTES[opts.grad_buffer] + ((PRECISION_AWARE_NOTE,) if opts.precision_aware_optimizer else ()) + (
        (PIPELINED_FSDP2_NOTE,) if pipelined_fsdp2(opts.framework, opts.pp, opts.zero) else ())
    if OPTIMIZERS[opts.optimizer].muon:
        return grads + (MUON_NOTE,)
    if not OPTIMIZERS[opts.optimizer].factored:
        return grads
    return grads + ("Adafactor (torch.optim.Adafactor; transformers' Adafactor with beta1=None): fp32 second moments "
            "factored per stored matrix, rows + columns elements for an (m, n) weight, n for a vector, read off "
            "each parameter's shape; q, k and v as the implementation stores them (one fused matrix in "
            "Megatron-LM, q_proj/k_proj/v_proj in transformers); step counts on the host (torch) and "
            "transformers' per-tensor fp32 RMS scalar (4 B per parameter tensor) neglected",)


CP_NOTE = ("context parallelism: each rank holds s/cp tokens of every sequence; the peak adds the K/V chunks its "
           "ring attention receives, cp - 1 of them held until the attention returns (Transformer Engine's "
           "AttnFuncWithCPAndKVP2P keeps each ring step's in p2p_comm_buffers)")


def context_parallel_buffers(graph: Graph) -> Breakdown:
    """The K/V chunks ring attention holds during one layer's attention: the cp - 1 received from the other ranks
    of the ring, each the size of this rank's own k and v (Transformer Engine's ``p2p_comm_buffers``, one per ring
    step, live until the forward of the attention returns)."""
    layer = graph.block("layer")
    chunk = sum((x.nbytes for op in layer.ops if "attention" in op.kind for x in op.saved if x.role in ("k", "v")),
                const(0))
    return Breakdown((Term("context_parallel/kv_chunks", chunk * (dims.cp - 1)),), "bytes")


#: What ``--fp8-param-gather`` holds per recipe (``symbolic.te_float8.PARAM_GATHER_SOURCE``).
_FLOAT8_PARAMS = ("fp8 primary weights (--fp8-param-gather): each layer linear's weight a Float8Tensor, its 1-byte "
                  "_data in the distributed optimizer's uint8 parameter buffer, a 4-byte scale_inv per tensor, no "
                  "16-bit copy; the norms, biases, embedding and output layer 16-bit; fp32 main params and the "
                  "gradient buffer as before")
PARAM_GATHER_NOTES = {
    "te-delayed": _FLOAT8_PARAMS + " (and the delayed-scaling amax history)",
    "te-current": _FLOAT8_PARAMS,
    "te-mxfp8": ("fp8 primary weights (--fp8-param-gather, with Megatron-Bridge's reuse_grad_buf_for_mxfp8_param_ag): "
                 "each layer linear's weight an MXFP8Tensor of its own, row- and column-wise data and a 1-byte scale "
                 "per 32 elements each, no 16-bit copy; its 16-bit parameter buffer a view of the gradient buffer "
                 "(nothing beside it); the norms, biases, embedding and output layer 16-bit; fp32 main params and the "
                 "gradient buffer as before"),
}


def _primary_shards(opts: Options) -> tuple[Any, Any]:
    """The ranks Megatron-FSDP shards the layers' linear weights over, the routed experts' over theirs
    (``zero_ranks``, ``expert_zero_ranks``), under ``--fp8-param-gather --zero 3``; 1 and 1 otherwise (the
    distributed optimizer keeps the weights whole)."""
    return (zero_ranks(opts.cp), expert_zero_ranks(opts)) if opts.fsdp_fp8_params else (1, 1)


def fp8_primary_weights(states: Breakdown, graph: Graph, opts: Options) -> Breakdown:
    """``states`` with the layers' linear weights taken out of the 16-bit weights under ``--fp8-param-gather`` (their
    8-bit tensors are ``te_fp8_buffers``' terms): ``model_states/weights`` less the dense linears' elements,
    ``model_states/experts/weights`` less the routed experts', each times the weights' width, over the ranks that
    shard them (``_primary_shards``: none under the distributed optimizer, --zero 1; Megatron-FSDP's under --zero
    3)."""
    if not opts.fp8_param_gather:
        return states
    width = state_widths(opts.dtype, opts.optimizer, opts.precision)[0]
    routed = set(expert_ops(graph))
    dense, experts = _primary_shards(opts)
    fp8 = {"model_states/weights": te_weight_elements(graph, lambda p: p not in routed) / dense,
           "model_states/experts/weights": te_weight_elements(graph, lambda p: p in routed) / experts}
    return Breakdown(tuple(Term(t.path, t.expr - width * fp8[t.path]) if t.path in fp8 else t
                           for t in states.terms), "bytes")


def fp8_gathered_fewer(graph: Graph, opts: Options) -> Any:
    """Under ``--fp8-param-gather --zero 3`` (Megatron-FSDP, ``FSDP_PARAM_GATHER_SOURCE``), a function of a layer
    block: the bytes its gathered weights hold fewer than 16 bits each, its Transformer Engine linears' weights
    gathered in 8 bits (and, where only TN fp8 GEMMs run, the transpose the backward makes beside each, released with
    the bucket: 0 fewer); None otherwise."""
    if not opts.fsdp_fp8_params:
        return None
    width = state_widths(opts.dtype, opts.optimizer, opts.precision)[0]
    saved = width - 1 - (1 if te_transposes(opts.fp8, opts.gpu) else 0)

    def fewer(block: Any) -> Any:
        return saved * te_weight_elements(graph, lambda path: path.split("/", 1)[0] == block.name, per_repeat=True)
    return fewer


def te_fp8_buffers(graph: Graph, opts: Options) -> tuple[Breakdown, str]:
    """What Transformer Engine's fp8 keeps beside the model states under Megatron-Core (``--fp8 te-*``): each
    layer linear's cached 8-bit weight (and, on Hopper and Ada, its transpose) and, under delayed scaling, its
    amax history and scales (``symbolic.te_float8.workspace_terms``), persistent across micro-batches and steps,
    whole per tensor-parallel rank (not sharded by the distributed optimizer, nor by ZeRO-3's Megatron-FSDP:
    ``te_float8.workspace_terms``); under ``--fp8-param-gather`` the weights themselves in 8 bits, whole under the
    distributed optimizer, sharded under Megatron-FSDP (--zero 3: no workspace); and the note that says so."""
    transpose = te_transposes(opts.fp8, opts.gpu)
    if opts.fsdp_fp8_params:  # Megatron-FSDP: 1/ranks of each weight's 8-bit data
        terms = workspace_terms(graph, opts.fp8, transpose, shards=_primary_shards(opts))
        terms = [(path.replace("/weight_workspace", "/fp8_weight_shard"), expr) for path, expr in terms]
        return Breakdown(tuple(Term(f"weights/te_fp8/{path}", expr) for path, expr in terms), "bytes"), (
            "fp8 primary weights under Megatron-FSDP (--fp8-param-gather --zero 3): each layer linear's weight a "
            "Float8Tensor, 1/(d cp) of its 1-byte data in the sharded uint8 model-weight buffer (the routed "
            "experts' over their expert data-parallel ranks) and a 4-byte scale_inv per tensor, no 16-bit copy and "
            "no cached workspace; a layer's weights gathered in 8 bits while it runs"
            + (", a transpose made beside each for the backward" if transpose else "")
            + ", both released after it (keep_fp8_transpose_cache False); the norms, embedding and output layer "
            "16-bit" + ("; the delayed-scaling amax history whole" if opts.fp8 == "te-delayed" else "")
            + f" ({FSDP_PARAM_GATHER_SOURCE})")
    terms = workspace_terms(graph, opts.fp8, transpose)
    if opts.fp8_param_gather:  # the same bytes, held as the weights themselves
        terms = [(path.replace("/weight_workspace", "/fp8_weight"), expr) for path, expr in terms]
        return Breakdown(tuple(Term(f"weights/te_fp8/{path}", expr) for path, expr in terms), "bytes"), (
            PARAM_GATHER_NOTES[opts.fp8] + (", a transposed copy beside each (post_all_gather_processing: Hopper "
                                            "and Ada run only TN fp8 GEMMs; no --gpu counts as Hopper)"
                                            if transpose else "") + f" ({PARAM_GATHER_SOURCE})")
    note = (f"fp8 ({opts.fp8}): Transformer Engine's 8-bit weight workspaces cached across micro-batches "
            "(Megatron-Core passes is_first_microbatch)"
            + (", a transposed copy beside each (Hopper and Ada run only TN fp8 GEMMs; no --gpu counts as Hopper)"
               if transpose else "")
            + (", and the delayed-scaling amax history (Megatron-Core's fp8_amax_history_len 1)"
               if opts.fp8 == "te-delayed" else "") + ", whole per tensor-parallel rank"
            + (" (under ZeRO-3 too: Megatron-FSDP is not torch's FSDP2, for which TE would not cache, module/linear.py "
               "L1958 is_fsdp2; the weights are cast once per step, as the time counts)" if opts.zero == 3 else ""))
    return Breakdown(tuple(Term(f"weights/te_fp8/{path}", expr) for path, expr in terms), "bytes"), note


_activations = per_graph(activations)


def _offloaded(cpu: Breakdown, rel: Any, opts: Options) -> Quantity:
    """``offloaded_bytes`` under ``--offload``, its title naming the host gradients' dtype."""
    width = offload_gradient_widths(opts.dtype, opts.precision, opts.zero)[0]
    grads = "fp32" if width == dtype("fp32").nbytes else opts.dtype
    note = OFFLOAD_HOST_NOTE if opts.precision != "pure" else (
        "--offload under --precision pure: no fp32 copy, the gradients on the host in the weights' dtype")
    buffer = ", 16-bit parameter buffer" if opts.zero < 3 else ""
    return Quantity("offloaded_bytes", f"Gradients ({grads}){buffer} and optimizer states offloaded to CPU memory "
                    "(ZeRO-Offload)", cpu, rel, offload_host_citation(opts.zero), (note,))


def train_quantities(model: Model, opts: Options, base: Graph, stage: str = "first") -> tuple[Graph, list[Quantity]]:
    """The transformed graph and the training quantities per GPU of pipeline stage ``stage`` (``base``: the
    untransformed graph)."""
    graph = transformed(base, opts, model, stage)
    ignore, why = PROFILES[opts.profile]
    rel = graph.relations
    states, cpu, trainable = _states(graph, opts)
    states = fp8_primary_weights(states, graph, opts)
    acts = _activations(graph, ignore_roles=tuple(ignore))
    per_layer = one_layer(graph, ignore)
    assumptions = graph.assumptions + (f"activation profile {opts.profile}: {why}",) + finetune_notes(opts)
    act_cite = KORTHIKANTI
    if opts.compile:  # what torch.compile's partitioner saves instead
        # lazy: the partitioner's model (symbolic.compile_partition), for --compile only (~2% of a cold estimate)
        from memderive.derivations.quantities.compiled import COMPILE_CITATION, COMPILE_NOTES, compiled_activations

        acts, per_layer = compiled_activations(graph, opts, model)
        act_cite, assumptions = COMPILE_CITATION, assumptions + COMPILE_NOTES
    if opts.recompute == "full" and (opts.recompute_method, opts.recompute_layers) != ("uniform", 1):
        acts = _some_layers_checkpointed(base, opts, acts, ignore, model, stage)
        assumptions += (f"full recompute, Megatron's --recompute-method {opts.recompute_method} "
                        f"--recompute-num-layers {opts.recompute_layers}: " + (
                            "each group of layers keeps its input, rebuilt whole in backward"
                            if opts.recompute_method == "uniform" else
                            "that many layers of each model chunk keep their input, the others save everything"),)
    host_acts = None
    if opts.activation_offload_layers:  # TE's CPU offload: l - N layers' saved activations on the GPU at once
        acts, host_acts = activation_offload(acts, model.sizes["l"], opts.activation_offload_layers)
        assumptions += (activation_offload_note(model.sizes["l"], opts.activation_offload_layers),)
    total = acts + dequantized_weight(graph, opts)
    if opts.recompute != "none":
        total += _recompute_working_set(base, opts, per_layer, ignore, model, graph)
        assumptions += ("recompute: the peak adds one layer's activations rebuilt in backward",)
    if opts.cp > 1:
        total += context_parallel_buffers(graph)
        assumptions += (CP_NOTE,)
    if opts.fp8 in TE_FP8:
        buffers, note = te_fp8_buffers(graph, opts)
        total += buffers
        assumptions += (note,)
    # FSDP2 under pipeline stages: the stage held whole (not modelled with --offload-params: the gathered root and layer)
    whole = pipelined_fsdp2(opts.framework, opts.pp, opts.zero) and not opts.offload_params
    if opts.zero == 3 and not opts.offload_params and opts.base_dtype is None and not whole:
        total += gathered_weights(graph, state_widths(opts.dtype, opts.optimizer, opts.precision)[0], "zero3",
                                  fewer=fp8_gathered_fewer(graph, opts))
        assumptions += (ZERO3_GATHERED_NOTE,) + ((MTP_UNIT_NOTE,) if opts.mtp_layers else ())
    total = _held_states(states, total) + total
    if opts.overhead_bytes:
        total += Breakdown((Term("overhead", const(opts.overhead_bytes)),), "bytes")
    cite = QLORA_CITATION if opts.base_dtype == "nf4" else INT8_CITATION if opts.base_dtype == "int8" else None
    weights = states.where(lambda path: path.startswith("model_states/weights"))
    tuned = [] if trainable is None else [
        Quantity("trainable_parameters", "Trainable parameters per GPU", trainable, rel, LORA_CITATION),
        Quantity("weight_bytes", "Weights per GPU", weights, rel, cite, assumptions)]
    offloaded = [] if cpu is None else [
        Quantity("offloaded_bytes", "Parameters, gradients and optimizer states in CPU memory (FSDP CPU offload)",
                 cpu, rel, PARAM_OFFLOAD_CITATION, PARAM_OFFLOAD_NOTES) if opts.offload_params else
        _offloaded(cpu, rel, opts) if opts.offload else
        Quantity("offloaded_bytes", "Gradients and optimizer states offloaded (or paged) to CPU memory", cpu, rel,
                 OFFLOAD_CITATION)]
    if host_acts is not None:
        offloaded.append(Quantity("offloaded_activation_bytes", "Saved activations offloaded to CPU memory "
                                  "(Megatron-Core CPU activation offloading)", host_acts, rel,
                                  ACTIVATION_OFFLOAD_CITATION))
    return graph, [
        Quantity("parameters_per_gpu", "Parameters held by one GPU" if opts.zero < 3 or whole else
                 "Parameters of one GPU's model shard (ZeRO-3 stores 1/d of them, gathered layer by layer)",
                 graph_parameters(graph), rel),
        *tuned,
        Quantity("activation_bytes_per_layer", "Activation memory per layer", per_layer, rel, act_cite,
                 assumptions, form=_sbh_factored),
        Quantity("activation_bytes", "Activation memory per GPU", acts, rel, act_cite, assumptions),
        Quantity("model_state_bytes", "Model states per GPU", states, rel, _states_citation(opts),
                 _states_notes(opts)),
        Quantity("total_bytes", "Training memory per GPU (sum of model states and saved activations)", total, rel,
                 None, assumptions + (SUM_NOTE,)),
        *offloaded,
    ]
