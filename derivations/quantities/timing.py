"""Time on a GPU cluster: training step time, throughput and MFU; prefill and decode time from a roofline.

Training, one optimizer step of m micro-batches on t x p x d GPUs (Narayanan et al. 2021), on a cluster
(``cluster.Cluster``: GPUs per node, the intra-node link, the network per GPU):

* compute, per micro-batch on the busiest pipeline stage: its hardware FLOPs (recompute included) at the GPU's
  matmul efficiency of the layers' per-GPU products (each at the measured rate of its shape: the GPU's sustained
  (MSMF) or maximum achievable (MAMF) matmul FLOP/s times OpenXLA's GEMM table's fraction; FlashAttention at its
  papers' rates), plus its elementwise kernels' HBM bytes at the bandwidth BabelStream's Triad reaches (the rated
  one where none is measured) (``efficiency``, ``memory_bound``: from kernel benchmarks
  and the kernels' code, nothing fitted to a run); ``efficiency=`` given instead: FLOPs at that fraction of the
  dense peak alone;
* communication per micro-batch, not hidden: tensor parallelism all-reduces each row-parallel layer's output in
  forward and each column-parallel layer's input gradient in backward (sequence parallelism turns each into a
  reduce-scatter plus an all-gather: the same bytes), full recompute repeats the forward ones, inside a node; the
  pipeline sends each micro-batch's activations and their gradients to the next stage (``v`` times interleaved),
  across nodes when the pipeline spans nodes (some boundary then crosses one, and every stage waits on it);
* pipeline bubble: ``(p - 1)/(m v)`` of the micro-batches' time (§2.2, interleaved schedule §2.2.2);
* data parallelism: what is not hidden behind compute (``data_parallel_s``): the gradient reduction behind the
  last micro-batch's backward, ZeRO-3's gathers per micro-batch behind its compute, but for the step's first
  all-gather and last reduce-scatter (the embedding and the first block: ``fsdp_edge_share``); rings on
  NVLink inside a node, NCCL's own cost model across nodes (``nccl_cost``: latency per ring step or tree level, bus
  bandwidth per NIC).
* ``tokens_per_s = b s m d / step``; ``mfu = model FLOPs per step / (step x GPUs x peak)``
  (Chowdhery et al. 2022, App. B), never above the matmul efficiency assumed, but with ``--fp8``: the Float8
  linears' scaled matmuls run at the fp8 rate (``float8_flops``) while MFU stays against the 16-bit one: each GEMM
  at the fp8 rate of its own shape where it runs in fp8 (``efficiency.float8_phases``: under Transformer Engine
  every layer linear's three, under torchao's the converted linears'), the attention core at its 16-bit kernel's
  (``gemm_efficiency(..., fp8=...)``).

Inference, one GPU of t (roofline, Williams et al. 2009): each phase takes the longer of its FLOPs at the matmul
efficiency x peak and its bytes at the memory bandwidth (the prefill reads the weights once; a decode step the
weights, of the routed experts only those its batch touches, and the KV cache), plus its tensor-parallel
all-reduces.

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, micro_batches=8, attention="eager")
>>> st = step_time(e, "a100-80gb")
>>> # the A100's matmul efficiency (efficiency.py): the linears, every side >= 4,096, at its MAMF, 271.2 / 312
>>> # = 0.8692 of peak; the unfused attention core, 2s/(4h + 3f) = 8192/49408 = 0.1658 of their FLOPs, with a side of
>>> # the head dim 128 (the table's 256: OpenXLA's H100 fraction 0.511 at (4096, 4096, 256)), 0.511 x 0.8692 = 0.4442:
>>> # 1.1658 / (1 / 0.8692 + 0.1658 / 0.4442) = 0.7651
>>> round(st.efficiency, 4)
0.7651
>>> st.mfu < st.efficiency  # one GPU: compute only, the elementwise work at the memory bandwidth on top
True
>>> step_time(e, "a100-80gb", efficiency=0.5).mfu  # a given efficiency: the FLOPs alone, at half the peak
0.5
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from memderive.derivations.columns import is_column, maximum, minimum, where
from memderive.derivations.quantities.a2a_overlap import A2A_OVERLAP_SOURCE, overlapped_ep_s
from memderive.derivations.quantities.host_timeline import HOST_COST_SOURCE
from memderive.derivations.hardware import GPU, gpu as lookup
from memderive.derivations.quantities.cluster import (ALL_REDUCE_SOURCE, GPUS_PER_NODE, NCCL, NCCL_COST, Cluster,
                                                      all_reduce_fraction, group_span)
from memderive.derivations.quantities.nccl_cost import NCCL_SMS, collective_sms
from memderive.derivations.quantities.compute import HARDWARE, graph_flops, whole_model
from memderive.derivations.quantities.efficiency import (FP4_STAND_IN, float8_phases, fp8_rate_ratio, gemm_efficiency,
                                                         gemm_products, low_precision, matmul_rate, rate_note)
from memderive.derivations.quantities.te_amax import AMAX_GROUP_HISTORY, DELAYED_AMAX, SP_AMAX, amax_micro_s
from memderive.derivations.quantities.torchao_casts import TORCHAO_CASTS, torchao_cast_bytes
from memderive.derivations.quantities.tp_overlap import (MICRO_PIPELINE_LIMITS, MICRO_PIPELINE_PARTS, RING_REDUCE,
                                                         TP_OVERLAP_PAIRS, exposed_s, overlap_forms, overlap_time, reduced_partials,
                                                         tp_traffic)
from memderive.derivations.quantities.muon_step import NS_CITATION, NS_STEPS, newton_schulz_s
from memderive.derivations.quantities.memory_bound import (achievable_bandwidth, eager_extra_bytes, fp32_accumulation_bytes, fused_elementwise_bytes,
                                                            layout_int, layout_int as _bytes, optimizer_bytes, unfused_framework_bytes,
                                                            zero3_copy_bytes, MEGATRON_FSDP_BUFFERS)
from memderive.derivations.options import TE_FP8, Options, block_share, derived, te_transposes
from memderive.derivations.memo import Keyed, per_graph
from memderive.derivations.quantity import Evaluated
from memderive.derivations.references import cite
from memderive.derivations.structure import structure_key
from memderive.symbolic import dims
from memderive.symbolic.experts import expert_ops
from memderive.symbolic.expr import Expr
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph
from memderive.symbolic.lazy import lazy
from memderive.symbolic.mamba import MAMBA_MIXER
from memderive.derivations.quantities.memory_bound import (CAST_SOURCE, MUON_STEP_BYTES, DEEPSPEED_SOURCE, EAGER_SOURCE, FSDP_SOURCE,
                                                            FP8_PAD_SOURCE, LOCAL_SORT_SOURCE, MCORE_UNFUSED_SOURCE, runs_unfused,
                                                            OPTIMIZER_SOURCE, STREAM_SOURCE, fp8_cast_bytes,
                                                            fp8_gathered_elements, MAMBA_SSM_MOVES)
from memderive.derivations.quantities.expert_states import expert_zero_ranks
from memderive.derivations.quantities.model_states import (FSDP2_FRAMEWORKS, MUON_CITATION, PIPELINED_FSDP2_CITATION,
                                                           reduced_gradient_width, state_widths)
from memderive.symbolic.float8 import TP_GATHERS, float8_matmul_flops, tp_planned
from memderive.symbolic.gathered import Gathered
from memderive.symbolic.te_float8 import SP_GATHERS, sp_gathered
from memderive.symbolic.userbuffers import (GEMM_SPLITS, PIPELINE_SPLITS, SM_MARGIN, UB_BUSY, UB_CONFIGS,
                                           ring_reduce_scatters, ub_source)
from memderive.symbolic.dims import sym
from memderive.derivations.quantities.inference import inference_graph, serving_dtypes
from memderive.derivations.quantities.runtime import fits_gpu
from memderive.derivations.quantities.training import transformed
from memderive.derivations.quantities.activation_offload import activation_offload_line, activation_offload_s
from memderive.derivations.quantities.offload_time import offload_line, offload_time
from memderive.derivations.quantities.param_offload_time import param_offload_line, param_offload_time

np = lazy("numpy")

__all__ = ["StepTime", "reduced_bytes", "InferenceTime", "step_time", "float8_flops", "product_flops", "inference_time", "DEFAULT_EFFICIENCY", "EFFICIENCY_SOURCE",
           "time_json", "time_of", "tp_bytes", "implied_mfu", "ZERO3_CHECKED_RANKS", "zero3_caution"]

TP_OVERLAP = Citation("te-userbuffers", "initialize_ub", also=(Citation("megatron-arguments", "--tp-comm-overlap"),))
NEMO_UB = Citation("nemo-userbuffers", "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192")
TE_GATHERS = Citation("te-sp-gathers", "gather_along_first_dim, _all_gather_fp8, _all_gather_mxfp8, "
                      "_all_gather_nvfp4, grad_output_preprocess, _Linear.forward/backward")

#: The fraction of dense peak that large-model training sustains: Narayanan et al. 2021 report 52%
#: of peak per GPU end to end (1T parameters on 3,072 A100s, Table 1), 44% to 52% across their runs.
DEFAULT_EFFICIENCY = 0.5
EFFICIENCY_SOURCE = Citation("narayanan-2021", "Abstract, Table 1: 52% of peak per GPU")


def _ring(n: int) -> float:
    """Fraction of the data each rank sends in a ring reduce-scatter or all-gather."""
    return (n - 1) / n


def dispatched_bytes(graph: Graph, values: Mapping[Any, int]) -> int:
    """Bytes of token-expert pairs one micro-batch sends to its routed experts, all MoE layers of the whole-model
    graph: each expert op's gathered inputs (b s k h, or E C h padded to capacity), the volume of one all-to-all."""
    total = _dispatched_form(graph)
    return _bytes(total, values) if total else 0


@per_graph
def _dispatched_form(graph: Graph) -> Any:
    """``dispatched_bytes``' expression, once per graph (structures that share the graph share it)."""
    total: Any = 0
    for blk in graph.blocks:
        for op in blk.ops:
            if op.kind == "experts":
                gathered = next(x for x in op.saved if x.name.endswith(".gathered"))
                total += blk.repeat * op.share * gathered.nbytes
    return total


#: Megatron-Core's all-to-all token dispatcher and its expert rank grid (``expert_parallel_s``).
EP_SOURCE = Citation("megatron-moe-dispatcher", "MoEAlltoAllTokenDispatcher; parallel_state expert grid tp-ep-dp-pp",
                     also=(Citation("lepikhin-2020", "§2.2"),))


DEEPEP_SOURCE = Citation("deepep", "get_dispatch_layout: is_token_in_rank, num_tokens_per_rdma_rank")


def reached(experts: int, top_k: int, held: Any) -> Any:
    """The chance that a token's k distinct experts, drawn uniformly from E (balanced routing), include one of the
    ``held`` experts a GPU or node holds: 1 - C(E - held, k) / C(E, k) (cell by cell on a column of ``held``).

    >>> round(reached(128, 8, 16), 4)  # Qwen3 30B-A3B, EP 8: a rank's 16 of 128 experts
    0.6674
    """
    return _cells(lambda n: 1 - math.comb(experts - int(n), top_k) / math.comb(experts, top_k), held)


def deepep_copies(cluster: Cluster, experts: int, top_k: int, ep: Any, stride: Any) -> tuple[Any, Any]:
    """(copies of a token over NVLink, copies over the GPU's network port) that DeepEP's dispatch sends (its combine
    returns as many), under balanced routing: once to each other GPU of its node that holds one of its experts,
    once over RDMA to each other node that does (``num_tokens_per_rdma_rank``), forwarded there over NVLink to each
    GPU that needs it; per GPU, as many arrive from other nodes as leave (``DEEPEP_SOURCE``). With ``inside`` of the
    ep ranks in a node and ``nodes`` nodes, a rank holding E/ep experts and a node E inside/ep:
    NVLink (inside - 1) p_rank nodes, network (nodes - 1) p_node (``reached``)."""
    inside, nodes = group_span(ep, stride, cluster.gpus_per_node)
    rank, node = reached(experts, top_k, experts // ep), reached(experts, top_k, experts * inside // ep)
    return (inside - 1) * rank * nodes, (nodes - 1) * node


def all_to_alls(opts: Options, values: Mapping[Any, Any] | None = None) -> Any:
    """Expert-parallel all-to-alls per MoE layer and micro-batch: dispatch and combine forward, their gradients
    backward, and the forward's two again where the MoE layer is recomputed (full, in the share of the layers it
    checkpoints: ``full_share``, or the ``moe`` module)."""
    return 4 + 2 * (1 if "moe" in opts.recomputed_modules else full_share(opts, values))


def full_share(opts: Options, values: Mapping[Any, Any] | None) -> Any:
    """The share of the decoder layers full recompute reruns (``Options.recompute_share``, at ``values``): 0 without
    it, 1 under uniform, ``options.block_share`` under Megatron's block method, on the layout's numbers (a plan's
    columns of p and v cell by cell)."""
    if opts.recompute != "full":
        return 0
    if opts.recompute_method != "block":
        return 1
    if values is None:
        raise ValueError("full_share: Megatron's block method needs the model's layers (values)")
    return block_share(opts.recompute_layers, opts.pp * (opts.virtual_stages or 1), values[dims.l], minimum)


def expert_parallel_s(cluster: Cluster, dispatched: int, opts: Options, experts: tuple[int, int] | None = None,
                      values: Mapping[Any, Any] | None = None) -> float:
    """Expert-parallel all-to-alls of one micro-batch on the busiest stage, not hidden: each MoE layer dispatches
    its tokens to their experts and combines the outputs (two all-to-alls forward, two for their gradients in
    backward, two more under full recompute; Lepikhin et al. 2020 §2.2, Megatron-Core's all-to-all dispatcher:
    one copy of a token per routed expert, b s k h bytes, ``EP_SOURCE``), over the ep ranks etp apart (the
    expert grid's order tp-ep-dp-pp, its tensor-parallel size the experts' etp, ``Options.expert_tp``: t unless
    folded), so a group of ep x etp past a node's GPUs spans nodes and ``Cluster.all_to_all`` sends the share bound
    elsewhere over each GPU's network port; each rank sends its s/t tokens under sequence parallelism."""
    if opts.ep <= 1 or not dispatched:
        return 0.0
    per_rank = dispatched / opts.pp / (opts.tp if opts.sp else 1) / opts.cp
    count = all_to_alls(opts, values)
    if opts.moe_dispatcher == "deepep" and experts is not None:  # ``experts``: (E, k)
        nvlink, network = deepep_copies(cluster, *experts, opts.ep, opts.expert_tp)
        token = per_rank / experts[1]  # b s h x 2 bytes per layer: one copy of each token
        return count * maximum(nvlink * token / cluster.peer, network * token / cluster.inter_node_bandwidth)
    return count * cluster.all_to_all(per_rank, opts.ep, opts.expert_tp)


def tp_bytes(graph: Graph, values: Mapping[Any, int], recompute_full: Any, modules: bool = False,
             float8: frozenset[str] = frozenset(), gathered: Gathered | None = None, experts: bool = True
             ) -> tuple[int, int]:
    """Bytes one micro-batch all-reduces over the tensor-parallel group in forward and backward,
    read off the whole-model graph: outputs of row-parallel layers and of the vocabulary-parallel
    embedding (partial sums) in forward, inputs of column- and vocabulary-parallel layers (their
    gradients) in backward, each distinct tensor once per repeat of its block; ``modules``: the partial sums of
    the row-parallel ops a selective module recomputes (Megatron-Core's mlp, moe, shared_experts) once more;
    ``recompute_full``: the share of the layers full recompute reruns (``full_share``), their forward's again.
    ``float8``: the weights of the linears whose sequence-parallel all-gathers move quantized tensors, ``gathered``
    the recipe's widths of them (``quantized_gathers``: torchtitan's Float8 tensor parallelism, Transformer Engine's
    fp8 under sequence parallelism; ``_tp_forms``). ``experts`` False: the routed experts move nothing over the
    tensor-parallel group (MoE parallel folding at etp 1: each rank dispatches its own s/t tokens over the ep
    ranks and gets their outputs back, ``EP_SOURCE``; the all-to-alls are ``expert_parallel_s``')."""
    forward = backward = 0
    for name, out, back, again in _tp_forms(graph, float8=float8, gathered=gathered, experts=experts):
        layer_fwd = _bytes(out, values) if out else 0
        forward += layer_fwd + (layer_fwd * recompute_full if name == "layer" else 0)
        # a module recomputed alone (Megatron-Core's mlp, moe, shared_experts) all-reduces its partial sums again
        forward += _bytes(again, values) if again and modules else 0
        backward += _bytes(back, values) if back else 0
    return forward, backward


def quantized_gathers(est: Evaluated, whole: Graph) -> tuple[frozenset[str], Gathered | None]:
    """The linears (weights, ``block/param``) whose sequence-parallel all-gathers move quantized tensors, and what
    each sends per element (``Gathered``, keyed on the recipe): torchtitan's Float8 tensor parallelism
    (``symbolic.float8.TP_GATHERS``, ``tp_planned``); Transformer Engine's fp8 under sequence parallelism, every
    layer linear (``symbolic.te_float8.SP_GATHERS``, ``sp_gathered``); none otherwise."""
    opts = est.options
    if opts.float8_tp_plan:
        return tp_planned(est.graph), TP_GATHERS[opts.fp8]
    if opts.fp8 in TE_FP8 and opts.sp:
        return sp_gathered(whole), SP_GATHERS[opts.fp8]
    return frozenset(), None


@per_graph
def _tp_forms(graph: Graph, float8: frozenset[str] = frozenset(),
              gathered: Gathered | None = None, experts: bool = True) -> tuple[tuple[str, Any, Any, Any], ...]:
    """Per block of ``graph``: its name and the expressions ``tp_bytes`` evaluates (forward's partial sums, the
    backward's input gradients, times the block's repeat; 0 when none), once per graph, summed from
    ``tp_overlap.tp_traffic``.

    A linear's two halves rejoin into the all-reduce it runs without sequence parallelism: a row-parallel one's in
    forward (its partial sums, again where a selective module reruns it), a column-parallel one's in backward (its
    input's gradient, once per module: the input's name). A linear whose weight is in ``float8`` gathers quantized
    tensors under sequence parallelism (torchtitan's Float8 tensor parallelism, ``symbolic.float8.TP_SOURCE``;
    Transformer Engine's, ``symbolic.te_float8.SP_SOURCE``), so its halves stay apart, each on its own side: a
    column-parallel one gathers its input quantized in forward and reduce-scatters the input's 16-bit gradient in
    backward; a row-parallel one reduce-scatters its 16-bit output in forward and gathers the output's gradient,
    quantized first, in backward."""
    forms = []
    for blk in graph.blocks:
        inputs: dict[str, Any] = {}
        quantized_in: dict[str, Any] = {}  # the forward's quantized all-gathers, by input
        out: Any = 0
        back: Any = 0  # the backward's quantized all-gathers of output gradients
        again: Any = 0  # the partial sums of row-parallel ops that are recomputed
        for c in tp_traffic(blk, float8, gathered, experts):
            if c.kind == "embedding":
                out += c.forward
            elif c.kind == "experts":  # split over t like an MLP: partial sums out, the input's gradient back
                out += c.forward
                again += c.forward if c.redone else 0
                inputs[c.key] = c.backward
            elif c.kind == "row" and c.quantized:  # forward: 16-bit reduce-scatter; backward: quantized gather
                out += c.forward
                back += c.backward
            elif c.kind == "row":  # partial sums of the output
                out += c.forward + c.backward
                again += c.forward + c.backward if c.redone else 0
            elif c.quantized:  # column: forward: quantized input all-gather; backward: 16-bit reduce-scatter
                quantized_in[c.key] = c.forward
                inputs[c.key] = c.backward
            else:  # column/vocabulary-parallel: the input's gradient
                inputs[c.key] = c.forward + c.backward
        out = out + sum(quantized_in.values())
        back = back + sum(inputs.values())
        forms.append((blk.name, blk.repeat * out if out else 0, blk.repeat * back if back else 0,
                      blk.repeat * again if again else 0))
    return tuple(forms)


@dataclass(frozen=True, slots=True)
class StepTime:
    """One optimizer step on ``gpu``: seconds by cause, throughput and utilization."""

    gpu: GPU
    efficiency: float
    compute_s: float
    bubble_s: float
    tp_s: float
    pp_s: float
    dp_s: float
    tokens_per_step: int
    model_flops_per_step: int
    gpus: int
    cluster: Cluster | None = None
    calibrated: bool = False  # efficiency from the products' shapes (``gemm_efficiency``), not given
    ep_s: float = 0.0  # expert-parallel all-to-alls
    cp_s: float = 0.0  # context-parallel ring exchange not hidden behind the attention
    cp: int = 1  # context-parallel degree
    fp8_share: float = 0.0  # of the compute FLOPs, the part that runs as Float8 matmuls (``--fp8``)
    eager_s: float = 0.0  # unfused elementwise kernels' extra HBM traffic (``--kernels eager``; memory_bound.py)
    zero3_copy_s: float = 0.0  # ZeRO-3's copies of the gathered parameters and of the gradients to reduce
    optimizer_s: float = 0.0  # the optimizer step over this GPU's shard, and the gradient clipping
    kernels: str = "fused"
    fp32_accumulation_s: float = 0.0  # each micro-batch's gradients added into fp32 ones (DeepSpeed, pipelined FSDP2)
    grad_sync: str = "overlapped"
    offload_copy_s: float = 0.0  # ZeRO-Offload's PCIe copies not hidden (offload_time.py)
    cpu_optimizer_s: float = 0.0  # ZeRO-Offload's CPU Adam step (offload_time.py)
    host_memory_bandwidth: float | None = None  # GB/s per GPU, set under --offload and --offload-params
    param_offload: str | None = None  # --offload-params: the optimizer the CPU steps (param_offload_time.py)
    zero3_ranks: Any = 0  # the ranks ZeRO-3 shards over (d x cp; a column in a plan); 0 below ZeRO-3
    framework: str | None = None  # --framework: which FlashAttention kernel runs (efficiency.flash_kernel)
    # fused elementwise kernels' HBM reads and writes (memory_bound.fused_elementwise_bytes), and the passes the
    # framework's code runs unfused beside them (memory_bound.unfused_framework_bytes)
    elementwise_s: float = 0.0
    unfused: bool = False  # the framework's code runs passes unfused (memory_bound.runs_unfused): the note names them
    tp_comm_overlap: bool = False  # --tp-comm-overlap: TP transfers behind their GEMMs
    async_tp: bool = False  # PyTorch's AsyncTP (``Options.async_tp``): what its pattern matcher leaves whole
    # TE userbuffers' SM margins (tp_overlap.overlap_time): the seconds they add to the GEMMs (in compute_s), the config
    ub_margin_s: float = 0.0
    # the seconds the overlaps' GEMMs, run in parts (TE's userbuffers, PyTorch's AsyncTP), take past the whole
    # products' (tp_overlap.overlap_time; in compute_s)
    ub_split_s: float = 0.0
    ub_config: str = "te"
    moe_dispatcher: str = "alltoall"  # --moe-dispatcher: how the expert-parallel all-to-alls send tokens
    moe_a2a_overlap: bool = False  # --moe-a2a-overlap: the all-to-alls behind another micro-batch's compute
    fp8_cast_s: float = 0.0  # fp8 quantization kernels: TE's (memory_bound.fp8_cast_bytes), torchao's tensorwise (torchao_casts)
    fp8: str = "none"  # --fp8: the recipe
    fp8_param_gather: bool = False  # --fp8-param-gather: the weights' step cast from the fp32 main shard
    fsdp_primary: bool = False  # ... under Megatron-FSDP (--zero 3): each gathered weight's transpose per micro-batch
    sp: bool = False  # --sp: sequence parallelism (TE's fp8 all-gathers then move quantized tensors)
    # ZeRO-2 over more than one rank, how its gradients are reduced (``_zero2_sync``): "each" micro-batch, "regather"
    # (FSDP2), "once" (FSDP2 under pipeline stages), "exposed" (--grad-sync deepspeed); "" otherwise
    zero2: str = ""
    activation_offload_layers: int = 0  # --activation-offload-layers (activation_offload.py)
    activation_offload_s: Any = 0.0  # its host copies not hidden behind the other layers' compute
    # the compute the hidden data-parallel collectives across nodes take, holding NCCL's SMs (nccl_cost.NCCL_SMS)
    dp_sm_s: Any = 0.0
    muon: str = ""  # --optimizer muon: "layer-wise" under --zero 1 (its distributed optimizer), "whole" otherwise
    p2p_overlap: bool = True  # Options.p2p_overlap: Megatron-Core's interleaved sends behind compute
    fp8_amax_s: Any = 0.0  # Transformer Engine's blocking amax all-reduces (te_amax.py)
    tp_only_amax_red: bool = False  # --tp-only-amax-red: delayed scaling's over t x cp ranks only
    mamba: bool = False  # Mamba-2 layers (a hybrid's, symbolic.mamba): the note says how their scan is timed

    @property
    def step_s(self) -> float:
        return (self.compute_s + self.bubble_s + self.tp_s + self.pp_s + self.dp_s + self.dp_sm_s + self.ep_s + self.cp_s
                + self.eager_s + self.zero3_copy_s + self.optimizer_s + self.fp32_accumulation_s
                + self.offload_copy_s + self.cpu_optimizer_s + self.elementwise_s + self.fp8_cast_s
                + self.activation_offload_s + self.fp8_amax_s)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / (self.step_s * self.gpus * self.gpu.bf16_flops)

    def model(self) -> tuple[str, ...]:
        """How the time was modelled, one line per cause (for writeups)."""
        cluster = self.cluster or Cluster(self.gpu)
        fp8 = () if not self.fp8_share else (
            f"Float8 linears (--fp8): {self.fp8_share:.1%} of the FLOPs are their scaled matmuls, "
            + ("each GEMM timed at the fp8 rate of its own shape, the attention core at its 16-bit kernel's (a Float8 "
               "linear outside the layers at the 16-bit rate times " if self.calibrated else
               "timed at the 16-bit rate times ")
            + f"the GPU's fp8 over bf16 measured rate (MSMF or MAMF), {fp8_rate_ratio(self.gpu):.2f}"
            + (")" if self.calibrated else "") + " (dense FP8 peak "
            f"{self.gpu.peak_flops('fp8') / 1e12:,.1f} TFLOP/s"
            + (", the 16-bit rate: this GPU has no FP8 tensor cores" if self.gpu.fp8_flops is None else "")
            + (f"; under te-nvfp4 the {FP4_STAND_IN}, dense FP4 peak {self.gpu.peak_flops('fp4') / 1e12:,.1f} TFLOP/s"
               if self.fp8 == "te-nvfp4" else "")
            + ("); Transformer Engine's quantization at the memory-bound line's bandwidth: each linear's input cast "
               "per forward (current scaling: an amax pass, then the cast; delayed: one pass; MXFP8: one pass "
               "writing both layouts and their scales per 32), fused with the norm where TE fuses it, its output "
               "gradient's per "
               "backward, the transposes Hopper's TN-only fp8 GEMMs need, " + self._weight_cast_words()
               + f", {self.fp8_cast_s:.3g} s per step ({cite(CAST_SOURCE)})" if self.fp8 in TE_FP8 else
               "); torchao's tensorwise casts at the memory-bound line's bandwidth, a lower bound: a pass per cast "
               "reading the 16-bit tensor and writing 8 bits (its amax fused into the kernel that wrote it), each "
               "linear's input and weight per forward, its output gradient per backward, the saved input again for "
               f"the weight gradient but under the Float8 TP plan, {self.fp8_cast_s:.3g} s per step "
               f"({cite(TORCHAO_CASTS)})" if self.fp8 == "tensorwise" else
               "); the casts' elementwise work is not timed")
            + "; MFU stays against the 16-bit peak",)
        memory = () if not self.calibrated else (memory_line(self.gpu, self.kernels, self.unfused),)
        if self.muon and self.calibrated:
            memory += (f"--optimizer muon (Megatron-Core's): the optimizer time is Muon's step, {NS_STEPS} Newton-Schulz "
                       "iterations per matrix it owns, X X^T, A A and B X (4 m^2 n + 2 m^3 FLOPs, m the smaller side), "
                       "each product at the bf16 rate of its shape (fp32_matmul_prec medium), its elementwise passes "
                       f"({MUON_STEP_BYTES} B per element) and Adam's fused step for the rest at the memory bandwidth "
                       f"({cite(NS_CITATION)})" + (
                           "; under --zero 1 (LayerWiseDistributedOptimizer) the busiest rank's: the mean rank's 1/d "
                           "of them (the routed experts' 1/edp), or the one whole parameter with the most "
                           "Newton-Schulz work where that is more, the gradients all-reduced as without a "
                           "distributed optimizer, the "
                           "updated 16-bit weights all-gathered after the step, not hidden (overlap_param_gather off: "
                           f"{cite(MUON_CITATION)})" if self.muon == "layer-wise" else
                           "; under --zero 0 the gradients' all-reduce after the last backward, whole, not hidden "
                           "(Megatron-LM refuses --overlap-grad-reduce under --optimizer muon: "
                           f"{cite(MUON_OVERLAP_SOURCE)})" if self.framework == "megatron" else ""),)
        if self.grad_sync == "deepspeed":
            memory += ("--grad-sync deepspeed: each micro-batch's 16-bit gradients cast and added into fp32 ones "
                       "(18 bytes per parameter at the memory bandwidth; fp16: added into the 16-bit .grad, 6 bytes); "
                       "the fp32 gradients all-reduced (fp16: the 16-bit ones, ZeRO-1 reduce-scattered), the tied "
                       "embedding's between the first and last stage, ZeRO-1's updated shards gathered, after the "
                       f"last backward, not hidden ({cite(DEEPSPEED_SOURCE)})"
                       + (f"; under ZeRO-2 a reduce-scatter in each micro-batch's backward, none hidden "
                          f"({cite(ZERO2_SOURCE)})" if self.zero2 == "exposed" else ""),)
        elif self.fp32_accumulation_s:  # FSDP2 under pipeline stages (memory_bound.fp32_accumulation_bytes)
            memory += ("FSDP2 under torch.distributed.pipelining, gradient sync off until the last backward: each "
                       "micro-batch's 16-bit gradients upcast (the first, 6 bytes per parameter) or added (10) into "
                       f"fp32 ones at the memory bandwidth, {self.fp32_accumulation_s:.3g} s per step "
                       f"({cite(PIPELINED_FSDP2_CITATION)})",)
        if self.param_offload is not None and self.host_memory_bandwidth is not None:
            memory += (param_offload_line(self.gpu, self.host_memory_bandwidth, self.param_offload),)
        elif self.host_memory_bandwidth is not None:
            memory += (offload_line(self.gpu, self.host_memory_bandwidth),)
        if self.activation_offload_layers:
            memory += (activation_offload_line(self.gpu, self.activation_offload_layers),)
        if self.mamba:
            memory += (f"Mamba-2 layers ({cite(MAMBA_MIXER)}): the chunked scan's products, counted over whole s_ch x s_ch "
                       "chunks, at the layers' FLOP-weighted GEMM rate (no benchmark of mamba_ssm's Triton scan "
                       "kernels is read here: a stand-in); its causal convolution and the tensors each scan kernel "
                       f"reads and writes at the memory bandwidth ({cite(MAMBA_SSM_MOVES)})",)
        caution = zero3_caution(self.zero3_ranks) if isinstance(self.zero3_ranks, int) else None
        cautions = tuple(c for c in (caution, MOE_HOST_CAUTION if self.ep_s else None) if c)
        return (compute_line(self.gpu, self.efficiency, self.calibrated, self.framework), *fp8, *memory,
                "pipeline bubble: (p - 1)/(m v) of a micro-batch's time, communication included "
                "(Narayanan et al. 2021 §2.2)",
                f"communication on {cluster.describe()}: "
                + (f"TP all-gathers and reduce-scatters behind their own GEMMs (--tp-comm-overlap: split into t "
                   f"chunks, one chunk's transfer and what the rest takes past the GEMMs it is fused with exposed; "
                   f"{cite(TP_OVERLAP)}; {cite(TP_OVERLAP_PAIRS)})"
                   if self.tp_comm_overlap else "TP all-reduces per layer (not hidden)")
                + (ub_margin_note(self.ub_config, self.gpu, self.ub_margin_s, self.ub_split_s)
                   if self.tp_comm_overlap and not self.async_tp else "")
                + ("; torchtitan's AsyncTP fuses a reduce-scatter with one matmul's output only and inside the "
                   "compiled blocks only: the backward's reduce-scatters of the summed input gradients of wq, wk, wv "
                   "and w1, w3 and the head's and embedding's collectives stay whole, and each fused reduce-scatter "
                   f"sums its t stacked partials in a memory-bound pass of its own ({cite(MICRO_PIPELINE_LIMITS)}); "
                   "each fused pair's GEMMs run as t matmuls of 1/t of the tokens, one per rank's shard, each at its "
                   f"shape's measured rate: {self.ub_split_s:.3g} s a step more than the whole products "
                   f"({cite(MICRO_PIPELINE_PARTS)})"
                   if self.async_tp else "")
                + ("; under torchtitan's Float8 tensor parallelism (--fp8 tensorwise) the all-gathers move 8-bit "
                   "tensors, the reduce-scatters 16-bit ones" if self.fp8 == "tensorwise" and self.framework ==
                   "torchtitan" and self.tp_s else "")
                + (te_gathers_note(self.fp8, self.tp_comm_overlap) if self.fp8 in TE_FP8 and self.sp and self.tp_s
                   else "")
                + (self._amax_words() if self.fp8_amax_s else "")
                + (f", each at the measured speed of its size ({cite(ALL_REDUCE_SOURCE)})"
                   if all_reduce_fraction(self.gpu, 2**27, 8) < 1 else "")
                + ", PP sends per micro-batch" + (" (inside a node at NCCL's per-link speed)" if cluster.nccl else "")
                + ((f" (under Megatron-Core's interleaved schedule each behind a chunk's compute, {cite(P2P_OVERLAP)})"
                    if self.p2p_overlap else " (--no-p2p-overlap: each waited on at once)")
                   if self.framework == "megatron" else "")
                + ", DP gradient reduction hidden behind the last micro-batch's backward (DDP/FSDP buckets; "
                "interleaved: each model chunk's after its own last backward, its parameters gathered before its "
                f"first forward, {cite(CHUNK_SYNC_SOURCE)}), "
                + ("ZeRO-2 reduce-scatters each micro-batch's gradients behind its own backward"
                   + (", FSDP2 gathering the parameters again in each forward" if self.zero2 == "regather" else "")
                   + (" (timed as DeepSpeed's overlap_comm true; its default for stage 2 is false, each reduction "
                      "then on the compute stream, not hidden: deepspeed/runtime/zero/config.py overlap_comm_valid)"
                      if self.framework == "deepspeed" else "")
                   + f" ({cite(ZERO2_SOURCE)}), " if self.zero2 in ("each", "regather") else
                   f"ZeRO-2 under torch.distributed.pipelining: whole gradients accumulated, reduce-scattered once "
                   f"after the last backward has returned, not hidden ({cite(PIPELINED_FSDP2_CITATION)}; the memory "
                   f"holds them whole, in fp32), "
                   if self.zero2 == "once" else "")
                + f"ZeRO-3 gathers per micro-batch hidden behind its compute but for the embedding's and first "
                f"block's all-gather opening the step and their reduce-scatters closing it ({cite(FSDP_EDGES)}); "
                + (f"collectives inside a node at NCCL's own ring model, its bus bandwidth the NVLink links at NCCL's "
                   f"per-link speed and its latency per ring step ({cite(NCCL_COST)}; no NVLink SHARP on this GPU), "
                   if cluster.node_ring else
                   f"all-reduces inside a node as rings at the link's rated bandwidth ({cite(NCCL)}; NVLink SHARP's "
                   f"reach more), its reduce-scatters and all-gathers at NCCL's own ring model, the bus the NVLink "
                   f"links at NCCL's per-link speed, with its latency per ring step ({cite(NCCL_COST)}), "
                   if cluster.nccl else
                   f"collectives inside a node as rings at the link's rated bandwidth ({cite(NCCL)}), ")
                + f"across nodes at "
                f"NCCL's own cost model, its latency per ring step or tree level and its bus bandwidth per NIC "
                f"({cite(NCCL_COST)}), the data-parallel ones call by call: FSDP's units, Megatron-Core's gradient "
                f"buckets under --framework megatron ({cite(BUCKETS_SOURCE)}), the last bucket's reduce-scatter and the "
                f"first's all-gather (interleaved: each chunk's whole gather before its first forward) with nothing to "
                f"hide behind ({cite(BUCKET_PIPELINE_SOURCE)}); "
                + (f"the data-parallel collectives across nodes that run hidden hold NCCL's channels, one SM each "
                   f"that no compute kernel shares, two per GPU of the group in a node (16 when all 8 of a DGX's "
                   f"are in it), and the compute beside them loses that share of the GPU's SMs while they run: "
                   f"{self.dp_sm_s:.3g} s a step ({cite(NCCL_SMS)}; inside a node, on NVLink alone, and MoE's expert "
                   f"data-parallel groups not timed); "
                   if self.dp_sm_s else "")
                + "MoE: expert-parallel all-to-alls (dispatch and combine, forward and backward) "
                + ("behind another micro-batch's compute (--moe-a2a-overlap: Megatron-Core's combined 1F1B, the "
                   "steady state's forward beside a backward, layer by layer: combine behind attention, dispatch "
                   "behind the experts' GEMMs, each one's excess exposed; the warmup's forwards and the cooldown's "
                   f"backwards alone, exposed; {cite(A2A_OVERLAP_SOURCE)})" if self.moe_a2a_overlap else "not hidden")
                + ", over "
                + ("NVLink inside a node at NCCL's per-link speed (each of its links at 20.0-40.1 GB/s of the rated "
                   f"25-50, {cite(NCCL_COST)}) " if cluster.nccl else "NVLink inside a node ")
                + "and each GPU's port for the share bound to other nodes, "
                + (f"DeepEP's: a token once per GPU, and per node across nodes, that holds one of its experts under "
                   f"balanced routing ({cite(DEEPEP_SOURCE)})" if self.moe_dispatcher == "deepep" else
                   f"a token once per routed expert ({cite(EP_SOURCE)})")
                + "; the routed experts' gradients and weights reduced and gathered over the ranks that hold the "
                f"same experts (t x d x cp / (etp x ep), etp x ep apart: {cite(EDP_SOURCE)})"
                + ("" if self.cp == 1 else f"; context parallelism over {self.cp}: the ring's K/V chunk sends, "
                   f"each behind its step's attention ({cite(CP_SOURCE)})"
                   + ("; Transformer Engine's merges of the steps' outputs and gradients at memory bandwidth, outside "
                      f"the overlapped loop ({cite(TE_CP_MERGE_SOURCE)})" if self.framework == "megatron" else "")),
                f"MFU = model FLOPs per step / (step time x {self.gpus} GPUs x peak) (Chowdhery et al. 2022, App. B)",
                *cautions)

    def _amax_words(self) -> str:
        """Transformer Engine's amax all-reduces (``te_amax``), in words."""
        if self.fp8 == "te-delayed":
            group = ("the tensor- and context-parallel ranks (--tp-only-amax-red)" if self.tp_only_amax_red else
                     "the stage's tensor-, data- and context-parallel ranks")
            return (f"; delayed scaling's amaxes all-reduced, blocking, twice per model chunk and micro-batch (the "
                    f"fp8_autocast's exit, the chunk's first fp8 module's backward) over {group}, each at NCCL's "
                    f"latency for its group: {self.fp8_amax_s:.3g} s a step ({cite(DELAYED_AMAX)}; "
                    f"{cite(AMAX_GROUP_HISTORY)})")
        return (f"; under sequence parallelism each column-parallel module's input amax (forward) and each "
                f"row-parallel linear's output-gradient amax (backward) all-reduced over the tensor-parallel ranks, "
                f"blocking, before the cast, at NCCL's latency: {self.fp8_amax_s:.3g} s a step ({cite(SP_AMAX)})")

    def _weight_cast_words(self) -> str:
        """Where the step's weight cast comes from (``memory_bound.fp8_cast_bytes``), in words."""
        if not self.fp8_param_gather:
            return "the weights once per step (cached across micro-batches)"
        if self.fp8 == "te-mxfp8":
            return ("the weights once per step, quantized both ways from the 16-bit bucket the --fp8-param-gather "
                    "all-gather brings (Megatron-LM param_and_grad_buffer.py _post_param_sync)")
        if self.fsdp_primary:
            return ("the weights once per step after the optimizer, under --fp8-param-gather with Megatron-FSDP: the "
                    "rank's fp32 main shard cast to 16 bits and quantized into its uint8 shard (quantize_param_shard), "
                    "and, where only TN fp8 GEMMs run, each gathered weight's transpose in every micro-batch's "
                    "backward, dropped with its bucket (keep_fp8_transpose_cache False; Megatron-LM 0d8e0714 "
                    "megatron_fsdp.py release_module_parameters)")
        return ("the weights once per step after the optimizer, under --fp8-param-gather: the rank's fp32 main shard "
                "cast to 16 bits and quantized into the 8-bit parameter buffer (quantize_master_weights), and, "
                "where only TN fp8 GEMMs run, each gathered weight's transpose (Megatron-LM distrib_optimizer.py quantize_param_shard; Transformer Engine "
                "tensor/utils.py quantize_master_weights, post_all_gather_processing)")

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu.name, "efficiency": self.efficiency, "step_time_s": self.step_s,
                "compute_time_s": self.compute_s, "bubble_time_s": self.bubble_s, "tp_comm_time_s": self.tp_s,
                "pp_comm_time_s": self.pp_s, "dp_comm_time_s": self.dp_s, "dp_sm_time_s": self.dp_sm_s,
                "ep_comm_time_s": self.ep_s,
                "cp_comm_time_s": self.cp_s, "elementwise_time_s": self.elementwise_s, "eager_kernels_time_s": self.eager_s,
                "fp8_cast_time_s": self.fp8_cast_s, "fp8_amax_time_s": self.fp8_amax_s,
                "zero3_copy_time_s": self.zero3_copy_s, "optimizer_time_s": self.optimizer_s,
                "grad_accum_time_s": self.fp32_accumulation_s,
                "offload_copy_time_s": self.offload_copy_s, "cpu_optimizer_time_s": self.cpu_optimizer_s,
                "act_offload_time_s": self.activation_offload_s,
                "tokens_per_s": self.tokens_per_s,
                "mfu": self.mfu}


def ub_margin_note(config: str, hw: GPU, seconds: float, split_s: float = 0.0) -> str:
    """Transformer Engine's userbuffers' SMs taken under --tp-comm-overlap-cfg ``config``, in words: with
    set_sm_margin for the GEMM's whole time, else while its transfer runs (``overlap_time``); and the GEMMs they
    split (``UbComm.splits``), ``split_s`` seconds a step past the whole products."""
    comms = UB_CONFIGS[config]
    whole = ", ".join(f"{name} {c.num_sm}" for name, c in comms.items() if c.margin)
    during = ", ".join(f"{name} {c.busy}" for name, c in comms.items() if c.busy and not c.margin)
    of = f" of {hw.sms}" if hw.sms else ""
    taken = "; ".join(([f"{whole}{of} with set_sm_margin"] if whole else [])
                      + ([f"{during}{of} while its transfer runs"] if during else []))
    source = cite(ub_source(config))
    parts = (f"; each overlap runs its GEMM in parts, a ring exchange t GEMMs of 1/t of the tokens (t/2 of two "
             f"chunks each where the config aggregates them), a pipelined "
             f"reduce-scatter {PIPELINE_SPLITS} of 1/{PIPELINE_SPLITS} of the output features, each part at its "
             f"shape's measured rate (OpenXLA's table, a side past 4,096 read at 4,096): {split_s:.3g} s a step "
             f"more than the whole products ({cite(GEMM_SPLITS)})")
    ring = [f"{name}_fprop" for name in ring_reduce_scatters(comms)]
    if ring:
        parts += (f"; {' and '.join(ring)} reduce-scatter by ring exchange and sum the t chunks each rank receives in "
                  f"a pass of their own at the memory bandwidth, in the TP time ({cite(RING_REDUCE)})")
    if hw.sms is None:
        return (f"; userbuffers' SMs taken from the GEMMs they overlap ({config}: {taken}; {source}) not timed: no SM "
                f"count for the {hw.name}{parts}")
    return (f"; userbuffers take SMs from the GEMMs they overlap ({config}: {taken}; {source}; the ring exchanges "
            f"copy with the copy engine): each such GEMM timed on the rest for that time, its rate assumed "
            f"proportional to its SMs, {seconds:.3g} s a step more ({cite(SM_MARGIN)}; {cite(UB_BUSY)}){parts}")


def te_gathers_note(fp8: str, overlap: bool = False) -> str:
    """Which of the tensor-parallel collectives Transformer Engine's recipe ``fp8`` runs in 8 bits under sequence
    parallelism, in words (``SP_GATHERS``); ``overlap``: under --tp-comm-overlap (userbuffers), whose all-gather
    buffers are 8-bit as well and whose reduce-scatters are 16-bit by TE's default."""
    g = SP_GATHERS[fp8]
    def per(copies: int) -> str:
        w = g.width(copies)
        return f"{w.numerator}/{w.denominator} B" if w.denominator != 1 else f"{w.numerator} B"
    bits = "the 4-bit data (two elements a byte)" if g.data < 1 else "the 8-bit data"
    scales = (f"{bits} and one 1-byte scale per {g.block} elements" if g.block else
              f"{bits}, no scale (each rank holds the same)")
    return (f"; under Transformer Engine's fp8 (--fp8 {fp8}) with sequence parallelism the layer linears' "
            f"all-gathers move the quantized tensor, {scales}: a column-parallel input in forward "
            f"({per(g.input)} per element), a row-parallel output's gradient in backward ({per(g.grad)}"
            + (", its row- and column-wise copies" if g.grad > 1 else "") + "); the reduce-scatters (a row-parallel "
            "output, a column-parallel input's gradient) 16-bit"
            + (" (userbuffers' by TE's default; a config setting fp8_buf on proj_fprop or fc2_fprop, as NeMo's fp8 "
               f"H100 ones do ({cite(NEMO_UB)}), makes the forward's 8-bit: not modelled)" if overlap else "")
            + "; the input's re-gather for the weight gradient runs behind the input-gradient GEMM, as in 16 bits, "
            f"not timed ({cite(TE_GATHERS)})")


def compute_line(hw: GPU, efficiency: float, calibrated: bool, framework: str | None = None) -> str:
    """How compute was timed, in words."""
    peak = f"{hw.title}'s dense 16-bit peak ({hw.bf16_flops / 1e12:,.1f} TFLOP/s)"
    if not calibrated:
        return f"compute: the busiest stage's hardware FLOPs at {efficiency:.0%} (given) of {peak}"
    return (f"compute: the busiest stage's matmul FLOPs (recompute included) at {efficiency:.1%} of {peak}: each "
            f"product of the layers at the rate of its per-GPU shape (forward, input and weight gradient), "
            f"{rate_note(hw, framework)}, FLOP-weighted; nothing fitted to a run's step time")


def memory_line(hw: GPU, kernels: str, unfused: bool = False) -> str:
    """How the memory-bound work was timed, in words; ``unfused``: the framework's code runs passes of the model
    unfused (``memory_bound.runs_unfused``: Megatron-Core's, the one ``UNFUSED_MOVES`` lists)."""
    eager = (f"eager kernels (--kernels eager): each norm, SwiGLU and rotary op's extra HBM reads and writes over a "
             f"fused kernel's, op by op from the module's code ({cite(EAGER_SOURCE)}); " if kernels == "eager" else "")
    adam = "foreach" if kernels == "eager" else "fused"
    framework = (f"the passes Megatron-Core's code runs unfused around its fused kernels (the experts' clamp and fc2 "
                 f"bias, YaRN's rotary; memory_bound.UNFUSED_MOVES: {cite(MCORE_UNFUSED_SOURCE)}; where its all-to-all "
                 f"dispatcher holds more than one expert a GPU, the tokens sorted by local expert and back, "
                 f"memory_bound.LOCAL_SORT_MOVES: {cite(LOCAL_SORT_SOURCE)}; under fp8 with dropless routing, "
                 f"TEGroupedMLP's padding of each expert's rows and back, memory_bound.FP8_PAD_MOVES: "
                 f"{cite(FP8_PAD_SOURCE)}); " if unfused else "")
    reached = achievable_bandwidth(hw)
    rate = (f"{reached / 1e9:,.0f} GB/s (BabelStream's Triad, {reached / hw.memory_bandwidth:.1%} of the rated "
            f"{hw.memory_bandwidth / 1e9:,.0f}: {cite(STREAM_SOURCE)})" if reached != hw.memory_bandwidth else
            f"{hw.memory_bandwidth / 1e9:,.0f} GB/s (rated; no streaming kernel measured on it)")
    return (f"memory-bound, at {rate}: every elementwise kernel's reads and writes as "
            f"a fused kernel makes them (norms, rotary, activations, residual adds, dropout, the unfused softmax, the "
            f"loss, the routed experts' tokens permuted and scattered back and their router; memory_bound.FUSED_MOVES, "
            f"TOKEN_MOVES); {framework}{eager}ZeRO-3's copy-out of each gathered "
            f"parameter (forward and backward) and copy-in of each gradient to reduce ({cite(FSDP_SOURCE)}; "
            f"Megatron-FSDP, --zero 3 under Megatron-Core, gathers into and reduces from its parameters' own "
            f"buckets: its reduced gradient shard added into the rank's, the embeddings' and norms' gradient copy-in "
            f"not counted, {cite(MEGATRON_FSDP_BUFFERS)}); the "
            f"AdamW step over this GPU's shard as {adam} kernels and the gradient clipping ({cite(OPTIMIZER_SOURCE)}; "
            "other optimizers and fine-tuning: not timed; ZeRO-Offload: its own line)")


def _stage_flops(est: Evaluated) -> int:
    """Hardware FLOPs per GPU of the busiest pipeline stage (the slowest sets the pipeline's pace): the first
    (embedding and its layers), the last (its layers and the LM head) and, with uneven stages, a middle one; under
    ``--pipeline-layout`` the busiest rank, each rank's FLOPs those of its chunks."""
    first = est.number("hardware_flops_per_gpu")
    if est.options.pp == 1:
        return first
    stages = ["first", "last"]
    if est.options.uneven_stages and est.options.stage_layers(est.model.sizes["l"])[1] is not None:
        stages.append("middle")
    layout = est.options.pipeline_layout is not None  # every rank of a custom layout that can be the slowest
    if layout:
        stages = list(est.options.layout_ranks(est.model.sizes.get("l_d", 0)))
    structure = Keyed(structure_key(est.model, est.options), est)
    out = [_bytes(_stage_flops_form(structure, stage), est.values) for stage in stages]
    return maximum(*out) if est.options.uneven_stages or layout else maximum(first, *out[1:])


@lru_cache(maxsize=256)
def _stage_flops_form(structure: Keyed, stage: str) -> Expr:
    """One pipeline stage's hardware FLOPs per GPU as a closed form, derived once per structure and stage (the
    sizes and degrees left as symbols, as ``estimate``'s derivation memo leaves them)."""
    est = structure.value
    graph = est.model.graph(activation_dtype=est.options.dtype, dropout=est.options.dropout,
                            mtp_layers=est.options.mtp_layers)
    return _hardware_total(transformed(graph, est.options, est.model, stage))  # fine-tuning's transforms too


@per_graph
def _hardware_total(graph: Graph) -> Expr:
    """A graph's hardware FLOPs as one expression, once per graph (structures of one stage's graph, e.g. the ZeRO
    stages of a layout, share the expression, so the grid prepares it once)."""
    return graph_flops(graph, phases=HARDWARE).total


def elementwise_flops(est: Evaluated) -> int:
    """Elementwise FLOPs of one micro-batch, whole model, that move memory: all of them, less the attention core's
    under a fused kernel (FlashAttention and SDPA keep the scores on chip)."""
    fused = est.options.attention_kernel != "eager"
    return est.quantity("elementwise_flops").value_where(est.values, lambda path: not (fused and "attn/core/" in path))


def cluster_of(options: Options, hw: GPU) -> Cluster:
    """The cluster the options describe (``--gpus-per-node``, ``--inter-node-bandwidth`` in Gb/s per GPU each way,
    ``--intra-node-link``) of ``hw`` GPUs."""
    # --gpus-per-node left at 8: the GPU's NVLink domain (GB200 NVL72: 72 GPUs on NVLink)
    per_node = hw.nvlink_domain if options.gpus_per_node == GPUS_PER_NODE else options.gpus_per_node
    return Cluster(hw, per_node, round(options.inter_node_bandwidth * 10**9 / 8), options.intra_node_link)


#: The most ZeRO-3 (FSDP) ranks a step time here is checked on: torchtitan's Llama 3 8B on 128 H100s
#: (tests/published_runs.py, held out). Past it the only measured runs are DeepSpeed's ZeRO-3 of 2021 at 384-2,240
#: A100s, where this model gives 30-78% less than the measured step time (Narayanan et al. 2021, Table 2; tests/published_runs.ZERO3_2021).
ZERO3_CHECKED_RANKS = 128


def zero3_caution(ranks: int) -> str | None:
    """A caution for a ZeRO-3 step sharded over more ranks than ``ZERO3_CHECKED_RANKS``, else None.

    >>> zero3_caution(128) is None, zero3_caution(1536)[:32]
    (True, 'ZeRO-3 over 1,536 ranks: past th')
    """
    if ranks <= ZERO3_CHECKED_RANKS:
        return None
    return (f"ZeRO-3 over {ranks:,} ranks: past the {ZERO3_CHECKED_RANKS} the time model is checked on (torchtitan's "
            "FSDP on 128 H100s); at 384-2,240 A100s DeepSpeed's ZeRO-3 took longer than this model gives (its time 30-78% short) "
            f"({cite(Citation('narayanan-2021', 'Table 2, ZeRO-3 without model parallelism'))}): this time may be "
            "optimistic")


#: What the time of an expert-parallel step leaves out, said beside it: the host. Megatron-Core's dropless all-to-all
#: dispatcher copies the tokens per expert to the host once per MoE layer and waits on them
#: (``MoEAlltoAllTokenDispatcher.preprocess``), after which the GPU runs only as fast as the host issues the layer's
#: many small kernels; NVIDIA's own DeepSeek-V3 tuning found the step host-bound without CUDA graphs.
MOE_HOST_CAUTION = ("MoE: not timed, the host: the dropless all-to-all dispatcher's device-to-host copy of the tokens "
                    f"per expert, once per MoE layer ({cite(EP_SOURCE)}), and the launches of the layer's small "
                    f"kernels, which left NVIDIA's DeepSeek-V3 runs host-bound without CUDA graphs "
                    f"({cite(Citation('megatron-dsv3-gb200', 'CPU overhead, host boundedness'))}); the host work "
                    "a source counts per MoE layer (router, the experts' GroupedLinear calls and their per-expert "
                    f"GEMMs, at measured per-call CPU costs: {cite(HOST_COST_SOURCE)}) stays below the layer's GPU "
                    "time on every published run (quantities/host_timeline.py), yet the published Megatron-Core runs "
                    "of fine-grained MoE (Qwen3 30B-A3B, gpt-oss) ran slower than this time "
                    "(tests/published_runs.MOE): read it as a lower bound")


CP_SOURCE = Citation("megatron-core-context-parallel", "ring of K/V chunks overlapped with attention",
                     also=(Citation("liu-2023-ring-attention", "§3: blockwise attention overlapped with the ring's "
                                    "send and receive"), Citation("te-context-parallel", "AttnFuncWithCPAndKVP2P"),
                           Citation("pytorch-context-parallel", "torchtitan's context_parallel, ring rotation"),
                           Citation("megatron-arguments", "--context-parallel-size")))


def context_parallel_s(est: Evaluated, cluster: Cluster, flops_per_s: float) -> float:
    """The ring exchange of one micro-batch on the busiest stage's layers, not hidden: each layer's attention runs
    cp steps, each on the K/V chunk at hand while the next arrives from the neighbour (Liu et al. 2023; Megatron-Core
    and Transformer Engine's AttnFuncWithCPAndKVP2P, torchtitan's rotate); cp - 1 sends of this rank's k and v in
    forward, cp - 1 of k, v and their gradients in backward (twice the bytes), a forward more under full recompute.
    A step's send hides behind that step's share (1/cp) of the attention's products; the ranks are t apart
    (Megatron's order tp-cp-dp-pp), on NVLink while the group stays in a node, else on the network."""
    opts = est.options
    c = opts.cp
    layer = est.graph.block("layer")
    attention = [op for op in layer.ops if "attention" in op.kind]
    sent = _unrecomputed(est)  # the ring moves k and v whatever the layer saves for backward
    chunk = _bytes(_cp_tensors(sent)[2], est.values)
    products = [f for op in attention for f in op.flops if f.kind == "matmul"]
    forward = sum(_bytes(f.count, est.values) for f in products if f.phase == "forward")
    backward = sum(_bytes(f.count, est.values) for f in products if f.phase not in ("forward", "recompute"))
    _, nodes = group_span(c, opts.tp, cluster.gpus_per_node)
    link = where(nodes > 1, cluster.network, cluster.peer)  # NCCL's per-NIC speed across nodes, per-link inside
    exposed = (c - 1) * (maximum(0.0, chunk / link - forward / c / flops_per_s)
                         + maximum(0.0, 2 * chunk / link - backward / c / flops_per_s))
    again = full_share(opts, est.values)  # the checkpointed layers' share (Megatron's block method: some only)
    if opts.recompute == "full":
        exposed += again * (c - 1) * maximum(0.0, chunk / link - forward / c / flops_per_s)
    if opts.framework == "megatron":  # Transformer Engine's merges of the steps' partial results, not overlapped
        q, out = (_bytes(x, est.values) for x in _cp_tensors(sent)[:2])
        ahead, back = te_cp_merge_bytes(c, q, out, chunk)
        exposed += (ahead * (1 + again) + back) / achievable_bandwidth(cluster.gpu)
    return _bytes(layer.repeat, est.values) * exposed


#: Transformer Engine's ring (AttnFuncWithCPAndKVP2P, the p2p cp_comm_type Megatron-Core passes when a recipe sets
#: none: megatron/core/extensions/transformer_engine.py L925-926 at core_v0.15.0; no Llama recipe of Megatron-Bridge
#: 25.11/26.02 sets one) merges each step's partial attention with memory-bound kernels outside the overlapped loop.
TE_CP_MERGE_SOURCE = Citation("te-context-parallel", "v2.9 context_parallel.py: forward L1366 torch.cat of k and v "
                              "into the send buffer; L1631-1690 the output corrections after the loop, on the current "
                              "stream (flash_attn_fwd_out_correction_init, flash_attn_fwd_out_correction: out.add_); "
                              "backward L2033-2038 dq_buffer like q, kv copied into the 16-bit send buffer; "
                              "L2262-2420 per step dq.add_(dq_), dk.add_(dk_), dv.add_(dv_) on one stream")


def te_cp_merge_bytes(c: int, q: Any, out: Any, kv: Any) -> tuple[Any, Any]:
    """Bytes Transformer Engine's p2p context parallelism moves outside its overlapped loop per layer and micro-batch
    on the rank that moves most (the last, whose every step covers its whole query: ``i <= rank``), forward and
    backward, for a rank's ``q``, ``out`` and ``k`` + ``v`` bytes in the 16-bit attention (``TE_CP_MERGE_SOURCE``):

    * forward: k and v concatenated into the send buffer (read, write: 2 kv); the first step's output scaled into a new
      out (read, write: 2 out); each of the c - 1 others added to it (read out, read the step's, write: 3 out);
    * backward: k and v copied into the send buffer (2 kv); dq copied at step 0 (2 q), added at the c - 1 others
      (3 q); dk and dv copied half at step 0 (kv), added half at steps 1 .. c - 2 (1.5 kv each), whole at the last
      (3 kv): (1.5 c + 1) kv, c >= 2.

    The softmax statistics' corrections (one fp32 per head and token, 1/d of the output) and the per-step ones
    inside the loop (on the second stream, behind the next step's attention) are left out.

    >>> te_cp_merge_bytes(2, 100, 100, 20)  # forward 2*20 + (2 + 3)*100; backward 2*20 + (2 + 3)*100 + 4*20
    (540, 620.0)
    """
    ahead = 2 * kv + (2 + 3 * (c - 1)) * out
    back = 2 * kv + (2 + 3 * (c - 1)) * q + (1.5 * c + 1) * kv
    return ahead, back


@per_graph
def _cp_tensors(graph: Graph) -> tuple[Any, Any, Any]:
    """A rank's q, attention output and k + v bytes per layer (``te_cp_merge_bytes``; k + v: the chunk one rank of
    the ring sends, ``context_parallel_s``), once per graph."""
    saved = [x for op in graph.block("layer").ops if "attention" in op.kind for x in op.saved]
    return tuple(sum((x.nbytes for x in saved if x.role in roles), 0) or 0
                 for roles in (("q",), ("attention-output",), ("k", "v")))


def _unrecomputed(est: Evaluated) -> Graph:
    """The estimate's per-rank graph without recompute, whose attention saves q, k, v and its output: under full
    recompute the layer saves its input alone, yet the ring still sends k and v and merges the steps' outputs."""
    opts = est.options
    if opts.recompute == "none":
        return est.graph
    base = est.model.graph(activation_dtype=opts.dtype, dropout=opts.dropout, mtp_layers=opts.mtp_layers)
    return transformed(base, derived(opts, recompute="none"), est.model)  # fine-tuning's transforms too, as est.graph


#: Megatron-Core's Muon without its layer-wise distributed optimizer (``--optimizer muon --zero 0``): Megatron-LM
#: refuses --overlap-grad-reduce, so DDP's all-reduce waits for the last backward to end (``data_parallel_s``).
MUON_OVERLAP_SOURCE = Citation("megatron-arguments-muon", "validate_args: if args.optimizer == 'muon': assert not "
                               "args.overlap_grad_reduce, 'Muon optimizer does not support overlap grad reduce. Use "
                               "dist_muon instead.'")


#: Under ZeRO-2 each micro-batch's backward reduce-scatters its gradients (``data_parallel_s``), read in each
#: framework's code: DeepSpeed's ZeRO stage 2 reduces its buckets from every backward's hooks, stage 1 only at the
#: accumulation boundary; Megatron-FSDP reduces every backward under 'optim_grads' (ZeRO-2) and
#: 'optim_grads_params'; FSDP2 reduce-scatters and reshards after every backward unless told not to, which
#: torch.distributed.pipelining does for every micro-batch of an FSDP stage.
ZERO2_SOURCE = Citation("deepspeed-zero2-estimator", "reduce_ready_partitions_and_remove_grads: `if "
                        "self.partition_gradients or self.is_gradient_accumulation_boundary()`; "
                        "independent_gradient_partition_epilogue: get_accelerator().synchronize() under overlap_comm",
                        also=(Citation("megatron-fsdp", "grad_reduce_every_bprop"),
                              Citation("pytorch-fsdp2", "_fsdp_param_group.py FSDPParamGroup.post_backward: "
                                       "reduce_grads and reshard_after_backward True by default"),
                              Citation("pytorch-pipelining-stage", "backward_maybe_with_nosync")))


def data_parallel_s(cluster: Cluster, grads: Any, d: int, stride: int, zero: int, m: int, micro_s: Any,
                    weights: Any = None, p: int = 1, v: int = 1, edge: Any = 0.0, calls: Any = 1,
                    experts: ExpertGroup | None = None, fsdp2: bool = False, gather_after: bool = False,
                    bucketed: bool = False, overlap_reduce: bool = True) -> Any:
    """Data-parallel communication not hidden behind compute, one step: ``grads`` the gradient bytes one GPU
    reduces, ``weights`` the weight bytes it gathers (``grads`` when not given; ``reduced_bytes``).

    ZeRO 0: one all-reduce of the gradients, bucketed behind the last micro-batch's backward (about 2/3 of
    its time; PyTorch DDP, Li et al. 2020 §3.2.3; Megatron-LM ``--overlap-grad-reduce``). ZeRO-1 (the distributed
    optimizer): a reduce-scatter behind that backward and the parameters' all-gather behind the next step's first
    forward (1/3). With ``v`` model chunks per GPU (the interleaved schedule over ``p`` stages) each chunk's share is
    launched on its own (``chunked_reduce_s``, ``chunked_gather_s``). ZeRO-2 (``ZERO2_SOURCE``): a gradient sharded
    1/d cannot accumulate over micro-batches, so every micro-batch's backward reduce-scatters its own gradients,
    each hidden behind that backward alone (DeepSpeed synchronizes the device at the end of each backward), the
    last as ZeRO-1's; the all-gather once a step as ZeRO-1's. ``fsdp2`` (torchtitan, torchtune): FSDP2 reshards the
    parameters after every backward, so each micro-batch's forward gathers them again (1/3 of its time to hide
    behind); with pipeline stages (``p`` > 1) torch.distributed.pipelining accumulates whole gradients and reduces
    once after the last backward has returned (``PIPELINED_FSDP2_CITATION``: ``post_backward`` of every group,
    called from ``backward_maybe_with_nosync`` once ``perform_backward`` is done), so that reduce-scatter is exposed
    whole; the gather as ZeRO-1's. ZeRO-3: every micro-batch gathers the weights
    for its forward and again for its backward and reduce-scatters its gradients (Rajbhandari et al. 2020 §7: 1.5x
    the all-reduce's volume, per micro-batch), prefetched behind that micro-batch's compute (FSDP), but for the
    step's edges: ``edge`` the share of the GPU's parameters in the units nothing hides (``fsdp_edge_share``),
    whose all-gather opens the step and whose reduce-scatter closes it, once a step. Each collective is ``calls``
    calls of an equal share (``data_parallel_calls``: Megatron's buckets, FSDP's units), each paying NCCL's latency
    (inside a node too, but for an all-reduce at the rated ring where NVLink SHARP runs: ``Cluster.node_ring``).

    ``experts``: the routed experts' part of ``grads`` and ``weights``, reduced and gathered over their own group
    (``ExpertGroup``, Megatron-Core's expert data-parallel ranks) on the same stream, one collective after the other:
    their times add before the overlap is taken.

    ``gather_after`` (Megatron-Core's Muon under its layer-wise distributed optimizer, ``--optimizer muon --zero 1``):
    ZeRO 0's all-reduce (DDP reduces whole gradients: no distributed optimizer), then, after the step, one all-gather
    of the updated weights per group, each rank's own whole parameters, hidden behind nothing (``allgather_params``
    in ``LayerWiseDistributedOptimizer.step`` when overlap_param_gather is off, as the Kimi-K2 recipe sets it).

    ``bucketed`` (Megatron-Core's DDP, ``--framework megatron`` at ZeRO 0-2): each of the ``calls`` buckets (all
    groups' together) is reduced once its gradients are final and gathered when its first module's forward needs it,
    so the last bucket's reduce-scatter and the first bucket's all-gather have nothing to hide behind
    (``BUCKET_PIPELINE_SOURCE``; ``chunked_reduce_s``, ``chunked_gather_s``).

    ``overlap_reduce`` False (Megatron-Core's Muon without its layer-wise optimizer, ``--optimizer muon --zero 0``:
    Megatron-LM asserts ``not overlap_grad_reduce``, ``MUON_OVERLAP_SOURCE``): ZeRO 0's all-reduce after the last
    backward, whole, hidden behind nothing."""
    if d <= 1:
        return 0.0
    weights = grads if weights is None else weights
    groups = [(grads, weights, d, stride, calls, 1)]
    if experts is not None:  # a group of one rank (d x cp = ep) moves nothing: ``live`` 0 (cell by cell)
        live = where(experts.ranks > 1, 1, 0)
        groups = [(grads - experts.grads, weights - experts.weights, d, stride, experts.dense_calls, 1),
                  (experts.grads, experts.weights, maximum(experts.ranks, 2), experts.stride, experts.calls, live)]

    def timed(collective: Any, part: int) -> Any:  # one collective of every group's bytes (0: grads, 1: weights)
        return sum(on * c * collective(g[part] / maximum(c, 1), n, s) for *g, n, s, c, on in groups)

    if zero == 3:
        per_micro = 2 * timed(cluster.all_gather, 1) + timed(cluster.reduce_scatter, 0)
        edge_s = sum(on * (cluster.all_gather(w * edge, n, s) + cluster.reduce_scatter(g * edge, n, s))
                     for g, w, n, s, _, on in groups)
        return edge_s + m * maximum(0.0, per_micro - edge_s / m - micro_s)
    buckets = sum(c * on for *_, c, on in groups) if bucketed else None  # Megatron-Core's, every group's that moves
    if zero == 0:
        reduced = timed(cluster.all_reduce, 0)
        reduced = chunked_reduce_s(reduced, micro_s, p, v, buckets) if overlap_reduce else reduced
        return reduced + sum(on * cluster.all_gather(w, n, s) for _, w, n, s, _, on in groups) if gather_after else reduced
    reduce, gather = timed(cluster.reduce_scatter, 0), timed(cluster.all_gather, 1)
    gathered = chunked_gather_s(gather, micro_s, p, v, buckets)
    once = chunked_reduce_s(reduce, micro_s, p, v, buckets) + gathered
    if zero == 1:
        return once
    sync = _zero2_sync(zero, d, p, fsdp2)
    if sync == "once":  # the stage's reduce-scatters start after its last backward has ended: nothing to hide behind
        return reduce + gathered
    # ZeRO-2: the m - 1 earlier micro-batches' reduce-scatters, each behind its own backward (2/3 of micro_s)
    each = once + (m - 1) * maximum(0.0, reduce - micro_s * 2 / 3)
    if sync == "each":
        return each
    return each + (m - 1) * maximum(0.0, gather - micro_s / 3)  # FSDP2: each later forward's all-gather


#: Megatron-Core's expert data-parallel group: the routed experts' gradient buffers are reduced, and under the
#: distributed optimizer their shards gathered, over the t x cp x d / (etp x ep) ranks that hold the same experts
#: (etp = t unless folded: ``Options.expert_tp``), ``etp x ep`` apart in the expert grid's order tp-ep-dp-pp; the
#: dense parameters over the t-apart data- and context-parallel ranks as before.
EDP_SOURCE = Citation("megatron-ddp", "DistributedDataParallel: expert_parallel_buffers over the expert data-parallel "
                      "group (intra_expt_dp_group), its own buckets", also=(EP_SOURCE,))


@dataclass(frozen=True, slots=True)
class ExpertGroup:
    """The routed experts' share of a GPU's data-parallel traffic: gradient and weight bytes, the ranks that hold
    the same experts, how far apart, and the buckets (calls) their collectives take (``expert_group``)."""

    grads: Any
    weights: Any
    ranks: Any
    stride: Any
    calls: Any
    dense_calls: Any  # the calls of the rest of the GPU's parameters, bucketed apart


def expert_group(est: Evaluated, grads: Any, weights: Any, zero: int) -> ExpertGroup | None:
    """``ExpertGroup`` of an estimate with routed experts under ``ep`` > 1 (``EDP_SOURCE``), else None: the
    experts' share of the GPU's parameters (their ``parameters_per_gpu`` terms, ``symbolic.experts.expert_ops``)
    of ``grads`` and ``weights``, over the expert data-parallel ranks, t x d x cp / (etp x ep) of them etp x ep
    apart (the expert grid tp-ep-dp-pp folds the t x d x cp ranks; etp = t unless folded: d x cp / ep ranks t x ep
    apart); Megatron-Core buckets them apart (``data_parallel_calls`` of their parameters over those ranks)."""
    o = est.options
    if o.ep <= 1 and not o.folded:
        return None
    routed = set(expert_ops(est.graph))
    if not routed:
        return None
    held = est.quantity("parameters_per_gpu").value_where(est.values, lambda path: path in routed)
    params = est.number("parameters_per_gpu")
    share = held / params
    ranks = layout_int(expert_zero_ranks(o), est.values)  # the ranks the memory shards their states over
    total = est.number("trainable_parameters") if o.finetuning else params
    experts = share * total if o.finetuning else held
    gathered = weights * share
    if fp8_gathered_elements(est):  # --fp8-param-gather: every expert weight 8-bit, the embedding and norms 16-bit
        width = state_widths(o.dtype, o.optimizer, o.precision)[0]
        gathered = held * width - (width - 1) * fp8_gathered_elements(est, routed=True)
    return ExpertGroup(grads * share, gathered, ranks, o.expert_tp * o.ep, _bucket_calls(est, experts, ranks, zero),
                       _bucket_calls(est, total - experts, o.dp * o.cp, zero))


#: Megatron-Core's gradient buckets (``DistributedDataParallel``: ``bucket_size = max(40000000, 1000000 *
#: dp_group.size())`` elements, "large enough to remain bandwidth-bound rather than latency-bound" in NCCL's rings).
BUCKETS_SOURCE = Citation("megatron-ddp", "DistributedDataParallel.__init__: bucket_size = max(40000000, 1000000 * "
                          "dp_group.size())")


def data_parallel_calls(est: Evaluated, zero: int) -> Any:
    """How many NCCL calls one data-parallel collective of the GPU's gradients or weights takes: ZeRO-3 (FSDP), one
    per unit, each transformer block of the stage and, without pipeline parallelism, the embedding and [norm,
    output] (torchtitan's ``apply_fsdp``); ZeRO 0-2 under ``--framework megatron``, Megatron-Core's buckets of
    max(40,000,000, 1,000,000 x d) elements (d the data- and context-parallel ranks), per model chunk under the
    interleaved schedule; else one call (Megatron-LM of 2021 all-reduced its contiguous buffer at once; PyTorch
    DDP's 25 MB buckets are not modelled)."""
    o = est.options
    params = est.number("trainable_parameters") if o.finetuning else est.number("parameters_per_gpu")
    return _bucket_calls(est, params, o.dp * o.cp, zero)


def _bucket_calls(est: Evaluated, params: Any, ranks: Any, zero: int) -> Any:
    """``data_parallel_calls`` of ``params`` parameters reduced over ``ranks``."""
    o = est.options
    if zero == 3:
        return _bytes(est.graph.block("layer").repeat, est.values) + (2 if o.pp == 1 else 0)
    if o.framework != "megatron":
        return 1
    v = o.virtual_stages or 1
    bucket = maximum(40_000_000, 1_000_000 * ranks)
    return v * -(-params // (v * bucket))


FSDP_EDGES = Citation("torchtitan-parallelize", "apply_fsdp: fully_shard(tok_embeddings), then each transformer "
                      "block, then [norm, output] with reshard_after_forward False", also=(
                          Citation("pytorch-fsdp2", "fully_shard: each module's all-gather issued in its pre-forward, "
                                   "the root's post-backward waits on the last reduce-scatter"),))


def fsdp_edge_share(est: Evaluated) -> Any:
    """The share of one GPU's parameters that FSDP gathers and reduces with no compute to hide behind, once a
    step: the token embedding, wrapped on its own and first in the forward (torchtitan's ``apply_fsdp``), and the
    first transformer block, whose all-gather runs behind the embedding's lookup alone (a memory-bound gather of
    b s rows: microseconds); in the backward the same two units' reduce-scatters come last, after the final
    block's and the embedding's backward, and the optimizer step waits on them (FSDP2's root post-backward).
    [norm, output] are kept gathered from the forward for the backward's start (``reshard_after_forward`` False).
    Under pipeline parallelism the busiest stage's first block alone (its embedding, if any, is on stage 0)."""
    layer = est.graph.block("layer")
    block = sum((x.numel for op in layer.ops for x in op.params), 0)
    embedding = sum((x.numel for blk in est.graph.blocks for op in blk.ops if op.kind == "embedding"
                     for x in op.params), 0) if est.options.pp == 1 else 0
    edge = _bytes(block + embedding, est.values) if block or embedding else 0
    return edge / est.number("parameters_per_gpu")


#: Megatron-Core's interleaved schedule posts each chunk's activation send and the next receive after its forward
#: (and the gradient's after its backward) and waits on them only before the next chunk needs them, so the transfer
#: runs behind the compute in between (``overlap_p2p_comm``: on by default, forced off without virtual stages).
P2P_OVERLAP = Citation("megatron-schedules", "forward_backward_pipelining_with_interleaving: pp_post_forward "
                       "send_forward_recv_forward(overlap_p2p_comm=True), pp_pre_forward recv_prev_wait_handle.wait()",
                       also=(Citation("megatron-arguments", "--no-overlap-p2p-communication (dest overlap_p2p_comm, "
                                      "default True); at d98e8a64 L1012: False without the interleaved schedule"),))


#: Megatron-LM's per-chunk gradient and parameter syncs under the interleaved schedule (``chunked_reduce_s``).
CHUNK_SYNC_SOURCE = Citation("megatron-schedules", "backward_step_helper_postprocess: grad_sync_func[chunk] after its "
                             "last micro-batch; forward_step_helper_preprocess: param_sync_func[chunk + 1]")


#: Megatron-Core's buckets in flight (``data_parallel_s``'s ``bucketed``): a bucket's reduce-scatter is dispatched in
#: the last micro-batch once all its gradients are ready (the backward runs the buckets in order, the first layers'
#: last), each bucket's all-gather when the forward reaches its first module: without the interleaved schedule the
#: forward pre-hook waits on that bucket's gather and then dispatches the next (so the first is waited on whole);
#: under it (``align_param_gather``, on by default there) each chunk's buckets are dispatched together by the
#: schedule's ``param_sync_func``, the first layers' bucket last of them (buckets follow the backward's order), so a
#: chunk's first forward waits on its whole gather.
BUCKET_PIPELINE_SOURCE = Citation("megatron-param-buffer", "_ParamAndGradBucketGroup.register_grad_ready L863-885 "
                                  "(start_grad_sync once every param of the bucket is ready, last micro-batch); "
                                  "finish_param_sync L538-573 (wait, then next_param_gather_bucket_group."
                                  "start_param_sync)", also=(
                                      Citation("megatron-ddp", "at d98e8a64 __init__ L369-380: next_param_gather_bucket_group in "
                                               "reverse bucket order; start_param_sync L619-639: every bucket group "
                                               "dispatched in bucket order"),
                                      Citation("megatron-arguments", "at d98e8a64 L1013: align_param_gather False without the "
                                               "interleaved schedule; L3153: --no-align-param-gather, on by default")))


def chunked_reduce_s(reduce_s: Any, micro_s: Any, p: int, v: int, buckets: Any = None) -> Any:
    """Seconds of the gradient reduction (``reduce_s`` for all of a GPU's weights) past the end of its last backward.

    Megatron-LM's interleaved schedule (``megatron/core/pipeline_parallel/schedules.py``,
    ``backward_step_helper_postprocess``: ``grad_sync_func[chunk]`` once that chunk's last micro-batch is through
    backward) reduces each of the ``v`` model chunks' gradients as soon as they are final; in the cooldown the
    chunks finish ``p`` chunk-backwards apart, the last-numbered first. Each reduction (``reduce_s / v``) runs
    behind its chunk's last backward (2/3 of a micro-batch's ``micro_s``, over ``v``) and they run one after another
    on the data-parallel stream. ``buckets`` (Megatron-Core's, all chunks': ``BUCKET_PIPELINE_SOURCE``): a chunk's
    ``buckets / v`` buckets are ready one after another through that backward, each reduced once ready, so the
    first starts a bucket's share of the backward in and the last starts when the backward ends; None: as if the
    reduction could follow the backward continuously (the frameworks whose buckets are not modelled). One chunk:
    ``max(0, reduce_s - 2 micro_s / 3)``, and with n buckets ``max(reduce_s / n, reduce_s - (n - 1)/n 2 micro_s / 3)``.

    >>> [round(chunked_reduce_s(1.0, 0.6, 4, v), 6) for v in (1, 3)]  # 1 - 0.4; with 3 chunks the last's 1/3 - 2/15
    [0.6, 0.2]
    >>> [round(chunked_reduce_s(0.2, 0.6, 1, 1, n), 6) for n in (1, 4)]  # one bucket: all 0.2; four: the last's 0.05
    [0.2, 0.05]
    """
    share, backward = reduce_s / v, micro_s * 2 / 3 / v
    lead, last = (0.0, 0.0) if buckets is None else (backward * v / buckets, share * v / buckets)
    finish: Any = -math.inf
    for k in reversed(range(_most(v))):  # chunk k's backward ends k p chunk-backwards before the step's last
        ends = (k * p + 1) * backward  # its last backward starts this long before the step's last backward ends
        # the bucket queue: max(what came before + this chunk's share, its first bucket's start + the share, its
        # last bucket's start + that bucket)
        done = maximum(maximum(finish + share, share - ends + lead), backward - ends + last)
        finish = where(k < v, done, finish)
    return maximum(0.0, finish)


def chunked_gather_s(gather_s: Any, micro_s: Any, p: int, v: int, buckets: Any = None) -> Any:
    """Seconds the next step's forward waits on the distributed optimizer's parameter all-gather (``gather_s`` for
    all of a GPU's weights; Megatron-LM ``--overlap-param-gather``).

    Each chunk's share (``gather_s / v``) is needed by that chunk's first forward, whose time (1/3 of ``micro_s``,
    over ``v``) it overlaps; the interleaved schedule starts chunk k's first forward after k p chunk-forwards
    (``schedules.py``: ``param_sync_func`` for chunks 0 and 1 at the start, chunk k + 1's during chunk k's first
    forward). The gathers run one after another; a wait delays every later deadline. ``buckets`` (Megatron-Core's,
    ``BUCKET_PIPELINE_SOURCE``): under the interleaved schedule a chunk's first forward waits on its whole share;
    with one chunk the forward waits on the first of its n buckets and each later bucket's gather runs behind the one
    before it's forward (``max(gather_s / n, gather_s - (n - 1)/n micro_s / 3)``); None: as if the gather could run
    behind the whole first forward. One chunk, None: ``max(0, gather_s - micro_s / 3)``.

    >>> [round(chunked_gather_s(0.5, 0.6, 4, v), 6) for v in (1, 3)]  # 0.5 - 0.2; chunk 0's 1/6 - 1/15
    [0.3, 0.1]
    >>> [round(chunked_gather_s(0.1, 0.6, 4, v, 12), 6) for v in (1, 3)]  # the first of 12 buckets; chunk 0's third
    [0.008333, 0.033333]
    """
    share, forward = gather_s / v, micro_s / 3 / v
    # how much of the chunk's first forward its gather may run behind: all of it, its first bucket's share less, none
    behind: Any = forward if buckets is None else where(v > 1, 0.0, forward - forward * v / buckets)
    finish: Any = 0.0
    waited: Any = 0.0
    for k in range(_most(v)):
        launch = 0.0 if k < 2 else ((k - 1) * p) * forward + waited
        done = maximum(finish, launch) + share
        late = maximum(0.0, done - (k * p * forward + behind + waited))
        if buckets is not None:  # one chunk: its first bucket is waited on whole, however fast the rest
            late = where(v > 1, late, maximum(late, share * v / buckets))
        finish, waited = where(k < v, done, finish), where(k < v, waited + late, waited)
    return waited


def _most(v: Any) -> int:
    """The largest chunk count of ``v`` (a number, or a column of layouts: the loops above mask the others)."""
    return int(v.max()) if is_column(v) else int(v)


def reduced_bytes(est: Evaluated) -> tuple[Any, Any]:
    """(gradient bytes one GPU reduces over the data-parallel ranks, weight bytes it gathers) per step.

    The gradients are those of the trainable parameters (DDP and FSDP reduce what requires a gradient: LoRA's
    adapters, not the frozen base) in the gradient buffer's dtype: Megatron-LM's fp32 ``main_grad`` under
    ``--grad-buffer fp32`` (``accumulate_allreduce_grads_in_fp32``, forced under ``--bf16``: the buffer it
    reduce-scatters, megatron/core/distributed/param_and_grad_buffer.py), else the trainable weights' dtype
    (fp32 under autocast). The weights gathered (ZeRO 1-3) are all the GPU's parameters in their dtype."""
    o = est.options
    params = est.number("parameters_per_gpu")
    width, grad = state_widths(o.dtype, o.optimizer, o.precision)[0], reduced_gradient_width(o)
    trained = est.number("trainable_parameters") if o.finetuning else params
    return trained * grad, params * width - (width - 1) * fp8_gathered_elements(est)  # --fp8-param-gather: 1 B


#: The token embedding's weight, the one a tied LM head shares (``models.architectures``).
TIED_WEIGHT = "embed/tokens.weight"


def deepspeed_data_parallel_s(est: Evaluated, cluster: Cluster) -> float:
    """Data-parallel communication of DeepSpeed's engine (``--grad-sync deepspeed``), none of it hidden: after the
    last micro-batch's backward the pipeline schedule reduces the tied embedding's fp32 gradient between the first
    and last stage (ReduceTiedGrads) and all-reduces the fp32 gradients over the data-parallel ranks (ReduceGrads:
    ``buffered_allreduce_fallback`` of the bf16 optimizer's fp32 gradients, ZeRO 0-1; under ZeRO-2 a reduce-scatter
    in every micro-batch's backward, ``ZERO2_SOURCE``; ZeRO-3's per-micro-batch traffic is not timed here);
    under ZeRO 1-2 each rank's updated 16-bit shard is then all-gathered (the bf16 optimizer's
    ``update_lp_params``). Under fp16 (DeepSpeed's FP16 optimizer, as MT-NLG trained in 2021) the pipeline engine
    reduces the 16-bit ``.grad`` (``_exec_reduce_grads``: ``allreduce_gradients``), ZeRO-1 by a reduce-scatter at
    the accumulation boundary (``engine.allreduce_gradients``: ``optimizer.reduce_scatter_gradients`` for stage 1,
    DeepSpeed v0.3-v0.5)."""
    o = est.options
    t, d, p = o.tp, o.dp * o.cp, o.pp
    params = est.number("parameters_per_gpu")
    width = 2 if o.dtype == "fp16" else 4  # fp16: the 16-bit .grad; else the bf16 optimizer's fp32 gradients
    if o.zero == 2:  # stage 2 reduces in every micro-batch's backward (ZERO2_SOURCE), here none of it hidden
        reduce = (o.micro_batches or 1) * cluster.reduce_scatter(params * width, d, t)
    elif o.zero >= 2 or (o.zero == 1 and o.dtype == "fp16"):
        reduce = cluster.reduce_scatter(params * width, d, t)
    else:
        reduce = cluster.all_reduce(params * width, d, t)
    gather = cluster.all_gather(params * 2, d, t) if o.zero >= 1 else 0.0
    tied = 0.0
    if p > 1 and est.model.arch.tied_embeddings:
        embedding = sum((x.numel for blk in est.graph.blocks for op in blk.ops if op.kind == "embedding"
                         for x in op.params if f"{blk.name}/{x.name}" == TIED_WEIGHT), 0)  # not the positions
        tied = cluster.all_reduce(_bytes(embedding, est.values) * width, 2, t * d * (p - 1))
    return reduce + gather + tied


def step_time(est: Evaluated, gpu: GPU | str | Cluster, efficiency: float | None = None) -> StepTime:
    """Time of one optimizer step of a training estimate (``mode="train"``) on ``gpu`` (a name, a ``GPU`` or a
    ``Cluster``; a name or GPU takes the cluster of the estimate's options).

    Micro-batches per step: ``options.micro_batches`` (1 when not given). ``efficiency``: a fraction of dense peak
    to use instead of the products' measured rates (``gemm_efficiency``). The plan search ranks layouts by
    ``step_time(...).step_s``, evaluated for the layouts of one structure at once (``search.columns``: the
    estimate's options and values columns of them, ``derivations.columns`` for what differs row by row).
    """
    if isinstance(gpu, Cluster):
        cluster, hw = gpu, gpu.gpu
    else:
        hw = lookup(gpu) if isinstance(gpu, str) else gpu
        cluster = cluster_of(est.options, hw)
    if efficiency is not None and not 0 < efficiency <= 1:
        raise ValueError(f"--efficiency must be a fraction of peak in (0, 1], got {efficiency!r}")
    opts, values = est.options, est.values
    t, p, d, m, v = opts.tp, opts.pp, opts.dp, opts.micro_batches or 1, opts.virtual_stages or 1
    eff = efficiency if efficiency is not None else gemm_efficiency(hw, est)
    stage = _stage_flops(est)
    fp8 = float8_flops(est)  # torchao's scaled matmuls at the fp8 peak (none without --fp8)
    # a given efficiency is of each dtype's dense peak; the measured rates' fp8 over bf16 is the MSMF's or MAMF's (efficiency.py)
    fp8_ratio = (fp8_rate_ratio(hw) if efficiency is None else
                 hw.peak_flops(low_precision(opts.fp8)) / hw.bf16_flops)
    if opts.fp8 != "none" and efficiency is None:  # each layer product at its own kernel's rate, in its own dtype
        products, inside = product_flops(est)
        rest = fp8 - inside  # Float8 matmuls outside the layers' products (a converted head): the ratio
        micro = ((stage - products - rest) / (hw.bf16_flops * eff) + rest / (hw.bf16_flops * eff * fp8_ratio)
                 + products / (hw.bf16_flops * gemm_efficiency(hw, est, fp8=opts.fp8)))
    else:  # a given efficiency: of each dtype's dense peak
        micro = (stage - fp8) / (hw.bf16_flops * eff) + fp8 / (hw.bf16_flops * eff * fp8_ratio)
    eager_micro = copy_micro = optimizer = accumulate_micro = elementwise_micro = cast_micro = cast_step = 0.0
    if efficiency is None:  # elementwise work at the bandwidth a streaming kernel reaches (memory_bound.py)
        bandwidth = achievable_bandwidth(hw)
        # memory-bound work (memory_bound.py): unfused kernels' extra, on the busiest stage
        extra = eager_extra_bytes(est) if opts.kernels == "eager" else 0
        eager_micro = extra * stage / est.number("hardware_flops_per_gpu") / bandwidth if extra else 0.0
        # every elementwise kernel's reads and writes, fused, and the passes the framework's code runs unfused
        # (memory_bound.py), on the busiest stage
        elementwise_micro = ((fused_elementwise_bytes(est) + unfused_framework_bytes(est)) * stage
                             / est.number("hardware_flops_per_gpu") / bandwidth)
        # Transformer Engine's fp8 quantization (memory_bound.py), on the busiest stage: per micro-batch, per step
        te_micro, te_step = fp8_cast_bytes(est, te_transposes(opts.fp8, hw.name))
        casts = (te_micro + torchao_cast_bytes(est), te_step)  # torchao's tensorwise casts per micro-batch
        cast_micro, cast_step = (x * stage / est.number("hardware_flops_per_gpu") / bandwidth for x in casts)
        copy_micro = where(d * opts.cp > 1, zero3_copy_bytes(est) / bandwidth, 0.0)
        optimizer = optimizer_bytes(est) / bandwidth + (newton_schulz_s(est, _gemm_rate(hw)) if opts.optimizer == "muon" else 0.0)
        accumulate_micro = fp32_accumulation_bytes(est) / bandwidth
    base = est.model.graph(activation_dtype=opts.dtype, dropout=opts.dropout, mtp_layers=opts.mtp_layers)
    tp_micro = pp_micro = margin_micro = split_micro = 0.0
    whole = whole_model(base, opts) if t > 1 or opts.ep > 1 else None
    if t > 1:  # each rank's s/cp tokens under context parallelism
        quantized, gathered = quantized_gathers(est, whole)
        share, modules = full_share(opts, values), bool({"mlp", "moe", "shared_experts"} & set(opts.recomputed_modules))
        fwd, bwd = tp_bytes(whole, values, share, modules, quantized, gathered, experts=not opts.folded)
        total = (fwd + bwd) / p / opts.cp
        message = _bytes(base.block("layer").input.nbytes, values) / opts.cp
        if group_span(t, 1, cluster.gpus_per_node)[1] > 1:  # past a node: NCCL's cost model call by call (cluster.py)
            tp_micro = total / message * cluster.all_reduce(message, t, 1)
        else:  # each all-reduce is one layer's activations: at the measured speed of that size (cluster.py)
            measured = cluster.intra_link != "pcie"  # the curves were measured on NVLink
            tp_micro = (total / message * cluster.all_reduce(message, t, 1)
                        / (_cells(lambda x, n: all_reduce_fraction(hw, x, n), message, t) if measured else 1.0))
        if opts.tp_comm_overlap:  # TE's userbuffers, PyTorch's AsyncTP: each transfer behind its own GEMMs
            # torchtitan's AsyncTP: what PyTorch's pattern matcher fuses, its stacked partials summed (tp_overlap.py)
            forms = overlap_forms(whole, float8=quantized, gathered=gathered, experts=not opts.folded,
                                  micro_pipeline=opts.async_tp)
            # TE's userbuffers take SMs from the GEMMs they overlap (symbolic/userbuffers.py); not AsyncTP's kernels
            ub = {} if opts.async_tp else UB_CONFIGS[opts.tp_comm_overlap_cfg]
            pairs, margin_micro, split_micro = overlap_time(forms, values, share, modules, t, p, opts.cp,
                                                            tp_micro / total, _gemm_rate(hw), ub, hw.sms,
                                                            micro_pipeline=opts.async_tp)
            # the partial chunks a fused or ring-exchanged reduce-scatter sums in a pass of its own
            ring = ring_reduce_scatters(ub)
            tp_micro = exposed_s(pairs, t) + (_stacked_sum_s(whole, values, share, t, p, opts.cp, hw, ring)
                                              if opts.async_tp or ring else 0.0)
            micro += margin_micro + split_micro
    # the dispatched volume is what the experts gather, read off a graph that saves it (recompute drops saved tensors)
    sizes = est.model.sizes
    ep_micro = expert_parallel_s(cluster, dispatched_bytes(whole_model(base, derived(opts, recompute="none")), values),
                                 opts, (sizes["E"], sizes["k"]) if "E" in sizes else None, values
                                 ) if opts.ep > 1 else 0.0
    if opts.moe_a2a_overlap:  # the combined 1F1B schedule (a2a_overlap.py); a selective moe recompute's two exposed
        four = ep_micro * 4 / all_to_alls(opts, values)
        ep_micro = (overlapped_ep_s(est.graph, values, micro, four, m, p, v) + m * (ep_micro - four)) / m
    if p > 1:
        boundary = _bytes(base.block("layer").input.nbytes, values) / (t if opts.sp else 1) / opts.cp
        send = cluster.send(boundary, t * opts.cp * d, p)  # Megatron's rank order tp-cp-dp-pp
        pp_micro = 2 * v * send
        if opts.framework == "megatron" and opts.p2p_overlap:  # the interleaved schedule's, behind compute (P2P_OVERLAP)
            pp_micro = where(v > 1, 2 * v * maximum(0.0, send - micro / (3 * v)), pp_micro)
    cp_micro = context_parallel_s(est, cluster, hw.bf16_flops * eff) if opts.cp > 1 else 0.0
    # Transformer Engine's blocking amax all-reduces (te_amax.py), the per-layer ones on the busiest stage
    amax_micro = amax_micro_s(est, cluster, full_share(opts, values), opts.recompute == "selective")
    memory_micro = eager_micro + copy_micro + accumulate_micro + elementwise_micro + cast_micro
    bubble = (p - 1) / (m * v) * m * (micro + memory_micro + tp_micro + pp_micro + ep_micro + cp_micro + amax_micro)
    grads, weights = reduced_bytes(est)
    zero = 3 if opts.offload_params else opts.zero  # FSDP's CPU offload shards as ZeRO-3 does
    muon = ("layer-wise" if opts.layer_wise else "whole") if opts.optimizer == "muon" else ""
    # Megatron-LM reduces the gradients over the data- and context-parallel ranks together (t apart)
    dp_sm_s: Any = 0.0
    if opts.grad_sync == "deepspeed":
        dp_s = deepspeed_data_parallel_s(est, cluster)
    else:
        edge = fsdp_edge_share(est) if zero == 3 else 0.0
        experts, calls = expert_group(est, grads, weights, zero), data_parallel_calls(est, zero)

        def data_parallel(behind: Any) -> Any:  # not hidden behind ``behind`` seconds of a micro-batch's compute
            # Muon's layer-wise optimizer (Options.layer_wise): ZeRO 0's all-reduce, then the weights gathered
            return data_parallel_s(cluster, grads, d * opts.cp, t, 0 if opts.layer_wise else zero, m, behind,
                                   weights, p, v, edge, calls, experts, fsdp2=opts.framework in FSDP2_FRAMEWORKS,
                                   gather_after=opts.layer_wise,
                                   overlap_reduce=not (muon == "whole" and opts.framework == "megatron"),
                                   bucketed=opts.framework == "megatron" and zero < 3)

        dp_s = data_parallel(micro + memory_micro)
        # what runs hidden holds NCCL's SMs, across nodes (NCCL_SMS): the compute beside it loses their share; the
        # routed experts' own data-parallel group (expert_group) spans nodes otherwise: not timed
        inside, nodes = group_span(d * opts.cp, t, cluster.gpus_per_node)
        if hw.sms and experts is None and (is_column(nodes) or nodes > 1):  # a column: cell by cell (no numpy)
            hidden = maximum(0.0, data_parallel(0.0) - dp_s)
            dp_sm_s = where(nodes > 1, hidden * collective_sms(inside) / hw.sms, 0.0)
    tokens = values[_sym("b")] * values[_sym("s")] * m * d
    model_flops = est.number("model_flops") * m * d
    offload = None
    if opts.offload:  # ZeRO-Offload's copies and CPU step (offload_time.py)
        n = d * opts.cp
        reduce_s = cluster.reduce_scatter(grads, n, t) if opts.zero else cluster.all_reduce(grads, n, t)
        offload = offload_time(est, cluster, (micro + memory_micro) * 2 / 3, reduce_s)
    elif opts.offload_params:  # FSDP2's CPU offload: copies each micro-batch, the CPU step (param_offload_time.py)
        offload = param_offload_time(est, cluster, micro + memory_micro, m)
    return StepTime(hw, eff, m * micro, bubble, m * tp_micro, m * pp_micro, dp_s, tokens, model_flops,
                    t * p * d * opts.cp, cluster, efficiency is None, m * ep_micro, m * cp_micro, opts.cp,
                    fp8 / stage if stage else 0.0, m * eager_micro, m * copy_micro, optimizer, opts.kernels,
                    m * accumulate_micro, opts.grad_sync,
                    offload_copy_s=offload.copy_s if offload else 0.0, cpu_optimizer_s=offload.cpu_s if offload else 0.0,
                    host_memory_bandwidth=opts.host_memory_bandwidth if offload else None,
                    zero3_ranks=d * opts.cp if zero == 3 else 0,
                    param_offload=opts.optimizer if opts.offload_params else None, framework=opts.framework,
                    elementwise_s=m * elementwise_micro, unfused=runs_unfused(est), tp_comm_overlap=opts.tp_comm_overlap,
                    async_tp=opts.async_tp, ub_margin_s=m * margin_micro, ub_split_s=m * split_micro, dp_sm_s=dp_sm_s,
                    ub_config=opts.tp_comm_overlap_cfg,
                    moe_dispatcher=opts.moe_dispatcher, moe_a2a_overlap=opts.moe_a2a_overlap, fp8_cast_s=m * cast_micro + cast_step, fp8=opts.fp8,
                    fp8_param_gather=opts.fp8_param_gather, fsdp_primary=opts.fsdp_fp8_params,
                    sp=bool(opts.sp), zero2=_zero2_sync(zero, opts.dp * opts.cp, opts.pp, opts.framework in FSDP2_FRAMEWORKS,
                                                       opts.grad_sync == "deepspeed"),
                    activation_offload_layers=opts.activation_offload_layers,
                    activation_offload_s=activation_offload_s(est, hw, micro + memory_micro, m),
                    muon=muon, p2p_overlap=opts.p2p_overlap, fp8_amax_s=m * amax_micro,
                    tp_only_amax_red=opts.tp_only_amax_red,
                    mamba=est.model.arch.hybrid is not None and "mamba" in est.model.arch.hybrid.kinds)


def _stacked_sum_s(whole: Graph, values: Mapping[Any, Any], share: Any, t: int, p: int, cp: int, hw: GPU,
                   names: tuple[str, ...] = ()) -> Any:
    """Seconds of one micro-batch's fused reduce-scatters' own sums under PyTorch's AsyncTP (``tp_overlap``'s NOTE),
    or of the ring-exchanged ones under TE's userbuffers (``names``: the linears whose forward reduce-scatter a ring
    exchange runs, ``tp_overlap.RING_REDUCE``): each forward's (and full recompute's rerun of) row-parallel outputs,
    read whole in the activation dtype and written over t, on a GPU of the busiest stage at the bandwidth a
    streaming kernel reaches."""
    partials = _bytes(reduced_partials(whole, names=names), values) * (1 + share) / p / cp
    return partials * (1 + 1 / t) / achievable_bandwidth(hw)


def _zero2_sync(zero: int, d: Any, p: Any, fsdp2: bool, deepspeed: bool = False) -> str:
    """How a ZeRO-2 step over ``d`` > 1 ranks reduces its gradients, the one decision ``data_parallel_s`` times and
    the note names: "each" micro-batch, "regather" (FSDP2, its parameters gathered again in each forward), "once"
    (FSDP2 under pipeline stages), "exposed" (``deepspeed``: --grad-sync deepspeed, each micro-batch's, none
    hidden); empty otherwise."""
    if zero != 2 or not bool(d > 1):
        return ""
    if deepspeed:
        return "exposed"
    if not fsdp2:
        return "each"
    return "once" if bool(p > 1) else "regather"


def _gemm_rate(hw: GPU) -> Any:
    """``rate(dtype, m, n, k)``: FLOP/s of one product on ``hw`` at its shape (``efficiency.matmul_rate``), cell by
    cell on columns of layouts."""
    return lambda dt, m, n, k: _cells(lambda *mnk: matmul_rate(hw, dt, *mnk), m, n, k)


def _cells(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, cell by cell where an argument is a column of layouts (``derivations.columns``); equal cells
    once."""
    size = next((len(x) for x in args if is_column(x)), None)
    if size is None:
        return fn(*args)
    done: dict[tuple, Any] = {}
    out = np.empty(size, dtype=object)
    out[:] = [done[k] if k in done else done.setdefault(k, fn(*k))
              for k in zip(*(x if is_column(x) else [x] * size for x in args))]
    return out


def product_flops(est: Evaluated) -> tuple[Any, Any]:
    """Hardware FLOPs per micro-batch of the layers' products (``gemm_products``: linears, experts, the attention
    core), every phase: the FLOPs ``gemm_efficiency`` weighs; and of them, those that run in fp8 under the
    estimate's ``--fp8`` (``float8_phases``)."""
    rows = gemm_products(est.graph)
    total = sum(layout_int(sum(p[1:3 if p[0] == "flash" else 4], 0), est.values) for p in rows)
    fp8 = sum(layout_int(sum((x for x, on in zip(p[1:4], phases) if on), 0), est.values)
              for p, phases in zip(rows, float8_phases(est.graph, est.options.fp8)) if any(phases))
    return total, fp8


def float8_flops(est: Evaluated) -> int:
    """Hardware FLOPs per micro-batch of the Float8 linears' scaled 8-bit matmuls (``--fp8``), read off the graph:
    each Float8 linear's matmul terms, forward, input and weight gradients and recompute, less the weight gradient
    that ``rowwise_with_gw_hp`` keeps 16-bit (``symbolic.float8.float8_matmul_flops``); 0 without ``--fp8``."""
    if est.options.fp8 == "none":
        return 0
    if est.options.fp8 in TE_FP8:  # Transformer Engine: every layer linear's forward, dgrad and wgrad GEMMs
        return product_flops(est)[1]

    return layout_int(float8_matmul_flops(est.graph, est.options.fp8, HARDWARE), est.values)  # columns: each layout


def _sym(name: str) -> Any:
    return sym(name)


@dataclass(frozen=True, slots=True)
class InferenceTime:
    """Prefill and per-step decode time of one replica (roofline), decode and end-to-end throughput."""

    gpu: GPU
    efficiency: float
    prefill_s: float
    decode_step_s: float
    batch: int
    new_tokens: int
    prefill_bound: str
    decode_bound: str
    experts_read: float | None = None  # MoE: the fraction of routed experts one decode step reads

    @property
    def tokens_per_s(self) -> float:
        """Decode alone: tokens per second while every sequence is generating."""
        return self.batch / self.decode_step_s

    @property
    def generate_s(self) -> float:
        """Prefill plus n decode steps, each at the last step's length (an upper bound)."""
        return self.prefill_s + self.new_tokens * self.decode_step_s

    @property
    def end_to_end_tokens_per_s(self) -> float:
        """New tokens over the whole request, prefill included (b n / (prefill + n decode steps))."""
        return self.batch * self.new_tokens / self.generate_s if self.new_tokens else 0.0

    def model(self) -> tuple[str, ...]:
        experts = ("" if self.experts_read is None else
                   f"; of the routed experts, the {self.experts_read:.1%} a batch of {self.batch} touches, "
                   "E(1 - (1 - k/E)^b) of E per layer (each token picks k of E)")
        return (f"roofline on {self.gpu.title}: the longer of FLOPs at {self.efficiency:.0%} of the dense peak and "
                f"bytes at {self.gpu.memory_bandwidth / 1e9:,.0f} GB/s memory bandwidth, plus TP all-reduces",
                f"prefill: b prompts of s tokens, reads the weights once ({self.prefill_bound}-bound)",
                f"decode step: one token per sequence, reads the weights{experts} and the whole KV cache at s + n "
                f"tokens ({self.decode_bound}-bound); generation time = prefill + n decode steps (an upper bound); "
                "end-to-end tokens/s = b n / generation time")

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu.name, "efficiency": self.efficiency, "prefill_time_s": self.prefill_s,
                "decode_time_per_token_s": self.decode_step_s, "tokens_per_s": self.tokens_per_s,
                "generate_time_s": self.generate_s, "end_to_end_tokens_per_s": self.end_to_end_tokens_per_s}


def experts_touched(experts: int, top_k: int, tokens: int) -> float:
    """Expected fraction of E routed experts that ``tokens`` tokens, each choosing k of them, touch:
    1 - (1 - k/E)^tokens (uniform routing; E(1 - (1 - k/E)^b) distinct experts)."""
    return 1 - (1 - top_k / experts) ** tokens


def decode_bytes(est: Evaluated, batch: int) -> tuple[int | float, float | None]:
    """Bytes one decode step reads per GPU (weights, only the routed experts the batch touches, and the KV cache),
    and that fraction of the experts (None without experts)."""
    terms = est.quantity("weight_bytes").term_ints(est.values)
    experts = sum(v for k, v in terms if "/experts" in k)
    dense = est.number("weight_bytes") - experts
    kv = est.number("kv_cache_bytes")
    if not experts:
        return dense + kv, None
    z = est.model.sizes
    touched = experts_touched(z["E"], z["k"], batch)
    return dense + experts * touched + kv, touched


def inference_time(est: Evaluated, gpu: GPU | str | Cluster, efficiency: float | None = None) -> InferenceTime:
    """Prefill and decode time of an inference estimate (``mode="infer"``) on ``gpu``; ``efficiency`` a fraction of
    peak instead of the products' measured rates."""
    if isinstance(gpu, Cluster):
        cluster, hw = gpu, gpu.gpu
    else:
        hw = lookup(gpu) if isinstance(gpu, str) else gpu
        cluster = cluster_of(est.options, hw)
    opts, values = est.options, est.values
    eff = efficiency if efficiency is not None else gemm_efficiency(hw, est, forward_only=True)
    peak = hw.peak_flops(serving_dtypes(opts)[0].name) * eff
    batch = values[_sym("b")]
    memory, touched = decode_bytes(est, batch)
    comm_prefill = comm_decode = 0.0
    if opts.tp > 1:  # call by call: each all-reduce one layer's activations, b s h at prefill, b h per token
        whole = inference_graph(est.model, replace(opts, tp=1))
        fwd, _ = tp_bytes(whole, values, False)
        message = _bytes(whole.block("layer").input.nbytes, values)
        comm_prefill = fwd / message * cluster.all_reduce(message, opts.tp, 1)
        comm_decode = fwd / message * cluster.all_reduce(message / values[_sym("s")], opts.tp, 1)
    prefill = (est.number("prefill_flops_per_gpu") / peak, est.number("weight_bytes") / hw.memory_bandwidth)
    decode = (est.number("decode_flops_per_token_per_gpu") * batch / peak, memory / hw.memory_bandwidth)
    return InferenceTime(hw, eff, max(prefill) + comm_prefill, max(decode) + comm_decode, batch,
                         opts.new_tokens, "compute" if prefill[0] >= prefill[1] else "memory",
                         "compute" if decode[0] >= decode[1] else "memory", touched)


def time_of(est: Evaluated) -> StepTime | InferenceTime | None:
    """The estimate's time on its ``--gpu`` (None without one, or for parameters only)."""
    if getattr(est.options, "gpu", None) is None or est.options.mode == "params":
        return None
    fn = step_time if est.options.mode == "train" else inference_time
    return fn(est, est.options.gpu, est.options.efficiency)


def time_json(est: Evaluated) -> dict[str, Any]:
    """The time keys of ``estimate --json`` (none without ``--gpu``)."""
    timing = time_of(est)
    if timing is None:
        return {}

    return {**timing.to_json(), "fits_gpu": fits_gpu(est)}  # device bytes (runtime included) against memory


def implied_mfu(flops_per_token: int, tokens: int, gpu_hours: float, gpu: GPU | str) -> float:
    """The MFU a published run implies: its model FLOPs over its GPU time at dense peak
    (Chowdhery et al. 2022, App. B)."""
    hw = lookup(gpu) if isinstance(gpu, str) else gpu
    return flops_per_token * tokens / (gpu_hours * 3600 * hw.bf16_flops)
