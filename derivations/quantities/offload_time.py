"""What ZeRO-Offload (``--offload``: gradients and optimizer states in CPU memory) costs a training step, as
DeepSpeed runs it with ``offload_optimizer: {device: cpu}`` and ``overlap_comm: true`` (Ren et al. 2021,
arXiv:2101.06840, §4.1 and Figure 5: gradients to the CPU during backward, the Adam step on the CPU, the updated
parameters back to the GPU). Per GPU, over the shard of the parameters it updates (n elements: the offloaded
gradient bytes of the model-states graph, ``offloaded_bytes``' ``offload/gradients`` term, over the gradient width):

* **Gradients, GPU <-> CPU during backward** over the GPU's PCIe x16 slot (each way half the datasheet's two-way
  figure, ``cluster.PCIE``; full duplex, so the two directions overlap), per micro-batch, bytes per element
  (``backward_copy_s``; DeepSpeed master, deepspeedai/DeepSpeed edaa722):
  ZeRO 1-2 (``stage_1_and_2.py`` ``copy_grads_in_partition``): at the last micro-batch the gradient cast to fp32
  on the GPU and copied into the CPU fp32 partition's grad (``async_inplace_copy_grad_to_fp32_buffer_from_gpu``:
  4 down); with m > 1 micro-batches every one also saves its 16-bit running sum to a pinned CPU buffer (2 down)
  and every one but the first first brings it back and adds it on the GPU (2 up;
  ``async_accumulate_grad_in_cpu_via_gpu``). ZeRO-3 (``stage3.py`` ``partition_grads``): every micro-batch copies
  its 16-bit gradient partition into the CPU ``grad_partitions_flat_buffer`` (2 down) and back to the GPU (2 up:
  ``grad_buffer.to(grad_partition.device)``, adding the earlier sum after the first), and the last also the fp32
  cast into the optimizer's partition (``_offload_grad_partition_at_boundary``: 4 down), for any m. With
  ``overlap_comm`` the copies run on the reduction stream after each bucket's reduce, so each micro-batch's hide
  behind its backward (2/3 of its time), less what the gradient reduction there already takes.
* **The CPU Adam step** (``csrc/includes/cpu_adam.h`` ``Adam_Optimizer::Step_AVX``: fp32 grad, exp_avg, exp_avg_sq
  and param loaded, param, exp_avg, exp_avg_sq stored: 16 + 12 bytes per element), after the unscale-and-clip of
  the fp32 gradients on the host (``unscale_and_clip_grads``: ``grad.mul_(1 / combined_scale)``, 4 + 4), and the
  fp32 -> 16-bit cast for the copy back, on the CPU (4 + 2): memory-bound over the host memory
  bandwidth one GPU's process gets (``--host-memory-bandwidth``, GB/s per GPU; its default ``HOST_BANDWIDTH`` is a
  DGX H100's DRAM shared by its 8 GPUs). Rated DRAM bandwidth: the time is a lower bound (the threads of one
  process rarely stream at it). Nothing else runs meanwhile: on the critical path.
* **Parameters, CPU -> GPU** after each group's step, on the critical path, 16-bit after a cast on the CPU:
  ZeRO 1-2 into a pinned 16-bit buffer, then up (``bit16_partition_buffer.data.copy_(fp32_partition.data)``,
  ``bit16_partitions[partition_id].data.copy_(bit16_partition_buffer.data, non_blocking=True)``: DeepSpeed 0.17.0,
  #7309; before it the fp32 partition went up, 4 bytes), ZeRO-3 into its 16-bit partition
  (``_reassign_or_swap_out_partitioned_parameters``:
  ``fp16_partitioned_groups_flat[i].data.copy_(fp32_partitioned_groups_flat[i].data)``): 2 bytes per element, the
  paper's design.

Not timed: the one-step delayed parameter update (DPU, the paper's §4.2, off by default), pinned-memory staging,
and GPUs with no PCIe figure in ``cluster.PCIE``.

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, zero=3, dp=8, offload=True)
>>> shard_elements(e)  # 6,738,415,616 / 8
842301952
>>> CPU_BYTES_PER_ELEMENT, PCIE_UP_BYTES
(42, 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memderive.derivations.columns import maximum, where
from memderive.derivations.hardware import GPU, kernels_of
from memderive.derivations.quantities.cluster import PCIE, Cluster
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.derivations.quantities.model_states import offload_gradient_widths
from memderive.derivations.quantity import Evaluated
from memderive.derivations.references import cite
from memderive.symbolic.formula import Citation

__all__ = ["OffloadTime", "offload_time", "shard_elements", "CPU_BYTES_PER_ELEMENT", "PCIE_UP_BYTES",
           "backward_copy_s", "pcie_bandwidth", "pcie_link", "offload_line", "HOST_BANDWIDTH", "HOST_SOURCE", "OFFLOAD_SOURCE", "CPU_ADAM_SOURCE"]

#: Host DRAM per GPU, GB/s: a DGX H100 (two Xeon Platinum 8480C) has 2 sockets x 8 DDR5 channels; at DDR5-4800
#: (4,800 MT/s x 8 bytes = 38.4 GB/s a channel) that is 614.4 GB/s for its 8 GPUs, 76.8 GB/s each.
HOST_BANDWIDTH = 76.8
HOST_SOURCE = Citation("nvidia-dgx-basepod-components", "DGX H100: dual Intel Xeon Platinum 8480C, 2 TB DDR5",
                       also=(Citation("sth-xeon-8480-memory", "8480+: four tiles, two DDR5 channels each, 8 channels"),))
OFFLOAD_SOURCE = Citation("ren-2021", "§4.1, Figure 5: gradient offload overlapped with backward, CPU Adam, "
                          "parameters swapped back", also=(
                              Citation("deepspeed-stage12-offload", "copy_grads_in_partition, "
                                       "async_accumulate_grad_in_cpu_via_gpu, "
                                       "async_inplace_copy_grad_to_fp32_buffer_from_gpu; step: "
                                       "bit16_partition_buffer.data.copy_(fp32_partition.data)"),
                              Citation("deepspeed-stage3-offload", "partition_grads, "
                                       "_offload_grad_partition_at_boundary, "
                                       "_reassign_or_swap_out_partitioned_parameters")))
CPU_ADAM_SOURCE = Citation("deepspeed-cpu-adam", "Adam_Optimizer::Step_AVX: loads grad, exp_avg, exp_avg_sq, "
                           "param; stores param, exp_avg, exp_avg_sq")


def shard_elements(est: Evaluated) -> Any:
    """Elements of the parameters this GPU updates on the CPU: the offloaded gradient bytes (the model-states
    graph's ``offload/gradients`` term) over their width on the host (fp32, ``offload_gradient_widths``)."""
    o = est.options
    term = next(t for t in est.quantity("offloaded_bytes").breakdown.terms if t.path == "offload/gradients")
    return layout_int(term.expr, est.values) // offload_gradient_widths(o.dtype, o.precision, o.zero)[0]


#: Host-memory bytes the CPU moves per element of the shard: Step_AVX's 16 loaded and 12 stored, the unscale's read
#: and write of the fp32 gradient (8), and the fp32 -> 16-bit cast for the copy back (6), at every stage (ZeRO 1-2
#: into the pinned 16-bit buffer since DeepSpeed 0.17.0, ZeRO-3 into its 16-bit partition).
CPU_BYTES_PER_ELEMENT = 16 + 12 + 8 + 6
#: Bytes per element of the shard the updated parameters take up after the step: 16-bit, cast on the CPU.
PCIE_UP_BYTES = 2


def backward_copy_s(zero: int, m: Any, one: Any, window: Any) -> Any:
    """Seconds of a step's backward gradient copies not hidden, with ``one`` the seconds of a byte per element each
    way and ``window`` a micro-batch's backward less its reduction: each micro-batch's larger direction (PCIe is
    full duplex) past the window. Per element of the shard (the module's docstring): ZeRO 1-2 with one micro-batch
    4 B down; with m > 1, 2 B down in the first, 2 B each way in the middle ones, 2 + 4 B down and 2 B up in the
    last; ZeRO-3, any m, 2 B each way in all but the last, 2 + 4 B down and 2 B up in it. ``m`` may be a column of
    layouts (``derivations.columns``): no branch on it.

    >>> [backward_copy_s(2, m, 1.0, 0.0) for m in (1, 4)], backward_copy_s(3, 1, 1.0, 0.0)  # 4; 2 + 2 x 2 + 6; 6
    ([4.0, 12.0], 6.0)
    """
    both = maximum(0.0, 2 * one - window)  # 2 B a way: the 16-bit running sum
    last = maximum(0.0, 6 * one - window)  # and the fp32 copy at the last micro-batch
    if zero == 3:
        return (m - 1) * both + last
    return where(m > 1, (m - 1) * both + last, maximum(0.0, 4 * one - window))


def pcie_bandwidth(hw: GPU) -> int | None:
    """Both directions of the GPU's PCIe x16 slot (bytes/s): its own link where that is PCIe, else ``cluster.PCIE``;
    None where the table has no figure."""
    if hw.fabric == "pcie":
        return hw.link_bandwidth
    return PCIE[kernels_of(hw)][0] if kernels_of(hw) in PCIE else None


def pcie_link(hw: GPU) -> str:
    """The PCIe link the host copies were timed on, in words (or that they were not timed)."""
    pcie = pcie_bandwidth(hw)
    if pcie is None:
        return "no PCIe figure for this GPU: the copies are not timed"
    own = hw.fabric == "pcie"
    return (f"over PCIe at {pcie / 2e9:,.0f} GB/s each way ({hw.link if own else 'x16 slot'}"
            f"{'' if own else ', ' + cite(PCIE[kernels_of(hw)][1])})")


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
    cpu_s = n * CPU_BYTES_PER_ELEMENT / (o.host_memory_bandwidth * 10**9)
    pcie = pcie_bandwidth(cluster.gpu)
    if pcie is None:
        return OffloadTime(0.0, cpu_s)
    each_way = pcie / 2
    window = maximum(0.0, backward_s - reduce_s)
    exposed = backward_copy_s(o.zero, o.micro_batches or 1, n / each_way, window)
    return OffloadTime(where(n > 0, exposed + n * PCIE_UP_BYTES / each_way, 0.0), cpu_s)


def offload_line(hw: GPU, host_gbs: float) -> str:
    """How the offload terms were timed, in words (the same for every ZeRO stage, as ``plan`` prints it once)."""
    link = pcie_link(hw)
    return (f"ZeRO-Offload (DeepSpeed offload_optimizer cpu, overlap_comm): this GPU's shard's gradients to the CPU, "
            f"fp32 (4 B each) at the last micro-batch, and the 16-bit running sums down and back each micro-batch "
            f"under ZeRO-3 or gradient accumulation (2 B each way), each behind its micro-batch's backward less its "
            f"gradient reduction, and the updated 16-bit parameters back on the critical path, {link}; the CPU Adam "
            f"step ({CPU_BYTES_PER_ELEMENT} B per element of host-memory traffic: {cite(CPU_ADAM_SOURCE)}; the "
            f"unscale; the cast to 16 bits) at {host_gbs:g} GB/s of host "
            f"memory per GPU (--host-memory-bandwidth; default a DGX H100's 2 x 8 DDR5-4800 channels over 8 GPUs, "
            f"{cite(HOST_SOURCE)}), rated DRAM bandwidth: a lower bound ({cite(OFFLOAD_SOURCE)}; the delayed parameter "
            "update not timed)")
