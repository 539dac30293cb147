"""Issue 39, MoE host time: the kernel-by-kernel host/GPU walk (quantities/host_timeline.py), the host work a source
counts per MoE layer, and what it comes to against the published Megatron-Core MoE rows.

Measured (python benchmarks/published_runs.py, the "gap/layer" table's fwd GPU, fwd host and exposed columns): the
counted host work of one MoE layer's forward (the segment between the dropless dispatcher's syncs: router ops at
TransformerEngine#2053's torch op cost, 13.48 us on a DGX's Xeon, 37.08 us on Grace, or one graph launch where the
recipe graphs the router; two TE GroupedLinear calls, 99.66 us each on Grace; one GEMM per local expert at
cuLaunchKernel's 3.0 us) comes to 0.04-1.44 ms, below a third of the predicted time per layer (0.97-14.6 ms) on all
52 rows (53 with the eager row since): max(G, H) = G everywhere, nothing exposed, MoE median |error| 18.1% and
worst 65.3% either way, so the host
is not timed in ``step_time``. The gap per layer is 0-171x the counted host work, a different multiple on each row.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from memderive.derivations.hardware import GPUS, gpu
from memderive.derivations.quantities.host_timeline import (host_of, moe_host_exposed_s, moe_layer_host_s, segment_s,
                                                            timeline_s)
from memderive.derivations.quantities.nccl_cost import NCCL_ARCH
from tests.published_runs import MOE, predict


def test_walk_host_bound_then_gpu_bound() -> None:
    # (h, g, sync). Host 1 per kernel.
    # k1: host 1, GPU 1 -> 1.5. k2: host 2, GPU 2 -> 2.5 (host-bound: the GPU waited 0.5 each).
    # k3: host 3, GPU 3 -> 6, then the sync: host waits to 6. k4: host 7, GPU 7 -> 8 (the drained queue costs 1).
    assert timeline_s([(1, 0.5, False), (1, 0.5, False), (1, 3, True), (1, 1, False)]) == 8.0
    # the same four kernels without the sync: k4 issued at 4, the GPU busy until 6 -> 7
    assert timeline_s([(1, 0.5, False), (1, 0.5, False), (1, 3, False), (1, 1, False)]) == 7.0


def test_segment_bounds_the_walk() -> None:
    # GPU-bound: 3 kernels of h 1, g 4: 1 + 3 x 4 = 13 >= max(12, 3) = 12
    assert timeline_s([(1, 4, False)] * 3) == 13.0 and segment_s(12, 3) == 12
    # host-bound: 3 kernels of h 4, g 1: each starts at its issue, 4, 8, 12, ends 13 >= max(3, 12) = 12
    assert timeline_s([(4, 1, False)] * 3) == 13.0 and segment_s(3, 12) == 12


def test_moe_layer_host() -> None:
    # 16 local experts (Qwen3 30B-A3B at EP 8) on a DGX's Xeon, fused router: forward 31 x 13.48 us + 2 x 13.48 us
    # (TE module calls, the torch op's cost standing in) + 32 x 3.0 us = 417.88 + 26.96 + 96 = 540.84 us;
    # backward 64 x 3.0 = 192 us
    forward, backward = moe_layer_host_s(16)
    assert forward == pytest.approx(540.84e-6) and backward == pytest.approx(192e-6)
    # Grace, router in a CUDA graph: 3.0 (the graph launch) + 2 x 99.66 + 2 x 2 x 3.0 = 214.32 us; backward 24 us
    assert moe_layer_host_s(2, host_of("gb200"), "graphed") == pytest.approx((214.32e-6, 24e-6))
    # DeepEP's 17 router and preprocess kernels on Xeon, 4 experts: 17 x 13.48 + 26.96 + 24 = 280.12 us
    assert moe_layer_host_s(4, host_of("h100-sxm"), "deepep")[0] == pytest.approx(280.12e-6)
    # host-bound forward: 540.84 us issued against 400 us of GPU: 140.84 us exposed; backward 192 us < 1 ms: none
    assert moe_host_exposed_s(400e-6, 1e-3, 16) == pytest.approx(140.84e-6)
    with pytest.raises(ValueError):
        moe_layer_host_s(16, router="jit")
    with pytest.raises(ValueError):
        moe_layer_host_s(16, host="arm64")


def test_counted_host_work_never_binds_on_published_rows() -> None:
    """The counted host work of a MoE layer's forward stays below a third of the predicted time per layer on
    26.02's last five rows (Qwen3 30B-A3B MBS 1 on B200 and on H100 among them): nothing exposed (module docstring)."""
    for run in [r for r in MOE if "26.02 NeMo" in r.source][-5:]:
        lay, sizes = run.layout, run.estimate().model.sizes
        per_layer = predict(run).predicted_s / (lay.get("micro_batches", 1) * (sizes["l"] // lay.get("pp", 1)))
        experts = sizes["E"] // lay.get("ep", 1)
        forward, _ = moe_layer_host_s(experts, host_of(run.gpu))
        assert 0 < forward < per_layer / 3
        assert moe_host_exposed_s(per_layer / 3, per_layer * 2 / 3, experts, host_of(run.gpu)) == 0


def test_host_is_the_gpus_own() -> None:
    """One host field per GPU (hardware.py), read by both host_of and NCCL's post overhead: DGX B300 ships two Intel
    Xeon 6776P (its datasheet), GB300 NVL72 36 Grace CPUs (its datasheet), DGX A100 two AMD EPYC 7742, DGX H100 two
    Xeon 8480C; a PCIe card (L40S) names no system, so no host."""
    assert [gpu(n).host for n in ("b300", "gb300", "a100-80gb", "h100-sxm", "gb200", "l40s")] == [
        "intel", "grace", "amd", "intel", "grace", None]
    assert [host_of(n) for n in ("b300", "gb300", "a100-80gb", "gb200", "l40s")] == ["x86", "grace", "x86", "grace",
                                                                                       "x86"]
    assert all(GPUS[n].host is not None for n in NCCL_ARCH)  # NCCL's latency reads every covered GPU's host
    with pytest.raises(ValueError):
        replace(gpu("h100-sxm"), host="arm")


def test_graphed_router_is_a_field_of_the_run() -> None:
    """The rows whose recipe captures the router in a CUDA graph (cuda_graph_scope moe_router, as each row's v0.3.0
    config names it, v0.3.1's for Nemotron 3 Nano) say so in a field, which the benchmark reads (one graph launch for the router's host work), not
    in their ``assumed`` text."""
    assert [r.name for r in MOE if "moe_router" in r.cuda_graph_scope] == [
        "DeepSeek-V3 p4 v4 ep64 b4096 GB200", "gpt-oss-120b ep64 b4 B300", "Qwen3 30B-A3B ep8 b4 GB200",
        "Qwen3 30B-A3B ep8 b1 B200", "Nemotron 3 Nano ep8 b4 mxfp8 GB300", "Nemotron 3 Nano ep8 b2 mxfp8 GB200",
        "Nemotron 3 Nano ep8 b4 mxfp8 B300", "Nemotron 3 Nano ep8 b2 mxfp8 B200"]
