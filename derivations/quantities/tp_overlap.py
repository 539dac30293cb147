"""Tensor-parallel collectives overlapped with their own GEMM (``--tp-comm-overlap``): what stays exposed.

Transformer Engine's userbuffers (``te-userbuffers``: Megatron-LM's --tp-comm-overlap) and PyTorch's micro-pipeline
TP (``pytorch-micro-pipeline-tp``: torchtitan's AsyncTP, ``torch._inductor.config._micro_pipeline_tp``) both split a
sequence-parallel all-gather into t chunks behind the GEMM that reads the gathered tensor (``fuse_all_gather_matmul``:
the matmuls whose left operand it is, q/k/v or gate/up together) and a reduce-scatter into t chunks behind the GEMM
that produces its input (``fuse_matmul_reduce_scatter``: its producer matmul alone). Neither hides a collective
behind any other kernel: a transfer longer than its GEMM leaves the excess exposed, whatever else the layer computes.

Per collective of c seconds (unhidden) beside its GEMMs of g seconds: one chunk exposed, and what the other t - 1
chunks take past the GEMM: ``c/t + max(0, c (t - 1)/t - g)``. The transfer of a row-parallel linear's output scales
as b s h and its GEMM as b s h h_in/t, so their ratio is the same at every batch and sequence: an attention output
projection (h x h) whose fp8 GEMM runs twice as fast as the bf16 one leaves more of its reduce-scatter exposed.

>>> exposed_s([(8.0, 3.0)], 8)  # 8 s of transfer, 3 s of GEMM: 1 chunk (1 s) + (7 - 3) s past the GEMM
5.0

Transformer Engine's userbuffers run each overlapped transfer on SMs of their own, and where a GEMM's config sets
``set_sm_margin`` the GEMM beside it runs on the rest (``symbolic/userbuffers.py``: TE's defaults take 16 of the
GPU's SMs from o's and fc2's forward GEMMs and from the column-parallel data- and weight-gradient GEMMs;
Megatron-Bridge's fp8 configs 1 SM from the two forward ones): ``overlap_time`` times what that adds, the GEMM's rate
taken as proportional to its SMs (an assumption, not a measurement), and the pairs' GEMMs run that much longer.
PyTorch's AsyncTP (symmetric-memory kernels, no such setting) is timed without any.

NOTE(tp_overlap): PyTorch's micro-pipeline TP (``micro_pipeline=True``, torchtitan's AsyncTP) fuses what its pattern
matcher finds in a compiled graph, and less than that model: (1) ``fuse_matmul_reduce_scatter`` returns unless the
reduce-scatter's input is one matmul's output (``_find_producer_matmul``: an ``aten.mm`` or ``_scaled_mm``, or a
reshape of one; else None, and no fusion; read in a late-2024 copy, before pytorch/pytorch#147794 of February 2025);
torchtitan's Llama (models/llama/model.py at 9dec370, L189 and L253: ``wq``, ``wk``, ``wv`` and ``w1``, ``w3``
separate ``nn.Linear``s reading one input) reduce-scatters the *sum* of those linears' data gradients in backward,
an add, so every backward reduce-scatter of a layer stays whole; (2) torchtitan compiles each TransformerBlock only
(parallelize_llama.py ``apply_compile``), so the head's and the embedding's collectives, outside Inductor, stay
whole; (3) the fused reduce-scatter (``_fused_matmul_reduce_scatter_impl``, ``_fused_scaled_matmul_reduce_scatter_impl``
in torch/distributed/_symmetric_memory) writes each rank's t partial chunks into ``stacked_partials`` (M x N) and
sums them in a kernel of its own after the pipeline (``reduce_fn(stacked_partials ...)``: torch.sum over the t
partials), a memory-bound pass on the critical path (pytorch/pytorch#191801 replaced it in 2026 for that reason):
``reduced_partials`` counts its bytes, in the dtype the matmul writes (the run's activation dtype), read whole and
written over t.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from memderive.derivations.columns import maximum, minimum
from memderive.derivations.memo import per_graph
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.symbolic.float8 import param_in
from memderive.symbolic.formula import Citation
from memderive.symbolic.gathered import Gathered
from memderive.symbolic.graph import Graph
from memderive.symbolic.userbuffers import UbComm, ub_gemm

__all__ = ["MICRO_PIPELINE_LIMITS", "MICRO_PIPELINE_PARTS", "OverlapTime", "RING_REDUCE", "TP_OVERLAP_PAIRS",
           "TpTraffic", "exposed_s", "overlap_forms", "overlap_time", "reduced_partials", "tp_traffic"]

TP_OVERLAP_PAIRS = Citation("pytorch-micro-pipeline-tp", "fuse_all_gather_matmul, fuse_matmul_reduce_scatter",
                            also=(Citation("te-userbuffers", "initialize_ub"),))
#: How PyTorch's micro-pipeline TP runs a fused pair's GEMMs: one per rank's shard of M/t rows.
MICRO_PIPELINE_PARTS = Citation("pytorch-micro-pipeline-tp", "torch/distributed/_symmetric_memory "
                                "_fused_all_gather_matmul_impl: mm_out_op(shard, B) per rank's shard; "
                                "_fused_matmul_reduce_scatter_impl: A.chunk(group.size()), mm_out_op(A_shards[rank], B)")
#: A ring-exchanged reduce-scatter's own sum: the t chunks of M/t rows each rank receives, added in a kernel after
#: the exchange on the main stream.
RING_REDUCE = Citation("te-comm-gemm-overlap", "CommOverlapP2PBase::split_overlap_rs: reduce_bf16(reduce_buf_ptr, "
                       "rs_output_ptr, _tp_size, _ubufs[0].numel(), stream_main) after the last send")
#: What torchtitan's AsyncTP leaves whole (module NOTE(tp_overlap)).
MICRO_PIPELINE_LIMITS = Citation("pytorch-micro-pipeline-tp", "fuse_matmul_reduce_scatter (a reduce-scatter of one "
                                 "matmul's output only); symm_mem _fused_matmul_reduce_scatter_impl's reduce_fn over "
                                 "stacked_partials", also=(Citation("torchtitan-parallelize", "apply_compile"),))


def exposed_s(pairs: Any, t: int) -> Any:
    """Seconds not hidden of ``pairs`` (transfer seconds, GEMM seconds), each collective behind its own GEMMs split
    into ``t`` chunks (module docstring)."""
    return sum((c / t + maximum(0.0, c * (t - 1) / t - g) for c, g in pairs), 0.0)


def _gemm(op: Any, scale: Any, column: bool, ub: str | None = None) -> tuple[Any, Any, Any, Any, bool, str | None]:
    """The op's forward GEMM, which also stands for its data gradient's and its weight gradient's, as (whole-model
    FLOPs times ``scale``, m, n, k, split side, TE's name) on the whole-model graph: (M, out, in) forward, (M, in,
    out) the data gradient, (out, in, M) the weight gradient, the side tensor parallelism splits (out of a
    column-parallel weight, in of a row-parallel one) marked by ``column``. All count the same FLOPs, 2 M out in.
    ``ub``: Transformer Engine's name of the linear (``symbolic.userbuffers.ub_gemm``; None: no userbuffers)."""
    rows, weight = next(f.operands for f in op.flops if f.kind == "matmul" and f.phase == "forward")
    flops = sum((f.count for f in op.flops if f.kind == "matmul" and f.phase == "forward"), 0)
    return scale * flops, rows.numel, weight.shape[-2], weight.shape[-1], column, ub


def _gemm_s(gemm: tuple, fp8: bool, phase: str, values: Any, t: int, p: int, cp: int,
            rate: Callable[[str, Any, Any, Any], Any], splits: tuple[int, int] = (1, 1)) -> Any:
    """Seconds of one of ``_gemm``'s GEMMs on a GPU in ``phase`` (fprop, dgrad, wgrad): its FLOPs over t p cp at
    ``rate(dtype, m, n, k)`` of its per-GPU shape, M/cp rows (the sequence-parallel gather rejoins the cp rank's
    tokens), the split side over t; ``splits``: run as that many GEMMs of its first and second sides' parts
    (``UbComm.splits``), the same FLOPs at the parts' rate."""
    flops, m, n, k, column, _ = gemm
    n, k = (layout_int(n, values), layout_int(k, values))
    n, k = (n // t, k) if column else (n, k // t)  # forward (M, out, in): out or in split
    rows = layout_int(m, values) // cp
    first, second, inner = {"fprop": (rows, n, k), "dgrad": (rows, k, n), "wgrad": (n, k, rows)}[phase]
    shape = (first // splits[0], second // splits[1], inner)
    return layout_int(flops, values) / (t * p * cp) / rate("fp8" if fp8 else "bf16", *shape)


def _comm(gemm: tuple, phase: str, config: Mapping[str, UbComm]) -> UbComm | None:
    """The userbuffers communicator of a GEMM in ``phase`` (None: it overlaps none)."""
    return config.get(f"{gemm[5]}_{phase}") if gemm[5] else None


def _taken(comm: UbComm | None, sms: int | None) -> tuple[int, bool]:
    """The SMs a GEMM's userbuffers take from it (``overlap_time``) and whether for its whole time (set_sm_margin)
    or only while the transfer runs; (0, True) for a GEMM without userbuffers or a GPU without an SM count."""
    if comm is None or not sms:
        return (0, True)
    return (comm.num_sm, True) if comm.margin else (comm.busy, False)


class TpTraffic(NamedTuple):
    """One op's tensor-parallel collectives per repeat of its block, bytes in all-reduce terms (``tp_traffic``)."""

    op: Any
    kind: str  # "embedding" (vocabulary-parallel), "experts", "row" or "column" (a linear's weight split)
    key: str  # what moves: a column-parallel linear's input (its readers share one gather), else the op's path
    forward: Any  # the forward's collective
    backward: Any  # the backward's (0: none)
    quantized: bool  # its gathers move quantized tensors, its GEMMs run in fp8
    redone: bool  # a selective module reruns its forward GEMMs


def tp_traffic(blk: Any, float8: frozenset[str] = frozenset(), gathered: Gathered | None = None,
               experts: bool = True) -> list[TpTraffic]:
    """The ops of ``blk`` that move tensors over the tensor-parallel group, in order, and what each moves: the one
    classification ``overlap_forms`` pairs with GEMMs and ``timing.tp_bytes`` sums.

    A vocabulary-parallel embedding all-reduces its output (forward). A MoE expert op split over t like an MLP
    all-reduces its output forward and its input's gradient backward (``experts`` False: folded at etp 1, nothing).
    A linear's all-reduce is taken apart into its two ring halves (a ring reduce-scatter or all-gather of B bytes
    moves what an all-reduce of B/2 does): a row-parallel one reduce-scatters its 16-bit output forward and
    gathers the output's gradient backward; a column-parallel one gathers its input forward and reduce-scatters the
    input's 16-bit gradient backward. ``float8``/``gathered``: the linears (``block/param``) whose gathers move
    quantized tensors and their widths per element (``timing.quantized_gathers``)."""
    ops = []
    for op in blk.ops:
        axes = {x.tp_axis for x in op.params if x.role == "weight"}
        redone = any(f.phase == "recompute" and f.kind == "matmul" for f in op.flops)
        if op.kind == "embedding" and 0 in axes:
            ops.append(TpTraffic(op, "embedding", op.path, op.output.nbytes, 0, False, redone))
        elif op.kind == "experts" and experts:
            moved = op.share * op.output.nbytes
            ops.append(TpTraffic(op, "experts", op.path, moved, moved, False, redone))
        elif op.kind == "linear":
            rows, weight = op.flops[0].operands  # the forward product: rows x weight
            half = rows.numel / 2  # elements, in all-reduce terms
            quantized = bool(gathered) and param_in(blk.name, op, float8)
            if weight.tp_axis == 1:  # row-parallel: output reduce-scattered, its gradient gathered
                grad = gathered.width(gathered.grad) if quantized else rows.dtype.nbytes
                ops.append(TpTraffic(op, "row", op.path, half * weight.shape[0] * rows.dtype.nbytes,
                                     half * weight.shape[0] * grad, quantized, redone))
            elif weight.tp_axis == 0:  # column-parallel: input gathered, its gradient reduce-scattered
                width = gathered.width(gathered.input) if quantized else rows.dtype.nbytes
                key = op.inputs[0] if op.inputs else rows.name
                ops.append(TpTraffic(op, "column", key, half * weight.shape[1] * width,
                                     half * weight.shape[1] * rows.dtype.nbytes, quantized, redone))
    return ops


@per_graph
def overlap_forms(graph: Graph, float8: frozenset[str] = frozenset(), gathered: Gathered | None = None,
                  experts: bool = True, micro_pipeline: bool = False) -> tuple[tuple[str, Any, tuple, tuple, tuple], ...]:
    """Per block of the whole-model graph (t = 1): (name, forward pairs, backward pairs, pairs recomputed by a
    selective module), each pair (bytes in all-reduce terms, whether its GEMMs run in fp8, the GEMMs it overlaps as
    ``_gemm`` gives them), times the block's repeat.

    The bytes are ``tp_traffic``'s (``timing.tp_bytes`` sums them): a row-parallel linear reduce-scatters its output
    behind its forward GEMM and gathers the output's gradient behind its data-gradient GEMM; a column-parallel input
    is gathered behind the forward GEMMs of the linears that read it and its gradient reduce-scattered behind their
    data-gradient GEMMs, their GEMMs in fp8 where the gathers are quantized (the reduce-scatters stay 16-bit). A
    vocabulary-parallel embedding's all-reduce has no GEMM (exposed); a MoE expert op all-reduces its output and its
    input's gradient behind its own products. ``micro_pipeline``: PyTorch's pattern matcher under torchtitan (module
    NOTE(tp_overlap)): the backward's reduce-scatters of column-parallel inputs and every collective outside the
    decoder layers paired with no GEMM."""
    forms = []
    for blk in graph.blocks:
        forward: list[tuple[Any, bool, tuple]] = []
        backward: list[tuple[Any, bool, tuple]] = []
        again: list[tuple[Any, bool, tuple]] = []
        columns: dict[str, list[Any]] = {}  # input -> [gather bytes, gradient bytes, fp8, its readers' GEMMs]
        r = blk.repeat
        for c in tp_traffic(blk, float8, gathered, experts):
            if c.kind == "embedding":
                forward.append((r * c.forward, False, ()))
            elif c.kind == "experts":  # split over t like an MLP, its GEMMs at one expert's shape
                gemms = (_gemm(c.op, r * c.op.share, True),)
                forward.append((r * c.forward, False, gemms))
                backward.append((r * c.backward, False, gemms))
                again += [(r * c.forward, False, gemms)] if c.redone else []
            elif c.kind == "row":
                gemms = (_gemm(c.op, r, False, ub_gemm(c.op.path, True) if blk.name == "layer" else None),)
                forward.append((r * c.forward, c.quantized, gemms))
                backward.append((r * c.backward, c.quantized, gemms))
                if c.redone and not c.quantized:  # a selective module's rerun: its all-reduce again
                    again.append((r * (c.forward + c.backward), c.quantized, gemms))
            else:  # column
                entry = columns.setdefault(c.key, [r * c.forward, r * c.backward, c.quantized, ()])
                entry[3] += (_gemm(c.op, r, True, ub_gemm(c.op.path, False) if blk.name == "layer" else None),)
        for gather, grad, quantized, gemms in columns.values():
            forward.append((gather, quantized, gemms))
            backward.append((grad, quantized, () if micro_pipeline else gemms))  # a sum of data gradients: whole
        if micro_pipeline and blk.name != "layer":  # outside the compiled blocks: nothing fused
            forward, backward, again = ([(moved, fp8, ()) for moved, fp8, _ in group]
                                        for group in (forward, backward, again))
        forms.append((blk.name, tuple(forward), tuple(backward), tuple(again)))
    return tuple(forms)


class OverlapTime(NamedTuple):
    """``overlap_time``'s one walk: the pairs ``exposed_s`` reads, the seconds the userbuffers' SM margins add and
    the seconds their split GEMMs add."""

    pairs: list[tuple[Any, Any]]  # (transfer seconds unhidden, GEMM seconds) per collective of a micro-batch
    margin_s: Any  # seconds a micro-batch's GEMMs run past their time on every SM (0.0: no margin timed)
    split_s: Any = 0.0  # seconds a micro-batch's split GEMMs run past their whole products' (UbComm.splits)


def overlap_time(forms: tuple, values: Any, recompute_full: float, modules: bool, t: int, p: int, cp: int,
                 per_byte: Any, rate: Callable[[str, Any, Any, Any], Any], ub: Mapping[str, UbComm] = {},
                 sms: int | None = None, micro_pipeline: bool = False) -> OverlapTime:
    """``overlap_forms``' rounds of one micro-batch on a GPU of the busiest stage, walked once, each GEMM timed once.

    ``pairs``: (transfer seconds unhidden, GEMM seconds): the bytes over p stages and cp ranks at ``per_byte``
    seconds a byte (the unhidden TP time over ``tp_bytes``' total, so the transfers take what ``timing.step_time``
    gives them without overlap); each GEMM's FLOPs over t p cp at ``rate(dtype, m, n, k)``, its per-GPU shape: M/cp
    rows (the sequence-parallel gather rejoins the cp rank's tokens), the split side over t, the data gradient's
    (M, in, out) behind a backward collective. Full recompute runs the layers' forward pairs twice
    (``recompute_full``: the share of the layers it checkpoints, 0 to 1; Megatron's block method some only: their
    pairs, scaled); ``modules`` the selective modules' again.

    ``margin_s``: the seconds those GEMMs run past their time on every SM under Transformer Engine's userbuffers
    (``ub``: a ``symbolic.userbuffers.UB_CONFIGS`` config, TE's name of a GEMM -> its communicator's num_sm and
    set_sm_margin), of the GPU's ``sms``. The GEMM's rate is taken as proportional to the SMs it runs on (a GEMM of
    many waves of tiles, each SM a tile at a time: the model's assumption, not a measurement): n SMs taken for
    ``x`` seconds of its time cost ``x n / (SMs - n)`` more. With set_sm_margin the GEMM is launched on SMs - n
    (``SM_MARGIN``): ``x`` its whole time. Without, its communication kernel still occupies n SMs (``busy``: 0 for a
    ring exchange, the copy engine's; ``UB_BUSY``), but only while the transfer runs (``c``, the pair's transfer
    seconds as ``pairs`` has it): a GEMM of ``G`` seconds that outlasts it loses n/SMs of its rate for ``c``, ``c n /
    SMs`` more, else it runs on SMs - n throughout: min(``G n / (SMs - n)``, ``c n / SMs``). The pairs' GEMMs run that
    much longer. The decoder layers' linears: forward GEMMs (fprop; again under full recompute, and for a selective module's rerun), the
    data gradients' (dgrad) and the weight gradients' (wgrad: behind no pair, timed for the SMs taken only; a bulk
    overlap there runs the reduce-scatter of the collective the pair moves). ``sms`` None (no SM count for the
    GPU): 0, not timed.

    ``split_s``: the seconds the pairs' GEMMs run past their whole products' because the overlap runs each in
    parts, each part at its own shape's rate (``rate``): TE's userbuffers as ``UbComm.splits`` says (``GEMM_SPLITS``,
    the SMs taken counted on the parts); PyTorch's micro-pipeline TP (``micro_pipeline``) t parts of M/t rows,
    one ``mm`` per rank's shard, for each fused pair's GEMMs (``MICRO_PIPELINE_PARTS``).

    >>> gemm = (2 * 8192 * 8192 * 8192, 8192, 8192, 8192, False, "proj")  # one h x h GEMM of 8,192 tokens
    >>> forms = (("layer", ((0, False, (gemm,)),), (), ()),)
    >>> time = overlap_time(forms, {}, 0, False, 1, 1, 1, 1.0, lambda *_: 1e15, {"proj_fprop": UbComm("pipeline",
    ...                     16, True)}, 132)
    >>> time.margin_s  # 1.0995 ms x 16/116
    0.00015165...
    >>> forms = (("layer", ((2**19, False, (gemm,)),), (), ()),)  # 524,288 B at 1 ns a byte: 0.524 ms of transfer
    >>> time = overlap_time(forms, {}, 0, False, 1, 1, 1, 1e-9, lambda *_: 1e15, {"proj_fprop": UbComm("pipeline",
    ...                     16, False)}, 132)
    >>> time.margin_s  # no margin: 16 of 132 SMs for the 0.524 ms its kernel runs beside the 1.0995 ms GEMM
    6.3550...e-05
    """
    added = 0.0  # the SMs' seconds, each GEMM's times its round's share (the forward's: 1 + its full rerun)
    split = 0.0  # the split GEMMs' seconds past their whole products', likewise

    def slowed(gemms: tuple, fp8: bool, phase: str, transfer: Any) -> tuple[Any, Any, Any]:  # alone, added, split
        alone = extra = during = parts = 0.0
        busy = 0
        for g in gemms:
            comm = _comm(g, phase, ub)
            n, whole = _taken(comm, sms)
            if phase == "wgrad" and not n:  # behind no pair: timed only where it loses SMs
                continue
            whole_s = _gemm_s(g, fp8, phase, values, t, p, cp, rate)
            # AsyncTP's fused pairs: the layer's linears (a TE name), not the experts' grouped products
            splits = comm.splits(t) if comm else (t, 1) if micro_pipeline and g[5] else (1, 1)  # MICRO_PIPELINE_PARTS
            seconds = whole_s if splits == (1, 1) else maximum(  # a table's parts no faster than their whole
                whole_s, _gemm_s(g, fp8, phase, values, t, p, cp, rate, splits))
            parts += seconds - whole_s  # its parts' rate, past the whole product's (GEMM_SPLITS)
            alone += seconds
            if n and whole:
                extra += seconds * n / (sms - n)
            elif n:
                during, busy = during + seconds, n
        # n SMs busy for the transfer's c seconds: c n / SMs more while the GEMM outlasts it, else G n / (SMs - n)
        return alone, extra + minimum(during * busy / (sms - busy), transfer * busy / sms) if busy else extra, parts

    def timed(group: tuple, back: bool, share: Any) -> list[tuple[Any, Any]]:  # each transfer's, its GEMMs' seconds
        nonlocal added, split
        phase, entries = "dgrad" if back else "fprop", []
        for moved, fp8, gemms in group:
            transfer = layout_int(moved, values) / p / cp * per_byte
            alone, extra, parts = slowed(gemms, fp8, phase, transfer)
            wgrad = slowed(gemms, fp8, "wgrad", transfer)[1] if back else 0.0
            added += share * (extra + wgrad)
            split += share * parts
            entries.append((transfer, alone + extra))
        return entries

    pairs = []
    for name, forward, backward, again in forms:
        rerun = recompute_full if recompute_full and name == "layer" else 0
        ahead = timed(forward, False, 1 + rerun)  # evaluated once, rerun by full recompute
        rounds = [(ahead, 1)] + ([(ahead, recompute_full)] if rerun else [])
        rounds += [(timed(backward, True, 1), 1)] + ([(timed(again, False, 1), 1)] if modules else [])
        pairs += [(share * transfer, share * seconds) for entries, share in rounds for transfer, seconds in entries]
    return OverlapTime(pairs, added, split)


@per_graph
def reduced_partials(graph: Graph, names: tuple[str, ...] = ()) -> Any:
    """Bytes of the decoder layers' row-parallel outputs (M x out per linear, whole model, times the layers'
    repeat), in the dtype their matmul writes, its input's (the activation dtype, as ``tp_traffic`` reads the
    reduce-scatter's): what PyTorch's fused matmul-reduce-scatter stacks per forward and sums in a pass of its own
    (module NOTE(tp_overlap)); on a GPU each is read whole (its M/cp rows, t partial chunks) and written over t.
    ``names``: only the linears of those TE names (``symbolic.userbuffers.ub_gemm``: "proj", "fc2"), the ones whose
    forward reduce-scatter a userbuffers ring exchange runs, whose t received chunks TE sums the same way
    (``RING_REDUCE``); empty: every one.

    >>> from memderive.derivations.estimate import estimate
    >>> from memderive.derivations.quantities.compute import whole_model
    >>> e = estimate("llama-3-70b", mode="train", batch=1, seq=4096, tp=8, sp=True)
    >>> layout_int(reduced_partials(whole_model(e.model.graph(), e.options)), e.values)  # 80 x 4,096 x 8,192 x 2 x 2 B
    10737418240
    """
    total: Any = 0
    for blk in graph.blocks:
        for c in tp_traffic(blk) if blk.name == "layer" else ():
            if c.kind == "row" and (not names or ub_gemm(c.op.path, True) in names):  # rows (M) x weight (out, in/t)
                rows, weight = c.op.flops[0].operands
                total += blk.repeat * rows.numel * weight.shape[0] * rows.dtype.nbytes
    return total
