"""Each GPU's architecture said once (``GPU.arch``, hardware.py) and what is chosen by it read from there: OpenXLA's
GEMM curve, the FlashAttention kernel, NCCL's compute-capability row, the cuBLAS workspace. Likewise how its link
joins a node's GPUs (``GPU.fabric``): NCCL's NVLink rows and the measured all-reduce curves.

Expected values from NVIDIA's CUDA GPUs table (compute capability: H100 9.0, B200 10.0, B300 10.3, A100 8.0, V100 7.0,
L40S 8.9) and AMD's ROCm specifications (MI300X gfx942), and from the code that chooses by them: NCCL's tuning.cc
(rows 0 Volta ... 3 Blackwell, every cc >= 100 Blackwell), PyTorch's cuBLAS workspace (32 MiB on sm90 only). The
fabrics from the systems' documents: DGX-1 (V100) a hybrid cube-mesh (the Volta whitepaper), DGX A100/H100/H200/B200
and the NVL72 racks NVSwitch, H100 PCIe and RTX A6000 a two-card bridge (their datasheets), MI300X Infinity Fabric.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from memderive.derivations.hardware import GPUS, HardwareError, gpu
from memderive.derivations.quantities.cluster import all_reduce_fraction
from memderive.derivations.quantities.efficiency import CURVE, flash_kernel, matmul_rate
from memderive.derivations.quantities.nccl_cost import NCCL_ARCH
from memderive.derivations.quantities.runtime import SM90, cublas_workspace_bytes


def test_every_gpu_names_its_architecture() -> None:
    assert all(x.arch for x in GPUS.values())
    assert [gpu(n).arch for n in ("v100-16gb", "a100-80gb", "l40s", "h100-pcie", "b200", "gb300", "mi325x")] == [
        "sm_70", "sm_80", "sm_89", "sm_90", "sm_100", "sm_103", "gfx942"]
    assert gpu("h800").arch == gpu("h100-sxm").arch and gpu("a800-80gb").arch == gpu("a100-80gb").arch


def test_what_the_architecture_chooses() -> None:
    # Hopper's 32 MiB cuBLAS workspace: every sm_90 part, the PCIe card and the export variant too; not Blackwell
    assert SM90 == {"h100-sxm", "h100-pcie", "h200", "h800", "gh200-96gb", "gh200-141gb"}
    assert cublas_workspace_bytes("h100-pcie") == 32 * 2**20 > cublas_workspace_bytes("b200")
    # OpenXLA's curves: Hopper's sm_90, Blackwell Ultra on the B200's, CDNA 3 on the MI300X's; none for Ampere or Ada
    assert (CURVE["h100-pcie"], CURVE["gb300"], CURVE["mi325x"]) == ("sm_90", "sm_100_B200", "gfx942")
    assert "a100-80gb" not in CURVE and "l40s" not in CURVE
    # FlashAttention: Hopper's kernels from sm_90 on, FlashAttention-2's Ampere kernel before
    assert [flash_kernel(gpu(n), "megatron") for n in ("h100-pcie", "b300", "a100-80gb", "l40s")] == [
        "fa3-hopper", "fa3-hopper", "fa2-ampere", "fa2-ampere"]
    # NCCL: Volta 0, Ampere 1, Hopper 2 at 20.6 GB/s a link, Blackwell and Blackwell Ultra 3 at 40.1; a bridged pair
    # (H100 PCIe, RTX A6000) and PCIe cards have no NVLink row
    assert [NCCL_ARCH[n][:2] for n in ("v100-32gb", "a100-40gb", "h200", "b300")] == [
        (0, 20.0), (1, 20.0), (2, 20.6), (3, 40.1)]
    assert not {"h100-pcie", "a6000", "l40s", "mi300x"} & set(NCCL_ARCH)


def test_a_gpu_without_a_known_architecture_is_refused() -> None:
    """A GPU the table builds needs its architecture: nothing silently falls back to "not Hopper, no curve"."""
    with pytest.raises(HardwareError, match="arch 'sm_91' is none of"):
        replace(gpu("h100-sxm"), arch="sm_91")
    # a renamed copy keeps its architecture and so its kernel choices (a plan's "given" GPU)
    copy = replace(gpu("h100-sxm"), name="given")
    assert flash_kernel(copy, "megatron") == "fa3-hopper"
    # its GEMMs on OpenXLA's sm_90 curve: (4096, 1024, 4096) at 0.963 of 4096^3, the table's H100 entry
    ratio = matmul_rate(copy, "bf16", 4096, 1024, 4096) / matmul_rate(copy, "bf16", 4096, 4096, 4096)
    assert abs(ratio - 0.963) < 1e-9


def test_every_gpu_says_how_its_link_joins_a_node() -> None:
    assert [gpu(n).fabric for n in ("v100-16gb", "a100-80gb", "h100-sxm", "h100-pcie", "a6000", "gb200", "l40s",
                                    "mi300x")] == ["hybrid-cube", "nvswitch", "nvswitch", "bridge", "bridge",
                                                   "nvswitch", "pcie", "infinity-fabric"]
    with pytest.raises(HardwareError, match="fabric 'nvlink' is none of"):
        replace(gpu("h100-sxm"), fabric="nvlink")


def test_what_the_fabric_chooses() -> None:
    # NCCL's NVLink rows: every NVSwitch or hybrid-cube GPU of a row's architecture, and nothing else
    assert set(NCCL_ARCH) == {"v100-16gb", "v100-32gb", "a100-40gb", "a100-80gb", "a800-80gb", "h100-sxm", "h200",
                              "h800", "gh200-96gb", "gh200-141gb", "b200", "gb200", "b300", "gb300"}
    # OpenXLA's measured all-reduce (2^27 B over 8 GPUs): on the 8-GPU NVSwitch nodes of Hopper and Blackwell it
    # measured (H100: 200.3 GB/s over the rated ring's 450 / 1.75 = 257.14), not on the NVL72 racks nor Blackwell
    # Ultra (1: the rated ring), nor a bridged pair
    assert round(all_reduce_fraction(gpu("h200"), 2**27, 8), 4) == round(200.3 / (450 / 1.75), 4)
    assert [all_reduce_fraction(gpu(n), 2**27, 8) for n in ("gb200", "b300", "h100-pcie", "a100-80gb")] == [1.0] * 4
    assert all_reduce_fraction(gpu("b200"), 2**27, 8) < 1.0
