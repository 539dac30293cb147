"""Where a CPU step and a CUDA step allocate differently, pinned (the timeline tests measure CPU).

* The CUDA caching allocator rounds every block up to 512 bytes (``c10/cuda/CUDACachingAllocator.cpp``:
  ``kMinBlockSize = 512``); the CPU allocator takes what is asked. ``torch.cuda.max_memory_allocated``
  counts the rounded blocks.
* AdamW keeps each parameter's step count in a 4-byte tensor on the CPU unless it is fused or capturable
  (``torch/optim/adam.py`` ``_init_group``): on a GPU it takes no GPU memory, on CPU it is counted.
* torch picks the foreach update by default only for tensors on CUDA-like devices
  (``torch/optim/optimizer.py`` ``_default_to_fused_or_foreach``): on CPU the default is the per-tensor loop,
  so the measured CPU steps ask for ``foreach=True``, the update GPUs run.
"""

from __future__ import annotations

import torch

from tests.step_cases import SMALL, Case, derived


def test_cuda_rounds_every_block_to_512_bytes_and_keeps_step_counts_on_the_cpu() -> None:
    """Tiny LLaMA (h = 64, 2 layers, V = 128), bf16 weights with fp32 master and AdamW states, before the step.
    Every weight is a multiple of 512 bytes but the five RMSNorm weights (64 bf16 = 128 B: +384 each) and
    their master copies and two states (256 B: +256 each): 5 * (384 + 3 * 256) = 5760. The batch's
    input_ids and labels (2 x 24 int64 = 384 B) take 512 each: +256; the rotary inv_freq buffer (8 fp32 =
    32 B) 512: +480. The 21 parameters' 4-byte step counts are on the CPU: -84. In all 5760 + 256 + 480 - 84."""
    case = Case("llama-gqa", "sdpa", SMALL, "master")
    assert derived(case, "cuda").baseline - derived(case, "cpu").baseline == 5760 + 256 + 480 - 84 == 6412


def test_cpu_adamw_defaults_to_the_loop_and_cuda_to_foreach() -> None:
    from torch.optim.optimizer import _default_to_fused_or_foreach, _get_foreach_kernels_supported_devices

    cpu = [torch.zeros(2, requires_grad=True)]
    assert _default_to_fused_or_foreach(cpu, differentiable=False, use_fused=False) == (False, False)
    assert "cuda" in _get_foreach_kernels_supported_devices() and "cpu" not in _get_foreach_kernels_supported_devices()
