"""Model states per GPU: weights, gradients and optimizer states, with ZeRO sharding.

Rajbhandari et al. 2020 (ZeRO, arXiv:1910.02054 §3.1, §5): mixed-precision Adam keeps 2 bytes of
16-bit weights, 2 of gradients and K = 12 of optimizer states (fp32 master weights, momentum and
variance) per parameter: 16 bytes. ZeRO stage 1 shards the optimizer states over the d
data-parallel ranks, stage 2 the gradients too, stage 3 the weights too.

The precision recipe (``--precision``) says which copies exist. ``master`` (ZeRO's accounting; the copies
of Megatron-LM's ``Float16OptimizerWithFloat16Params`` and DeepSpeed's optimizers): 16-bit weights and
gradients, an fp32 master copy and fp32 states. ``pure`` (torchtune's default, ``dtype: bf16``): 16-bit weights and gradients and
no master; torch's optimizers make their states ``zeros_like(param)``, so in the weights' dtype
(bitsandbytes' 8-bit and 32-bit states keep theirs). ``autocast`` (``torch.autocast``, the HF Trainer's
``bf16=True``): fp32 weights, fp32 gradients (AccumulateGrad casts to the leaf's dtype) and fp32 states;
the 16-bit casts are activations, not model states.

The gradient buffer (``--grad-buffer``) says where the optimizer reads its gradients from under ``master``.
``param`` (the default, ZeRO's accounting of 16 bytes): in the weights' dtype. ``fp32``: an fp32 buffer the
backward accumulates into and the data-parallel reduction runs on: Megatron-LM's ``main_grad``, which
``megatron/training/arguments.py`` forces under ``--bf16`` (``accumulate_allreduce_grads_in_fp32 = True``;
``distributed_data_parallel.py``: ``grad_dtype = torch.float if self.ddp_config.grad_reduce_in_fp32 else
param.dtype``), and DeepSpeed's ``BF16_Optimizer`` (``fp32_groups_gradients_flat``, the whole model's size in
``grad_acc_dtype``); 2 + 4 + 12 = 18 bytes. ``param+fp32``: a 16-bit buffer and the optimizer's fp32 copy of
it, ``main_param.grad = model_param.main_grad.float()`` (Megatron-LM under ``--fp16``, where ``.float()``
copies; of an fp32 buffer it is the buffer itself); 2 + 2 + 4 + 12 = 20 bytes. The copy is the optimizer's:
ZeRO shards it with the optimizer states, as Megatron-LM's distributed optimizer copies only its shard
(docs/source/distrib_optimizer.md: 4 + 16/d with fp16 gradients, 6 + 12/d with fp32 ones).

>>> from memderive.symbolic.dims import Psi, d
>>> [states_breakdown(Psi, "bf16", "adamw", zero, d).total for zero in range(4)]
[16*Psi, 4*Psi + 12*Psi/d, 2*Psi + 14*Psi/d, 16*Psi/d]
>>> [states_breakdown(Psi, "bf16", "adamw", 0, d, precision=p).total for p in PRECISIONS]
[16*Psi, 16*Psi, 8*Psi]
>>> [states_breakdown(Psi, "bf16", "adamw", 1, d, grad_buffer=g).total for g in GRAD_BUFFERS]
[4*Psi + 12*Psi/d, 6*Psi + 12*Psi/d, 4*Psi + 16*Psi/d]

FSDP2 under torch.distributed.pipelining (torchtitan with pipeline stages, ZeRO 2-3; ``PIPELINED_FSDP2_CITATION``)
holds the stage's 16-bit weights whole and its gradients whole in the fp32 reduce dtype until the step's one
reduce-scatter; only the fp32 master and the optimizer states stay 1/d:

>>> [states_breakdown(Psi, "bf16", "adamw", zero, d, whole=True).total for zero in (2, 3)]
[6*Psi + 12*Psi/d, 6*Psi + 12*Psi/d]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memderive.derivations.choices import GRAD_BUFFERS, OPTIMIZERS, PRECISIONS, Optimizer
from memderive.derivations.quantities.precision_aware import PrecisionAware
from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.expr import Expr, Max, prod, total
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.tensor import Tensor
from memderive.symbolic import dims

__all__ = ["PRECISIONS", "GRAD_BUFFERS", "GRAD_BUFFER_CITATIONS", "OPTIMIZERS", "state_widths", "reduced_gradient_width", "master_bytes", "Optimizer", "states_breakdown", "offloaded_breakdown", "zero_ranks", "CP_ZERO_CITATION", "optimizer_state_bytes",
           "factored_state_elements", "stored_parameters", "MUON_CITATION", "MUON_NOTE", "as_matrices", "muon_owned", "second_state_elements", "layer_wise_largest", "FACTORED_STATE_BYTES", "factored_state_bytes", "ZERO_CITATION", "OFFLOAD_CITATION", "ADAFACTOR_CITATION",
           "offload_host_citation", "OFFLOAD_HOST_NOTE", "offload_gradient_widths", "STEP_ONLY", "UNSCALED",
           "FSDP2_FRAMEWORKS", "PIPELINED_FSDP2_CITATION", "PIPELINED_FSDP2_NOTE", "pipelined_fsdp2", "zero_shards"]

ZERO_CITATION = Citation("rajbhandari-2020", "§3.1, §5, Figure 1")
#: The precision-aware optimizer's fp32 copies of its states not kept in fp32 (``quantities.precision_aware``).
UNSCALED = "model_states/fp32_unscaled_states"
#: The terms that live in the optimizer step only, after the backward has freed the activations (the last part of
#: a term's path; an expert part's too): the fp32 gradient copy and the unscaled states.
STEP_ONLY = ("fp32_gradient_copy", "fp32_unscaled_states")
#: ZeRO under context parallelism: the cp ranks of one data-parallel replica hold the same weights and reduce their
#: gradients together, so the shards are over d x cp (Megatron-LM's distributed optimizer over intra_dp_cp_group).
CP_ZERO_CITATION = Citation("megatron-optimizer-init", "get_megatron_optimizer: DistributedOptimizer's "
                            "data_parallel_group = intra_dp_cp_group")
#: Where each gradient buffer's bytes come from (Megatron-LM's table; the code that allocates them).
GRAD_BUFFER_CITATIONS = {
    "fp32": Citation("megatron-distrib-optimizer", "the bytes-per-parameter table: 18, 6 + 12/d", also=(
        Citation("megatron-arguments", "validate_args: if args.bf16, accumulate_allreduce_grads_in_fp32 = True"),
        Citation("megatron-ddp", "grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype"),
        Citation("deepspeed-bf16-optimizer", "fp32_groups_gradients_flat in grad_acc_dtype"))),
    "param+fp32": Citation("megatron-distrib-optimizer", "the bytes-per-parameter table: 20, 4 + 16/d", also=(
        Citation("megatron-fp16-optimizer", "_copy_model_grads_to_main_grads: main_param.grad = "
                 "model_param.main_grad.float()"),)),
}


ADAFACTOR_CITATION = Citation("shazeer-2018", "§3, Algorithm 4: row and column sums of the second moment per matrix",
                              also=(Citation("pytorch-adafactor", "_init_group: row_var, col_var, variance"),
                                    Citation("transformers-adafactor", "Adafactor.step: exp_avg_sq_row, "
                                             "exp_avg_sq_col, exp_avg_sq")))
#: Adafactor's states are fp32: the optimizer runs over the fp32 master copy under mixed precision
#: (torch's ``p.grad.new_zeros``), and transformers' casts 16-bit gradients to fp32 first (``grad.float()``).
FACTORED_STATE_BYTES = 4


def factored_state_bytes(param_dtype: str, precision: str = "master") -> int:
    """Bytes per element of Adafactor's factored second moments: fp32 (``FACTORED_STATE_BYTES``), but under
    ``--precision pure`` torch.optim.Adafactor runs over the 16-bit parameters themselves and makes its
    states ``p.grad.new_zeros(...)``, in the gradients' dtype. (transformers' Adafactor casts a 16-bit
    gradient to fp32 first and keeps fp32 states, 2 bytes more per element: ``tests/test_adafactor.py``
    measures both.)

    >>> factored_state_bytes("bf16"), factored_state_bytes("bf16", "pure"), factored_state_bytes("fp32", "pure")
    (4, 2, 4)
    """
    return dtype(param_dtype).nbytes if precision == "pure" else FACTORED_STATE_BYTES


def stored_parameters(op: Op) -> tuple[Tensor, ...]:
    """The parameter tensors of ``op`` as the model stores them: the parts a ``parameters`` kernel splits a
    fused weight into (transformers' ``q_proj``, ``k_proj``, ``v_proj`` of the graph's ``attn/qkv``), else
    the op's own."""
    split = next((k for k in op.program if k.kind == "parameters"), None)
    return split.outputs if split is not None else op.params


def _factored(shape: tuple[Expr, ...]) -> Expr:
    """Second-moment elements Adafactor keeps for one parameter of ``shape`` (torch.optim.Adafactor: a
    matrix's ``row_var`` of shape[:-1] and ``col_var`` of shape[:-2] + shape[-1:]; a vector's ``variance``
    whole). ``(m, n)``: m + n; ``(n,)``: n."""
    if len(shape) < 2:
        return prod(shape)
    lead = prod(shape[:-2])
    return lead * shape[-2] + lead * shape[-1]


def factored_state_elements(graph: Graph, keep: Callable[[Block, Op, Tensor], bool] | None = None) -> Expr:
    """Elements of Adafactor's second moments over the graph's parameters (those ``keep`` accepts), read
    off each stored parameter's shape.

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h, l
    >>> from memderive.symbolic.dtypes import dtype
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.linear("fc", bb.input, 4 * h, bias=True)
    >>> factored_state_elements(Graph("toy", (bb.build(repeat=l),)))  # rows 4h + columns h, the bias 4h
    9*h*l
    """
    parts = [blk.repeat * op.share * _factored(x.shape) for blk, op in graph.ops()
             for x in stored_parameters(op) if keep is None or keep(blk, op, x)]
    return total(parts)


#: Which parameters Megatron-Core's Muon owns: the 2-D ones that are not the embedding or the output layer (those carry
#: is_embedding_or_output_parameter); the rest (norms, biases, embedding, output layer) go to Adam, the scalar optimizer.
MUON_CITATION = Citation("megatron-muon", "get_megatron_muon_optimizer: linear_params = not "
                         "is_embedding_or_output_parameter and len(param.shape) == 2, else nonlinear_params (Adam: "
                         "muon_scalar_optimizer); muon_init_state_fn: momentum_buffer = zeros_like(p.data); "
                         "adam_init_state_fn: exp_avg, exp_avg_sq", also=(
                             Citation("megatron-language-module", "weight.is_embedding_or_output_parameter = True "
                                      "for embedding.word_embeddings and output_layer"),))


#: What ``--optimizer muon`` counts (``second_state_elements``), and how ``--zero 1`` shards it.
MUON_NOTE = (
    "Muon (Megatron-Core's TensorParallelMuon): an fp32 momentum for every 2-D weight but the embedding and the output "
    "layer (the routed experts' weights one matrix per expert), Adam's fp32 exp_avg and exp_avg_sq for the rest "
    "(norms, biases, embedding, output layer), fp32 main params for all under bf16; --zero 1 is its layer-wise "
    "distributed optimizer (dist_muon), which deals whole parameters to the data-parallel ranks (the routed experts' "
    "to the expert data-parallel ranks), main params and states with them, the 16-bit weights and the gradients "
    "whole; the code deals the parameters sorted by size in ping-pong order (shard_params), so the GPU counted is "
    "the busiest rank as far as its largest parameter: the mean rank's 1/d, or the largest parameter's main params "
    "and moments whole where that is more (layer_wise_busiest_rank: the embedding or output layer of a first or "
    "last stage); the few small parameters the deal adds to that rank, and its fp32 gradient copy of them under "
    "--grad-buffer param+fp32, not counted")


def as_matrices(op: Op, x: Tensor) -> tuple[Expr | int, Expr, Expr] | None:
    """``(count, rows, cols)``: parameter ``x`` of ``op`` as the whole matrices Megatron-Core holds, a routed
    experts' stacked (E, rows, cols) weight E of them (TEGroupedLinear's weight0..weightN), any other 2-D weight
    one; None for the rest: vectors, and a routed experts' (E, n) bias stack (E vectors, TEGroupedLinear's
    bias0..biasN).

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.linear("fc", bb.input, 4 * h, bias=True)
    >>> op = bb.build().ops[0]
    >>> [as_matrices(op, x) for x in op.params]  # the weight, the bias
    [(1, 4*h, h), None]
    """
    stacked = op.kind == "experts"
    if len(x.shape) != (3 if stacked else 2):
        return None
    return (x.shape[0], *x.shape[1:]) if stacked else (1, *x.shape)


def muon_owned(blk: Block, op: Op, x: Tensor) -> bool:
    """Whether Muon orthogonalizes parameter ``x`` of ``op`` (``MUON_CITATION``): a matrix (the routed experts' stacked
    (E, rows, cols) weights are E matrices: TEGroupedLinear's weight0..weightN), not the token embedding or the LM
    head (the head block's ``lm_head``).

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.linear("fc", bb.input, 4 * h, bias=True)
    >>> blk = bb.build(); op = blk.ops[0]
    >>> [muon_owned(blk, op, x) for x in op.params]  # the weight, the bias
    [True, False]
    """
    return as_matrices(op, x) is not None and op.kind != "embedding" and not (  # (E, n) bias stacks: Adam's
        blk.name == "head" and op.path == "lm_head")


def second_state_elements(graph: Graph, optimizer: str, keep: Callable[[Block, Op, Tensor], bool] | None = None) -> Expr | int:
    """Elements of the optimizer's states that depend on each parameter's shape, beyond its per-parameter bytes (the
    ``factored`` slot of ``states_breakdown``, 4 bytes each, the weights' dtype under ``pure``): Adafactor's
    factored second moments (``factored_state_elements``); under Muon, Adam's exp_avg_sq of the parameters Muon does
    not own (``muon_owned``: every parameter has a momentum, Muon's or Adam's exp_avg); 0 otherwise.

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h, l
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.linear("fc", bb.input, 4 * h, bias=True)
    >>> second_state_elements(Graph("toy", (bb.build(repeat=l),)), "muon")  # the bias, Adam's
    4*h*l
    """
    own = OPTIMIZERS[optimizer]
    if own.factored:
        return factored_state_elements(graph, keep)
    if not own.muon:
        return 0
    parts = [blk.repeat * op.share * prod(x.shape) for blk, op in graph.ops() for x in stored_parameters(op)
             if not muon_owned(blk, op, x) and (keep is None or keep(blk, op, x))]
    return total(parts)


def layer_wise_largest(graph: Graph, param_dtype: str, precision: str = "master",
                       keep: Callable[[Block, Op, Tensor], bool] | None = None) -> Expr:
    """The optimizer-state bytes (main params and moments) of the largest parameter ``keep`` accepts, whole: Megatron-
    Core's LayerWiseDistributedOptimizer deals whole parameters to the data-parallel ranks (``MUON_NOTE``), so the
    rank that gets it holds at least this much, whatever the mean. A routed experts' stacked weight is E parameters
    (TEGroupedLinear's weight0..weightN), one of them counted.

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h, l
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.linear("fc", bb.input, 4 * h, bias=True)
    >>> layer_wise_largest(Graph("toy", (bb.build(repeat=l),)), "bf16")  # the (4h, h) weight's 4 + 4 B, the bias's 4 + 8
    Max(48*h, 32*h**2)
    """
    own = optimizer_state_bytes("muon", param_dtype, precision)
    adam = factored_state_bytes(param_dtype, precision)
    sizes = [_whole_parameter(op, x) * (own + (0 if muon_owned(blk, op, x) else adam))
             for blk, op in graph.ops() for x in stored_parameters(op) if keep is None or keep(blk, op, x)]
    return Max(*sizes) if len(sizes) > 1 else total(sizes)


def _whole_parameter(op: Op, x: Tensor) -> Expr | int:
    """Elements of one of the whole parameters ``x`` holds (``as_matrices``: one expert's matrix of a stacked
    weight), ``x`` whole where it is no matrix."""
    matrices = as_matrices(op, x)
    return prod(x.shape) if matrices is None else prod(matrices[1:])


OFFLOAD_CITATION = Citation("ren-2021",
                            "§4.1: 16-bit parameters on the GPU; gradients, fp32 master weights and optimizer states on the CPU")
_OFFLOAD_GRADIENT_SOURCES = {
    "stage12": Citation("deepspeed-stage12-offload", "initialize_optimizer_states: single_partition_of_fp32_groups[i]"
                        ".grad = torch.zeros(partition_size[i], dtype=single_partition_of_fp32_groups[i].dtype, "
                        "device=self.device), self.device 'cpu' under cpu_offload; "
                        "async_inplace_copy_grad_to_fp32_buffer_from_gpu: src_tensor.to(master dtype); "
                        "param_buffer_of_bit16_for_cpu_offload_groups: a pinned 16-bit partition (0.17.0, #7309)"),
    "stage3": Citation("deepspeed-stage3-offload", "initialize_optimizer_states: fp32_partitioned_groups_flat[i].grad "
                       "= torch.zeros(num_elements, dtype=fp32_partitioned_groups_flat[0].dtype, device=self.device); "
                       "grad_partitions_flat_buffer in gradient_accumulation_dtype on self.device, the CPU under "
                       "offload_optimizer", also=(Citation("deepspeed-engine-dtypes", "get_data_types: grad_accum_dtype "
                                                           "= model_dtype under ZeRO unless set"),)),
}


def offload_host_citation(zero: int) -> Citation:
    """Where the host bytes of ``--offload`` come from: Ren et al.'s split, and DeepSpeed's ZeRO-Offload
    (``offload_optimizer: {device: cpu}``) code for the gradients it keeps on the CPU (``offload_gradient_widths``):
    stage_1_and_2.py for ZeRO 0-2, stage3.py (and the engine's gradient-accumulation dtype) for ZeRO-3."""
    code = _OFFLOAD_GRADIENT_SOURCES["stage3" if zero == 3 else "stage12"]
    return Citation(OFFLOAD_CITATION.key, "§4.1: gradients, fp32 master weights and optimizer states on the CPU",
                    also=(code,))


#: What ``offloaded_bytes`` models under ``--offload`` (``offload_gradient_widths``), and what it leaves out.
OFFLOAD_HOST_NOTE = (
    "--offload (DeepSpeed ZeRO-Offload, offload_optimizer device cpu): CPU memory holds this GPU's partition of the "
    "fp32 master weights and optimizer states and of the gradients, 1/d from ZeRO stage 1 on (one partition per rank "
    "in stages 1-2 alike); the gradients in fp32, 4 B per element (the fp32 partition's own .grad, the 16-bit GPU "
    "gradients copied in with .float()), and under ZeRO-3 also its 16-bit gradient partitions, in the model's dtype "
    "(grad_partitions_flat_buffer, on the CPU with offload_optimizer), under ZeRO 0-2 the pinned 16-bit copy of the "
    "partition the step casts into before the copy back (param_buffer_of_bit16_for_cpu_offload_groups, DeepSpeed "
    "0.17.0 on); not counted: the GPU's reduce buckets "
    "(reduce_bucket_size 16-bit elements, two under overlap_comm) and ZeRO 1-2's 16-bit CPU buffers for gradient "
    "accumulation over micro-batches (accumulated_grads_in_cpu)")


#: The frameworks whose data parallelism is FSDP2's ``fully_shard`` (``frameworks.py``): torchtitan, torchtune.
FSDP2_FRAMEWORKS = frozenset({"torchtitan", "torchtune"})

#: FSDP2 under torch.distributed.pipelining (PyTorch 2.13, the installed version): the stage runs every micro-batch's
#: backward with gradient sync and resharding after backward off, and reduce-scatters and reshards once, after the
#: last; without sync FSDP2 keeps each gradient unsharded, upcast to the reduce dtype and accumulated there; torchtitan
#: gives fully_shard reduce_dtype float32 and, with pipeline stages, reshard_after_forward False (its 'default').
PIPELINED_FSDP2_CITATION = Citation(
    "pytorch-pipelining-stage", "backward_maybe_with_nosync: an FSDPModule's set_reshard_after_backward(False), "
    "set_requires_gradient_sync(False) for every backward; perform_reduce_grad after the last: both True, "
    "post_backward", also=(
        Citation("pytorch-fsdp2", "_fsdp_param_group.py FSDPParamGroup.post_backward: `if not self.reduce_grads: if "
                 "self.reshard_after_backward: self.reshard()`, then to_accumulated_grad_if_needed; _fsdp_param.py "
                 "FSDPParam.to_accumulated_grad_if_needed: unsharded_accumulated_grad = unsharded_grad.to("
                 "self.reduce_dtype); accumulate_unsharded_grad_if_needed: += each later micro-batch's"),
        Citation("torchtitan-parallelize", "apply_fsdp: MixedPrecisionPolicy(param_dtype, reduce_dtype="
                 "training.mixed_precision_reduce, 'float32' by default); reshard_after_forward = not pp_enabled "
                 "under fsdp_reshard_after_forward 'default'")))
#: What ``states_breakdown(..., whole=True)`` counts (``pipelined_fsdp2``).
PIPELINED_FSDP2_NOTE = (
    "FSDP2 under pipeline stages (torch.distributed.pipelining, PyTorch 2.13): gradient sync and resharding after "
    "backward are off for every micro-batch, so the stage's gradients are held whole in the fp32 reduce dtype "
    "(torchtitan's mixed_precision_reduce), 4 B per parameter, and its gathered 16-bit weights stay whole until the "
    "one reduce-scatter after the last backward (ZeRO-3 too: resharded after a forward, gathered again for the "
    "backward and kept); the fp32 master weights and the optimizer states stay 1/d. Not counted: the 16-bit "
    "gradient of the layer in backward before it is added in. Torch versions before set_reshard_after_backward(False) "
    "(backward_maybe_with_nosync calling only set_requires_gradient_sync(last_backward)) held the gradients as here "
    "but resharded ZeRO-3's weights after each backward")


def pipelined_fsdp2(framework: str | None, pp: int, zero: int) -> bool:
    """Whether a stage's gradients and weights are held whole (``PIPELINED_FSDP2_CITATION``): FSDP2's ZeRO 2-3 under
    pipeline stages; torchtune runs none (``frameworks.py``), so torchtitan's.

    >>> pipelined_fsdp2("torchtitan", 8, 2), pipelined_fsdp2("torchtitan", 1, 3), pipelined_fsdp2("megatron", 8, 2)
    (True, False, False)
    """
    return framework in FSDP2_FRAMEWORKS and bool(pp > 1) and zero >= 2


def state_widths(param_dtype: str, optimizer: str, precision: str = "master") -> tuple[int, int, int]:
    """Bytes per parameter of the weights, the gradients and ZeRO's K (master copy included) under a
    precision recipe (see the module docstring).

    >>> [state_widths("bf16", "adamw", p) for p in PRECISIONS]
    [(2, 2, 12), (4, 4, 8), (2, 2, 4)]
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    width = dtype(param_dtype).nbytes
    if precision == "autocast":
        return 4, 4, optimizer_state_bytes(optimizer, "fp32")
    return width, width, optimizer_state_bytes(optimizer, param_dtype, precision)


def reduced_gradient_width(o: Any) -> int:
    """Bytes per element of the gradients one GPU reduces over the data-parallel ranks (``Options`` ``o``): the fp32
    ``main_grad`` buffer under ``--grad-buffer fp32`` with master weights, else ``state_widths``' gradient width.

    >>> from types import SimpleNamespace as O
    >>> reduced_gradient_width(O(dtype="bf16", optimizer="adamw", precision="master", grad_buffer="fp32"))
    4
    >>> reduced_gradient_width(O(dtype="bf16", optimizer="adamw", precision="master", grad_buffer="param+fp32"))
    2
    """
    if o.grad_buffer == "fp32" and o.precision == "master":
        return 4
    return state_widths(o.dtype, o.optimizer, o.precision)[1]


def zero_shards(zero: int, dp: Expr | int, whole: bool = False) -> tuple[Expr | int, Expr | int, Expr | int]:
    """The ranks ZeRO stage ``zero`` splits (weights, gradients, optimizer states) over, ``dp`` of them; ``whole``:
    FSDP2 under pipeline stages (``pipelined_fsdp2``), the weights and gradients unsharded, the states over dp.

    >>> zero_shards(2, 8), zero_shards(3, 8, whole=True)
    ((1, 8, 8), (1, 1, 8))
    """
    if whole:
        return 1, 1, dp
    return {0: (1, 1, 1), 1: (1, 1, dp), 2: (1, dp, dp), 3: (dp, dp, dp)}[zero]


def _terms(params: Expr, param_dtype: str, optimizer: str, zero: int, dp: Expr | int,
           factored: Expr | int = 0, precision: str = "master", grad_buffer: str = "param",
           aware: PrecisionAware | None = None, whole: bool = False) -> list[Term]:
    """Weights, gradients and optimizer states (ZeRO's K, master weights included, and Adafactor's
    ``factored`` second-moment elements), sharded per stage, under a ``precision`` recipe; the gradients
    in the ``grad_buffer``'s dtype, its fp32 copy sharded with the optimizer states. ``aware``: Megatron-Core's
    precision-aware optimizer (``quantities.precision_aware``): K its main params and moments, the step's fp32
    copies sharded with them. ``whole``: FSDP2 under pipeline stages, the weights and the fp32 gradients whole
    (``pipelined_fsdp2``)."""
    width, grad, k = state_widths(param_dtype, optimizer, precision)
    if grad_buffer not in GRAD_BUFFERS:
        raise ValueError(f"unknown gradient buffer {grad_buffer!r}; choose one of {', '.join(GRAD_BUFFERS)}")
    grad = 4 if grad_buffer == "fp32" or whole else grad  # whole: accumulated in the fp32 reduce dtype
    shard = zero_shards(zero, dp, whole)
    copy = [Term("model_states/fp32_gradient_copy", params * 4 / shard[2])] if grad_buffer == "param+fp32" else []
    if aware is not None:
        held = aware.widths(param_dtype, grad_buffer)
        k = held.master + held.moments
        copy = [Term(path, params * n / shard[2]) for path, n in (
            ("model_states/fp32_gradient_copy", held.copy), (UNSCALED, held.unscaled)) if n]
    return [Term("model_states/weights", params * width / shard[0]),
            Term("model_states/gradients", params * grad / shard[1]), *copy,
            Term("model_states/optimizer", (params * k + factored * factored_state_bytes(param_dtype, precision))
                 / shard[2])]


def states_breakdown(params: Expr, param_dtype: str, optimizer: str, zero: int, dp: Expr | int,
                     offload: bool = False, factored: Expr | int = 0, precision: str = "master",
                     grad_buffer: str = "param", aware: PrecisionAware | None = None, whole: bool = False) -> Breakdown:
    """Bytes of model states on one GPU for ``params`` parameters held by that GPU.

    16-bit ``param_dtype`` means mixed precision: 16-bit weights and gradients plus an fp32
    master copy counted with the optimizer states (ZeRO's K). With ``offload`` (ZeRO-Offload)
    the gradients and the optimizer states live in CPU memory: only the weights stay. ``factored``:
    the elements of Adafactor's second moments (``factored_state_elements``), fp32. ``precision``: the
    recipe (``PRECISIONS``). ``grad_buffer``: the gradients' buffer (``GRAD_BUFFERS``). ``aware``: Megatron-Core's
    precision-aware optimizer (``quantities.precision_aware``). ``whole``: the stage's weights and fp32
    gradients whole (``pipelined_fsdp2``).

    >>> from memderive.symbolic.dims import Psi, d
    >>> states_breakdown(Psi, "bf16", "adam", 1, d, aware=PrecisionAware("bf16")).total  # 2 + 2 + (2 + 4 + 8)/d
    4*Psi + 14*Psi/d
    """
    terms = _terms(params, param_dtype, optimizer, zero, dp, factored, precision, grad_buffer, aware, whole)
    return Breakdown(tuple(terms[:1] if offload else terms), "bytes")


def offload_gradient_widths(param_dtype: str, precision: str, zero: int) -> tuple[int, int]:
    """Bytes per element of the gradients ZeRO-Offload keeps in CPU memory (``offload_host_citation``): the
    optimizer's gradient and, under ZeRO-3, the 16-bit partition the reduce-scatter writes (0 otherwise).

    DeepSpeed gives its fp32 partition (the master copy, ``.float()`` of the weights, an fp32 clone of fp32 ones) a
    gradient of the partition's own dtype on the CPU; ZeRO-3 also keeps ``grad_partitions_flat_buffer`` there, in
    the model's dtype (the weights': 16-bit, fp32 under ``autocast``). Under ``pure`` there is no fp32 copy: the
    optimizer's gradient is in the weights' dtype, and no second buffer.

    >>> [offload_gradient_widths("bf16", "master", z) for z in (1, 2, 3)]
    [(4, 0), (4, 0), (4, 2)]
    >>> offload_gradient_widths("bf16", "autocast", 3), offload_gradient_widths("bf16", "pure", 3)
    ((4, 4), (2, 0))
    """
    width = dtype("fp32" if precision == "autocast" else param_dtype).nbytes  # the model's weights
    if precision == "pure":
        return width, 0
    return dtype("fp32").nbytes, width if zero == 3 else 0


def offloaded_breakdown(params: Expr, param_dtype: str, optimizer: str, zero: int, dp: Expr | int,
                        factored: Expr | int = 0, precision: str = "master", grad_buffer: str = "param") -> Breakdown:
    """CPU bytes that ZeRO-Offload moves off the GPU: the gradients as DeepSpeed keeps them on the host
    (``offload_gradient_widths``), sharded with the optimizer states (the rank's partition from stage 1 on), the
    optimizer states (with master weights) and, under ZeRO 0-2, the pinned buffer the updated partition is cast into
    before it goes back to the GPU, in the model's dtype (``stage_1_and_2.py``
    ``param_buffer_of_bit16_for_cpu_offload_groups``, DeepSpeed 0.17.0 on; ZeRO-3 casts into its own 16-bit
    partition, which the GPU-side weights count).

    >>> from memderive.symbolic.dims import Psi, d
    >>> offloaded_breakdown(Psi, "bf16", "adamw", 0, 1).total  # 4 (fp32 gradients) + 12 + 2 (the 16-bit buffer)
    18*Psi
    >>> [offloaded_breakdown(Psi, "bf16", "adamw", z, d).total for z in (1, 2, 3)]
    [18*Psi/d, 18*Psi/d, 18*Psi/d]
    """
    terms = _terms(params, param_dtype, optimizer, zero, dp, factored, precision, grad_buffer)
    states = next(t for t in terms if t.path == "model_states/optimizer")
    grads, partitions = offload_gradient_widths(param_dtype, precision, zero)
    shard = dp if zero else 1  # the optimizer's partition
    model = dtype("fp32" if precision == "autocast" else param_dtype).nbytes  # the weights' (bit16 groups') dtype
    host = [Term("offload/gradients", params * grads / shard), *(
        [Term("offload/gradient_partitions", params * partitions / shard)] if partitions else []),
        Term("offload/optimizer", states.expr), *(
        [Term("offload/parameter_buffer", params * model / shard)] if zero < 3 else [])]
    return Breakdown(tuple(host), "bytes")


def zero_ranks(cp: int) -> Expr:
    """The ranks ZeRO shards the model states over: the d data-parallel ranks, and under context parallelism
    (``cp`` > 1) the cp ranks of each, which hold the same weights and see other tokens of the same sequences
    (``CP_ZERO_CITATION``; the time model reduces the gradients over the same d x cp ranks, ``timing.step_time``).

    >>> zero_ranks(1), zero_ranks(16)
    (d, cp*d)
    """
    return dims.d * dims.cp if cp > 1 else dims.d


def optimizer_state_bytes(optimizer: str, param_dtype: str, precision: str = "master") -> int:
    """K of the ZeRO paper: optimizer-state bytes per parameter (master copy included). Under ``pure``
    there is no master and torch's optimizers keep their states in the parameters' dtype; under
    ``autocast`` the parameters are fp32.

    >>> optimizer_state_bytes("adamw", "bf16"), optimizer_state_bytes("adamw", "bf16", "pure")
    (12, 4)
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    own = OPTIMIZERS[optimizer]
    if precision == "autocast":
        param_dtype = "fp32"
    width = dtype(param_dtype).nbytes
    states = own.state_bytes * width // 4 if own.like_param and precision == "pure" else own.state_bytes
    return states + master_bytes(param_dtype, precision)


def master_bytes(param_dtype: str, precision: str = "master") -> int:
    """Bytes per parameter of the fp32 master copy: 4 under ``master`` with 16-bit weights, else none."""
    return 4 if precision == "master" and dtype(param_dtype).nbytes < 4 else 0
