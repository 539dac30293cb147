"""The memory-bound work of a training step at the HBM bandwidth a streaming kernel reaches (BabelStream's Triad on
Azure's ND A100 v4, ND H100 v5 and ND H200 v5: 1.70, 2.97 and 4.15 TB/s), not the rated bandwidth no kernel reaches
(``memory_bound.achievable_bandwidth``). Expected figures: the benchmark pages' and hand arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.memory_bound import achievable_bandwidth
from memderive.derivations.quantities.timing import memory_line, step_time

pytestmark = pytest.mark.fast


def test_the_measured_gpus_move_bytes_at_their_triad() -> None:
    # rated 2,039, 3,350 and 4,800 GB/s; BabelStream Triad 1.70, 2.97 and 4.15 TB/s
    assert achievable_bandwidth(gpu("a100-80gb")) == pytest.approx(1.70e12)
    assert achievable_bandwidth(gpu("h100-sxm")) == pytest.approx(2.97e12)
    assert achievable_bandwidth(gpu("h200")) == pytest.approx(4.15e12)


def test_unmeasured_gpus_keep_their_rated_bandwidth() -> None:
    assert achievable_bandwidth(gpu("l40s")) == 864e9
    assert achievable_bandwidth(gpu("b200")) == 8000e9


def test_a_clusters_own_bandwidth_takes_the_measured_fraction() -> None:
    # torchtitan's H100s with 2.4 TB/s HBM2e: 2.4 x 2.97 / 3.35 = 2.12776 TB/s
    hbm2e = replace(gpu("h100-sxm"), memory_bandwidth=2400 * 10**9)
    assert achievable_bandwidth(hbm2e) == pytest.approx(2.4e12 * 2.97 / 3.35)


def test_the_step_times_memory_bound_work_at_the_triad() -> None:
    # the same A100 under a name with no Triad measured (so: the rated 2,039 GB/s) against the A100's own: every
    # memory-bound part 2.039 / 1.70 = 1.19941 times as fast at the rated bandwidth, the matmuls alike
    est = estimate("llama-2-7b", mode="train", batch=1, seq=2048, dp=8, zero=3, kernels="eager", flash=True)
    hw = gpu("a100-80gb")
    measured = step_time(est, Cluster(hw)).to_json()
    rated = step_time(est, Cluster(replace(hw, name="a100-unmeasured"))).to_json()
    assert measured["compute_time_s"] == pytest.approx(rated["compute_time_s"])
    for part in ("elementwise_time_s", "eager_kernels_time_s", "zero3_copy_time_s", "optimizer_time_s"):
        assert measured[part] > 0
        assert measured[part] / rated[part] == pytest.approx(2.039 / 1.70)


def test_the_time_model_says_which_bandwidth() -> None:
    assert "1,700 GB/s (BabelStream's Triad, 83.4% of the rated 2,039" in memory_line(gpu("a100-80gb"), "fused")
    assert "864 GB/s (rated; no streaming kernel measured on it)" in memory_line(gpu("l40s"), "fused")
