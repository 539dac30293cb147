"""What ZeRO-Offload (``--offload``: gradients and optimizer states in CPU memory) costs a training step, as
DeepSpeed runs it with ``offload_optimizer: {device: cpu}`` and ``overlap_comm: true`` (Ren et al. 2021,
arXiv:2101.06840, §4.1 and Figure 5: gradients to the CPU during backward, the Adam step on the CPU, the updated
parameters back to the GPU). Per GPU, over the shard of the parameters it updates (n elements: the offloaded
gradient bytes of the model-states graph, ``offloaded_bytes``' ``offload/gradients`` term, over the gradient width):

* **Gradients, GPU -> CPU** over the GPU's PCIe x16 slot (each way half the datasheet's two-way figure,
  ``cluster.PCIE``). DeepSpeed casts them to fp32 on the GPU before the copy, so 4 bytes per element
  (``stage_1_and_2.py`` ``async_inplace_copy_grad_to_fp32_buffer_from_gpu``: ``src_tensor.float()`` then
  ``copy_(non_blocking=True)`` into the CPU fp32 partition's grad; ``stage3.py`` ``partition_grads``:
  ``fp32_grad_tensor.copy_(grad_buffer.float())``). With ``overlap_comm`` the copies run on the reduction stream
  after each bucket's reduce, so they hide behind the last micro-batch's backward (2/3 of its time), less what the
  gradient reduction there already takes.
* **The CPU Adam step** (``csrc/includes/cpu_adam.h`` ``Adam_Optimizer::Step_AVX``: fp32 grad, exp_avg, exp_avg_sq
  and param loaded, param, exp_avg, exp_avg_sq stored: 16 + 12 bytes per element), after the unscale-and-clip of
  the fp32 gradients on the host (``unscale_and_clip_grads``: ``grad.mul_(1 / combined_scale)``, 4 + 4), and under
  ZeRO-3 the fp32 -> 16-bit cast the copy back makes on the CPU (PyTorch ``aten/src/ATen/native/cuda/Copy.cu``:
  "type conversions are performed on the CPU for CPU-GPU copies", 4 + 2): memory-bound over the host memory
  bandwidth one GPU's process gets (``--host-memory-bandwidth``, GB/s per GPU; its default ``HOST_BANDWIDTH`` is a
  DGX H100's DRAM shared by its 8 GPUs). Rated DRAM bandwidth: the time is a lower bound (the threads of one
  process rarely stream at it). Nothing else runs meanwhile: on the critical path.
* **Parameters, CPU -> GPU** after each group's step, synchronously, on the critical path: ZeRO 1-2 copy the fp32
  partition and cast on the GPU (``bit16_partitions[partition_id].data.copy_(fp32_partition.to(device))``: 4 bytes
  per element), ZeRO-3 copies into the 16-bit partition (``_reassign_or_swap_out_partitioned_parameters``:
  ``fp16_partitioned_groups_flat[i].data.copy_(fp32_partitioned_groups_flat[i].data)``: 2 bytes after the CPU cast).
  The paper's 2 + 2 bytes per parameter over PCIe (16-bit each way) is the design; the code moves 4 + 4 (ZeRO 1-2)
  or 4 + 2 (ZeRO-3).

Not timed: the one-step delayed parameter update (DPU, the paper's §4.2, off by default), the per-micro-batch
gradient accumulation through the CPU with more than one micro-batch (``async_accumulate_grad_in_cpu_via_gpu``,
``partition_grads``' add), pinned-memory staging, and GPUs with no PCIe figure in ``cluster.PCIE``.

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, zero=3, dp=8, offload=True)
>>> shard_elements(e)  # 6,738,415,616 / 8
842301952
>>> cpu_bytes_per_element(3), cpu_bytes_per_element(2), pcie_bytes_per_element(3), pcie_bytes_per_element(2)
(42, 36, (4, 2), (4, 4))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memderive.derivations.columns import maximum, where
from memderive.derivations.hardware import GPU
from memderive.derivations.quantities.cluster import PCIE, Cluster
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.derivations.quantities.model_states import offload_gradient_widths
from memderive.derivations.quantity import Evaluated
from memderive.derivations.references import cite
from memderive.symbolic.formula import Citation

__all__ = ["OffloadTime", "offload_time", "shard_elements", "cpu_bytes_per_element", "pcie_bytes_per_element",
           "pcie_bandwidth", "offload_line", "HOST_BANDWIDTH", "HOST_SOURCE", "OFFLOAD_SOURCE", "CPU_ADAM_SOURCE"]

#: Host DRAM per GPU, GB/s: a DGX H100 (two Xeon Platinum 8480C) has 2 sockets x 8 DDR5 channels; at DDR5-4800
#: (4,800 MT/s x 8 bytes = 38.4 GB/s a channel) that is 614.4 GB/s for its 8 GPUs, 76.8 GB/s each.
HOST_BANDWIDTH = 76.8
HOST_SOURCE = Citation("nvidia-dgx-basepod-components", "DGX H100: dual Intel Xeon Platinum 8480C, 2 TB DDR5",
                       also=(Citation("sth-xeon-8480-memory", "8480+: four tiles, two DDR5 channels each, 8 channels"),))
OFFLOAD_SOURCE = Citation("ren-2021", "§4.1, Figure 5: gradient offload overlapped with backward, CPU Adam, "
                          "parameters swapped back", also=(
                              Citation("deepspeed-stage12-offload", "async_inplace_copy_grad_to_fp32_buffer_from_gpu; "
                                       "step: fp32_partition.to(device)"),
                              Citation("deepspeed-stage3-offload", "partition_grads; "
                                       "_reassign_or_swap_out_partitioned_parameters"),
                              Citation("pytorch-copy-cu", "type conversions on the CPU for CPU-GPU copies")))
CPU_ADAM_SOURCE = Citation("deepspeed-cpu-adam", "Adam_Optimizer::Step_AVX: loads grad, exp_avg, exp_avg_sq, "
                           "param; stores param, exp_avg, exp_avg_sq")


def shard_elements(est: Evaluated) -> Any:
    """Elements of the parameters this GPU updates on the CPU: the offloaded gradient bytes (the model-states
    graph's ``offload/gradients`` term) over their width on the host (fp32, ``offload_gradient_widths``)."""
    o = est.options
    term = next(t for t in est.quantity("offloaded_bytes").breakdown.terms if t.path == "offload/gradients")
    return layout_int(term.expr, est.values) // offload_gradient_widths(o.dtype, o.precision, o.zero)[0]


def cpu_bytes_per_element(zero: int) -> int:
    """Host-memory bytes the CPU moves per element of the shard: Step_AVX's 16 loaded and 12 stored, the unscale's
    read and write of the fp32 gradient (8), and under ZeRO-3 the fp32 -> 16-bit cast for the copy back (6)."""
    return 28 + 8 + (6 if zero == 3 else 0)


def pcie_bytes_per_element(zero: int) -> tuple[int, int]:
    """(GPU -> CPU, CPU -> GPU) bytes per element of the shard: fp32 gradients down; fp32 parameters up under ZeRO
    1-2, 16-bit (cast on the CPU) under ZeRO-3."""
    return 4, (2 if zero == 3 else 4)


def pcie_bandwidth(hw: GPU) -> int | None:
    """Both directions of the GPU's PCIe x16 slot (bytes/s): its own link where that is PCIe, else ``cluster.PCIE``;
    None where the table has no figure."""
    if hw.link.startswith("PCIe"):
        return hw.link_bandwidth
    return PCIE[hw.name][0] if hw.name in PCIE else None


@dataclass(frozen=True, slots=True)
class OffloadTime:
    """One step's offload seconds on the critical path: the PCIe copies not hidden, and the CPU step."""

    copy_s: Any
    cpu_s: Any


def offload_time(est: Evaluated, cluster: Cluster, backward_s: Any, reduce_s: Any) -> OffloadTime:
    """Seconds ZeRO-Offload adds to one step of ``est`` on ``cluster``'s GPUs (0 without ``--offload``, or for an
    optimizer other than Adam/AdamW: DeepSpeed's offload runs DeepSpeedCPUAdam). ``backward_s``: the last
    micro-batch's backward, behind which the gradient copies run; ``reduce_s``: the gradient reduction that shares
    that window (both scalars or columns of layouts)."""
    o = est.options
    if not o.offload or o.optimizer not in ("adam", "adamw"):
        return OffloadTime(0.0, 0.0)
    n = shard_elements(est)
    cpu_s = n * cpu_bytes_per_element(o.zero) / (o.host_memory_bandwidth * 10**9)
    pcie = pcie_bandwidth(cluster.gpu)
    if pcie is None:
        return OffloadTime(0.0, cpu_s)
    down, up = pcie_bytes_per_element(o.zero)
    each_way = pcie / 2
    window = maximum(0.0, backward_s - reduce_s)
    exposed = maximum(0.0, n * down / each_way - window)
    return OffloadTime(where(n > 0, exposed + n * up / each_way, 0.0), cpu_s)


def offload_line(hw: GPU, host_gbs: float) -> str:
    """How the offload terms were timed, in words (the same for every ZeRO stage, as ``plan`` prints it once)."""
    pcie = pcie_bandwidth(hw)
    link = ("no PCIe figure for this GPU: the copies are not timed" if pcie is None else
            f"over PCIe at {pcie / 2e9:,.0f} GB/s each way ({hw.link if hw.link.startswith('PCIe') else 'x16 slot'}"
            f"{'' if hw.link.startswith('PCIe') else ', ' + cite(PCIE[hw.name][1])})")
    return (f"ZeRO-Offload (DeepSpeed offload_optimizer cpu, overlap_comm): this GPU's shard's fp32 gradients to the CPU "
            f"(4 B each) behind the last micro-batch's backward, less its gradient reduction, and the updated "
            f"parameters back (fp32 under ZeRO 1-2, 16-bit under ZeRO-3) on the critical path, {link}; the CPU Adam "
            f"step ({cpu_bytes_per_element(2)} B per element of host-memory traffic, {cpu_bytes_per_element(3)} under "
            f"ZeRO-3: {cite(CPU_ADAM_SOURCE)}; the unscale; ZeRO-3's cast to 16 bits) at {host_gbs:g} GB/s of host "
            f"memory per GPU (--host-memory-bandwidth; default a DGX H100's 2 x 8 DDR5-4800 channels over 8 GPUs, "
            f"{cite(HOST_SOURCE)}), rated DRAM bandwidth: a lower bound ({cite(OFFLOAD_SOURCE)}; delayed parameter "
            "update and accumulation through the CPU not timed)")
