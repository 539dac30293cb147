"""The host's side of an eager step: how long the CPU takes to issue a MoE layer's work, and when that shows.

An eager framework enqueues each kernel from the CPU; the GPU runs them in order and can never start a kernel
before the CPU has issued it. Where the host waits for the device (a device-to-host copy it needs the value of),
the queue drains and the GPU then waits for the next issues. Exact for one stream, kernel by kernel
(``timeline_s``)::

    host_i = host_{i-1} + h_i                      # the CPU issues kernel i
    start_i = max(host_i, end_{i-1}); end_i = start_i + g_i
    at a sync after kernel i: host_i = max(host_i, end_i)

Between two syncs this is at least max(sum g, sum h) and at most sum g + sum h (``segment_s`` takes the lower
edge, max(G, H): exact when the host stays ahead throughout or behind throughout).

Megatron-Core's dropless all-to-all dispatcher syncs once per MoE layer forward: the tokens per expert and the
all-to-all's splits go to the host and ``d2h_event.synchronize()`` waits for them before the all-to-all
(``HOST_SYNC_SOURCE``). So each MoE layer's forward is its own segment; the backward reuses the splits, no sync.

The host's work per MoE layer (``moe_layer_host_s``), a lower bound: only what a source counts or measures.
- The router and its preprocessing: 72 kernels unfused, 31 fused, 17 with DeepEP (NVIDIA's DeepSeek-V3 tuning,
  ``ROUTER_KERNELS_SOURCE``), each an eager PyTorch op; one graph launch where a recipe captures them in a CUDA graph.
- The routed experts' two GroupedLinear calls (fc1, fc2), each a Transformer Engine module call, and inside each one
  cuBLAS GEMM per local expert issued from TE's C++ loop (``GROUPED_GEMM_LAUNCHES``): 2 E GEMMs forward, each one's
  dgrad and wgrad, 4 E, backward.
- Host seconds (``HOST_COSTS``): a PyTorch op issuing one kernel, torch.nn.Linear forward's CPU time, 13.48 us on a
  DGX H100's Xeon 8480C, 37.08 us on GB200's Grace; a TE module call, te.Linear forward's, 99.66 us on Grace (the
  Xeon figure is not in the copy read here: the torch op's stands in, a lower bound); a GEMM from TE's loop,
  cuLaunchKernel alone, 3.0 us (measured on GB200, used for both hosts).
Attention, norms, permutes, the activation, the all-to-alls' host calls and the router's backward are not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memderive.derivations.hardware import gpu
from memderive.symbolic.formula import Citation

__all__ = ["HOST_SYNC_SOURCE", "ROUTER_KERNELS_SOURCE", "GROUPED_GEMM_LAUNCHES", "LAUNCH_SOURCE", "HOST_COST_SOURCE",
           "ROUTER_KERNELS", "HostCosts", "HOST_COSTS", "host_of", "timeline_s", "segment_s", "moe_layer_host_s",
           "moe_host_exposed_s"]

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
HOST_COST_SOURCE = Citation("te-grace-cpu-overhead", "CPU runtime per Linear forward: torch 13.48 us DGX H100 (Xeon "
                            "8480C), 37.08 us GB200; TE 99.66 us GB200", also=(LAUNCH_SOURCE,))

#: Router and preprocess kernels per MoE layer forward (``ROUTER_KERNELS_SOURCE``); "graphed": one graph launch.
ROUTER_KERNELS = {"unfused": 72, "fused": 31, "deepep": 17, "graphed": 1}


@dataclass(frozen=True, slots=True)
class HostCosts:
    """Host seconds to issue: an eager PyTorch op of one kernel, a Transformer Engine module call, one GEMM from TE's
    C++ loop (``HOST_COST_SOURCE``)."""

    torch_op: float
    te_module: float
    launch: float


#: Per host CPU (``host_of``): DGX x86 (Xeon 8480C measured; the other DGX Xeons, A100's EPYC and a card's unnamed
#: server taken the same) and Grace.
HOST_COSTS = {"x86": HostCosts(13.48e-6, 13.48e-6, 3.0e-6), "grace": HostCosts(37.08e-6, 99.66e-6, 3.0e-6)}


def host_of(gpu_name: str) -> str:
    """``HOST_COSTS``' key for the host CPU beside ``gpu_name``: the GPU's own (``GPU.host``, hardware.py), Grace
    on the Grace-Blackwell racks and the GH200 (the GB200's Grace figures for both), else x86 (Intel, AMD, or a card
    no system fixes the host of)."""
    return "grace" if gpu(gpu_name).host == "grace" else "x86"


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


def moe_layer_host_s(local_experts: int, host: str = "x86", router: str = "fused") -> tuple[float, float]:
    """Host seconds one MoE layer's counted work takes to issue, (forward, backward), a lower bound (the module's
    docstring): forward the router's ops, two TE module calls and 2 E GEMM launches; backward 4 E launches."""
    if router not in ROUTER_KERNELS:
        raise ValueError(f"router is one of {', '.join(ROUTER_KERNELS)}, got {router!r}")
    if host not in HOST_COSTS:
        raise ValueError(f"host is one of {', '.join(HOST_COSTS)}, got {host!r}")
    if local_experts < 1:
        raise ValueError(f"a MoE layer holds at least one local expert, got {local_experts!r}")
    c = HOST_COSTS[host]
    router_s = c.launch if router == "graphed" else ROUTER_KERNELS[router] * c.torch_op
    return router_s + 2 * c.te_module + 2 * local_experts * c.launch, 4 * local_experts * c.launch


def moe_host_exposed_s(gpu_forward_s: float, gpu_backward_s: float, local_experts: int, host: str = "x86",
                       router: str = "fused") -> float:
    """Host seconds one MoE layer adds to one micro-batch past its GPU time: the forward its own segment (the
    dispatcher's sync), the backward another, each max(G, H) - G (``segment_s``)."""
    forward, backward = moe_layer_host_s(local_experts, host, router)
    return (segment_s(gpu_forward_s, forward) - gpu_forward_s + segment_s(gpu_backward_s, backward) - gpu_backward_s)
