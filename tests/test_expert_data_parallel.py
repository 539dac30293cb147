"""The routed experts' gradients and weights move over Megatron-Core's expert data-parallel group (the d x cp / ep
ranks that hold the same experts, t x ep apart), the rest over the data-parallel ranks (``timing.ExpertGroup``)."""

from __future__ import annotations

import pytest

from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.timing import ExpertGroup, data_parallel_s, expert_group
from memderive.derivations.estimate import estimate

# MI300X: no NCCL table, so the rings are the rated ones: inside a node 448 GB/s each way, across nodes the 50 GB/s
# port (cluster.Cluster._phases). ZeRO-1, one chunk, no compute to hide behind: the reduce-scatter plus the all-gather.
MI300X = Cluster(gpu("mi300x"))


def test_dense_gradients_over_sixteen_ranks() -> None:
    # 4 GB over 16 ranks 1 apart, 8 per node: 7/8 x 4e9 / 448e9 = 0.0078125 s in the node, 1/2 x 4e9 / 8 / 50e9
    # = 0.005 s across the two nodes; twice (reduce-scatter, all-gather): 0.025625 s
    assert data_parallel_s(MI300X, 4e9, 16, 1, 1, 1, 0.0, 4e9) == pytest.approx(0.025625)


def test_experts_cross_nodes_on_one_port() -> None:
    # Half of those bytes are experts held by 2 ranks 8 apart (EP 8 of d 16): one rank per node, one port each:
    # 1/2 x 2e9 / 50e9 = 0.02 s; the dense half 7/8 x 2e9 / 448e9 + 1/2 x 2e9 / 8 / 50e9 = 0.00640625 s;
    # twice: 0.0528125 s, twice the time of the same bytes all over the 16 ranks
    experts = ExpertGroup(2e9, 2e9, 2, 8, 1, 1)
    assert data_parallel_s(MI300X, 4e9, 16, 1, 1, 1, 0.0, 4e9, experts=experts) == pytest.approx(0.0528125)


def test_experts_held_once_move_nothing() -> None:
    # d = ep: each expert on one rank, nothing to reduce or gather; the dense 2 GB as above, twice: 0.0128125 s
    experts = ExpertGroup(2e9, 2e9, 1, 8, 1, 1)
    assert data_parallel_s(MI300X, 4e9, 16, 1, 1, 1, 0.0, 4e9, experts=experts) == pytest.approx(0.0128125)


def test_mixtral_experts_are_their_own_group() -> None:
    # Mixtral 8x7B, d 16, ep 8 (t 1): per GPU 32 layers x 1 of 8 experts x 3 x 4,096 x 14,336 = 5,637,144,576 expert
    # parameters of 7,242,780,672 (embedding and head 131,072,000 each, attention 805,306,368 + 536,870,912, the
    # norms 131,072 + 131,072 + 4,096, the routers 1,048,576); 16 / 8 = 2 ranks hold each expert, 8 apart
    est = estimate("mixtral-8x7b", mode="train", batch=1, seq=4096, dp=16, ep=8, zero=1, framework="megatron")
    group = expert_group(est, 7_242_780_672 * 2, 7_242_780_672 * 2, 1)
    assert (group.grads, group.ranks, group.stride) == (5_637_144_576 * 2, 2, 8)
