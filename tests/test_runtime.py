"""The runtime around a step on a named GPU (``derivations.quantities.runtime``): allocated, reserved and
device bytes, each a sum of named terms whose figures come from the sources they cite.

Expected numbers are the sources' own (PyTorch's cuBLAS workspace sizes, the measured CUDA contexts and
NCCL buffers) or sums written out by hand; none is computed by the code under test."""

from __future__ import annotations

import json
import math

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import GPUS, gpu
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.references import cite
from memderive.derivations.quantities.runtime import (FRAGMENTATION, context_bytes, cublas_workspace_bytes,
                                                      fits_gpu, nccl_bytes, parallel_groups, runtime)

MIB = 2**20
STEP = {"mode": "train", "batch": 1, "seq": 128}


def test_the_gpus_people_measure_on_are_in_the_table() -> None:
    """V100 SXM2 16/32 GB, A10, RTX A6000, L4, T4, RTX 3090 at their datasheets' dense 16-bit tensor rate,
    memory and bandwidth (V100: 125 TFLOPS, 900 GB/s; A10: 125, 600; A6000: 309.7 with sparsity, 768;
    L4: 242 and FP8 485 with sparsity, 300; T4: 65, 320; RTX 3090: 71 with FP32 accumulate, 936)."""
    expected = {"v100-16gb": (125e12, 16, 900e9), "v100-32gb": (125e12, 32, 900e9), "a10": (125e12, 24, 600e9),
                "a6000": (154.8e12, 48, 768e9), "l4": (121e12, 24, 300e9), "t4": (65e12, 16, 320e9),
                "rtx-3090": (71e12, 24, 936e9)}
    for name, (flops, gib, bandwidth) in expected.items():
        x = gpu(name)
        assert (x.bf16_flops, x.memory_bytes, x.memory_bandwidth) == (int(flops), gib * 2**30, int(bandwidth)), name
        assert x.source.key.startswith("nvidia-") and cite(x.source)
    assert gpu("l4").fp8_flops == 242_500_000_000_000 and gpu("t4").fp8_flops is None
    # with the GB200 (tests/test_time_model: its NVL72 domain), the B300, the GB300, and the export variants H800 and
    # A800 (tests/test_export_variants.py), the GH200's two memories and the MI325X (tests/test_more_gpus.py)
    assert len(GPUS) == 24


def test_blackwell_ultra_is_in_the_table_at_its_datasheets() -> None:
    """B300: DGX B300 FP8 72 PFLOPS with sparsity over 8 GPUs = 9 sparse = 4.5 dense PFLOP/s; HGX B300 FP16/BF16 36
    over 8 = 4.5 sparse = 2.25 dense; 2.3 TB over 8 = 288 GB (NVIDIA's Blackwell Ultra blog: 288 GB at 8 TB/s);
    NVLink 14.4 TB/s over 8 = 1.8 TB/s; 8-GPU nodes. GB300 NVL72: FP8 720 and BF16 360 PFLOPS with sparsity over 72
    = 10 and 5 sparse = 5 and 2.5 dense; 576 TB/s over 72 = 8 TB/s; NVLink 130 TB/s over 72 = 1.8 TB/s (1,805.6
    rounded as the GB200's); one domain of 72. Both have Blackwell's MXFP8 (--fp8 te-mxfp8 accepted)."""
    b300, gb300 = gpu("b300"), gpu("gb300")
    assert (b300.bf16_flops, b300.fp8_flops, b300.memory_bytes, b300.memory_bandwidth, b300.link_bandwidth,
            b300.nvlink_domain) == (2_250 * 10**12, 4_500 * 10**12, 288 * 2**30, 8 * 10**12, 1_800 * 10**9, 8)
    assert (gb300.bf16_flops, gb300.fp8_flops, gb300.memory_bytes, gb300.memory_bandwidth, gb300.link_bandwidth,
            gb300.nvlink_domain) == (2_500 * 10**12, 5_000 * 10**12, 288 * 2**30, 8 * 10**12, 1_800 * 10**9, 72)
    assert cite(b300.source) and cite(gb300.source) and gb300.source.key == "nvidia-gb300-nvl72-datasheet"
    for name in ("b300", "gb300"):
        e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, gpu=name, implementation="megatron",
                     fp8="te-mxfp8")
        assert e.options.gpu == name
    with pytest.raises(OptionsError, match="not Blackwell"):
        estimate("llama-2-7b", mode="train", batch=1, seq=4096, gpu="h100-sxm", implementation="megatron",
                 fp8="te-mxfp8")


def test_cublas_workspace_is_pytorchs_default() -> None:
    """CublasHandlePool.cpp: 4096 * 8 * 1024 = 33,554,432 B on sm90, 4096 * 1024 * 2 + 16 * 1024 * 8 =
    8,519,680 B elsewhere (CUBLAS_WORKSPACE_CONFIG unset)."""
    assert [cublas_workspace_bytes(x) for x in ("h100-sxm", "h100-pcie", "h200")] == [33_554_432] * 3
    assert [cublas_workspace_bytes(x) for x in ("a100-80gb", "v100-16gb", "b200", "rtx-4090")] == [8_519_680] * 4


def test_cuda_context_is_the_measured_one() -> None:
    """Lazy loading: 256 MiB on an RTX 3090 (InvokeAI#9413), 426 MiB elsewhere (unsloth-zoo#1053); eager:
    1343 - 2 MiB on a V100 (transformers docs), 666,632,192 - 20 MiB elsewhere (pytorch#86509)."""
    assert context_bytes("rtx-3090")[0] == 256 * MIB
    assert context_bytes("h100-sxm")[0] == 426 * MIB
    assert context_bytes("v100-16gb", "eager")[0] == 1341 * MIB
    assert context_bytes("a100-80gb", "eager")[0] == 666_632_192 - 20 * MIB
    with pytest.raises(ValueError):
        context_bytes("a100-80gb", "sometimes")


def test_parallel_groups_and_their_nccl_buffers() -> None:
    """One communicator per group of more than one rank: 544 MiB for 2 ranks, 688 MiB for more
    (NVIDIA/nccl#964); the expert group's all-to-all adds 3.28e9 B / 7 per peer (NVIDIA/nccl#1685)."""
    opts = Options(mode="train", batch=1, seq=8, tp=2, pp=4, dp=8, zero=1)
    assert parallel_groups(opts) == [("tensor", 2), ("pipeline", 4), ("data", 8)]
    assert parallel_groups(Options(mode="train", batch=1, seq=8)) == []
    assert [nccl_bytes(*g) for g in parallel_groups(opts)] == [544 * MIB, 688 * MIB, 688 * MIB]
    assert nccl_bytes("expert", 8) == 688 * MIB + 3_280_000_000 // 7 * 7


def test_device_is_reserved_plus_context_and_nccl() -> None:
    """gpt2, b=1, s=128, AdamW bf16, on 2 A100s (dp 2, ZeRO-1): allocated = total_bytes + 8,519,680;
    reserved = allocated + FRAGMENTATION of total_bytes less the model states (the transient part); device = reserved + 426 MiB +
    544 MiB (one data-parallel communicator of 2)."""
    est = estimate("gpt2", **STEP, dp=2, zero=1, gpu="a100-80gb")
    r = runtime(est)
    total, states = est.number("total_bytes"), est.number("model_state_bytes")
    assert r.allocated_bytes == total + 8_519_680
    assert r.reserved_bytes == r.allocated_bytes + math.ceil((total - states) * FRAGMENTATION)
    assert r.device_bytes == r.reserved_bytes + 426 * MIB + 544 * MIB
    assert [t.path for t in r.terms] == ["runtime/peak", "runtime/cublas_workspace", "allocator/fragmentation",
                                         "runtime/cuda_context", "runtime/nccl/data"]
    assert all(t.source for t in r.terms)


def test_json_says_what_each_number_models(capsys) -> None:
    """With --gpu the JSON has reserved_bytes and device_bytes and the terms and assumptions behind them;
    without, none of them."""
    base = ["estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "128", "--json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "reserved_bytes" not in plain and "device_bytes" not in plain
    assert main([*base, "--gpu", "a100-80gb", "--cuda-module-loading", "eager"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device_bytes"] - data["reserved_bytes"] == 666_632_192 - 20 * MIB
    assert data["runtime"]["terms"]["runtime/cuda_context"] == 666_632_192 - 20 * MIB
    assert any("eager module loading" in x for x in data["runtime"]["assumptions"])
    assert data["fits_gpu"] is True


def test_text_report_names_each_counter(capsys) -> None:
    assert main(["estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "128", "--gpu", "l4",
                 "--summary"]) == 0
    out = capsys.readouterr().out
    assert "max_memory_reserved" in out and "nvidia-smi" in out and "runtime/cuda_context" in out


def test_fits_gpu_counts_the_runtime() -> None:
    """A step whose tensors fit but whose device bytes do not is reported as not fitting: llama-2-7b
    inference in bf16 on a T4 (16 GiB) holds 13.5 GB of weights, under 16 GiB, plus the runtime."""
    est = estimate("llama-2-7b", mode="infer", batch=1, seq=4096, gpu="t4")
    r = runtime(est)
    assert fits_gpu(est) == (r.device_bytes <= 16 * 2**30)
    small = estimate("gpt2", **STEP, gpu="t4")
    assert fits_gpu(small) is True and runtime(small).device_bytes > small.number("total_bytes")


def test_fit_budgets_against_device_bytes() -> None:
    """With a GPU named, fit's largest batch is the one whose device bytes (the runtime included) fit the
    GPU's memory and the next one's do not; without one, total_bytes against the same capacity."""
    from memderive.derivations.search.fit import fit

    capacity = gpu("l4").memory_bytes
    with_gpu = fit("llama-2-7b", Options(mode="infer", batch=1, seq=4096, gpu="l4"), capacity, "batch")
    plain = fit("llama-2-7b", Options(mode="infer", batch=1, seq=4096), capacity, "batch")
    assert with_gpu.budget == "device_bytes" and plain.budget == "total_bytes"
    at = runtime(estimate("llama-2-7b", mode="infer", batch=with_gpu.value, seq=4096, gpu="l4")).device_bytes
    nxt = runtime(estimate("llama-2-7b", mode="infer", batch=with_gpu.value + 1, seq=4096, gpu="l4")).device_bytes
    assert at == with_gpu.bytes_at <= capacity < nxt == with_gpu.bytes_next
    assert with_gpu.value < plain.value


@pytest.mark.slow
def test_plan_budgets_against_device_bytes() -> None:
    """Every training layout plan returns for a named GPU has device bytes within its memory; the rows still
    re-run through estimate to the same total_bytes."""
    from memderive.derivations.search.plan import plan

    capacity = gpu("a100-40gb").memory_bytes
    rows = plan("llama-2-7b", capacity, 16, 2048, 8, options=Options(gpu="a100-40gb"), top=20)
    assert rows
    for row in rows:
        est = estimate("llama-2-7b", **row.options)
        assert est.number("total_bytes") == row.total_bytes
        assert runtime(est).device_bytes <= capacity
