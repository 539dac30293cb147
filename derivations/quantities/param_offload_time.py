"""What FSDP2's CPU offload (``--offload-params``: ``CPUOffloadPolicy(pin_memory=True)``) costs a training step,
as PyTorch 2.13 runs it. Per GPU, over its shard of the N parameters (1/d of them, d the sharding ranks), with
every transformer layer its own FSDP unit and the root holding the R others (``param_offload``):

* **Parameters, CPU -> GPU**, before every all-gather (``_fsdp_param.py`` ``FSDPParam.all_gather_inputs``:
  ``sharded_param_data.to(self.device, non_blocking=True)``, then the cast to ``param_dtype`` on the GPU): the
  layers' shards twice per micro-batch (forward, and backward after ``reshard_after_forward``), the root's once
  (the root is not resharded after forward), in the host dtype (fp32 under mixed precision, the weights' under
  ``--precision pure``). Issued with the prefetched all-gathers on their own stream: hidden behind the
  micro-batch's compute, what exceeds it exposed.
* **Gradients, GPU -> CPU**, after each unit's reduce-scatter (``_fsdp_collectives.py`` ``foreach_reduce``:
  ``new_sharded_grad.to(torch.device("cpu"), non_blocking=non_blocking)``), in the host dtype. Non-blocking (into
  pinned memory, behind the backward) only while there is no gradient to accumulate into: the first micro-batch
  of a step. With accumulation (``to_accumulate_grad``) the copy is blocking and followed by a CPU add
  (``grad._local_tensor += new_sharded_grad``: a read of both and a write, 3 widths per element): the autograd
  thread waits, so micro-batches 2..m expose both. PCIe is full duplex: the two directions overlap each other.
* **The optimizer step on the CPU**: ``torch.optim.AdamW`` over the host shard. On CPU tensors it runs the
  single-tensor loop (``torch/optim/optimizer.py`` ``_default_to_fused_or_foreach``: foreach only on CUDA-like
  devices), the same elementwise ops as the foreach kernels (``memory_bound.adam_moves(True)``: 24 element reads
  and writes with the gradient clipping), in the host dtype, memory-bound over the host memory bandwidth one
  GPU's process gets (``--host-memory-bandwidth``): rated DRAM bandwidth, so a lower bound. Other optimizers: not
  timed (said in the line).

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, dp=8, offload_params=True)
>>> host_shard(e)  # (N / 8, R / 8, host width): N = 6,738,415,616, R = 2 x 32,000 x 4,096 + 4,096
(842301952, 32768512, 4)
"""

from __future__ import annotations

from typing import Any

from memderive.derivations.columns import maximum
from memderive.derivations.hardware import GPU
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.memory_bound import adam_moves, layout_int
from memderive.derivations.quantities.offload_time import HOST_SOURCE, OffloadTime, pcie_bandwidth, pcie_link
from memderive.derivations.quantity import Evaluated
from memderive.derivations.references import cite
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.formula import Citation

__all__ = ["param_offload_time", "param_offload_line", "host_shard", "PARAM_OFFLOAD_TIME_SOURCE"]

PARAM_OFFLOAD_TIME_SOURCE = Citation("pytorch-fsdp-offload", "CPUOffloadPolicy: sharded parameters copied "
                                     "host-to-device before all-gather, gradients device-to-host in backward, the "
                                     "optimizer step on CPU", also=(
                                         Citation("pytorch-fsdp2-collectives", "foreach_reduce: new_sharded_grad.to("
                                                  "cpu, non_blocking=pin_memory and not to_accumulate_grad)"),))


def host_shard(est: Evaluated) -> tuple[Any, Any, int]:
    """(elements of this GPU's host shard, of them the root's, bytes per element on the host)."""
    o = est.options
    width = dtype(o.dtype).nbytes if o.precision == "pure" else 4
    host = {t.path: t.expr for t in est.quantity("offloaded_bytes").breakdown.terms}
    gpu = {t.path: t.expr for t in est.quantity("model_state_bytes").breakdown.terms}
    shard = layout_int(host["offload/parameters"], est.values) // width
    ranks = o.dp * o.cp
    root = -(-layout_int(gpu["model_states/gathered_weights/root"], est.values) // dtype(o.dtype).nbytes // ranks)
    return shard, root, width


def param_offload_time(est: Evaluated, cluster: Cluster, micro_s: Any, m: int) -> OffloadTime:
    """Seconds ``--offload-params`` adds to one step of ``est`` on ``cluster``'s GPUs: the PCIe copies not hidden
    behind a micro-batch's compute (``micro_s``; ``m`` micro-batches) and the CPU side (the accumulating adds and
    the AdamW step). 0 without ``--offload-params``."""
    o = est.options
    if not o.offload_params:
        return OffloadTime(0.0, 0.0)
    n, root, w = host_shard(est)
    host = o.host_memory_bandwidth * 10**9
    step = n * adam_moves(True) * w / host if o.optimizer in ("adam", "adamw") else 0.0
    cpu_s = step + (m - 1) * n * 3 * w / host
    pcie = pcie_bandwidth(cluster.gpu)
    if pcie is None:
        return OffloadTime(0.0, cpu_s)
    each_way = pcie / 2
    up = (2 * n - root) * w / each_way  # layers' shards twice, the root's once
    down = n * w / each_way
    first = maximum(0.0, maximum(up, down) - micro_s)
    rest = (m - 1) * (maximum(0.0, up - micro_s) + down)
    return OffloadTime(first + rest, cpu_s)


def param_offload_line(hw: GPU, host_gbs: float, optimizer: str) -> str:
    """How ``--offload-params`` was timed, in words."""
    link = pcie_link(hw)
    step = "AdamW" if optimizer in ("adam", "adamw") else f"no optimizer step timed (--optimizer {optimizer}); AdamW's"
    return (f"--offload-params (FSDP2 CPUOffloadPolicy, pinned): each unit's host shard to the GPU before every "
            f"all-gather (the layers' twice per micro-batch, the root's once) behind the micro-batch's compute, the "
            f"sharded gradients back after each reduce-scatter (non-blocking in the first micro-batch; blocking, "
            f"then added on the CPU, in the others), {link}; {step} on the CPU as torch's single-tensor loop "
            f"({adam_moves(True)} element reads and writes each, clipping included) at {host_gbs:g} GB/s of host "
            f"memory per GPU (--host-memory-bandwidth; {cite(HOST_SOURCE)}), a lower bound "
            f"({cite(PARAM_OFFLOAD_TIME_SOURCE)})")
