"""The data-parallel collectives that run hidden behind compute still hold NCCL's SMs: one CUDA block per channel,
each on an SM no compute kernel shares (NVIDIA/nccl#689, the maintainer: "NCCL CTAs won't share an SM with compute
kernels"; "on DGX with 8 NICs ... it would use 16 SMs"), two channels per NIC (``ncclTopoDupChannels``), one NIC per
GPU of the group in a node. The compute beside them runs on the rest for the time they run. The share by hand; the
seconds the collectives run from the cluster's model of each (tests/test_nccl_cost.py checks it)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.nccl_cost import collective_sms
from memderive.derivations.quantities.timing import data_parallel_calls, reduced_bytes, step_time


def test_a_hidden_all_reduce_across_nodes_takes_16_of_the_h100s_132_sms_while_it_runs() -> None:
    """Llama 3 8B, 16 data-parallel ranks on two DGX H100 nodes (8 GPUs, 8 NICs each), ZeRO 0, 8 micro-batches of
    4,096 tokens: the gradients' all-reduce, ``calls`` buckets of grads/calls bytes over 16 ranks at NCCL's cost
    model, is hidden behind the last backward but for what ``dp_s`` leaves exposed; for the rest of it 2 x 8 = 16 of
    the 132 SMs are NCCL's: (all-reduce - exposed) x 16/132 more."""
    assert collective_sms(8) == 16 and collective_sms(2) == 4
    est = estimate("llama-3-8b", mode="train", batch=1, seq=4096, dp=16, micro_batches=8)
    step = step_time(est, "h100-sxm")
    grads, _ = reduced_bytes(est)
    calls = data_parallel_calls(est, 0)
    whole = calls * Cluster(gpu("h100-sxm")).all_reduce(grads / calls, 16, 1)
    assert 0 <= step.dp_s < whole
    assert step.dp_sm_s == pytest.approx((whole - step.dp_s) * 16 / 132, rel=1e-9)
    assert step.dp_sm_s > 0 and step.step_s == pytest.approx(replace(step, dp_sm_s=0.0).step_s + step.dp_sm_s)
    assert "16 when all 8 of a DGX's are in it" in " ".join(step.model())
    assert step.to_json()["dp_sm_time_s"] == step.dp_sm_s


def test_a_group_of_one_gpu_per_node_holds_two_sms() -> None:
    """Tensor parallelism over a node's 8 GPUs, 2 data-parallel ranks 8 apart: one GPU of the group in each node, one
    NIC, two channels: 2 of the 132 SMs while the hidden all-reduce runs."""
    est = estimate("llama-3-8b", mode="train", batch=1, seq=4096, tp=8, sp=True, dp=2, micro_batches=8)
    step = step_time(est, "h100-sxm")
    grads, _ = reduced_bytes(est)
    calls = data_parallel_calls(est, 0)
    whole = calls * Cluster(gpu("h100-sxm")).all_reduce(grads / calls, 2, 8)
    assert step.dp_sm_s == pytest.approx((whole - step.dp_s) * 2 / 132, rel=1e-9) and step.dp_sm_s > 0


def test_inside_one_node_or_without_an_sm_count_nothing_is_timed() -> None:
    """8 ranks in one node (NVLink alone: NCCL's channel count there is not read here) and a B200 (no SM count in
    the GPU table): no SMs timed, and the note does not claim them."""
    one_node = step_time(estimate("llama-3-8b", mode="train", batch=1, seq=4096, dp=8, micro_batches=8), "h100-sxm")
    b200 = step_time(estimate("llama-3-8b", mode="train", batch=1, seq=4096, dp=16, micro_batches=8), "b200")
    for step in (one_node, b200):
        assert step.dp_sm_s == 0 and "NCCL's channels" not in " ".join(step.model())
