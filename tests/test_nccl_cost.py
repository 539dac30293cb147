"""NCCL's own cost model across nodes (derivations/quantities/nccl_cost.py) against the numbers NCCL's source and
its maintainers state: NVIDIA/nccl at 5067397c26, src/graph/tuning.cc (latencies, bandwidth refinements),
search.cc (per-channel speeds), topo.h (NVLink per link); nccl-tests#290 and #212 (maintainers' measured figures).
Expected values are hand arithmetic from those constants, written out in each test."""

from __future__ import annotations

import numpy as np
import pytest

from memderive.derivations.columns import column_class
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.nccl_cost import (algorithm_bandwidth, bus_bandwidth, collective_s, latency_us,
                                                        net_channel_bw)
from memderive.derivations.quantities.timing import deepspeed_data_parallel_s, step_time

H100, A100 = gpu("h100-sxm"), gpu("a100-80gb")


def test_a_channel_per_nic_at_the_search_speed_the_maintainers_measure() -> None:
    """topo.cc:418 reads a NIC's speed as Mb/s / 8,000 GB/s: NDR 400 Gb/s = 50, HDR 200 Gb/s = 25; the search
    (search.cc:1170) takes the first of its speeds no faster: sm90SpeedArrayInter's 48.0, speedArrayInter's 24.0.
    The NCCL maintainers: 'For NDR @ 400Gbps you should see 46-48GB/s per NIC' (nccl-tests#290)."""
    assert net_channel_bw(2, 50e9) == 48.0
    assert 46 <= net_channel_bw(2, 50e9) <= 48
    assert net_channel_bw(1, 25e9) == 24.0
    assert net_channel_bw(3, 100e9) == 96.0  # a 800 Gb/s port on Blackwell: sm100SpeedArrayInter's first


def test_the_bus_bandwidth_of_a_node_stops_at_nvlink() -> None:
    """8 H100s a node: 8 NICs x 48 = 384 GB/s, above NVLink at NCCL's per-link 20.6 GB/s x 18 links = 370.8
    (topo.h SM90_NVLINK_BW; 'an effective NVLink bandwidth of 370GB/s', nccl-tests#212); 8 A100s: 8 x 24 = 192,
    under 12 x 20.0 = 240. One GPU a node: its own NIC, 48."""
    assert bus_bandwidth(H100, 8, 50e9, 450e9) == pytest.approx(370.8)
    assert bus_bandwidth(A100, 8, 25e9, 300e9) == pytest.approx(192.0)
    assert bus_bandwidth(H100, 1, 50e9, 450e9) == 48.0


def test_latencies_by_hand() -> None:
    """tuning.cc:384-435 with its constants (tuning.cc:149-176): a ring all-reduce over 16 nodes of 8 H100s under
    Simple, 8.4 + (254 - 30) x 3.4 + 30 x 14.0 = 1,190.0 us; a tree, 8.4 + 2 (7 x 4.0 + log2 16 x 14.0) = 176.4.
    A100s on DGX A100's AMD hosts: the NVLink hop no less than the network's post overhead, 2.0 x 3 = 6.0 us
    (tuning.cc:228-233, 404-410): a reduce-scatter over 2 nodes of 8, 8.4 + 14 x 6.0 + 1 x 14.0 = 106.4. PAT with
    one GPU in each of 64 nodes: 8.0 + log2 64 x 14.0 / 3.5 + 64 x 2.8 = 211.2."""
    assert latency_us(H100, "all_reduce", "ring", "simple", 128, 8, 16) == pytest.approx(1190.0)
    assert latency_us(H100, "all_reduce", "tree", "simple", 128, 8, 16) == pytest.approx(176.4)
    assert latency_us(A100, "reduce_scatter", "ring", "simple", 16, 8, 2) == pytest.approx(106.4)
    assert latency_us(H100, "all_gather", "pat", "simple", 64, 1, 64) == pytest.approx(211.2)


def test_nccl_picks_the_fastest() -> None:
    """A 1 MiB all-reduce over 64 nodes of 8 H100s: latency dominates. Ring under LL128: 2^20 / (0.92 x 370.8 x
    512/1022) GB/s = 6.14 us + 14.0 + (1022 - 126) x 1.9 + 126 x 4.0 = 2,220.4 us; the tree under LL128: 2^20 /
    (347.625 / 2 x 0.6) GB/s (the tree correction 0.6 at 2^14 x 64 bytes, tuning.cc:625) = 10.05 us + 14.0 + 2 (7 x
    1.25 + 6 x 8.5) = 133.5 us: 143.6 us, faster than the tree under Simple (0.5 at that size: 13.3 + 8.4 + 2 (28 +
    84) = 245.7) and either ring."""
    t = collective_s(H100, "all_reduce", 2**20, 512, 8, 50e9)
    assert t == pytest.approx(2**20 / (347.625e9 / 2 * 0.6) + 133.5e-6)


def test_time_across_nodes_grows_with_the_cluster() -> None:
    """Issue 39: 'measured runs slow down from a small to a large cluster; memderive predicts flat'. The same
    per-GPU 64 MiB gradient reduce-scatter over 2 to 256 nodes of 8 H100s: NCCL's ring latency grows with its
    n - 1 steps, 1.5 ms more at 256 nodes (8.4 + 2,047 x 3.4 + 255 x 14.0 = 10,540.2 us; 2 nodes: 8.4 + 15 x 3.4 +
    14.0 = 73.4, both under Simple, the bandwidth term (n-1)/n of 64 MiB at 370.8 GB/s about 181 us)."""
    c = Cluster(H100, 8, 50 * 10**9)
    times = [c.reduce_scatter(64 * 2**20, 8 * nodes, 1) for nodes in (2, 16, 256)]
    assert times == sorted(times) and times[-1] - times[0] > 1e-3


def test_a_collective_inside_a_node_keeps_the_rated_ring() -> None:
    """An all-reduce over 8 H100s of one node keeps the rated ring, 2 (7/8) X / 450e9 (NVLink SHARP's reaches more);
    their reduce-scatters and all-gathers, and every collective of an A100 node, take NCCL's one-node ring
    (``nccl_cost.node_ring_s``, tests/test_time_model.py)."""
    assert Cluster(H100).all_reduce(10**9, 8, 1) == 2 * 7 / 8 * 10**9 / 450e9


def test_deepspeed_fp16_reduces_its_16_bit_gradients() -> None:
    """DeepSpeed's pipeline engine under fp16 reduces the 16-bit .grad (``_exec_reduce_grads``:
    ``allreduce_gradients``), ZeRO-1 by a reduce-scatter at the accumulation boundary (``engine.allreduce_gradients``:
    ``optimizer.reduce_scatter_gradients`` for stage 1), then gathers the updated 16-bit shards; the bf16 optimizer
    all-reduces fp32 gradients. The step's data-parallel time: reduce-scatter of 2 P bytes + all-gather of 2 P
    (fp16) against all-reduce of 4 P + all-gather of 2 P (bf16), P the GPU's parameters, no tied embedding (p 1)."""
    c = Cluster(A100, 8, 25 * 10**9)
    step = dict(mode="train", batch=1, seq=1024, dp=16, zero=1, grad_sync="deepspeed")
    fp16 = estimate("gpt2-xl", **step, dtype="fp16")
    bf16 = estimate("gpt2-xl", **step, dtype="bf16")
    p = fp16.number("parameters_per_gpu")
    assert deepspeed_data_parallel_s(fp16, c) == pytest.approx(c.reduce_scatter(2 * p, 16, 1)
                                                               + c.all_gather(2 * p, 16, 1))
    assert deepspeed_data_parallel_s(bf16, c) == pytest.approx(c.all_reduce(4 * p, 16, 1) + c.all_gather(2 * p, 16, 1))
    # fp16: autograd adds each micro-batch's gradient into the 16-bit .grad, 6 B per parameter (r 2 + 2, w 2);
    # the bf16 optimizer casts and adds into fp32, 18 B (memory_bound.fp32_accumulation_bytes); at the A100's
    # BabelStream Triad, 1.70 TB/s (memory_bound.STREAM_TRIAD)
    assert step_time(fp16, c).fp32_accumulation_s == pytest.approx(6 * p / 1.70e12)
    assert step_time(bf16, c).fp32_accumulation_s == pytest.approx(18 * p / 1.70e12)


def test_a_column_of_layouts_times_as_each_layout_alone() -> None:
    """The planner evaluates a column of layouts at once (search.columns): NCCL's model on a column, computed in
    floats, equals it layout by layout (sizes from 64 B to 30 GB, 1 to 8 GPUs a node, 2 to 1,024 ranks)."""
    sizes, ranks, ppn = [10**9, 2**20, 5 * 10**7, 123_456, 64, 3 * 10**10], [128, 512, 16, 64, 2, 1024], [8, 8, 1, 1, 1, 4]
    column = [np.array(x, dtype=object).view(column_class()) for x in (sizes, ranks, ppn)]
    for coll in ("all_reduce", "reduce_scatter"):
        together = collective_s(H100, coll, *column, 50e9)
        assert type(together) is column_class()
        alone = [collective_s(H100, coll, a, b, c, 50e9) for a, b, c in zip(sizes, ranks, ppn)]
        assert list(together) == pytest.approx(alone, rel=1e-12)


def test_the_ring_against_a_measured_nccl_tests_curve() -> None:
    """nccl-tests#252: all_reduce_perf with NCCL_ALGO=RING on two nodes of 4 H100s, out-of-place bus bandwidth
    93.46, 93.58, 94.26, 97.37, 95.10 GB/s at 512 MB to 8 GB; the NCCL maintainers: 'that looks great with ~24GB/s
    per NIC' (200 Gb/s ports: 25 GB/s, the search's 24.0). NCCL's model of the ring under Simple: busBw 4 x 24 = 96
    GB/s, algBw 96 x 8/14, latency 1.4 (8.4 + 12 x 3.4 + 2 x 14.0) = 108.08 us; bus bandwidth of the call
    S x 2 (7/8) / time. Within 3% of each measured point (the model 95.0-95.9 GB/s)."""
    n, ppn, nodes = 8, 4, 2
    bus = bus_bandwidth(H100, ppn, 25e9, 450e9)
    assert bus == 96.0
    latency = 1.4 * latency_us(H100, "all_reduce", "ring", "simple", n, ppn, nodes)
    assert latency == pytest.approx(108.08)
    algbw = algorithm_bandwidth(bus, "all_reduce", "ring", "simple", n)
    measured = {2**29: 93.46, 2**30: 93.58, 2**31: 94.26, 2**32: 97.37, 2**33: 95.10}
    for size, busbw in measured.items():
        time = latency * 1e-6 + size / (algbw * 1e9)
        assert size * 2 * 7 / 8 / time / 1e9 == pytest.approx(busbw, rel=0.03)


def test_data_parallel_collectives_are_called_bucket_by_bucket() -> None:
    """Megatron-Core (--framework megatron) reduces its gradients in buckets of max(40,000,000, 1,000,000 x d)
    elements (DistributedDataParallel); FSDP gathers and reduces unit by unit (torchtitan's apply_fsdp: the embedding, each
    block, [norm, output]). Llama-2-7B, P = 6,738,415,616 (Touvron et al. 2023): on 64 ranks, buckets of 64,000,000,
    ceil(P / 64e6) = 106 calls; on 8, of 40,000,000: 169. Llama 3 8B under FSDP: 32 blocks + 2 = 34 units. Each call
    across nodes pays NCCL's latency: 106 reduce-scatters of P x 4 B / 106 over 64 ranks one per node take more than
    one of the whole, inside one node as well."""
    from memderive.derivations.quantities.timing import data_parallel_calls

    step = dict(mode="train", batch=1, seq=1024, zero=1, framework="megatron")
    assert data_parallel_calls(estimate("llama-2-7b", **step, dp=64), 1) == 106
    assert data_parallel_calls(estimate("llama-2-7b", **step, dp=8), 1) == 169
    # without --framework megatron one call (Megatron-LM of 2021 all-reduced its contiguous buffer at once)
    assert data_parallel_calls(estimate("llama-2-7b", mode="train", batch=1, seq=1024, zero=1, dp=64), 1) == 1
    assert data_parallel_calls(estimate("llama-3-8b", mode="train", batch=1, seq=1024, dp=8, zero=3), 3) == 34
    c, grads = Cluster(H100, 8, 50 * 10**9), 4 * 6_738_415_616
    assert 106 * c.reduce_scatter(grads / 106, 64, 8) > c.reduce_scatter(grads, 64, 8)
    # inside one node a reduce-scatter is NCCL's one-node ring too (nccl_cost.node_ring_s): each call its latency, Simple's 8.4 + 7 x 3.4 = 32.2 us
    # (the faster protocol at these sizes), the bytes the same: 105 latencies more than one call
    one_node = Cluster(H100)
    assert 106 * one_node.reduce_scatter(grads / 106, 8, 1) - one_node.reduce_scatter(grads, 8, 1) == pytest.approx(
        105 * 32.2e-6)
