"""The export variants, H800 and A800: the full GPU's die with fewer NVLink links (hardware.py, ``GPU.die``).

What is measured on the die's kernels stands for the variant's; its link is its own, timed at NCCL's per-link speed
(topo.h) over its 8 links. The check against reality is DeepEP's own measurement of the H800's NVLink."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import GPUS, gpu, intra_bandwidth, kernels_of
from memderive.derivations.quantities.cluster import Cluster
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
    for measured in (153.0, 158.0):
        assert 0.9 < measured / nvlink_bus(gpu("h800"), gpu("h800").link_bandwidth / 2) < 1.0


def test_an_a800_all_reduce_in_a_node_is_nccls_ring_over_its_8_links() -> None:
    """2^25 B over 8 A800s, by hand as the A100's (tests/test_time_model.py) with the bus 8 x 20.0 = 160 GB/s:
    Simple 8.4 + 14 x 3.4 = 56.0 us + 2^25 x 14 / (160e9 x 8) = 367.00 us: 423.00 us; LL128 40.6 + 2^25 x 14 /
    (147.2e9 x 8) = 398.92 us: 439.52 us. The A100's is 300.67 us."""
    assert node_ring_s(gpu("a800-80gb"), "all_reduce", 2**25, 8) == pytest.approx(423.0016e-6, rel=1e-6)
    assert Cluster(gpu("a800-80gb")).all_reduce(2**25, 8, 1) == pytest.approx(423.0016e-6, rel=1e-6)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_variant_computes_as_its_die(variant: str) -> None:
    """The same silicon, clocks and HBM: every matmul shape's rate, the memory-bound kernels' bandwidth, the
    FlashAttention kernel, the cuBLAS workspace, the memory CUDA reports and the PCIe slot are the die's."""
    hw, die = gpu(variant), gpu(VARIANTS[variant])
    for dtype in ("bf16", "fp8"):
        for shape in ((4096, 4096, 4096), (8192, 1024, 4096), (256, 14336, 4096)):
            assert matmul_rate(hw, dtype, *shape) == matmul_rate(die, dtype, *shape)
    assert achievable_bandwidth(hw) == achievable_bandwidth(die)
    assert flash_kernel(hw, "megatron") == flash_kernel(die, "megatron")
    assert cublas_workspace_bytes(variant) == cublas_workspace_bytes(die.name)
    assert usable_memory(hw)[0] == usable_memory(die)[0]
    assert intra_bandwidth(hw, "pcie") == intra_bandwidth(die, "pcie")


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
    assert mine.step_s > theirs.step_s
