"""Megatron-Core's CPU activation offloading (``--activation-offload-layers N``: ``cpu_offloading``,
``cpu_offloading_num_layers``), as Transformer Engine runs it (``get_cpu_offload_context`` around a
TransformerBlock's layers, ``model_layers`` the config's num_layers: with one pipeline stage, the GPU's l layers).

TE's default synchronizer (cpu_offload.py ``DefaultOffloadSynchronizer._init_offload_synchronization_dicts``)
offloads layers 0..N-1: layer i's saved tensors go to pinned host memory on a side stream from layer i+1's forward,
and its GPU copies are released at layer l-N+i's forward; in backward its reload starts at layer l-1-N+i's. So "if
all layers have memory footprint of T, then peak memory usage of saving activations is (l - N) * T" (its
docstring): at any moment the GPU holds l - N layers' saved activations, those not offloaded and those in flight.
TE refuses N > l - 1 (the last layer is never offloaded). The host holds the N offloaded layers' tensors.

Only the decoder layers' saved activations move (what TE's hooks see inside the context); the embedding, the
loss and the buffers outside the layers stay.

Time (``activation_offload_s``): the copies run on TE's side stream over the GPU's host link, one layer after the
other, each way at half the link's two-way figure (``host_link``: GB200's and GH200's NVLink-C2C, else the PCIe
slot). Offload i is queued at layer i+1's forward and awaited at layer l-N+i's, g = l - N - 1 layers later. With a
layer's copy c and forward f, a run of k back-to-back copies from offload i's queueing to its last one's wait takes k c
where the compute stream would take (k - 1 + g) f; the stalls add up along the worst chain of such runs (each next
run queued after the last resumed, g + k offloads on): for g >= 1 one run of all N copies (splitting one adds
f - g c < 0 where c >= f, and no run stalls where c < f), for g = 0 (N = l - 1, which TE warns "prevents
overlapping") every copy whole:

    exposed = max(0, N c - (l - 2) f)   (N < l - 1);   N c   (N = l - 1)

per micro-batch; the reloads mirror it in backward (reload i queued at layer l-1-N+i's backward, awaited at layer i's)
with the layer's backward b for f. f and b: a micro-batch's time over l, one third forward, two thirds backward.

>>> from fractions import Fraction
>>> resident_share(32, 8), offloaded_share(32, 8)
(Fraction(3, 4), Fraction(1, 4))
"""

from __future__ import annotations

from fractions import Fraction

from typing import Any

from memderive.derivations.columns import maximum
from memderive.derivations.hardware import GPU
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.derivations.quantities.offload_time import pcie_bandwidth
from memderive.derivations.quantity import Evaluated
from memderive.derivations.references import cite
from memderive.symbolic.derive import Breakdown
from memderive.symbolic.formula import Citation

__all__ = ["ACTIVATION_OFFLOAD_CITATION", "activation_offload", "offloaded_share", "resident_share",
           "activation_offload_note",
           "HOST_LINK", "host_link", "exposed_copy_s", "activation_offload_s", "activation_offload_line"]

ACTIVATION_OFFLOAD_CITATION = Citation("te-cpu-offload", "DefaultOffloadSynchronizer: peak (l - N) layers' saved "
                                       "activations; layers 0..N-1 on pinned host memory")

#: The CPU-GPU link of GPUs whose host is not on PCIe (both directions per GPU, bytes/s; in words; source): a GB200
#: superchip joins one Grace CPU to its two Blackwell GPUs over NVLink-C2C, 900 GB/s two-way, taken as shared by the
#: two GPUs; a GH200 joins one Grace to its one Hopper GPU over the same 900 GB/s.
_GH200_C2C = (900 * 10**9, "the superchip's one GPU", Citation("bekman-network", "NVLink-C2C, Grace/Hopper: 450 GB/s "
                                                                "unidirectional, 900 both"))
HOST_LINK: dict[str, tuple[int, str, Citation]] = {
    "gb200": (900 * 10**9 // 2, "the superchip's two GPUs sharing it",
              Citation("nvidia-gb200-nvl72-datasheet", "GB200 Grace Blackwell Superchip: one Grace CPU, two Blackwell "
                       "GPUs, NVLink-C2C 900 GB/s")),
    "gh200-96gb": _GH200_C2C, "gh200-141gb": _GH200_C2C,
}


def resident_share(layers: int, n: int) -> Fraction:
    """The share of the decoder layers' saved activations on the GPU at the peak: (l - N) / l."""
    return Fraction(layers - n, layers)


def offloaded_share(layers: int, n: int) -> Fraction:
    """The share in host memory: N / l."""
    return Fraction(n, layers)


def activation_offload(acts: Breakdown, layers: int, n: int) -> tuple[Breakdown, Breakdown]:
    """``acts`` with the decoder layers' saved activations cut to (l - N) layers' (the rest as they are), and the
    N layers' that host memory holds. Raises ``OptionsError`` where N is not below the layers (TE:
    "Cannot offload all layers without manual synchronization")."""
    if n > layers - 1:
        raise OptionsError(f"--activation-offload-layers {n}: the GPU has {layers} layers and Transformer Engine "
                           f"offloads at most {layers - 1} (the last layer stays); give {layers - 1} or fewer")
    layer = acts.where(lambda path: path.split("/")[0] == "layer")
    rest = acts.where(lambda path: path.split("/")[0] != "layer")
    return rest + layer.scaled(resident_share(layers, n)), layer.scaled(offloaded_share(layers, n))


def activation_offload_note(layers: int, n: int) -> str:
    """The assumption line an estimate prints."""
    return (f"CPU activation offloading (Megatron-Core cpu_offloading_num_layers {n}, Transformer Engine): "
            f"{layers - n} of {layers} layers' saved activations on the GPU at once, {n} layers' in host memory; "
            "the host copies timed with --gpu where its host link is known (the time model's line says which), else "
            "not (the step time a lower bound)")


def host_link(hw: GPU) -> tuple[int, str] | None:
    """Both directions of ``hw``'s link to host memory (bytes/s) and its words, or None where no figure is known."""
    if hw.name in HOST_LINK:
        bw, words, source = HOST_LINK[hw.name]
        return bw, f"NVLink-C2C at {bw / 2e9:,.0f} GB/s each way ({words}, {cite(source)})"
    pcie = pcie_bandwidth(hw)
    return None if pcie is None else (pcie, f"PCIe at {pcie / 2e9:,.0f} GB/s each way")


def exposed_copy_s(layers: int, n: int, copy_s: Any, layer_s: Any) -> Any:
    """Seconds one direction of the copies stalls a micro-batch (the module's docstring): ``copy_s`` one layer's
    copy, ``layer_s`` one layer's compute in that pass.

    >>> exposed_copy_s(4, 2, 3.0, 1.0), exposed_copy_s(4, 3, 1.0, 1.0), exposed_copy_s(32, 8, 1.0, 1.0)
    (4.0, 3.0, 0.0)
    """
    if n == layers - 1:  # each offload awaited at the layer that queued it
        return n * copy_s
    return maximum(0.0, n * copy_s - (layers - 2) * layer_s)


def activation_offload_s(est: Evaluated, hw: GPU, micro_s: Any, m: Any) -> Any:
    """Seconds a step of ``m`` micro-batches of ``micro_s`` each waits on the offload's copies (0 without it, or
    with no host link figure for ``hw``)."""
    n = est.options.activation_offload_layers
    link = host_link(hw)
    if not n or link is None:
        return 0.0
    layers = est.model.sizes["l"]
    layer_bytes = layout_int(est.quantity("offloaded_activation_bytes").breakdown.total, est.values) // n
    copy = layer_bytes / (link[0] / 2)
    forward = micro_s / 3 / layers
    return m * (exposed_copy_s(layers, n, copy, forward) + exposed_copy_s(layers, n, copy, 2 * forward))


def activation_offload_line(hw: GPU, n: int) -> str:
    """How the offload's copies were timed, in words."""
    link = host_link(hw)
    if link is None:
        return (f"CPU activation offloading ({n} layers): no host-link figure for {hw.name}, the copies not timed: "
                "the step time is a lower bound")
    return (f"CPU activation offloading ({n} layers, {cite(ACTIVATION_OFFLOAD_CITATION)}): each offloaded layer's "
            f"saved activations down after its forward and up before its backward, one layer at a time on a side "
            f"stream, {link[1]}, behind the other layers' compute (a layer a third of a micro-batch's time over l "
            "forward, two thirds backward); a copy past the slack Transformer Engine's schedule leaves stalls the step")
