"""What vLLM prints at start-up: its memory budget, the profiling run, and the KV blocks that fill the rest.

vLLM's GPU worker (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``; V0's
``worker.py`` the same since vllm#10511) takes ``gpu_memory_utilization`` of the memory CUDA reports
(``torch.cuda.mem_get_info``) as its budget, runs one forward of ``max_num_batched_tokens`` dummy
tokens and a sampler over ``max_num_seqs`` rows, and gives the KV cache what the budget has left:

    kv_cache_memory = total * gpu_memory_utilization - weights - activation peak - non-torch memory

(non-torch: memory outside PyTorch's allocator that appeared since start-up, NCCL's among it; since
v0.21 the CUDA graphs' estimate is subtracted too). The KV cache is cut into pages of ``block_size``
tokens per layer (``vllm/v1/core/kv_cache_utils.py``, ``_get_kv_cache_config_uniform_type``):

    num_blocks = kv_cache_memory // page_size // num_layers,   page_size = 2 * block_size * kv_heads * head_size * dtype
    GPU KV cache size = num_blocks * block_size tokens
    maximum concurrency = num_blocks / cdiv(max_model_len, block_size)

Here each of those is read off the graph: the weights and the KV bytes per token of the serving
estimate, the profiling run's peak as the larger of its forward's largest transient (``max_num_batched_tokens``
tokens over min(``max_num_seqs``, tokens) dummy requests) and its dummy sampler's buffers over one row per request
(``_profile_peak``), NCCL's buffers as ``nccl.nccl_bytes`` for the tensor-parallel group, and CUDA graphs as one
measured cost per captured batch size. An engine whose KV memory is not positive, or holds less than one request
of ``max_model_len`` tokens, does not start (``VllmStartup.refusal``, as vLLM's check_enough_kv_cache_memory).

>>> from memderive.derivations.estimate import estimate
>>> v = vllm_startup(estimate("llama-3-8b", mode="infer", batch=1, seq=8192, framework="vllm", gpu="h100-sxm"))
>>> v.block_bytes, v.max_num_batched_tokens, v.max_num_seqs
(2097152, 8192, 1024)
>>> v.kv_cache_blocks == v.kv_cache_bytes // v.block_bytes
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memderive.derivations.hardware import gpu as lookup, kernels_of
from memderive.derivations.quantities.nccl import nccl_bytes
from memderive.derivations.quantities.inference import serving_dtypes
from memderive.derivations.references import cite
from memderive.symbolic.formula import Citation

__all__ = ["VllmStartup", "vllm_startup", "vllm_json", "vllm_refusal", "batch_defaults", "usable_memory",
           "USABLE_MEMORY", "SAMPLER_FP32_BYTES",
           "CUDA_GRAPH_SIZES", "CUDA_GRAPH_BYTES", "VLLM_CITATION"]

GIB = 2**30
VLLM_CITATION = Citation("vllm-gpu-worker", "determine_available_memory", also=(
    Citation("vllm-kv-cache-utils", "_get_kv_cache_config_uniform_type, get_max_concurrency_for_kv_cache_config"),
    Citation("vllm-arg-utils", "EngineArgs.get_batch_defaults")))
#: What ``torch.cuda.mem_get_info`` reports as total (less than the datasheet: the driver keeps some), as
#: vLLM logs it; GPUs without a published figure use the datasheet's.
USABLE_MEMORY: dict[str, tuple[int, str]] = {
    "h100-sxm": (int(79.22 * GIB), "vllm#10511: 'total_gpu_memory 79.22GiB' (H100 80GB)"),
    "h200": (int(139.81 * GIB), "torch.cuda.get_device_properties(0).total_memory on an H200 141GB as logged: "
             "torchtitan's 'CUDA capacity: NVIDIA H200 with 139.81GiB memory' (DeviceMemoryMonitor: total_memory / "
             "2^30) and vLLM's worker 'total_gpu_memory (139.81GiB)'"),
}
#: CUDA graphs: vLLM captures one graph per batch size, 1, 2, 4, then every 8 up to 256 and every 16 up to
#: 512 (CompilationConfig's default capture sizes): 51. Each costs about 0.21 GiB / 35 (vllm#11349:
#: Llama-3.2-1B, 35 shapes, 'Graph capturing finished in 14 secs, took 0.21 GiB').
CUDA_GRAPH_SIZES = 3 + len(range(8, 256, 8)) + len(range(256, 513, 16))
CUDA_GRAPH_BYTES = int(0.21 * GIB) // 35


def usable_memory(gpu: Any) -> tuple[int, str]:
    """The total memory CUDA reports for ``gpu`` and where the figure is from."""
    die = kernels_of(gpu)
    if die in USABLE_MEMORY:
        total, source = USABLE_MEMORY[die]
        return total, source if die == gpu.name else f"{source}, {die}: the same die and memory (hardware.py)"
    return gpu.memory_bytes, f"the datasheet's {gpu.memory_bytes // GIB} GiB (no published mem_get_info total)"


def batch_defaults(gpu: Any) -> tuple[int, int]:
    """``vllm serve``'s max_num_batched_tokens and max_num_seqs on ``gpu``: 8192 and 1024 on GPUs of 70 GiB
    or more other than A100, else 2048 and 256 (``EngineArgs.get_batch_defaults``, OPENAI_API_SERVER).

    >>> from memderive.derivations.hardware import gpu
    >>> batch_defaults(gpu("h100-sxm")), batch_defaults(gpu("a100-80gb")), batch_defaults(gpu("l4"))
    ((8192, 1024), (2048, 256), (2048, 256))
    """
    large = gpu.memory_bytes >= 70 * GIB and "a100" not in gpu.name
    return (8192, 1024) if large else (2048, 256)


@dataclass(frozen=True, slots=True)
class VllmStartup:
    """The numbers of a vLLM start-up on one GPU of a tensor-parallel group (all bytes, per GPU)."""

    gpu: str
    total_memory: int
    utilization: float
    weights: int
    activation_peak: int
    non_torch: int
    cuda_graphs: int
    block_size: int
    block_bytes: int  # one block of block_size tokens in every layer
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    sources: tuple[str, ...]

    @property
    def budget(self) -> int:
        return int(self.total_memory * self.utilization)

    @property
    def kv_cache_bytes(self) -> int:
        return self.budget - self.weights - self.activation_peak - self.non_torch - self.cuda_graphs

    @property
    def kv_cache_blocks(self) -> int:
        return max(self.kv_cache_bytes // self.block_bytes, 0)

    @property
    def kv_cache_tokens(self) -> int:
        return self.kv_cache_blocks * self.block_size

    @property
    def max_concurrent_sequences(self) -> float:
        """Requests of ``max_model_len`` tokens the blocks hold at once, as vLLM prints it (``%.2fx``)."""
        return self.kv_cache_blocks / -(-self.max_model_len // self.block_size)

    @property
    def refusal(self) -> str | None:
        """Why vLLM refuses to start (None: it starts): vLLM's check of the KV cache memory left after profiling
        (``vllm/v1/core/kv_cache_utils.py``, check_enough_kv_cache_memory: none left, or less than one request of
        max_model_len needs, cdiv(max_model_len, block_size) blocks; V0's raise_if_cache_size_invalid the same in
        tokens)."""
        if self.kv_cache_bytes <= 0:
            return (f"no available memory for the cache blocks: the budget {self.budget:,} B "
                    f"(gpu_memory_utilization {self.utilization} x {self.total_memory:,} B) less the weights, the "
                    f"profiled activation peak and the CUDA graphs leaves {self.kv_cache_bytes:,} B; raise "
                    "--gpu-memory-utilization or use a larger GPU")
        needed = -(-self.max_model_len // self.block_size) * self.block_bytes
        if needed > self.kv_cache_bytes:
            return (f"one request of max_model_len {self.max_model_len:,} tokens needs {needed:,} B of KV cache, "
                    f"more than the {self.kv_cache_bytes:,} B available; raise --gpu-memory-utilization or shorten "
                    "--seq/--new-tokens")
        return None

    def to_json(self) -> dict[str, Any]:
        return {"total_gpu_memory": self.total_memory, "gpu_memory_utilization": self.utilization,
                "budget_bytes": self.budget, "weight_bytes": self.weights,
                "activation_peak_bytes": self.activation_peak, "non_torch_bytes": self.non_torch,
                "cuda_graph_bytes": self.cuda_graphs, "kv_cache_memory_bytes": self.kv_cache_bytes,
                "block_size": self.block_size, "block_bytes": self.block_bytes,
                "kv_cache_blocks": self.kv_cache_blocks, "kv_cache_tokens": self.kv_cache_tokens,
                "max_model_len": self.max_model_len, "max_concurrent_sequences": self.max_concurrent_sequences,
                "max_num_batched_tokens": self.max_num_batched_tokens, "max_num_seqs": self.max_num_seqs,
                "starts": self.refusal is None, "refusal": self.refusal, "sources": list(self.sources)}


#: Bytes per logit the profiling run's dummy sampler holds at its peak (``gpu_model_runner._dummy_sampler_run``:
#: top_k V - 1 and top_p 0.9 for every row, so the sort runs; ``vllm/v1/sample/sampler.py`` and
#: ``ops/topk_topp_sampler.py`` apply_top_k_top_p, at the scatter): the logits in the model's dtype (held by the
#: caller), their fp32 copy (``logits.to(torch.float32)``; temperature divides in place), the sorted values (fp32)
#: and their int64 indices (``logits.sort``), the top-k and top-p bool masks, the sorted softmax (cumsum in place)
#: and the scattered result (fp32): 4 + 4 + 8 + 1 + 1 + 4 + 4 = 26, plus the model dtype's bytes.
SAMPLER_FP32_BYTES = 4 + 4 + 8 + 1 + 1 + 4 + 4


def _profile_peak(est: Any, tokens: int, rows: int) -> int:
    """The profiling run's peak over the weights (``gpu_model_runner.profile_run``): ``_dummy_run`` of ``tokens``
    tokens split over ``rows`` = min(max_num_seqs, tokens) dummy requests (tokens // rows each, the rest to the
    last: here each ceil(tokens / rows), at most rows - 1 tokens more), whose largest transient is the estimate's
    ``activation_bytes`` for that batch; then ``_dummy_sampler_run`` over one row per request (its
    ``torch.rand_like`` of their hidden states, rows x h), while the forward's hidden states (tokens x h) are held: SAMPLER_FP32_BYTES plus the model dtype's per logit, rows x V of them.
    The peak is the larger of the two. Not modelled: torch.sort's own temporaries (its iota indices and cub's
    buffers) and torch.compile's or the CUDA graphs' buffers during the profile."""
    o = est.options
    per = -(-tokens // rows)
    probe = est.variant(batch=rows, seq=per, new_tokens=0, gpu=None)  # a whole estimate: built by estimate.py
    width = serving_dtypes(o)[1].nbytes  # the compute dtype: hidden states and logits (the LM head's)
    hidden = (tokens + rows) * est.model.sizes["h"] * width  # the forward's, and the sampler's rand_like of its rows
    sampler = rows * est.model.sizes["V"] * (SAMPLER_FP32_BYTES + width)
    return max(probe.number("activation_bytes"), hidden + sampler)


def vllm_startup(est: Any) -> VllmStartup | None:
    """vLLM's start-up numbers for an inference estimate under ``--framework vllm --gpu`` (None otherwise)."""

    o = est.options
    if o.framework != "vllm" or o.gpu is None or o.mode != "infer":
        return None
    hw = lookup(o.gpu)
    total, total_source = usable_memory(hw)
    tokens, seqs = batch_defaults(hw)
    tokens, seqs = o.max_num_batched_tokens or tokens, o.max_num_seqs or seqs
    block = o.kv_block or 16
    sources = (cite(VLLM_CITATION), f"total memory: {total_source}",
               f"CUDA graphs: {CUDA_GRAPH_SIZES} capture sizes x {CUDA_GRAPH_BYTES:,} B (vllm#11349); subtracted "
               "from the KV budget since v0.21 (earlier versions capture them on top of it)",
               "activation peak: the larger of the profiling forward's largest transient (max_num_batched_tokens "
               "tokens over min(max_num_seqs, tokens) dummy requests) and the dummy sampler's logits over one row per "
               f"request ({SAMPLER_FP32_BYTES} B of fp32/int64/bool buffers plus the model dtype's per logit) with "
               "the forward's hidden states held",
               "non-torch: NCCL buffers of the tensor-parallel group (runtime.nccl_bytes); none at tp 1")
    return VllmStartup(hw.name, total, o.gpu_memory_utilization or 0.9, est.number("weight_bytes"),
                       _profile_peak(est, tokens, min(seqs, tokens)), nccl_bytes("tensor", o.tp) if o.tp > 1 else 0,
                       CUDA_GRAPH_SIZES * CUDA_GRAPH_BYTES, block, est.number("kv_cache_bytes_per_token") * block,
                       o.seq + o.new_tokens, tokens, seqs, sources)


def vllm_refusal(est: Any) -> str | None:
    """Why vLLM would refuse to start for this estimate (None: it starts, or no --framework vllm --gpu)."""
    v = vllm_startup(est)
    return None if v is None else v.refusal


def vllm_json(est: Any) -> dict[str, Any]:
    """The vLLM keys of ``estimate --json``: ``kv_cache_blocks``, ``kv_cache_tokens``,
    ``max_concurrent_sequences`` and the start-up's parts under ``vllm`` (none unless --framework vllm --gpu)."""
    v = vllm_startup(est)
    if v is None:
        return {}
    return {"kv_cache_blocks": v.kv_cache_blocks, "kv_cache_tokens": v.kv_cache_tokens,
            "max_concurrent_sequences": v.max_concurrent_sequences, "vllm": v.to_json()}
