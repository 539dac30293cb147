"""A layout planner: every training layout of a model on N GPUs, those that fit, ranked by step time.

Layouts: tensor parallelism t (within a node, dividing the node's GPUs past one node, the heads, the KV heads and
the FFN width; with sequence parallelism), with a GPU count context parallelism cp (1, 2, 4, 8, 16 with FlashAttention, seq divisible
by 2 cp; without one, the fewest GPUs are searched with cp 1),
pipeline parallelism p (dividing the layers; interleaved with v virtual stages where p*v divides them and the
micro-batch count divides by p; with a GPU count, also p dividing the GPUs with the layers split unevenly:
``uneven_split``), data parallelism d, for a model with routed experts
expert parallelism ep (every degree dividing E and d, unless ``options.ep`` pins one), ZeRO stages 0-3, recompute,
FlashAttention, and the micro-batch size b and count m with b * m * d = the global batch. Memory per GPU is
``estimate``'s ``total_bytes`` (the first pipeline stage), evaluated for all layouts of one structure at
once (``derivations.search.sweep``), so a plan derives each structure once and never calls ``estimate``
per layout; the rows it returns carry ``estimate``'s option names and re-run through it to the same bytes.
With a GPU named, a layout fits when its device bytes (``quantities.runtime.budget_terms``: the CUDA
context, cuBLAS workspace, NCCL buffers of its parallel groups and the allocator's reserve added) fit
the GPU's memory.

With a GPU (``options.gpu``, a name of ``derivations.hardware.GPUS``), layouts are ranked by the compute
model's step time (``derivations.search.step_timer.plan_step_time``, i.e. ``step_time``: the busiest stage's
hardware FLOPs at ``efficiency`` x dense peak, the pipeline bubble, and tensor-, pipeline- and data-parallel
communication that is not hidden); each row's ``step_time_s`` is what ``estimate`` with the row's options
reports. Among equal times, lower ZeRO stages, fewer tensor, context and pipeline ranks, even stages and less
recompute rank first. A row of cp > 1 is kept only where context parallelism pays (``_paying``: faster than every
row of cp 1 that fits, or no row of cp 1 fits); a cp given is every row's. Under ``options.framework`` only the
layouts that framework runs are compared (``frameworks.plan_space``: its ``limits``, each citing its code).

NOTE(plan): without a GPU, step time is a stated proxy (``STEP_TIME``, ``proxy_step_time``): hardware FLOPs
per GPU at ``peak_flops``, stretched by the pipeline bubble (1 + (p - 1)/(m v)), with FLOPs 6 N per token
(Kaplan et al. 2020) plus the attention's 12 l a d_h s per token (Narayanan et al. 2021, Eq. 3), and a
forward more for full recompute (the attention core's forward for selective). Communication is not
modelled: the time is a lower bound and the MFU an upper bound.
"""

from __future__ import annotations

import itertools
import math
import operator
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from types import SimpleNamespace
from typing import Any

from memderive.derivations.estimate import estimate
from memderive.derivations.frameworks import FRAMEWORKS, PlanSpace, plan_space
from memderive.derivations.models.resolve import check_layout, resolve_model
from memderive.derivations.models.model import Model
from memderive.derivations.options import (ArgumentError, Options, OptionsError, capacity_bytes, given_options,
                                          peak_flops_option, positive_option)
from memderive.derivations.quantities.runtime import (budget_bytes, budget_terms, nccl_bytes, overhead_breakdown,
                                                     parallel_groups, peak_key)
from memderive.derivations.quantity import exact_int
from memderive.derivations.columns import is_column
from memderive.derivations.search.columns import LayoutColumns, cells, layout_columns
from memderive.derivations.search.step_timer import layout_times
from memderive.symbolic.derive import evaluate
from memderive.symbolic.errors import DerivationError, InvalidLayoutError
from memderive.derivations.quantities.inference import serving_dtypes
from memderive.derivations.search.fit import FitError, fit, memory_budget, smallest_changes
from memderive.derivations.quantities.timing import time_of
from memderive.symbolic.lazy import lazy

np = lazy("numpy")
sp = lazy("sympy")

__all__ = ["Layout", "Plan", "PlanError", "NothingFits", "plan", "plan_infer", "expert_degrees", "smallest_gpu_count", "proxy_step_time", "STEP_TIME",
           "NODE_SIZE", "MAX_LAYOUTS"]

#: The planner's whole search space (no framework's limits): the default ``space``.
EVERY_LAYOUT = PlanSpace()

NODE_SIZE = 8  # GPUs per node by default (``--gpus-per-node``): tensor parallelism stays within one
#: The most layouts a plan compares (a global batch with many divisors, no --gpus, has millions).
MAX_LAYOUTS = 2**17
VIRTUAL = (1, 2, 4, 8)


class PlanError(DerivationError):
    """No layout fits, or the request cannot be planned."""


#: plan's one line for ``--pipeline-layout``: the layout names its pp and v, the degrees plan searches.
LAYOUT_REFUSED = ("plan searches pp and v, which --pipeline-layout fixes (its chunks are pp x v); drop it, or "
                  "estimate that layout: memderive estimate --pp P --virtual-stages V --pipeline-layout ...")


class NothingFits(PlanError):
    """No layout fits the memory (an answer, not bad input): ``needed`` is the least any layout needs per GPU,
    ``would_fit`` the changes that would fit, each (flag, bytes per GPU of its best layout)."""

    def __init__(self, message: str, needed: int, would_fit: list[tuple[str, int]]) -> None:
        super().__init__(message)
        self.needed, self.would_fit = needed, would_fit


@dataclass(frozen=True, slots=True)
class Layout:
    """One layout that fits: ``options`` re-run through ``estimate`` to ``total_bytes``."""

    options: dict[str, Any]
    gpus: int
    total_bytes: int
    flops_per_gpu: int  # hardware FLOPs of one step on one GPU (recompute included)
    model_flops: int  # model FLOPs of one step, all GPUs (no recompute: what MFU counts)
    bubble: float  # (p - 1)/(m v)
    step_time_s: float | None  # None without a GPU or a peak FLOP/s
    mfu: float  # with a GPU, the compute model's; else an upper bound (see the module's NOTE)
    tokens_per_s: float | None  # global batch x seq / step time

    def to_json(self) -> dict[str, Any]:
        return {"options": self.options, "gpus": self.gpus, "total_bytes": self.total_bytes,
                "step_time_s": self.step_time_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
                "flops_per_gpu": self.flops_per_gpu, "pipeline_bubble": self.bubble}


@lru_cache(maxsize=64)
def _divisors(x: int) -> tuple[int, ...]:
    """The divisors of ``x``, increasing: trial division up to sqrt(x), SymPy's factorization past 10^10 (a
    global batch may be 10^15).

    >>> _divisors(12), len(_divisors(10**15))
    ((1, 2, 3, 4, 6, 12), 256)
    """
    if x > 10**10:
        return tuple(int(k) for k in sp.divisors(x))
    low = [k for k in range(1, math.isqrt(x) + 1) if x % k == 0]
    return tuple(low + [x // k for k in reversed(low) if k * k != x])


def uneven_split(layers: int, pp: int) -> tuple[int, int] | None:
    """(first, last) stage layers when ``pp`` stages do not divide ``layers`` evenly: every other stage holds
    ceil(l/p), the first and last split the rest (Llama 3 405B: 126 over 16 = 7 + 14 x 8 + 7, Dubey et al. 2024
    §3.3.2); None when p divides l or no such split exists.

    >>> uneven_split(126, 16), uneven_split(70, 12), uneven_split(32, 4)
    ((7, 7), (5, 5), None)
    """
    if layers % pp == 0 or pp < 3 or pp > layers:
        return None
    middle = -(-layers // pp)
    rest = layers - (pp - 2) * middle
    if rest < 2:
        return None
    return rest // 2, rest - rest // 2


def _degrees(model: Model, base: Options, gpus: int | None,
             space: PlanSpace = EVERY_LAYOUT) -> Iterator[tuple[int, int, int, tuple | None]]:
    """Valid (t, p, v, uneven): t within a node (dividing it, past one node) and dividing what it splits, p dividing l
    (p*v dividing l), or,
    with a GPU count, p dividing the GPUs left by t with the layers split unevenly (``uneven_split``, v = 1); p 1 alone
    where the framework runs no pipeline (``space``), v 1 where it interleaves none, even stages where it splits
    none unevenly."""
    layers = model.sizes["l"]
    node = base.gpus_per_node
    for tp in _divisors(model.sizes["a"]):
        if tp > node or (gpus is not None and gpus % tp):
            continue
        # ranks are numbered tensor-first (Megatron-LM's parallel_state), so a t that does not divide the node puts
        # groups across two nodes once there are more GPUs than a node (t 6 of 8: ranks 6-11), all-reducing over
        # the network where the time model (``cluster.group_span``) has them on NVLink: not a layout to run
        if node % tp and (gpus is None or gpus > node):
            continue
        stages = set(_divisors(layers)) | (set() if gpus is None else set(_divisors(gpus // tp)))
        for pp in sorted(stages) if space.pp else (1,):
            split = None if layers % pp == 0 else uneven_split(layers, pp)
            if (layers % pp and (split is None or not space.uneven)) or (gpus is not None and gpus % (tp * pp)):
                continue
            for vs in VIRTUAL if pp > 1 and split is None and space.virtual else (1,):
                extra = {} if split is None else {"first_stage_layers": split[0], "last_stage_layers": split[1]}
                try:
                    check_layout(model, replace(base, tp=tp, pp=pp, sp=tp > 1,
                                                virtual_stages=None if vs == 1 else vs, **extra))
                except (InvalidLayoutError, DerivationError):
                    continue
                yield tp, pp, vs, split


#: Context-parallel degrees a plan compares (with a fused attention kernel, seq divisible by 2 cp).
CONTEXT = (1, 2, 4, 8, 16)


def expert_degrees(model: Model, ep: int = 1) -> tuple[int, ...]:
    """The expert-parallel degrees a plan compares: ``ep`` when given (> 1), else for a model with routed experts
    every degree dividing E (1 included), else 1 alone.

    >>> from memderive.derivations.models.resolve import resolve_model
    >>> expert_degrees(resolve_model("mixtral-8x7b")), expert_degrees(resolve_model("mixtral-8x7b"), 4)
    ((1, 2, 4, 8), (4,))
    >>> expert_degrees(resolve_model("gpt2"))
    (1,)
    """
    if ep > 1 or "E" not in model.sizes:
        return (ep,)
    return _divisors(model.sizes["E"])


def _candidates(model: Model, base: Options, global_batch: int, gpus: int | None, flash: bool,
                ep: int = 1, recomputes: tuple[str, ...] | None = None,
                zeros: tuple[int, ...] = (0, 1, 2, 3), sequence_parallel: bool = True, cp: int = 1,
                space: PlanSpace = EVERY_LAYOUT, a2a_overlap: bool = False, fp8_params: bool = False) -> list[dict]:
    """Every layout as ``Options`` fields (memory not yet checked); the expert-parallel degrees of
    ``expert_degrees`` (``ep`` given: that one), each over data-parallel degrees it divides; the
    context-parallel degrees of ``CONTEXT`` (``cp`` > 1 given: that one); the recompute
    modes ``recomputes`` (None: none and full, and selective without FlashAttention) and the ZeRO stages ``zeros``
    (0 alone without data parallelism); sequence parallelism with every t > 1 unless ``sequence_parallel`` is off;
    of those, what the framework runs (``space``: its ZeRO stages with pipeline stages, cp, ep); ``a2a_overlap``:
    ``moe_a2a_overlap`` on the layouts that can run it (ep > 1, v > 1 where p > 1, no full recompute); ``fp8_params``:
    ``fp8_param_gather`` on the layouts of the distributed optimizer (ZeRO-1) and of Megatron-FSDP (ZeRO-3 under
    ``--framework megatron``, delayed and current scaling; Options refuses it elsewhere)."""
    out: list[dict] = []
    eps = (1,) if base.offload_params or not space.ep else expert_degrees(model, ep)  # Options refuses --ep with --offload-params
    if recomputes is None:
        recomputes = ("none", "full") if flash else ("none", "selective", "full")
    batches = _divisors(global_batch)
    # a hybrid's scan has no context parallelism in the graph (resolve.check_hybrid_layout refuses it)
    cps = [cp] if cp > 1 else [c for c in CONTEXT if c == 1 or (space.cp and flash and base.seq % (2 * c) == 0
                                                                and _ring_attention(base, c)
                                                                and model.arch.hybrid is None)]
    staged = tuple(z for z in zeros if z in space.zeros_with_pp)  # the ZeRO stages the framework runs with p > 1
    for tp, pp, vs, split in _degrees(model, base, gpus, space):
        pairs = [(gpus // (tp * pp * c), c) for c in cps if gpus % (tp * pp * c) == 0] if gpus is not None \
            else [(dp, cp) for dp in batches]  # the fewest GPUs: cp 1 unless given (cp x the divisors passes the layout limit)
        first, last = (None, None) if split is None else split
        sp, virtual = sequence_parallel and tp > 1, None if vs == 1 else vs
        for dp, c, ep in ((dp, c, ep) for dp, c in pairs for ep in eps):
            if global_batch % dp or dp % ep:
                continue
            for mb in (q for q in batches if (global_batch // dp) % q == 0):  # the divisors of global_batch / dp
                count = global_batch // (dp * mb)
                if (vs > 1 and count % pp) or (base.optimizer_in_backward and count > 1):
                    continue  # Megatron's interleaved schedule needs m divisible by p; Options refuses accumulation in backward
                if len(out) > MAX_LAYOUTS:
                    raise PlanError(f"{model.name}: more than {MAX_LAYOUTS:,} layouts to compare (the limit): a "
                                    f"global batch of {global_batch:,} has {len(batches):,} divisors, each a "
                                    "data-parallel degree and micro-batch size; give --gpus, or a global batch "
                                    "with fewer divisors")
                for zero, recompute in itertools.product((staged if pp > 1 else zeros) if dp > 1 else (0,),
                                                         recomputes):
                    # Megatron-Core's EP A2A overlap where it runs (Options refuses it elsewhere: quantities.a2a_overlap)
                    overlap = {"moe_a2a_overlap": ep > 1 and (pp == 1 or vs > 1) and recompute != "full"} \
                        if a2a_overlap else {}
                    if fp8_params:  # the distributed optimizer's, Megatron-FSDP's (delayed and current scaling)
                        overlap["fp8_param_gather"] = zero == 1 or (zero == 3 and base.framework == "megatron" and
                                                                    base.fp8 != "te-mxfp8" and not base.offload_params)
                    out.append({**overlap, "tp": tp, "pp": pp, "dp": dp, "sp": sp, "zero": zero, "recompute": recompute,
                                "flash": flash, **({} if flash else {"attention": "eager"}), "batch": mb, "micro_batches": count, "ep": ep, "cp": c,
                                "virtual_stages": virtual, "first_stage_layers": first, "last_stage_layers": last})
    return out


def _ring_attention(base: Options, cp: int) -> bool:
    """Whether ``base`` runs context parallelism ``cp`` on FlashAttention (``Options`` refuses it on an implementation
    without ring attention: the HF Trainer's and torchtune's models)."""
    try:
        replace(base, cp=cp, flash=True)
    except OptionsError:
        return False
    return True


def _memory(groups: list[tuple[list[int], LayoutColumns]], count: int) -> np.ndarray:
    """``total_bytes`` of every row: per structure (``search.columns``), the layouts of it evaluated at once."""
    out = np.empty(count, dtype=object)
    for indices, columns in groups:
        out[indices] = cells(columns.number("total_bytes"), len(indices))
    return out


#: The runtime's NCCL terms (``runtime.overhead_breakdown``): one per communicator, by its name and ranks.
NCCL_TERMS = "runtime/nccl/"
_DEGREES = ("tp", "cp", "pp", "dp", "ep")


def _device(base: Options, rows: list[dict], groups: list[tuple[list[int], LayoutColumns]],
            memory: np.ndarray) -> np.ndarray:
    """The device bytes of every row (``runtime.budget_terms``: the runtime's terms added): the budget's terms but
    NCCL's over the structure's columns, plus the NCCL buffers of the row's own communicators
    (``runtime.parallel_groups``, ``nccl_bytes``: a group of 2 ranks holds fewer than a larger one, the expert
    group's grow with its ranks), as ``overhead_breakdown`` adds them for it. Where the budget starts from
    ``total_bytes`` (``runtime.peak_key``), its terms are ``memory``'s (each term rounded up on its own, so the sum
    is ``total_bytes`` plus the runtime's terms)."""
    buffers: dict[tuple, int] = {}
    degrees = operator.itemgetter(*_DEGREES)

    def nccl(degrees: Any) -> int:
        return sum(nccl_bytes(name, ranks) for name, ranks in parallel_groups(degrees))

    out = np.empty(len(rows), dtype=object)
    for indices, columns in groups:
        total = peak_key(columns.structure) == "total_bytes"
        terms = overhead_breakdown(columns.structure).terms if total else budget_terms(columns.structure)
        own = sum(exact_int(evaluate(t.expr, {}), t.path) for t in terms if t.path.startswith(NCCL_TERMS))
        if own != nccl(columns.structure.options):
            raise DerivationError(f"the runtime's NCCL terms ({own:,} B) are not parallel_groups' nccl_bytes")
        rest = columns.values.ceiled([t.expr for t in terms if not t.path.startswith(NCCL_TERMS)], "device_bytes")
        if total:
            rest = memory[indices] + (rest if isinstance(rest, int) else np.asarray(rest, dtype=object))
        keys = [degrees(rows[i]) for i in indices]
        for key in set(keys).difference(buffers):  # the rows' degrees as parallel_groups reads them (the rest: base's)
            buffers[key] = nccl(SimpleNamespace(mode=base.mode, **dict(zip(_DEGREES, key))))
        own = np.empty(len(keys), dtype=object)
        own[:] = [buffers[key] for key in keys]
        out[indices] = own + (rest if isinstance(rest, int) else np.asarray(rest, dtype=object))
    return out


def proxy_step_time(model: Model, base: Options, row: dict, global_batch: int, peak_flops: float | None,
                    params: int) -> tuple[int, int, float, float | None, float]:
    """(hardware FLOPs per GPU, model FLOPs, bubble, step time or None, MFU bound): the NOTE's proxy."""
    z, seq = model.sizes, base.seq
    if seq is None:
        raise ValueError("plan needs the sequence length (--seq)")
    attention = 12 * z["l"] * z["a"] * z["d_h"] * seq * seq  # per sequence, forward + backward
    model_flops = global_batch * (6 * params * seq + attention)
    # recomputed per sequence: the attention core's forward (selective) or the whole forward (full)
    extra = {"none": 0, "selective": attention // 3, "full": 2 * params * seq + attention // 3}
    hardware = model_flops + global_batch * extra[row["recompute"]]
    gpus = _gpus(row)
    bubble = (row["pp"] - 1) / (row["micro_batches"] * (row["virtual_stages"] or 1))
    per_gpu = -(-hardware // gpus)
    time = per_gpu * (1 + bubble) / peak_flops if peak_flops else None
    mfu = model_flops / (hardware * (1 + bubble))
    return per_gpu, model_flops, bubble, time, mfu


#: The step-time model without a GPU (the module's NOTE); with one, ``search.step_timer.plan_step_time``.
STEP_TIME: Callable[..., tuple[int, int, float, float | None, float]] = proxy_step_time


class Plan(list):
    """The layouts a plan returns (a list, fastest first), with how many it evaluated (``evaluated``: every
    candidate's memory), how many fit (``fit``: each timed) and the seconds the plan took (``seconds``)."""

    def __init__(self, layouts: list[Layout], evaluated: int, fit: int, seconds: float,
                 least_held: int | None = None, space: PlanSpace = EVERY_LAYOUT) -> None:
        super().__init__(layouts)
        self.evaluated, self.fit, self.seconds = evaluated, fit, seconds
        self.least_held = least_held  # the least bytes any layout that fits holds against the capacity
        self.space = space  # what the framework runs (``frameworks.plan_space``): its limits, each with its source

    @property
    def rate(self) -> float:
        """Layouts evaluated per second of the plan."""
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")


def plan(model: Any, capacity: int, global_batch: int, seq: int, gpus: int | None = None, *,
         options: Options | None = None, peak_flops: float | None = None, flash: bool = True,
         top: int = 10, cluster: Any = None, recomputes: tuple[str, ...] | None = None,
         zeros: tuple[int, ...] = (0, 1, 2, 3), sequence_parallel: bool = True, cp_pays: bool = True,
         a2a_overlap: bool = False, fp8_params: bool = False, **fields: Any) -> Plan:
    """The ``top`` layouts that fit ``capacity`` bytes per GPU, fastest first (see the module's NOTE).

    Args:
        model: anything ``estimate`` accepts.
        capacity: bytes of one GPU's memory.
        global_batch: sequences per optimizer step (b * m * d).
        seq: tokens per sequence.
        gpus: GPU count; None plans every count and keeps the smallest that fits.
        options: base options (dtype, optimizer, profile, implementation, overhead, LoRA, ep, cp, gpu, efficiency);
            layout fields are set here (``ep`` > 1 kept: each row's dp is a multiple of it; else, for a model with routed experts, every ep dividing E and dp compared). With ``gpu``, layouts are ranked by the compute model's step time.
        peak_flops: one GPU's peak FLOP/s, for the proxy's step time in seconds (without ``gpu``).
        flash: plan with FlashAttention (it never costs memory); False plans without it.
        cluster: a ``derivations.quantities.cluster.Cluster`` of ``options.gpu`` GPUs (nodes and network) to time
            the layouts on; None: 8 GPUs per node, 400 Gb/s per GPU between nodes.
        recomputes: the recompute modes to compare (``Options.recompute``'s names); None: none and full, and
            selective without FlashAttention (on it, core_attn's checkpoint drops only the softmax statistics for
            the kernel's forward again) or with ``options.recompute_modules`` (then every selective row's).
        zeros: the ZeRO stages to compare with data parallelism (a framework without sharding: (0,)).
        sequence_parallel: sequence parallelism with tensor parallelism (False: a framework without it).
        a2a_overlap: Megatron-Core's EP A2A overlap (``Options.moe_a2a_overlap``, also taken from ``options``) on
            every row that can run it (ep > 1, v > 1 where p > 1, no full recompute; the others without it).
        fp8_params: Megatron-Core's fp8 primary weights (``Options.fp8_param_gather``, also taken from ``options``)
            on every row of the distributed optimizer (ZeRO-1) and of Megatron-FSDP (ZeRO-3 under --framework megatron,
            delayed and current scaling); the others without it.
        cp_pays: rows of cp > 1 only where they pay (``_paying``: faster than every row of cp 1 that fits, or none of
            cp 1 fits); False: every row that fits.

    With ``options.framework``, only what that framework runs is compared (``frameworks.plan_space``: its ZeRO
    stages, with pipeline stages too, recompute modes, pipeline, interleaving, uneven stages, sequence, context and
    expert parallelism); the plan's ``space`` holds its limits, each with its source.
    """
    start = time.perf_counter()
    options = _keyword_options(options, fields, "train", seq)
    given_options(options, "plan")
    capacity_bytes(capacity)
    peak_flops_option(peak_flops)
    for name, value in (("global-batch", global_batch), ("seq", seq), ("gpus", gpus), ("top", top)):
        positive_option(name, value, required=name != "gpus")
    if options is not None and options.pipeline_layout is not None:
        raise PlanError(LAYOUT_REFUSED)
    given = options or Options()  # the defaults where no options are given
    modules = given.recompute_modules  # every selective row's (Options checks them)
    resolved = resolve_model(model)
    experts = given.ep  # expert parallelism: over ep of the dp ranks of each row
    context = given.cp  # > 1: every row splits its sequences over that many ranks
    if context > 1 and not flash:
        raise PlanError(f"--cp {context} runs ring attention on a fused kernel; plan it with FlashAttention "
                        "(drop --no-flash)")
    # etp: the plan keeps the experts' tensor-parallel degree at the tp (Megatron-Core's default; no folded layouts)
    # set row by row (``_candidates``); Megatron-Core's schedule alone (Options refuses it under another framework)
    overlap = (a2a_overlap or given.moe_a2a_overlap) and given.framework in (None, "megatron")
    base = replace(given, mode="train", batch=1, seq=seq, tp=1, pp=1, dp=1, ep=1, etp=None, cp=1,
                   sp=False, zero=0, recompute="none", recompute_modules=(), moe_a2a_overlap=False,
                   fp8_param_gather=False,  # set row by row (``_candidates``)
                   recompute_method="uniform", recompute_layers=1)
    # Megatron's full recompute of some layers (--recompute-method, --recompute-layers), as given, on full's rows
    some = {"recompute_method": given.recompute_method, "recompute_layers": given.recompute_layers}
    if base.offload_params:  # FSDP's CPU offload shards as ZeRO-3 does (Options refuses ZeRO 1-2 with it)
        zeros = (3,)
    if base.precision_aware_optimizer:  # Megatron-Core's distributed optimizer only (Options refuses the others)
        zeros = (1,)
    if base.optimizer == "muon":  # Megatron-Core's Muon: no distributed optimizer, its layer-wise one (Options)
        zeros = tuple(z for z in zeros if z < 2)
    space = plan_space(base.framework)
    recomputes, zeros = _offered(resolved, space, base.framework, flash, recomputes, zeros, experts, context, modules)
    rows = _candidates(resolved, base, global_batch, gpus, flash, experts, recomputes, zeros,
                       sequence_parallel and space.sp, context, space, overlap,
                       fp8_params or given.fp8_param_gather)
    for row in rows:
        row["recompute_modules"] = modules if row["recompute"] == "selective" else ()
        row.update(some if row["recompute"] == "full" else {"recompute_method": "uniform", "recompute_layers": 1})
    if not rows:
        raise PlanError(f"{resolved.name}: no layout of {gpus} GPUs divides the model and a global batch of "
                        f"{global_batch}; try another --gpus or --global-batch")
    groups = list(layout_columns(resolved, base, rows))  # one derivation per structure
    memory = _memory(groups, len(rows))
    # with a GPU named, device bytes (the runtime's terms too) are held against its memory
    held = _device(base, rows, groups, memory) if base.gpu is not None else memory
    fitting = [i for i, need in enumerate(held) if need <= capacity]
    fits = [(rows[i], int(memory[i])) for i in fitting]
    if not fits:
        least = min(int(x) for x in held)
        # the advice keeps the given cp, GPU (its runtime terms), GPU count and recompute modules
        asked = replace(base, cp=context, **({"recompute": "selective", "recompute_modules": modules} if modules
                                             else {}))
        would = [] if gpus is None else _more_gpus(resolved, capacity, global_batch, seq, gpus, asked, flash)
        would += _offloaded(resolved, capacity, global_batch, seq, gpus, asked, flash)
        raise NothingFits(f"{resolved.name}: no layout fits {capacity:,} bytes per GPU; the smallest needs "
                          f"{least:,} bytes" + ("" if gpus is None else f" on {gpus} GPUs"), least, would)
    if gpus is None:
        fewest = min(_gpus(row) for row, _ in fits)
        fitting = [i for i in fitting if _gpus(rows[i]) == fewest]
        fits = [(rows[i], int(memory[i])) for i in fitting]
    if base.gpu is None:
        params = estimate(resolved, base).number("parameters")
        timed = [(STEP_TIME(resolved, base, row, global_batch, peak_flops, params), row, mem) for row, mem in fits]
        timed.sort(key=_rank)
        if cp_pays:
            timed = [timed[i] for i in _paying([_rank(x)[0] for x in timed], [row for _, row, _ in timed])]
    else:
        times = _timed(base, groups, {i: pos for pos, i in enumerate(fitting)}, len(fits), peak_flops, cluster)
        order = _ranked(times, fits)
        if cp_pays:
            order = order[_paying([float(times[3][i]) for i in order], [fits[i][0] for i in order])]
        timed = [(tuple(x[i] for x in times), *fits[i]) for i in order[:top]]
    return Plan([_layout(base, row, mem, times, global_batch * seq) for times, row, mem in timed[:top]],
                len(rows), len(fits), time.perf_counter() - start, min(int(held[i]) for i in fitting), space)


def _paying(times: list[float], rows: list[dict]) -> list[int]:
    """The places of the ranked rows to keep: context parallelism only where it pays, i.e. a cp > 1 row kept when it
    is faster than every row of cp 1 that fits, or no row of cp 1 fits (a cp the user gave is every row's: all kept).

    >>> _paying([1.0, 2.0, 3.0], [{"cp": 1}, {"cp": 2}, {"cp": 1}]), _paying([1.0, 2.0], [{"cp": 2}, {"cp": 4}])
    ([0, 2], [0, 1])
    """
    whole = [t for t, row in zip(times, rows) if row.get("cp", 1) == 1]
    best = min(whole, default=math.inf)
    return [i for i, (t, row) in enumerate(zip(times, rows)) if row.get("cp", 1) == 1 or t < best]


def _offered(model: Model, space: PlanSpace, framework: str | None, flash: bool, recomputes: tuple[str, ...] | None,
             zeros: tuple[int, ...], ep: int, cp: int,
             modules: tuple[str, ...] = ()) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The recompute modes and ZeRO stages to compare that the framework runs (``space``): asked ones it does not
    run refused in one line. Recompute by default: the framework's modes, selective (the attention core's) left out
    on FlashAttention, which saves no s x s scores (its checkpoint drops only the softmax statistics); with Megatron-
    Core's recompute ``modules`` given, selective is searched (they are its), and refused where it is not."""
    who = f"--framework {framework}"
    if cp > 1 and not space.cp:
        raise PlanError(f"{who} runs no context parallelism (--cp {cp}): {_limit(space, 'cp')}")
    if ep > 1 and not space.ep:
        raise PlanError(f"{who} runs no expert parallelism (--ep {ep})")
    if recomputes is None:
        recomputes = tuple(x for x in space.recomputes if not (flash and x == "selective" and not modules))
    offered = tuple(x for x in recomputes if x in space.recomputes)
    if modules and "selective" not in offered:
        raise PlanError(f"--recompute-modules names what Megatron-Core's selective recompute recomputes; "
                        f"{who if framework else 'this plan'} searches no selective recompute "
                        f"(recompute {', '.join(offered or recomputes)})")
    stages = tuple(z for z in zeros if z in space.zeros)
    if not offered or not stages:
        what = (f"recompute {', '.join(recomputes)}" if not offered else f"ZeRO {', '.join(map(str, zeros))}")
        raise PlanError(f"{who} runs no {what}: {space.words()}")
    return offered, stages


def _limit(space: PlanSpace, field: str) -> str:
    """The words of ``space``'s limit on ``field``."""
    return next((x.words for x in space.limits if x.field == field), "")


def _timed(base: Options, groups: list[tuple[list[int], LayoutColumns]], position: dict[int, int], count: int,
           peak_flops: float | None, cluster: Any) -> list[np.ndarray]:
    """The times of the ``count`` rows that fit (``position``: row index -> place among them), as five ``object``
    arrays in that order (hardware FLOPs per GPU, model FLOPs, bubble, step time, MFU): the compute model
    (``step_timer.layout_times``) run once per structure on the columns of its rows that fit (``search.columns``),
    each row's times ``estimate``'s to the bit."""
    out = [np.empty(count, dtype=object) for _ in range(5)]
    for indices, columns in groups:
        keep = [k for k, i in enumerate(indices) if i in position]
        if not keep:
            continue
        part = columns if len(keep) == len(indices) else columns.take(keep)
        at = [position[indices[k]] for k in keep]
        for column, values in zip(out, layout_times(part, base, peak_flops, cluster)):
            column[at] = values if is_column(values) else [values] * len(at)
    return out


def _ranked(times: list[np.ndarray], fits: list[tuple[dict, int]]) -> np.ndarray:
    """The rows' places, fastest first, in ``_rank``'s order (a stable sort on the same keys: step time, then
    ZeRO, tp, cp, pp, uneven stages, ep, recompute, the larger micro-batch, bytes), over arrays of the keys."""
    rows = [row for row, _ in fits]
    keys = ([mem for _, mem in fits], [-row["batch"] for row in rows],
            [_RECOMPUTE_ORDER[row["recompute"]] for row in rows], [row["ep"] for row in rows],
            [row["first_stage_layers"] is not None for row in rows], [row["pp"] for row in rows],
            [row.get("cp", 1) for row in rows], [row["tp"] for row in rows], [row["zero"] for row in rows])
    step = np.asarray(times[3].tolist(), dtype=np.float64)  # Python floats: the same doubles
    return np.lexsort((*(np.asarray(k, dtype=np.int64) for k in keys), step))


def _more_gpus(model: Model, capacity: int, global_batch: int, seq: int, gpus: int, base: Options,
               flash: bool) -> list[tuple[str, int]]:
    """The fewest GPUs with a layout that fits (``--gpus N``), as a change that would fit, with the least bytes its
    layouts hold; budgeted as the plan was (``base``: the given cp, and with a GPU its device bytes, the runtime's
    terms added), never the count given."""
    try:
        best = plan(model, capacity, global_batch, seq, None, options=base, flash=flash, top=1)
    except PlanError:
        return []
    return [] if best[0].gpus == gpus else [(f"--gpus {best[0].gpus}", best.least_held)]


def _offloaded(model: Model, capacity: int, global_batch: int, seq: int, gpus: int | None, base: Options,
               flash: bool) -> list[tuple[str, int]]:
    """ZeRO-Offload (``--offload``: gradients and optimizer states in CPU memory) and FSDP's CPU offload
    (``--offload-params``: the parameters too) on the same GPUs, as changes that would fit, each with the least bytes
    its layouts hold, budgeted as the plan was (device bytes with a GPU; the given cp) (none when already offloading,
    where Options refuses it, or still too big)."""
    if base.offload or base.offload_params:
        return []
    out = []
    for flag, change in (("--offload", {"offload": True}), ("--offload-params", {"offload_params": True})):
        try:
            best = plan(model, capacity, global_batch, seq, gpus, options=replace(base, **change), flash=flash, top=1)
        except (PlanError, OptionsError):
            continue
        out.append((flag, best.least_held))
    return out


def _layout(base: Options, row: dict, mem: int, times: tuple, tokens: int) -> Layout:
    per_gpu, model_flops, bubble, time, mfu = times
    opts = asdict(replace(base, **row))
    return Layout(shown_options(opts), _gpus(row), mem, per_gpu, model_flops, bubble, time, mfu,
                  None if time is None else tokens / time)


def shown_options(opts: dict[str, Any], always: tuple[str, ...] = ("mode", "batch", "seq")) -> dict[str, Any]:
    """The fields of ``opts`` (every ``Options`` field) a row carries to re-run through ``estimate``: those that differ
    from ``Options``' defaults, ``always``'s, and under a framework every field its preset sets (``estimate`` fills
    in the preset's value for a field not given, so a row equal to memderive's default but not to the preset's, as
    torchtitan's recompute none against its selective-op, must name it).

    >>> sorted(shown_options({**asdict(Options(mode="train", batch=1, seq=8)), "framework": "torchtitan"}))[:5]
    ['attention', 'batch', 'dropout', 'dtype', 'framework']
    """
    framework = FRAMEWORKS.get(opts.get("framework") or "")
    preset = {s.option for s in framework.settings} if framework is not None else set()
    return {k: val for k, val in opts.items() if val != _DEFAULTS[k] or k in always or k in preset}


_DEFAULTS = asdict(Options())


def _gpus(row: dict) -> int:
    """The GPUs a layout row spans: t x p x d x cp (expert parallelism runs inside the data-parallel ranks)."""
    return row["tp"] * row["pp"] * row["dp"] * row.get("cp", 1)


_RECOMPUTE_ORDER = {"none": 0, "selective": 1, "selective-op": 1, "full": 2}


def _rank(item: tuple) -> tuple:
    (per_gpu, _, bubble, time, _), row, mem = item
    return (per_gpu * (1 + bubble) if time is None else time, row["zero"], row["tp"], row.get("cp", 1), row["pp"],
            row["first_stage_layers"] is not None, row["ep"], _RECOMPUTE_ORDER[row["recompute"]], -row["batch"], mem)


def smallest_gpu_count(model: Any, capacity: int, global_batch: int, seq: int, **kwargs: Any) -> int:
    """How many GPUs the model needs: the fewest with a layout that fits."""
    return plan(model, capacity, global_batch, seq, None, top=1, **kwargs)[0].gpus


@dataclass(frozen=True, slots=True)
class ServingLayout:
    """An inference layout: ``options`` (tp and the largest batch that fits) re-run through ``estimate``."""

    options: dict[str, Any]
    gpus: int
    total_bytes: int
    tokens_per_step: int  # sequences decoded at once over all replicas (batch x gpus / tp)
    bytes_read_per_step: int  # per GPU: weights + KV cache, what a memory-bound decode step reads
    timing: Any = None  # with a GPU: ``timing.InferenceTime`` of one replica (what ``estimate`` reports)

    @property
    def tokens_per_s(self) -> float | None:
        """Decode tokens per second over all replicas (the roofline's; None without a GPU)."""
        return None if self.timing is None else self.tokens_per_step / self.timing.decode_step_s

    @property
    def end_to_end_tokens_per_s(self) -> float | None:
        """New tokens per second over all replicas, prefill included (None without a GPU)."""
        if self.timing is None:
            return None
        return self.timing.end_to_end_tokens_per_s * self.tokens_per_step / self.timing.batch

    def to_json(self) -> dict[str, Any]:
        out = {"options": self.options, "gpus": self.gpus, "total_bytes": self.total_bytes,
               "step_time_s": None, "mfu": None, "tokens_per_step": self.tokens_per_step,
               "bytes_read_per_step": self.bytes_read_per_step}
        if self.timing is not None:  # the replica's keys as estimate --json names them, and the total
            out.update(self.timing.to_json(), step_time_s=self.timing.decode_step_s, tokens_per_s=self.tokens_per_s,
                       replica_tokens_per_s=self.timing.tokens_per_s,
                       end_to_end_tokens_per_s=self.end_to_end_tokens_per_s,
                       replica_end_to_end_tokens_per_s=self.timing.end_to_end_tokens_per_s)
        return out


def plan_infer(model: Any, capacity: int, seq: int, gpus: int | None = None, *, new_tokens: int = 0,
               options: Options | None = None, top: int = 10, weight_dtypes: tuple[str | None, ...] | None = None,
               kv_dtypes: tuple[str | None, ...] | None = None, **fields: Any) -> list[ServingLayout]:
    """Tensor-parallel degrees and, for each, the largest batch that fits (``fit``), ranked by decode
    throughput (end to end, prefill included, when ``new_tokens`` are generated; decode alone otherwise), within
    ``fit``'s budget (``search.fit.memory_budget``: vLLM's gpu_memory_utilization under --framework vllm, the whole
    GPU otherwise). With a GPU (``options.gpu``): the roofline's (``timing.inference_time``: a decode step takes
    the longer of its FLOPs at peak x efficiency and its weights and KV cache at the memory bandwidth, plus
    TP all-reduces), tokens/s = sequences decoded at once over all replicas / decode step time. Without
    one, a memory-bound proxy: a decode step reads one GPU's weights and KV cache once, so tokens/s is
    proportional to ``batch * gpus/t / (weights + KV cache per GPU)`` (no bandwidth needed to rank; none
    is assumed, no seconds). Without ``gpus``, one replica of the smallest t that fits. ``weight_dtypes`` and
    ``kv_dtypes``: the weight and KV-cache dtypes to compare (each pair a layout; default: ``options``' own)."""
    options = _keyword_options(options, fields, "infer", seq)
    resolved = resolve_model(model)
    base = replace(options or Options(mode="infer", batch=1, seq=seq), mode="infer", batch=1, seq=seq, tp=1,
                   new_tokens=new_tokens)
    # fit's one budget rule (search.fit.memory_budget): vLLM's gpu_memory_utilization under --framework vllm,
    # the whole GPU otherwise (with a GPU named, the runtime's bytes counted in device_bytes)
    budget = capacity
    degrees = _tp_degrees(resolved, gpus, base.gpus_per_node)
    dtypes = list(itertools.product(weight_dtypes or (base.weight_dtype,), kv_dtypes or (base.kv_dtype,)))
    for weights, kv in dtypes:  # each pair refused as estimate refuses it (one line), not skipped as not fitting
        serving_dtypes(replace(base, weight_dtype=weights, kv_dtype=kv))
    out = [x for weights, kv in dtypes for tp in degrees
           for x in _serving(resolved, replace(base, tp=tp, weight_dtype=weights, kv_dtype=kv), budget, gpus, fit,
                             FitError)]
    if not out:
        raise _serving_nothing_fits(resolved, base, budget, seq, gpus)
    if gpus is None:
        fewest = min(x.gpus for x in out)
        out = [x for x in out if x.gpus == fewest]
    if base.gpu is not None:
        out.sort(key=lambda x: (-((x.end_to_end_tokens_per_s if new_tokens else x.tokens_per_s) or 0.0), x.gpus))
    else:
        out.sort(key=lambda x: (-x.tokens_per_step / x.bytes_read_per_step, x.gpus))
    return out[:top]


def _keyword_options(options: Options | None, fields: dict[str, Any], mode: str, seq: Any) -> Options | None:
    """``options``, or ``Options`` built from keyword fields (``dtype="fp32"``, ``gpu="h100-sxm"``) with the plan's
    mode, sequence and a batch of 1 filled in (the plan sets the batch of each row): no dummy batch and seq to give.

    >>> _keyword_options(None, {"optimizer": "sgd"}, "train", 2048).optimizer
    'sgd'
    """
    if not fields:
        return options
    if options is not None:
        raise ArgumentError(f"give options=Options(...) or keyword options ({', '.join(fields)}), not both")
    return Options.from_keywords({"mode": mode, "batch": 1, "seq": seq, **fields})


def _tp_degrees(model: Model, gpus: int | None, node: int = NODE_SIZE) -> list[int]:
    return [tp for tp in _divisors(model.sizes["a"]) if tp <= node and (gpus is None or gpus % tp == 0)]


def _serving_nothing_fits(model: Model, base: Options, budget: int, seq: int, gpus: int | None) -> NothingFits:
    """Batch 1 fits no tensor-parallel degree: the least it needs, and the smallest changes that would fit."""
    degrees = [tp for tp in _tp_degrees(model, gpus, base.gpus_per_node) if _valid(model, replace(base, tp=tp))] or [1]
    widest = replace(base, tp=max(degrees))
    needed = budget_bytes(estimate(model, widest))[0]
    changes = [(c, n) for c, n in smallest_changes(model, widest, budget, "batch") if not c.startswith("--tp")]
    allowed, rule = memory_budget(base, budget)
    if gpus is not None:  # more GPUs: the smallest tensor-parallel degree within a node that holds batch 1
        wider = [(tp, budget_bytes(estimate(model, replace(base, tp=tp)))[0]) for tp in _tp_degrees(model, None,
                 base.gpus_per_node) if tp > max(degrees) and _valid(model, replace(base, tp=tp))]
        changes = [(f"--gpus {tp}", n) for tp, n in wider if n <= allowed][:1] + changes
    return NothingFits(f"{model.name}: batch 1 at seq {seq} fits no tensor-parallel degree in {allowed:,} bytes per "
                       f"GPU ({rule}{'; device bytes' if base.gpu else ''}); tp {widest.tp} needs {needed:,} bytes",
                       needed, changes)


def _valid(model: Model, options: Options) -> bool:
    try:
        check_layout(model, options)
    except (InvalidLayoutError, DerivationError):
        return False
    return True


def _serving(resolved: Model, base: Options, capacity: int, gpus: int | None, fit: Callable,
             fit_error: type[Exception]) -> list[ServingLayout]:
    """The layout of one tensor-parallel degree (``base.tp``) at the largest batch that fits, or none."""
    try:
        found = fit(resolved, base, capacity, "batch")
    except (fit_error, DerivationError):
        return []
    est = estimate(resolved, replace(base, batch=found.value))
    read = est.number("weight_bytes") + est.number("kv_cache_bytes")
    replicas = (gpus or base.tp) // base.tp
    shown = shown_options(asdict(est.options), ("mode", "batch", "seq", "new_tokens"))
    timing = None
    if base.gpu is not None:
        timing = time_of(est)
    return [ServingLayout(shown, gpus or base.tp, est.number("total_bytes"), found.value * replicas, read, timing)]
