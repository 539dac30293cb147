"""GH200 and MI325X in the GPU table, at Bekman's tables (ml-engineering at 744d01e: the TFLOPS, memory, MAMF and
NVLink/XGMI tables), their matmul rates at the measured MAMF."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.efficiency import flash_kernel, matmul_rate
from memderive.derivations.quantities.runtime import cublas_workspace_bytes
from memderive.derivations.quantities.timing import step_time

G, T, GIB = 10**9, 10**12, 2**30


def test_gh200_and_mi325x_at_their_published_figures() -> None:
    """GH200: the H100 SXM's dense peaks (989.5 bf16, 1,979 fp8), 96 GB of HBM3 at 4.00 TB/s or 141 GB of HBM3e at
    4.80, NVLink 4 at 900 GB/s both ways, Grace its host. MI325X: the MI300X's compute (1,307.4 and 2,614.9), 256 GB of
    HBM3e at 6.00 TB/s, XGMI 7 x 64 GB/s = 448 each way, 896 both."""
    small, large, mi = gpu("gh200-96gb"), gpu("gh200-141gb"), gpu("mi325x")
    for hw, memory, bandwidth in ((small, 96, 4000), (large, 141, 4800)):
        assert (hw.bf16_flops, hw.fp8_flops, hw.memory_bytes, hw.memory_bandwidth, hw.link_bandwidth, hw.host) == \
            (989_500 * G, 1_979 * T, memory * GIB, bandwidth * G, 900 * G, "grace")
    assert (mi.bf16_flops, mi.fp8_flops, mi.memory_bytes, mi.memory_bandwidth, mi.link_bandwidth) == \
        (1_307_400 * G, 2_614_900 * G, 256 * GIB, 6_000 * G, 7 * 64 * 2 * G)


def test_their_matmuls_at_the_measured_mamf() -> None:
    """Bekman's MAMF: the GH200 (900 W, 141 GiB) 828.6 bf16 TFLOP/s, 4.3% above the H100 SXM's 794.5; its sustained
    rate the H200's ratio on it, 828.6 x 708.5 / 794.5 = 738.91 (the 96 GB one the same GPU: the same); the MI325X
    784.9 against the MI300X's 668.4 (1.1743x), no sustained rate measured for either. Each product's shape fraction is
    its architecture's curve, so a shape's rate keeps these ratios."""
    shape = (8192, 8192, 8192)
    assert matmul_rate(gpu("gh200-141gb"), "bf16", *shape) / matmul_rate(gpu("h200"), "bf16", *shape) == \
        pytest.approx(828.6 / 794.5)
    assert matmul_rate(gpu("gh200-96gb"), "bf16", *shape) == matmul_rate(gpu("gh200-141gb"), "bf16", *shape)
    assert matmul_rate(gpu("gh200-141gb"), "bf16", 4096, 4096, 4096) == \
        pytest.approx(738.91e12 * matmul_rate(gpu("h200"), "bf16", 4096, 4096, 4096) / 708.5e12, rel=1e-4)
    assert matmul_rate(gpu("mi325x"), "bf16", *shape) / matmul_rate(gpu("mi300x"), "bf16", *shape) == \
        pytest.approx(784.9 / 668.4)
    assert flash_kernel(gpu("gh200-96gb"), "megatron") == "fa3-hopper"
    assert cublas_workspace_bytes("gh200-96gb") == 32 * 2**20  # Hopper, compute capability 9.0


@pytest.mark.parametrize("name", ["gh200-96gb", "gh200-141gb", "mi325x"])
def test_a_training_step_is_timed_on_them(name: str) -> None:
    """Llama-2-7B at TP 2 and DP 4 over two nodes of 4 (a GH200 quad node's size, given): the data-parallel reduction
    across nodes (NCCL's latency needs the host CPU: Grace's on a GH200; the MI325X, no NCCL table: rated rings) and the
    compute at the rates above."""
    e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=2, dp=4, zero=1, framework="megatron",
                 gpus_per_node=4)
    t = step_time(e, name)
    assert t.step_s > t.compute_s > 0 and t.dp_s > 0


def test_the_gh200s_faster_memory_runs_its_memory_bound_kernels_faster() -> None:
    """The two GH200s differ only in their HBM (4.00 against 4.80 TB/s, neither measured by a stream benchmark: the
    rated bandwidth): the elementwise seconds in that ratio, the matmuls the same."""
    e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, framework="megatron")
    small, large = step_time(e, "gh200-96gb"), step_time(e, "gh200-141gb")
    assert small.compute_s == large.compute_s
    assert small.elementwise_s / large.elementwise_s == pytest.approx(4.8 / 4.0)
