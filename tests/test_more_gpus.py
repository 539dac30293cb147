"""GH200 and MI325X in the GPU table, at Bekman's tables (ml-engineering at 744d01e: the TFLOPS, memory, MAMF and
NVLink/XGMI tables), their matmul rates at the measured MAMF."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.activation_offload import host_link
from memderive.derivations.quantities.efficiency import flash_kernel, fp8_rate_ratio, matmul_rate
from memderive.derivations.quantities.memory_bound import achievable_bandwidth
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
    if name.startswith("gh200"):  # the H100's NVLink 4 and its measured all-reduce curve: the H100's TP seconds
        assert t.tp_s == step_time(e, "h100-sxm").tp_s > 0


def test_the_gh200s_memory_bound_kernels_at_their_hbms_measured_fraction() -> None:
    """No stream benchmark of a GH200: its HBM's kind stands in (memory_bound.STREAM_STAND_IN). The 141 GB one has the
    H200's HBM3e at 4.8 TB/s: the H200's measured Triad, 4.15 TB/s; the 96 GB one HBM3 at 4.0: the H100 SXM's fraction,
    4.0 x 2.97 / 3.35 = 3.546 TB/s. The two differ only there: the elementwise seconds in the ratio 4.15 / 3.546 =
    1.1702, the matmuls the same."""
    assert achievable_bandwidth(gpu("gh200-141gb")) == pytest.approx(4.15e12)
    assert achievable_bandwidth(gpu("gh200-96gb")) == pytest.approx(4.0e12 * 2.97 / 3.35)
    e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, framework="megatron")
    small, large = step_time(e, "gh200-96gb"), step_time(e, "gh200-141gb")
    assert small.compute_s == large.compute_s
    assert small.elementwise_s / large.elementwise_s == pytest.approx(4.15 / (4.0 * 2.97 / 3.35))


def test_the_mi325xs_fp8_keeps_the_mi300xs_ratio_to_bf16() -> None:
    """No fp8 MAMF for either: the MI300X's fp8 burst is OpenXLA's own 4096^3 point on it (1,745.7 TFLOP/s, gfx942);
    the MI325X, the same compute at more power, that times its bf16 MAMF over the MI300X's: 1,745.7 x 784.9 / 668.4 =
    2,049.97; both run fp8 2.61x their bf16."""
    shape = (8192, 8192, 8192)
    assert matmul_rate(gpu("mi325x"), "fp8", *shape) / matmul_rate(gpu("mi300x"), "fp8", *shape) == \
        pytest.approx(784.9 / 668.4)
    assert fp8_rate_ratio(gpu("mi325x")) == pytest.approx(fp8_rate_ratio(gpu("mi300x")))
    assert fp8_rate_ratio(gpu("mi300x")) == pytest.approx(1745.7 / 668.4)


def test_a_gh200_offloads_activations_over_its_own_nvlink_c2c() -> None:
    """A GH200 joins one Grace to its one GPU over NVLink-C2C, 450 GB/s each way (Bekman's NVLink-C2C table); a GB200
    superchip's two GPUs share theirs: 225 GB/s each. No PCIe slot to the host: without the C2C figure the copies would
    not be timed."""
    assert host_link(gpu("gh200-96gb"))[0] / 2 == 450e9
    assert host_link(gpu("gb200"))[0] / 2 == 225e9
    # 31 of Llama 3 8B's 32 layers: each copy awaited at the layer that queued it (activation_offload.exposed_copy_s,
    # g = 0), the stall every copy whole both ways: the same bytes over twice the GB200's share, half its stall
    e = estimate("llama-3-8b", mode="train", batch=1, seq=8192, activation_offload_layers=31, framework="megatron")
    gh200, gb200 = step_time(e, "gh200-96gb"), step_time(e, "gb200")
    assert gb200.activation_offload_s > 0
    assert gh200.activation_offload_s / gb200.activation_offload_s == pytest.approx(0.5)
