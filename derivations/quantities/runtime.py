"""The runtime around a step: what ``torch.cuda.max_memory_reserved`` and nvidia-smi show on a named GPU.

The graph gives the bytes tensors hold at the peak of a step (``peak_bytes`` where the step timeline
gives it and runs transformers' code call by call, else ``total_bytes``). Around them (NOTE(memderive), each term with its source):

* **allocated** (``torch.cuda.max_memory_allocated``): that peak plus the cuBLAS workspace PyTorch
  allocates through its caching allocator, one per (handle, stream) in use;
* **reserved** (``torch.cuda.max_memory_reserved``): allocated plus the caching allocator's reserve, the
  segments it keeps that no live tensor fills. Every block is rounded up to 512 B and large tensors to
  2 MiB segments (``c10/cuda/CUDACachingAllocator.cpp``: ``kMinBlockSize``, ``kRoundLarge``); tensor
  sizes of transformer layers are multiples of both, so the reserve is the fragmentation that the
  transient tensors of a step (activations, their gradients, the loss) leave behind: ``FRAGMENTATION``
  of them. Persistent tensors (weights, gradients, optimizer states, a KV cache) are allocated once and
  add none;
* **device** (nvidia-smi, ``cudaMemGetInfo``): reserved plus what lives outside the caching allocator:
  the CUDA context (driver state and loaded kernels) and the NCCL buffers of each parallel group in use.

>>> from memderive.derivations.estimate import estimate
>>> r = runtime(estimate("gpt2", mode="train", batch=1, seq=8, gpu="a100-80gb"))
>>> [t.path for t in r.terms]
['runtime/peak', 'runtime/cublas_workspace', 'allocator/fragmentation', 'runtime/cuda_context']
>>> r.device_bytes == sum(t.bytes for t in r.terms)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from memderive.derivations.quantity import exact_int
from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.expr import const, evaluate, total
from memderive.derivations.references import cite
from memderive.symbolic.formula import Citation
from memderive.derivations.quantities.nccl import NCCL, nccl_bytes
from memderive.derivations.quantities.serving import vllm_refusal, vllm_startup
from memderive.derivations.hardware import GPUS, gpu

__all__ = ["Runtime", "RuntimeTerm", "runtime", "runtime_json", "overhead_breakdown", "PERSISTENT", "cublas_workspace_bytes", "context_bytes",
           "nccl_bytes", "parallel_groups", "fits_gpu",
           "budget_terms", "budget_bytes", "peak_key", "FRAGMENTATION", "MODULE_LOADING", "CONTEXT_SOURCES",
           "CUBLAS", "ALLOCATOR", "NCCL"]

MIB = 2**20

CUBLAS = Citation("pytorch-cublas-handle-pool", "parseChosenWorkspaceSize: sm90 ? 4096*8*1024 : 4096*1024*2 + "
                  "16*1024*8 bytes (CUBLAS_WORKSPACE_CONFIG unset); getNewWorkspace allocates it through "
                  "CUDACachingAllocator")
ALLOCATOR = Citation("pytorch-caching-allocator", "kMinBlockSize 512 B, kSmallSize 1 MiB in 2 MiB segments, "
                     "kRoundLarge 2 MiB")
#: GPUs of compute capability 9.0 (Hopper, ``GPU.arch``), whose default cuBLAS workspace is 32 MiB.
SM90 = frozenset(name for name, hw in GPUS.items() if hw.arch == "sm_90")

#: ``CUDA_MODULE_LOADING``: lazy (PyTorch's default since 1.13 with CUDA >= 11.7, pytorch#86509) loads a
#: kernel when first launched; eager (older CUDA) loads every kernel of the libraries at start-up.
MODULE_LOADING = ("lazy", "eager")
#: The CUDA context as measured: (bytes, source). A GPU without its own measurement gets ``default``.
CONTEXT_SOURCES: dict[tuple[str, str], tuple[int, str]] = {
    ("lazy", "rtx-3090"): (256 * MIB, "invoke-ai/InvokeAI#9413: RTX 3090, torch 2.7.1+cu128, nvidia-smi "
                                      "256 MiB for a bare context"),
    ("lazy", "default"): (426 * MIB, "unslothai/unsloth-zoo#1053: RTX 6000 Ada, torch 2.10.0+cu130, nvidia-smi "
                                     "426 MiB after torch.cuda.mem_get_info creates the context (ptrblck, "
                                     "pytorch#109888: 'around 400MB if CUDA >= 11.7 ... lazy module loading')"),
    ("eager", "v100-16gb"): (1341 * MIB, "transformers docs, model_memory_anatomy.md: V100-SXM2 16GB, driver "
                                         "460.91.03, CUDA 11.2: 1343 MiB after torch.ones((1, 1)).to('cuda'), less "
                                         "its 2 MiB segment"),
    ("eager", "v100-32gb"): (1341 * MIB, "as v100-16gb (transformers docs, model_memory_anatomy.md)"),
    ("eager", "default"): (666_632_192 - 20 * MIB, "pytorch#86509: CUDA_MODULE_LOADING=DEFAULT, total - free = "
                                                   "666,632,192 B with a 6.4 MB tensor (a 20 MiB segment) allocated"),
}
#: Reserved over allocated in the transient part of a step: segments freed tensors leave that the next
#: ones of other sizes cannot use. Calibrated once, never per run, on the published device measurements
#: of ``tests/published_memory.py`` that memderive models whole (transformers' bert-large runs with
#: nvidia-smi: fp32 at batch 4 and 1, gradient checkpointing, 8-bit Adam; their ratios are 1.03-1.05 at
#: 1/5, 1.03-1.10 at 1/10). Published pairs bound it: reserved / allocated 1.00-1.07 over whole steps
#: (torchtune#961: 20.2 GiB allocated 'and similar for reserved'; NVIDIA-NeMo#14850: 57,466,159,104 /
#: 53,930,270,720), of which the transient part is a fraction.
FRAGMENTATION = Fraction(1, 5)


@dataclass(frozen=True, slots=True)
class RuntimeTerm:
    """One part of device memory: its path, bytes, which counter shows it, and where the figure is from."""

    path: str
    bytes: int
    counted_in: str  # "allocated", "reserved" or "device": the first counter that includes it
    source: str


@dataclass(frozen=True, slots=True)
class Runtime:
    """Allocated, reserved and device bytes of one GPU, the terms they sum and what they assume."""

    gpu: str
    terms: tuple[RuntimeTerm, ...]
    assumptions: tuple[str, ...]

    def _through(self, counter: str) -> int:
        order = ("allocated", "reserved", "device")
        return sum(t.bytes for t in self.terms if order.index(t.counted_in) <= order.index(counter))

    @property
    def allocated_bytes(self) -> int:
        return self._through("allocated")

    @property
    def reserved_bytes(self) -> int:
        return self._through("reserved")

    @property
    def device_bytes(self) -> int:
        return self._through("device")

    def to_json(self) -> dict[str, Any]:
        return {"allocated_bytes": self.allocated_bytes, "reserved_bytes": self.reserved_bytes,
                "device_bytes": self.device_bytes, "terms": {t.path: t.bytes for t in self.terms},
                "assumptions": list(self.assumptions)}


def cublas_workspace_bytes(gpu: str, streams: int = 1) -> int:
    """PyTorch's default cuBLAS workspace: 32 MiB on Hopper, 8 MiB + 128 KiB elsewhere, per stream.

    >>> cublas_workspace_bytes("h100-sxm"), cublas_workspace_bytes("a100-80gb")
    (33554432, 8519680)
    """
    return streams * (4096 * 8 * 1024 if gpu in SM90 else 4096 * 1024 * 2 + 16 * 1024 * 8)


def context_bytes(gpu: str, loading: str = "lazy") -> tuple[int, str]:
    """The CUDA context of one process on ``gpu``, and the measurement it comes from.

    >>> context_bytes("rtx-3090")[0] // 2**20, context_bytes("v100-16gb", "eager")[0] // 2**20
    (256, 1341)
    """
    if loading not in MODULE_LOADING:
        raise ValueError(f"module loading must be one of {', '.join(MODULE_LOADING)}, got {loading!r}")
    return CONTEXT_SOURCES.get((loading, gpu)) or CONTEXT_SOURCES[(loading, "default")]


def parallel_groups(options: Any) -> list[tuple[str, int]]:
    """The communicators a layout uses (name, ranks): tensor, pipeline, data and expert parallel groups
    of more than one rank.

    >>> from memderive.derivations.options import Options
    >>> parallel_groups(Options(mode="train", batch=1, seq=1, tp=8, dp=4, zero=1))
    [('tensor', 8), ('data', 4)]
    """
    mode = getattr(options, "mode", "train")
    sizes = [("tensor", options.tp), ("context", getattr(options, "cp", 1) if mode == "train" else 1),
             ("pipeline", options.pp if mode == "train" else 1),
             ("data", options.dp if mode == "train" else 1), ("expert", options.ep)]
    return [(name, size) for name, size in sizes if size > 1]


#: Paths of the per-GPU total (and of the step peak's breakdown) whose tensors are allocated once and
#: kept, or again at the same sizes every step (the rest is transient).
PERSISTENT = ("model_states/", "weights/", "overhead", "master weights/", "optimizer states/", "gradients/",
              "batch and buffers/")


def _peak_quantity(est: Any) -> str:
    """``peak_bytes`` or ``total_bytes``: the figure ``Estimate.deciding`` names (where the step timeline runs
    the step call by call, transformers' code, its peak; else the sum)."""
    return est.decides()


def overhead_breakdown(est: Any) -> Breakdown:
    """The bytes the runtime adds to the derived peak on the ``--gpu``, as terms (the fragmentation
    term is ``FRAGMENTATION`` times the peak's transient terms, so it keeps their symbols: ``fit`` and
    ``plan`` solve with it). Empty without ``--gpu``."""
    o = est.options
    if o.gpu is None or o.mode == "params":
        return Breakdown((), "bytes")
    gpu = o.gpu.strip().lower()
    transient = [t.expr for t in est.quantity(_peak_quantity(est)).breakdown.terms
                 if not t.path.startswith(PERSISTENT)]
    terms = [Term("runtime/cublas_workspace", const(cublas_workspace_bytes(gpu))),
             Term("allocator/fragmentation", total(transient) * FRAGMENTATION),
             Term("runtime/cuda_context", const(context_bytes(gpu, o.cuda_module_loading)[0]))]
    terms += [Term(f"runtime/nccl/{name}", const(nccl_bytes(name, ranks))) for name, ranks in parallel_groups(o)]
    return Breakdown(tuple(terms), "bytes")


_COUNTED = {"runtime/cublas_workspace": "allocated", "allocator/fragmentation": "reserved"}


def _sources(est: Any, key: str) -> dict[str, str]:
    o = est.options
    return {"runtime/peak": f"the derived {key}", "runtime/cublas_workspace": cite(CUBLAS),
            "allocator/fragmentation": f"{FRAGMENTATION} of the transient terms of {key} (calibrated on "
                                       f"tests/published_memory.py); {cite(ALLOCATOR)}",
            "runtime/cuda_context": context_bytes(o.gpu.strip().lower(), o.cuda_module_loading)[1]}


def _vllm_terms(est: Any, gpu: str) -> tuple[list[RuntimeTerm], tuple[str, ...]]:
    """vLLM's engine: the weights, the whole KV cache it pre-allocates and the activation peak it profiled,
    in PyTorch's allocator; its CUDA graphs in a private pool of that allocator; NCCL outside it."""
    v = vllm_startup(est)
    assert v is not None
    startup = "vLLM start-up (derivations.quantities.serving)"
    terms = [RuntimeTerm("vllm/weights", v.weights, "allocated", startup),
             RuntimeTerm("vllm/kv_cache", v.kv_cache_blocks * v.block_bytes, "allocated", startup),
             RuntimeTerm("vllm/activation_peak", v.activation_peak, "allocated", startup),
             RuntimeTerm("runtime/cublas_workspace", cublas_workspace_bytes(gpu), "allocated", cite(CUBLAS)),
             RuntimeTerm("vllm/cuda_graphs", v.cuda_graphs, "reserved", v.sources[2])]
    if v.non_torch:
        terms.append(RuntimeTerm("runtime/nccl/tensor", v.non_torch, "device", cite(NCCL)))
    return terms, (f"allocated: vLLM's weights, its {v.kv_cache_blocks:,} KV blocks and the profiled activation "
                   "peak, plus one cuBLAS workspace", "reserved: allocated plus the CUDA graphs' memory pool",
                   "device: reserved plus NCCL and the CUDA context (vLLM's budget, gpu_memory_utilization x total, "
                   "leaves the context out)")


def runtime(est: Any, loading: str | None = None) -> Runtime | None:
    """The runtime terms of an estimate on its ``--gpu`` (None without one)."""
    o = est.options
    if o.gpu is None or o.mode == "params":
        return None
    gpu = o.gpu.strip().lower()
    loading = loading or getattr(o, "cuda_module_loading", None) or "lazy"
    if getattr(o, "framework", None) == "vllm":
        terms, notes = _vllm_terms(est, gpu)
        context, context_source = context_bytes(gpu, loading)
        return Runtime(gpu, (*terms, RuntimeTerm("runtime/cuda_context", context, "device", context_source)), notes)
    key = _peak_quantity(est)
    sources = _sources(est, key)
    terms = [RuntimeTerm("runtime/peak", est.number(key), "allocated", sources["runtime/peak"])]
    for term in overhead_breakdown(est).terms:
        value = exact_int(evaluate(term.expr, est.values), term.path)
        terms.append(RuntimeTerm(term.path, value, _COUNTED.get(term.path, "device"), sources.get(term.path, cite(NCCL))))
    assumptions = (f"allocated: {key} plus one cuBLAS workspace (one stream)",
                   f"reserved: allocated plus {FRAGMENTATION} of the transient bytes (activations, their "
                   "gradients, the loss) as allocator fragmentation; persistent tensors add none",
                   f"device: reserved plus the CUDA context ({loading} module loading) and "
                   f"{len(parallel_groups(o))} NCCL communicator(s), one per parallel group of more than one rank")
    return Runtime(gpu, tuple(terms), assumptions)


def peak_key(est: Any) -> str:
    """The quantity whose terms ``budget_terms`` starts with: ``peak_bytes`` or ``total_bytes``."""
    return _peak_quantity(est)


def budget_terms(est: Any) -> list[Term]:
    """What ``fit`` and ``plan`` hold against one GPU's memory: the derived peak's terms, plus the runtime's
    (``overhead_breakdown``) when a GPU is named, so that they budget against device bytes."""
    peak = est.quantity(_peak_quantity(est)).breakdown.terms
    return [*peak, *overhead_breakdown(est).terms]


def budget_bytes(est: Any) -> tuple[int, str]:
    """The bytes ``budget_terms`` sum to and which number that is (``device_bytes`` with a GPU named,
    else the derived peak)."""
    key = _peak_quantity(est)
    extra = overhead_breakdown(est).terms
    if not extra:
        return est.number(key), key
    return est.number(key) + sum(exact_int(evaluate(t.expr, est.values), t.path) for t in extra), "device_bytes"


def fits_gpu(est: Any) -> bool | None:
    """Whether the device bytes fit the ``--gpu``'s memory (None without one): ``fit`` and ``plan`` budget
    against the same device bytes."""
    r = runtime(est)
    if r is None:
        return None
    if vllm_refusal(est) is not None:  # an engine that does not start holds nothing: it does not fit
        return False
    return r.device_bytes <= gpu(r.gpu).memory_bytes


def runtime_json(est: Any) -> dict[str, Any]:
    """The runtime keys of ``estimate --json`` (none without ``--gpu``)."""
    r = runtime(est)
    if r is None:
        return {}
    data = r.to_json()
    return {"allocated_bytes": data["allocated_bytes"], "reserved_bytes": data["reserved_bytes"],
            "device_bytes": data["device_bytes"], "runtime": data}
