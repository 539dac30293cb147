"""The host's side of an eager step: how long the CPU takes to issue a layer's kernels, and when that shows.

An eager framework enqueues each kernel from the CPU; the GPU runs them in order and can never start a kernel
before the CPU has issued it. Where the host waits for the device (a device-to-host copy it needs the value of),
the queue drains and the GPU then waits for the next issues. Exact for one stream, kernel by kernel
(``timeline_s``)::

    host_i = host_{i-1} + h_i                      # the CPU issues kernel i
    start_i = max(host_i, end_{i-1}); end_i = start_i + g_i
    at a sync after kernel i: host_i = max(host_i, end_i)

Between two syncs this is at least max(sum g, sum h) and at most sum g + one issue (``segment_s`` takes the
lower edge, max(G, H): exact when the host stays ahead throughout or behind throughout).

Megatron-Core's dropless all-to-all dispatcher syncs once per MoE layer forward: the tokens per expert and the
all-to-all's splits go to the host and ``d2h_event.synchronize()`` waits for them before the all-to-all
(``HOST_SYNC_SOURCE``). So each MoE layer's forward is its own segment; the backward reuses the splits, no sync.

Kernel counts per MoE layer (``moe_layer_kernels``), a lower bound, only what a source counts: the router and
its preprocessing (NVIDIA's DeepSeek-V3 tuning: 72 kernels unfused, 31 fused, 17 with DeepEP's router and
preprocess) and the routed experts' GEMMs, one cuBLAS GEMM per local expert per GroupedLinear call (Transformer
Engine's multi-stream loop): fc1 and fc2 forward, each one's data- and weight-gradient backward. Attention, norms,
permutes, the activation and the all-to-alls themselves are not counted.

Host cost per kernel (``LAUNCH_S``): the CUDA driver's ``cuLaunchKernel`` alone, 3.0 us (0 arguments) on a GB200
(tritonbench#1017), a lower bound of an eager op's CPU cost (PyTorch's dispatcher and the Python module code come on
top of it, and are not timed here).
"""

from __future__ import annotations

from collections.abc import Sequence

from memderive.symbolic.formula import Citation

__all__ = ["HOST_SYNC_SOURCE", "ROUTER_KERNELS_SOURCE", "GROUPED_GEMM_LAUNCHES", "LAUNCH_SOURCE", "LAUNCH_S",
           "ROUTER_KERNELS", "timeline_s", "segment_s", "moe_layer_kernels", "moe_host_exposed_s"]

HOST_SYNC_SOURCE = Citation("megatron-moe-dispatcher", "core_r0.14.0 token_dispatcher.py L521-523 (sync point "
                            "'before_ep_alltoall' when ep > 1), L821-858 (_maybe_dtoh_and_synchronize: the splits "
                            "and tokens per expert to the host, d2h_event.synchronize(); skipped under drop_and_pad)")
ROUTER_KERNELS_SOURCE = Citation("megatron-dsv3-gb200", "router fusion: 'the total number of kernels in the router "
                                 "part from 72 to 31'; DeepEP: 'the number of kernels in the router and preprocess "
                                 "parts [drops] to 17'")
GROUPED_GEMM_LAUNCHES = Citation("transformer-engine-2.9-grouped-linear", "grouped_linear.py L171 forward, L363 "
                                 "dgrad, L412-432 wgrad: general_grouped_gemm; common/gemm/cublaslt_gemm.cu L924-963 "
                                 "multi_stream_cublas_gemm: one cuBLAS GEMM per expert (for i < num_gemms)")
LAUNCH_SOURCE = Citation("tritonbench-launch-overhead", "nop_triton_direct_culaunch: cuLaunchKernel 3.0 us with 0 "
                         "arguments, 3.3 us with 19, GB200")

#: Router and preprocess kernels per MoE layer forward (``ROUTER_KERNELS_SOURCE``): unfused, fused, with DeepEP.
ROUTER_KERNELS = {"unfused": 72, "fused": 31, "deepep": 17}

#: Host seconds per kernel launch: cuLaunchKernel alone (``LAUNCH_SOURCE``), a lower bound of an eager op's.
LAUNCH_S = 3.0e-6


def timeline_s(kernels: Sequence[tuple[float, float, bool]]) -> float:
    """When the GPU finishes ``kernels`` (host seconds to issue, GPU seconds to run, whether the host then waits for
    the device), one stream, both clocks starting at 0 (the walk in the module's docstring)."""
    host = end = 0.0
    for h, g, sync in kernels:
        if h < 0 or g < 0:
            raise ValueError(f"a kernel's host and GPU seconds are >= 0, got {h!r}, {g!r}")
        host += h
        end = max(host, end) + g
        if sync:
            host = max(host, end)
    return end


def segment_s(gpu_s: float, host_s: float) -> float:
    """One segment between syncs, its GPU seconds and its host's issue seconds: max(G, H), the walk's lower edge."""
    return max(gpu_s, host_s)


def moe_layer_kernels(local_experts: int, router: str = "fused") -> tuple[int, int]:
    """Kernels a MoE layer issues that a source counts, (forward, backward), a lower bound: the router's
    (``ROUTER_KERNELS``, forward only) and the routed experts' GEMMs, one per local expert per GroupedLinear call
    (``GROUPED_GEMM_LAUNCHES``): fc1 and fc2 forward (2 E), each one's dgrad and wgrad (4 E)."""
    if router not in ROUTER_KERNELS:
        raise ValueError(f"router is one of {', '.join(ROUTER_KERNELS)}, got {router!r}")
    if local_experts < 1:
        raise ValueError(f"a MoE layer holds at least one local expert, got {local_experts!r}")
    return ROUTER_KERNELS[router] + 2 * local_experts, 4 * local_experts


def moe_host_exposed_s(gpu_forward_s: float, gpu_backward_s: float, local_experts: int, router: str = "fused",
                       launch_s: float = LAUNCH_S) -> float:
    """Host seconds one MoE layer adds to one micro-batch past its GPU time: the forward its own segment (the
    dispatcher's sync), the backward another, each max(G, H) - G (``segment_s``)."""
    forward, backward = moe_layer_kernels(local_experts, router)
    return (segment_s(gpu_forward_s, forward * launch_s) - gpu_forward_s
            + segment_s(gpu_backward_s, backward * launch_s) - gpu_backward_s)
