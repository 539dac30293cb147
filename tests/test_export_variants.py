"""The export variants, H800 and A800: the full GPU's die with fewer NVLink links (hardware.py, ``GPU.die``).

What is measured on the die's kernels stands for the variant's; its link is its own, timed at NCCL's per-link speed
(topo.h) over its 8 links. The check against reality is DeepEP's own measurement of the H800's NVLink."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import GPUS, gpu, intra_bandwidth, kernels_of
from memderive.derivations.quantities.cluster import NVLINK_MEASURED, Cluster, all_reduce_fraction
from memderive.derivations.quantities.efficiency import flash_kernel, matmul_rate
from memderive.derivations.quantities.memory_bound import achievable_bandwidth
from memderive.derivations.quantities.nccl_cost import node_ring_s, nvlink_bus
from memderive.derivations.quantities.runtime import cublas_workspace_bytes
from memderive.derivations.quantities.serving import usable_memory
from memderive.derivations.quantities.timing import step_time

VARIANTS = {"h800": "h100-sxm", "a800-80gb": "a100-80gb"}


def test_every_die_is_a_gpu_of_the_table_with_its_own_die() -> None:
    for name, hw in GPUS.items():
        if hw.die is not None:
            assert hw.die in GPUS and GPUS[hw.die].die is None, name
    assert {n: kernels_of(gpu(n)) for n in VARIANTS} == VARIANTS


def test_the_h800s_nvlink_at_nccls_per_link_speed_against_deepeps_measurement() -> None:
    """400 GB/s both ways (8 NVLink 4 links of 50): 200 GB/s each way x NCCL's 20.6 / 25 GB/s per link = 164.8 GB/s
    (8 x 20.6). DeepEP measured its intranode EP 8 dispatch at 153 GB/s and combine at 158 GB/s over the H800's NVLink
    (docs/legacy.md): 0.928 and 0.959 of the model. The A800: 8 NVLink 3 links x 20.0 = 160 GB/s."""
    assert nvlink_bus(gpu("h800"), 200e9) == pytest.approx(164.8)
    assert nvlink_bus(gpu("a800-80gb"), 200e9) == pytest.approx(160.0)
    measured = [gbs for _, gbs, _ in NVLINK_MEASURED["h800"]]
    assert measured == [153.0, 158.0]  # docs/legacy.md's table
    for gbs in measured:
        assert 0.9 < gbs / nvlink_bus(gpu("h800"), gpu("h800").link_bandwidth / 2) < 1.0
    # the full H100's 18 links would be 2.3x what DeepEP measured over the H800's
    assert nvlink_bus(gpu("h100-sxm"), gpu("h100-sxm").link_bandwidth / 2) / 158.0 > 2.3


def test_an_a800_all_reduce_in_a_node_is_nccls_ring_over_its_8_links() -> None:
    """2^25 B over 8 A800s, by hand as the A100's (tests/test_time_model.py) with the bus 8 x 20.0 = 160 GB/s:
    Simple 8.4 + 14 x 3.4 = 56.0 us + 2^25 x 14 / (160e9 x 8) = 367.00 us: 423.00 us; LL128 40.6 + 2^25 x 14 /
    (147.2e9 x 8) = 398.91 us: 439.51 us. The A100's is 300.67 us."""
    assert node_ring_s(gpu("a800-80gb"), "all_reduce", 2**25, 8) == pytest.approx(423.0016e-6, rel=1e-6)
    assert Cluster(gpu("a800-80gb")).all_reduce(2**25, 8, 1) == pytest.approx(423.0016e-6, rel=1e-6)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_variant_computes_as_its_die(variant: str) -> None:
    """The same silicon, clocks and HBM: every matmul shape's rate, the memory-bound kernels' bandwidth, the
    FlashAttention kernel, the cuBLAS workspace, the memory CUDA reports and the PCIe slot are the die's (pinned
    below by their measured values, where a GPU with no die would fall back to other ones)."""
    hw, die = gpu(variant), gpu(VARIANTS[variant])
    for dtype in ("bf16", "fp8"):
        for shape in ((4096, 4096, 4096), (8192, 1024, 4096), (256, 14336, 4096)):
            assert matmul_rate(hw, dtype, *shape) == matmul_rate(die, dtype, *shape)
    assert achievable_bandwidth(hw) == achievable_bandwidth(die)
    assert flash_kernel(hw, "megatron") == flash_kernel(die, "megatron")
    assert cublas_workspace_bytes(variant) == cublas_workspace_bytes(die.name)
    assert usable_memory(hw)[0] == usable_memory(die)[0]
    assert intra_bandwidth(hw, "pcie") == intra_bandwidth(die, "pcie")


def test_the_dies_measurements_are_what_the_variants_get() -> None:
    """BabelStream's Triad measured on the die (memory_bound.STREAM_TRIAD: 2.97 TB/s of an H100's 3.35, 1.70 of an
    A100 80GB's 2.039) where a GPU with no measurement gets its rated bandwidth; the H800 runs the Hopper FlashAttention
    kernel under Megatron-Core and PyTorch's 32 MiB Hopper cuBLAS workspace; Bekman's MAMF of the die (794.5 and 271.2
    TFLOP/s at their best shapes) where a GPU without one takes the A100's fraction of its own peak; the vLLM-logged
    79.22 GiB of an H100 80GB."""
    assert achievable_bandwidth(gpu("h800")) == pytest.approx(2.97e12)
    assert achievable_bandwidth(gpu("a800-80gb")) == pytest.approx(1.70e12)
    assert flash_kernel(gpu("h800"), "megatron") == "fa3-hopper"
    assert cublas_workspace_bytes("h800") == 32 * 2**20
    assert usable_memory(gpu("h800"))[0] == int(79.22 * 2**30)
    # the 4096^3 product: the die's sustained (MSMF-scaled) rate, not the A100's 86.9% of the H800's 989.5 TFLOP/s
    assert matmul_rate(gpu("h800"), "bf16", 4096, 4096, 4096) == pytest.approx(708.5e12, rel=2e-3)


def test_an_h800s_tp_all_reduce_is_no_faster_than_the_h100s_measured() -> None:
    """Without a measured curve of its own the H800 takes the slower of its die's measured all-reduce and NCCL's
    ring over its 8 links: 2^20 B over 8 GPUs, the H100's measured 20.2 GB/s, 2^20 / 20.2e9 = 51.91 us (its ring: LL
    15.0 + 2^20 x 14 / (82.4e9 x 8) = 37.27 us); 2^27 B, its ring, Simple 56.0 + 2^27 x 14 / (164.8e9 x 8) =
    1,481.1 us (the H100's measured 200.3 GB/s: 670.1 us). A short-sequence TP step on it is no faster than on an
    H100."""
    assert Cluster(gpu("h800")).all_reduce(2**20, 8, 1) / all_reduce_fraction(gpu("h800"), 2**20, 8) == \
        pytest.approx(2**20 / 20.2e9)
    assert Cluster(gpu("h800")).all_reduce(2**27, 8, 1) / all_reduce_fraction(gpu("h800"), 2**27, 8) == \
        pytest.approx(56.0e-6 + 2**27 * 14 / (164.8e9 * 8))
    e = estimate("llama-2-7b", mode="train", batch=1, seq=512, tp=8, framework="megatron")
    assert step_time(e, "h800").tp_s > step_time(e, "h100-sxm").tp_s


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_variants_fewer_links_slow_its_collectives_not_its_compute(variant: str) -> None:
    """Llama-2-7B at TP 8 in one node and DP 2 across two: the compute seconds are the die's; the TP all-reduces
    take longer over 400 GB/s than over 600 or 900; the data-parallel reduction across nodes runs (the host CPU
    NCCL's network latency needs is the die's system's)."""
    die = VARIANTS[variant]
    e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, dp=2, zero=1, framework="megatron")
    mine, theirs = step_time(e, variant), step_time(e, die)
    assert mine.compute_s == theirs.compute_s
    assert mine.tp_s > theirs.tp_s > 0
    assert mine.dp_s > 0 and theirs.dp_s > 0
    assert mine.step_s > theirs.step_s
