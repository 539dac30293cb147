"""What the published H100 runs say about the attention core's speed in training (a benchmark, not a test).

    python benchmarks/attention_whatif.py

memderive times FlashAttention's core at a flat fraction of the peak (``efficiency.FLASH``: FlashAttention-3's 75%
forward and 52.5% backward under Megatron-Core, FlashAttention-2's 35% under PyTorch's SDPA) over the FLOPs its
count gives, which are the full ``s x s`` products (FlopCounterMode's convention): a causal kernel skips the masked
half, so the flat fractions amount to 37.5% / 26.3% (17.5% under FlashAttention-2) of the peak on the work the
kernel does. Issue 39 asks for the kernels' published speeds by sequence, head dimension and mask instead. This
prints, for the H100 runs where attention weighs most (NeMo's long-sequence rows, torchtitan's context-parallel
ones, Llama 3's 128K row), the step memderive predicts as it is and the step it would predict with the core at
FlashAttention-3's published H100 speeds (Shah et al. 2024, Figs. 5 and 6: head dim 128, causal forward; the
backward figure is non-causal only) on the half of the FLOPs a causal kernel runs, at the per-GPU query length
s / cp (the table flat past its 16K column). Where those rows' error moves from a few percent to 30-40% too
fast, the kernels' microbenchmark speeds are not what a training step's attention reaches, and a per-shape table
from them is left out of the time model (tests/published_runs.py, the long-sequence rows' comments).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memderive.derivations.quantities import efficiency  # noqa: E402
from tests.published_runs import DENSE_APART, HELD_OUT, TORCHTITAN_FLOAT8, Run, predict  # noqa: E402

#: Shah et al. 2024 (FlashAttention-3, arXiv 2407.08608), H100 80GB SXM5, head dim 128, TFLOP/s over the FLOPs a
#: causal kernel runs (the benchmark halves them), by sequence 512, 1K, 2K, 4K, 8K, 16K: Fig. 5 (causal forward)
#: and Fig. 6 (backward, non-causal: the paper prints no causal backward).
SEQ = (512, 1024, 2048, 4096, 8192, 16384)
PUBLISHED = {  # kernel: (forward, backward)
    "fa3-hopper": ((315, 410, 484, 518, 529, 539), (305, 408, 465, 499, 518, 516)),  # cuDNN: TE's fused attention
    "fa2-hopper": ((191, 260, 298, 319, 333, 335), (214, 260, 291, 310, 318, 322)),  # FlashAttention-2 (SDPA)
}


def _at(values: tuple[int, ...], length: int) -> float:
    """The published speed at the longest benchmarked sequence not past ``length`` (the 512 column below it)."""
    return float(next((v for s, v in zip(reversed(SEQ), reversed(values)) if s <= length), values[0]))


def what_if(run: Run) -> tuple[float, float, str]:
    """(memderive's predicted step, the step with the core at the published speeds, the kernel)."""
    est, hw = run.estimate(), run.cluster().gpu
    kernel = efficiency.flash_kernel(hw, est.options.framework)
    peak = hw.bf16_flops / 1e12  # FLASH holds fractions of the dense bf16 peak
    base = predict(run).predicted_s
    fwd, bwd = PUBLISHED[kernel]
    query = run.seq // run.layout.get("cp", 1)
    saved = efficiency.FLASH[kernel]
    # the counted FLOPs are twice what the causal kernel runs: twice its speed as a fraction of the peak
    efficiency.FLASH[kernel] = (2 * _at(fwd, query) / peak, 2 * _at(bwd, query) / peak)
    try:
        published = predict(run).predicted_s
    finally:
        efficiency.FLASH[kernel] = saved
    return base, published, kernel


def main() -> None:
    runs = [r for r in HELD_OUT + DENSE_APART + TORCHTITAN_FLOAT8
            if r.gpu == "h100-sxm" and r.seq >= 16384]
    print(f"{'run':34s} {'kernel':10s} {'s/cp':>7s} {'measured s':>11s} {'memderive':>10s} {'error':>7s} "
          f"{'published':>10s} {'error':>7s}")
    now, then = [], []
    for run in runs:
        base, published, kernel = what_if(run)
        measured = run.measured()
        now.append(base / measured - 1)
        then.append(published / measured - 1)
        print(f"{run.name:34s} {kernel:10s} {run.seq // run.layout.get('cp', 1):7d} {measured:11.2f} {base:10.2f} "
              f"{now[-1]:+7.1%} {published:10.2f} {then[-1]:+7.1%}")
    print(f"{len(runs)} runs: memderive's median error {statistics.median(now):+.1%}; with the core at the published "
          f"kernel speeds {statistics.median(then):+.1%} (negative: predicted too fast)")


if __name__ == "__main__":
    main()
