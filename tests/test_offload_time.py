"""ZeRO-Offload's time (derivations/quantities/offload_time.py): the PCIe copies of this GPU's shard and the CPU Adam
step, against seconds computed by hand from DeepSpeed's code (bytes per element) and the datasheets (PCIe)."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.options import Options
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.timing import step_time, time_of
from memderive.derivations.search.plan import NothingFits, plan

#: llama-2-7b: 6,738,415,616 parameters (its preset's count, tests/derivations).
P = 6_738_415_616


def test_zero3_over_8_h100s_by_hand() -> None:
    e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, zero=3, dp=8, offload=True, gpu="h100-sxm")
    st = time_of(e)
    n = P // 8  # 842,301,952 elements this GPU updates
    # CPU Adam: Step_AVX loads 16 B and stores 12 B, the unscale 4 + 4, the fp32 -> bf16 cast for the copy back
    # 4 + 2 = 42 B per element at 76.8 GB/s: 842,301,952 x 42 / 76.8e9 = 0.46063 s
    assert st.cpu_optimizer_s == pytest.approx(n * 42 / 76.8e9, rel=1e-12)
    assert round(st.cpu_optimizer_s, 4) == 0.4606
    # the bf16 parameters back over PCIe Gen5 x16, 64 GB/s each way: 842,301,952 x 2 / 64e9 = 0.026322 s; the fp32
    # gradients down (4 B: 0.0526 s) hide behind the backward (2/3 of 0.537 s, less no reduce-scatter on NVLink
    # worth 0.3 s)
    assert st.offload_copy_s == pytest.approx(n * 2 / 64e9, rel=1e-12)
    # both are lines of the step: twice the host bandwidth takes 0.23032 s off the step, nothing else
    fast = time_of(estimate("llama-2-7b", mode="train", batch=1, seq=4096, zero=3, dp=8, offload=True,
                            gpu="h100-sxm", host_memory_bandwidth=153.6))
    assert st.step_s - fast.step_s == pytest.approx(n * 42 / 153.6e9, rel=1e-9)
    keys = time_of(e).to_json()
    assert keys["cpu_optimizer_time_s"] == st.cpu_optimizer_s and keys["offload_copy_time_s"] == st.offload_copy_s


def test_zero2_on_one_a100_the_gradient_copy_is_exposed() -> None:
    # a tiny step (8 tokens): the backward cannot hide the gradients' copy (one GPU, --zero 0: DeepSpeed's stage-2
    # code on one rank)
    e = estimate("llama-2-7b", mode="train", batch=1, seq=8, offload=True, host_memory_bandwidth=50.0)
    st = step_time(e, "a100-80gb")
    n = P  # one GPU: the whole model
    # 42 B per element (DeepSpeed 0.17.0 on: ZeRO 1-2 too cast to 16 bits on the CPU, into a pinned buffer, before
    # the copy up) at 50 GB/s: 6,738,415,616 x 42 / 50e9 = 5.6603 s
    assert st.cpu_optimizer_s == pytest.approx(n * 42 / 50e9, rel=1e-12)
    # PCIe Gen4 x16, 32 GB/s each way: bf16 up 2n / 32e9 = 0.42115 s; fp32 down 4n / 32e9 = 0.84230 s less 2/3 of
    # the one micro-batch's compute and its fused elementwise kernels (no eager kernels, no ZeRO-3 copies, no
    # reduction on one GPU)
    down = max(0.0, 4 * n / 32e9 - (st.compute_s + st.elementwise_s) * 2 / 3)
    assert 0 < down < 4 * n / 32e9
    assert st.offload_copy_s == pytest.approx(2 * n / 32e9 + down, rel=1e-12)


def test_gradient_accumulation_through_the_cpu_by_hand() -> None:
    """DeepSpeed's copy_grads_in_partition (ZeRO 1-2) and partition_grads (ZeRO-3), read at edaa722: with m
    micro-batches each saves its 16-bit running sum to the CPU (2 B down) and all but the first (ZeRO-3: all) bring
    it back (2 B up); the last adds the fp32 copy (4 B down). On one A100 at 8 tokens nothing hides them."""
    n, each_way = P, 32e9  # one GPU (--zero 0: stage-2 code), PCIe Gen4 x16
    one = step_time(estimate("llama-2-7b", mode="train", batch=1, seq=8, offload=True), "a100-80gb")
    four = step_time(estimate("llama-2-7b", mode="train", batch=1, seq=8, offload=True, micro_batches=4), "a100-80gb")
    window = (one.compute_s + one.elementwise_s) * 2 / 3  # one micro-batch's backward; the same in both
    # m = 1: fp32 down 4n less the window, bf16 up 2n after the step
    assert one.offload_copy_s == pytest.approx(4 * n / each_way - window + 2 * n / each_way, rel=1e-12)
    # m = 4: micro-batch 1 2n down, 2-3 2n each way (full duplex: 2n), 4 6n down and 2n up, then 2n up
    want = 3 * (2 * n / each_way - window) + (6 * n / each_way - window) + 2 * n / each_way
    assert four.offload_copy_s == pytest.approx(want, rel=1e-12)
    # ZeRO-3 copies the 16-bit partition down and back in every micro-batch, m = 1 too: 6 B down (2 up alongside),
    # then 2 B up after the step, over this GPU's half (d 2), the down copy behind 2/3 of the micro-batch (its
    # compute and ZeRO-3's copies) less the reduce-scatter of the bf16 gradients on NVLink
    z3 = step_time(estimate("llama-2-7b", mode="train", batch=1, seq=8, offload=True, zero=3, dp=2), "a100-80gb")
    window = max(0.0, (z3.compute_s + z3.elementwise_s + z3.zero3_copy_s) * 2 / 3 - Cluster(gpu("a100-80gb")).reduce_scatter(2 * P, 2, 1))
    assert z3.offload_copy_s == pytest.approx(6 * (P // 2) / each_way - window + 2 * (P // 2) / each_way, rel=1e-12)


def test_nothing_without_offload_or_cpu_adam() -> None:
    for kw in ({}, {"optimizer": "sgd"}):
        st = step_time(estimate("llama-2-7b", mode="train", batch=1, seq=8, zero=2, dp=2,
                                offload=bool(kw), **kw), "h100-sxm")
        assert st.offload_copy_s == st.cpu_optimizer_s == 0.0
    st = step_time(estimate("llama-2-7b", mode="train", batch=1, seq=8, zero=2, dp=2), "h100-sxm")
    assert not any("ZeRO-Offload (DeepSpeed" in line for line in st.model())


def test_a_gpu_without_a_pcie_figure_times_the_cpu_step_and_says_so() -> None:
    st = step_time(estimate("llama-2-7b", mode="train", batch=1, seq=8, zero=2, dp=8, offload=True), "b200")
    assert st.offload_copy_s == 0.0 and st.cpu_optimizer_s == pytest.approx(P // 8 * 42 / 76.8e9, rel=1e-12)
    assert any("no PCIe figure for this GPU: the copies are not timed" in line for line in st.model())


def test_plan_rows_with_offload_equal_estimate_one_by_one() -> None:
    rows = plan("llama-2-7b", 80 * 10**9, 16, 4096, 8, options=Options(gpu="h100-sxm", offload=True), top=10**6,
                cp_pays=False)  # every row that fits (cp > 1 rows too)
    assert rows.fit == len(rows) > 20
    rng = random.Random(24)  # two rows of each ZeRO stage
    picked = [x for z in (0, 1, 2, 3) for x in rng.sample([x for x in rows if x.options.get("zero", 0) == z], 2)]
    for x in picked:
        timing = time_of(estimate("llama-2-7b", **x.options))
        assert timing.cpu_optimizer_s > 0
        assert math.isclose(x.step_time_s, timing.step_s, rel_tol=1e-9), (x.options, x.step_time_s, timing.step_s)


def test_bad_host_memory_bandwidth_is_one_line() -> None:
    r = subprocess.run([sys.executable, "-m", "memderive", "estimate", "--model", "llama-2-7b", "--mode", "train",
                        "--batch", "1", "--seq", "8", "--offload", "--gpu", "h100-sxm", "--host-memory-bandwidth",
                        "-3"], capture_output=True, text=True)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "--host-memory-bandwidth is GB/s of host memory per GPU" in r.stderr


def test_fsdp2_param_offload_over_8_h100s_by_hand() -> None:
    """--offload-params (FSDP2 CPUOffloadPolicy): the host shard's AdamW step on the CPU, and with accumulation the
    blocking gradient copies and CPU adds of micro-batches 2..m (PyTorch 2.13 _fsdp_collectives.foreach_reduce)."""
    n, root = P // 8, (2 * 32_000 * 4_096 + 4_096) // 8  # the host shard; the root (embeddings, head, final norm)
    one = time_of(estimate("llama-2-7b", mode="train", batch=1, seq=4096, dp=8, offload_params=True, gpu="h100-sxm"))
    # torch's AdamW on CPU tensors: 21 fp32 reads and writes per element plus the clipping's 3, 96 B at 76.8 GB/s:
    # 842,301,952 x 96 / 76.8e9 = 1.05288 s
    assert one.cpu_optimizer_s == pytest.approx(n * 96 / 76.8e9, rel=1e-12)
    assert round(one.cpu_optimizer_s, 4) == 1.0529
    # the fp32 shards up, (2 x 842,301,952 - 32,768,512) x 4 / 64e9 = 0.10324 s, and the gradients down, 0.05264 s,
    # hide behind the 4,096-token micro-batch (0.6 s)
    up = (2 * n - root) * 4 / 64e9
    assert up < one.compute_s and one.offload_copy_s == 0
    four = time_of(estimate("llama-2-7b", mode="train", batch=1, seq=4096, dp=8, offload_params=True,
                            gpu="h100-sxm", micro_batches=4))
    # micro-batches 2-4: the blocking copy down (n x 4 / 64e9 each) and the CPU add (n x 12 / 76.8e9 each)
    assert four.offload_copy_s == pytest.approx(3 * n * 4 / 64e9, rel=1e-12)
    assert four.cpu_optimizer_s == pytest.approx(n * 96 / 76.8e9 + 3 * n * 12 / 76.8e9, rel=1e-12)
    # FSDP shards as ZeRO-3 does: its copy-out and copy-in of the gathered bf16 weights, 6 x 2 B per parameter
    assert one.zero3_copy_s == pytest.approx(P * 12 / 2.97e12, rel=1e-12)  # the H100's Triad, 2.97 TB/s
    assert "--offload-params (FSDP2 CPUOffloadPolicy" in " ".join(one.model())


def test_plan_rows_with_offload_params_equal_estimate_one_by_one() -> None:
    """plan --offload-params: every row shards as ZeRO-3 (or has one data-parallel rank), has no expert
    parallelism, and re-runs through estimate to the same bytes and step time (the copies, the CPU step)."""
    base = Options(mode="train", batch=1, seq=4096, gpu="h100-sxm", offload_params=True)
    for model in ("llama-2-7b", "mixtral-8x7b"):
        rows = plan(model, 80 * 10**9, 16, 4096, 8, options=base, top=10**6, cp_pays=False)  # every row that fits
        assert rows.fit == len(rows) > 20
        assert all(x.options.get("zero", 0) == 3 or x.options.get("dp", 1) == 1 for x in rows)
        assert all(x.options.get("ep", 1) == 1 for x in rows)
        for x in random.Random(24).sample(list(rows), 4):
            e = estimate(model, **x.options)
            timing = time_of(e)
            assert e.number("total_bytes") == x.total_bytes
            assert timing.cpu_optimizer_s > 0
            assert math.isclose(x.step_time_s, timing.step_s, rel_tol=1e-9), (x.options, x.step_time_s, timing.step_s)


def test_nothing_fits_names_both_offloads_with_their_least_bytes() -> None:
    """llama-2-70b on 8 GPUs of 40 GiB at 4,096 tokens fits no layout; each offload that would fit is named with the
    least bytes of its own plan (ZeRO-Offload keeps the 16-bit weights on the GPU; FSDP's offload only the gathered
    root and one layer)."""
    base = Options(mode="train", batch=1, seq=4096)
    with pytest.raises(NothingFits) as caught:
        plan("llama-2-70b", 40 * 2**30, 16, 4096, 8, options=base)
    would = dict(caught.value.would_fit)
    for flag, change in (("--offload", {"offload": True}), ("--offload-params", {"offload_params": True})):
        rows = plan("llama-2-70b", 40 * 2**30, 16, 4096, 8, options=Options(mode="train", batch=1, seq=4096, **change),
                    top=10**6)
        assert would[flag] == min(x.total_bytes for x in rows)
    assert would["--offload-params"] < would["--offload"] < 40 * 2**30
