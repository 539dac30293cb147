"""The cluster a step runs on, and the time of each collective on the links its group spans.

A cluster is nodes of ``gpus_per_node`` GPUs (default 8: DGX/HGX A100 and H100, Grand Teton). Inside a node each GPU
reaches the others over its intra-node link (NVLink/NVSwitch, Infinity Fabric or PCIe: ``hardware.GPU.link_bandwidth``,
both directions, so half of it each way); between nodes each GPU has its own network port of
``inter_node_bandwidth`` bytes/s each way (default 400 Gb/s = 50 GB/s: one ConnectX-7 NDR InfiniBand port per H100
on a DGX H100, the 400 Gb/s RoCE/InfiniBand per GPU of the Llama 3 clusters; ``INTER_NODE``).

Ranks are laid out as Megatron-LM numbers them (``parallel_state``: tensor-parallel ranks adjacent, then context,
then data, then pipeline), so a group of ``n`` ranks whose members are ``stride`` ranks apart keeps
``min(n, gpus_per_node // stride)`` of them in one node (one when ``stride >= gpus_per_node``) and spans
``n / inside`` nodes. Inside one node, on the GPUs NCCL's tables cover, a reduce-scatter or all-gather is NCCL's
own ring (``nccl_cost.node_ring_s``: the NVLink links at NCCL's per-link speed, a latency per ring step), and so is
an all-reduce where no NVLink SHARP runs (Volta, Ampere: ``Cluster.node_ring``); a send or an all-to-all moves at
NCCL's per-link speed (``Cluster.peer``). An all-reduce on Hopper or Blackwell, and every collective on a GPU NCCL's
tables do not cover, is a ring at the link's rated bandwidth (NCCL tests' bus bandwidth: an all-reduce moves
``2(n-1)/n`` of the data, a reduce-scatter or all-gather ``(n-1)/n``), the tensor-parallel ones at their measured
speed (``all_reduce_fraction``). A collective whose group spans nodes takes NCCL's own
cost model (``nccl_cost``: NCCL's tuning.cc, its latency per ring step and tree level and its bus bandwidth of one
channel per NIC at the topology search's speed), so its time grows with the nodes as NCCL's does; a point-to-point
send across nodes goes at that per-NIC speed. GPUs NCCL's tables do not cover here (PCIe cards, MI300X) keep
hierarchical rings at the rated bandwidths: a reduce-scatter inside each node, a ring across nodes on the
``1/inside`` share each GPU then holds, an all-gather inside the node.

>>> from memderive.derivations.hardware import gpu
>>> c = Cluster(gpu("h100-sxm"))
>>> c.all_reduce(10**9, 8, 1) == 2 * 7 / 8 * 10**9 / 450e9  # one node: NVLink only
True
>>> # two nodes, one rank in each: NCCL's ring (Simple) at the search's 48 GB/s for the 50 GB/s port, 10^9 / 48e9 s,
>>> # and its latency 1.4 x (8.4 + 2 x 14.0) us (nccl_cost)
>>> round(c.all_reduce(10**9, 2, 8) * 1e6, 2), round((10**9 / 48e9 + 1.4 * 36.4e-6) * 1e6, 2)
(20884.29, 20884.29)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from memderive.derivations.columns import is_column, maximum, minimum, where
from memderive.derivations.hardware import GPU, GPUS, PCIE, intra_bandwidth, kernels_of
from memderive.derivations.quantities.nccl_cost import (NCCL_COST, collective_s, latency_s, nccl_arch, net_channel_bw,
                                                       node_ring_s, nvlink_bus)
from memderive.symbolic.formula import Citation

__all__ = ["Cluster", "INTER_NODE", "INTER_NODE_BANDWIDTH", "GPUS_PER_NODE", "NCCL", "PCIE", "group_span", "intra_bandwidth",
           "ALL_REDUCE_MEASURED", "ALL_REDUCE_SOURCE", "all_reduce_fraction", "NCCL_COST", "NVLINK_MEASURED"]

GPUS_PER_NODE = 8
#: 400 Gb/s per GPU each way, in bytes/s.
INTER_NODE_BANDWIDTH = 400 * 10**9 // 8
INTER_NODE = Citation("nvidia-dgx-h100-guide", "8 single-port ConnectX-7 400 Gb/s (NDR) per 8 GPUs",
                      also=(Citation("dubey-2024", "§3.3.1: 'both fabrics use 400 Gbps interconnects between GPUs'"),))
NCCL = Citation("nccl-tests-performance", "bus bandwidth: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n")
ALL_REDUCE_SOURCE = Citation("openxla-collective-perf-table", "xla/service/gpu/model/default_collective_perf_table"
                             ".txtpb: all-reduce, F32, one group of n devices per node (sm_90, sm_100_B200); "
                             "network_throughput_bytes_per_sec = tensor bytes / runtime (xla/tools/"
                             "collective_perf_table_gen.cc)")
#: NVLink throughput measured inside one node other than by an all-reduce, GB/s each way, by GPU: (what was measured,
#: GB/s, source). The H800's: DeepEP's intranode EP 8 dispatch and combine, the check on its 8 links at NCCL's
#: per-link speed (tests/test_export_variants.py; benchmarks/published_runs.py prints the ratios).
NVLINK_MEASURED: dict[str, tuple[tuple[str, float, Citation], ...]] = {
    "h800": (("DeepEP's intranode EP 8 dispatch", 153.0, Citation("deepep-v1", "intranode EP 8 dispatch 153 GB/s")),
             ("DeepEP's intranode EP 8 combine", 158.0, Citation("deepep-v1", "intranode EP 8 combine 158 GB/s"))),
}
#: OpenXLA's measured all-reduce throughput inside one node (the buffer's bytes over the time, GB/s), by device and
#: GPUs in the group: (buffer bytes, GB/s), from 1 MiB up.
ALL_REDUCE_MEASURED: dict[tuple[str, int], tuple[tuple[int, float], ...]] = {
    ("sm_90", 2): ((2**20, 50.0), (2**22, 97.2), (2**23, 115.1), (2**24, 165.9), (2**26, 203.2), (2**28, 227.2),
                   (2**29, 232.5), (2**30, 242.2), (2**31, 250.3)),
    ("sm_90", 4): ((2**20, 24.1), (2**21, 35.5), (2**23, 98.7), (2**25, 153.8), (2**26, 170.0), (2**27, 181.8),
                   (2**28, 189.1), (2**29, 193.3), (2**30, 198.3), (2**31, 201.6)),
    ("sm_90", 8): ((2**20, 20.2), (2**21, 36.6), (2**22, 61.1), (2**23, 80.1), (2**24, 115.5), (2**25, 148.5),
                   (2**26, 176.7), (2**27, 200.3), (2**28, 212.7), (2**29, 220.8), (2**30, 227.4), (2**31, 230.0)),
    ("sm_100_B200", 2): ((2**20, 34.2), (2**21, 66.1), (2**22, 68.2), (2**24, 218.3), (2**25, 277.7), (2**26, 337.3),
                         (2**27, 383.2), (2**28, 413.5), (2**29, 438.0), (2**30, 461.5)),
    ("sm_100_B200", 4): ((2**23, 128.3), (2**24, 178.1), (2**25, 203.6), (2**26, 280.1), (2**27, 311.5),
                         (2**29, 351.2), (2**30, 367.4), (2**31, 378.6)),
    ("sm_100_B200", 8): ((2**20, 21.4), (2**21, 33.6), (2**22, 50.6), (2**23, 89.1), (2**24, 128.0), (2**25, 170.6),
                         (2**26, 213.5), (2**27, 293.9), (2**28, 318.5), (2**29, 333.7), (2**30, 344.7),
                         (2**31, 350.8)),
}
#: The device each measured curve was taken on, with its rated NVLink bytes/s each way (hardware.py).
_MEASURED_ON = {"sm_90": 450 * 10**9, "sm_100_B200": 900 * 10**9}
#: The curve of each architecture it was measured on (``ALL_REDUCE_MEASURED``' keys): Hopper on H100 nodes, Blackwell
#: on B200 nodes.
_CURVE_OF = {"sm_90": "sm_90", "sm_100": "sm_100_B200"}
#: The GPUs whose TP all-reduces take a measured curve: their own die (not an export variant, ``GPU.die``) on an
#: 8-GPU NVSwitch node (``GPU.fabric``, ``GPU.nvlink_domain``) of a measured architecture. So H100 SXM, H200 and B200;
#: the GH200's NVLink 4 is the H100's, whose curve (on NVSwitch nodes) stands in for its systems' own. Not the NVL72
#: racks (72 GPUs on NVLink switch trays, not measured) nor Blackwell Ultra (sm_103, not measured).
_ARCH = {name: _CURVE_OF[hw.arch] for name, hw in GPUS.items()
         if hw.arch in _CURVE_OF and hw.fabric == "nvswitch" and hw.nvlink_domain == 8 and hw.die is None}


def all_reduce_fraction(gpu: GPU, nbytes: float, n: int) -> float:
    """The fraction of the rated ring time's speed a measured all-reduce of ``nbytes`` over ``n`` GPUs of one node
    reaches: OpenXLA's throughput (log-linear in the size between its points, the end points past them) over the
    rated ring's, bytes / (2 (n-1)/n / NVLink each way), on the device it was measured on (H100 SXM and H200, whose
    NVLink 4 is the same; B200); other GPUs 1: no measurement, and a stand-in curve would time their TP against their
    other collectives unevenly (Volta and Ampere time every collective in a node at NCCL's own ring model,
    ``Cluster.node_ring``; the rest at the rated ring). An export variant of a measured die (the H800,
    ``GPU.die``): no faster than its die's measured all-reduce (the same NCCL and switches, fewer links) nor than
    NCCL's ring over its own links (``nccl_cost.node_ring_s``), the slower of the two. Groups past 8 take 8's, 3
    takes 4's. The caller divides its rated time by it.

    >>> from memderive.derivations.hardware import gpu
    >>> round(all_reduce_fraction(gpu("h100-sxm"), 2**27, 8), 4)  # 200.3 GB/s over 450e9 / 1.75 = 257.14 GB/s
    0.7789
    >>> # H800, 2^20 B over 8: the H100's measured 20.2 GB/s, 51.9 us, slower than its own ring's; 200e9 / 1.75 rated
    >>> round(all_reduce_fraction(gpu("h800"), 2**20, 8), 4)  # 20.2 / 114.29
    0.1767
    """
    own = _ARCH.get(gpu.name)
    if own is not None:
        rated = _MEASURED_ON[own] / (2 * (_group(n) - 1) / _group(n)) / 1e9  # GB/s, the measured device's ring
        return min(1.0, _measured_rate(own, nbytes, n) / rated)
    die = _ARCH.get(kernels_of(gpu))
    if die is None:
        return 1.0
    rated = nbytes * 2 * (n - 1) / n / (gpu.link_bandwidth / 2)
    slowest = max(nbytes / (_measured_rate(die, nbytes, n) * 1e9), node_ring_s(gpu, "all_reduce", nbytes, n))
    return min(1.0, rated / slowest)


def _group(n: int) -> int:
    """The measured group standing for ``n`` GPUs: 2, 4 or 8."""
    return 2 if n <= 2 else 4 if n <= 4 else 8


def _measured_rate(arch: str, nbytes: float, n: int) -> float:
    """OpenXLA's all-reduce throughput (GB/s) of ``nbytes`` on ``arch`` over ``n`` GPUs' group (``_group``)."""
    points = ALL_REDUCE_MEASURED[(arch, _group(n))]
    size = max(float(nbytes), 1.0)
    if size <= points[0][0]:
        return points[0][1]
    if size >= points[-1][0]:
        return points[-1][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= size <= x1:
            return y0 + (y1 - y0) * (math.log2(size) - math.log2(x0)) / (math.log2(x1) - math.log2(x0))
    raise AssertionError("unreachable: the size lies between two points")


def group_span(n: int, stride: int, gpus_per_node: int) -> tuple[int, int]:
    """(ranks of the group inside one node, nodes the group spans) for ``n`` ranks ``stride`` apart (cell by cell
    on columns of layouts: ``derivations.columns``)."""
    inside = where(stride >= gpus_per_node, 1, maximum(1, minimum(n, gpus_per_node // stride)))
    return inside, -(-n // inside)


@dataclass(frozen=True, slots=True)
class Cluster:
    """GPUs of one kind in nodes of ``gpus_per_node``, each with a network port of ``inter_node_bandwidth``."""

    gpu: GPU
    gpus_per_node: int = GPUS_PER_NODE
    inter_node_bandwidth: int = INTER_NODE_BANDWIDTH  # bytes/s per GPU, each way
    intra_link: str | None = None  # None or "nvlink": the GPU's own link; "pcie": its PCIe slot (``PCIE``)

    @property
    def intra(self) -> float:
        """Bytes/s each way over the intra-node link."""
        return intra_bandwidth(self.gpu, self.intra_link) / 2

    @property
    def peer(self) -> float:
        """Bytes/s each way NCCL's kernels move between GPUs of a node outside an all-reduce (sends, all-to-alls):
        the NVLink links at NCCL's per-link speed where its tables cover the GPU (``nccl_cost.NCCL_ARCH``: 20.6 of
        an NVLink 4 link's 25 GB/s, 370.8 of an H100's 450; "an effective NVLink bandwidth of 370GB/s, which you can
        observe as BusBw when running non-allreduce operations", nccl-tests#212; 721.8 of a B200's 900, where DeepEP
        measured its own dispatch and combine over NVLink at EP 8 on SM100 at 726 and 740 GB/s, its README's
        Performance table), else the rated ``intra``."""
        return nvlink_bus(self.gpu, self.intra) * 1e9 if self.nccl else self.intra

    @property
    def link_name(self) -> str:
        return "PCIe" if self.intra_link == "pcie" and self.gpu.fabric != "pcie" else self.gpu.link

    @property
    def nccl(self) -> bool:
        """Whether collectives across nodes take NCCL's own cost model (``nccl_cost``): the GPUs NCCL's tables
        cover, on their NVLink (not ``--intra-node-link pcie``)."""
        return nccl_arch(self.gpu) is not None and self.intra_link != "pcie"

    @property
    def network(self) -> float:
        """Bytes/s each way one GPU's NIC carries for NCCL: the topology search's per-channel speed for the port
        (``nccl_cost.net_channel_bw``: 48 GB/s for a 400 Gb/s NDR port), the port's rate where NCCL's tables do
        not cover the GPU."""
        if not self.nccl:
            return float(self.inter_node_bandwidth)
        return net_channel_bw(nccl_arch(self.gpu)[0], self.inter_node_bandwidth) * 1e9

    @property
    def node_ring(self) -> bool:
        """Whether every collective inside one node takes NCCL's own ring model (``nccl_cost.node_ring_s``): the
        GPUs NCCL's tables cover that run no NVLink SHARP (Volta, Ampere). On Hopper and Blackwell the reduce-scatters
        and all-gathers take it (the effective NVLink bandwidth "you can observe as BusBw when running non-allreduce
        operations", ``peer``) and the all-reduces the rated ring (NVLink SHARP's, "a peak busBw of ~480GB/s" on 8
        H100s, nccl-tests#212, passes it), the tensor-parallel ones at a measured speed (``all_reduce_fraction``)."""
        return self.nccl and nccl_arch(self.gpu)[0] < 2

    def _phases(self, nbytes: float, n: int, stride: int, factor: int) -> float:
        """A ring reduce-scatter (factor 1) or all-reduce (factor 2) of ``nbytes`` per rank: inside one node NCCL's
        own ring model where it covers the GPU, but for an all-reduce on a GPU with NVLink SHARP (``node_ring``: the
        link's rated bandwidth); across nodes NCCL's own cost model (``nccl_cost.collective_s``) where it covers the
        GPU, else hierarchical rings at the rated bandwidths."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        inside, nodes = group_span(n, stride, self.gpus_per_node)
        local = factor * (inside - 1) / inside * nbytes / self.intra
        if not self.nccl:
            return local + factor * (nodes - 1) / nodes * nbytes / inside / self.inter_node_bandwidth
        coll = "all_reduce" if factor == 2 else "reduce_scatter"
        if self.node_ring or factor == 1:  # NCCL's own ring in one node, but for NVLink SHARP's all-reduces
            local = where(inside > 1, node_ring_s(self.gpu, coll, nbytes, maximum(inside, 2), self.intra), 0.0)
        if not is_column(nodes) and nodes == 1:
            return local
        across = collective_s(self.gpu, coll, nbytes, maximum(n, 2), inside, self.inter_node_bandwidth, self.intra)
        return where(nodes > 1, across, local)

    def all_reduce(self, nbytes: float, n: int, stride: int) -> float:
        return self._phases(nbytes, n, stride, 2)

    def reduce_scatter(self, nbytes: float, n: int, stride: int) -> float:
        """Of ``nbytes`` per rank before the scatter (each keeps ``1/n``); an all-gather to ``nbytes`` takes the same."""
        return self._phases(nbytes, n, stride, 1)

    all_gather = reduce_scatter

    def tiny_all_reduce(self, n: int, stride: int) -> float:
        """An all-reduce of a few bytes over ``n`` ranks ``stride`` apart, in one node or across nodes: NCCL's own
        latency (``nccl_cost.latency_s``); 0.0 where NCCL's tables do not cover the GPU (not timed)."""
        if not self.nccl:
            return 0.0
        inside, _ = group_span(n, stride, self.gpus_per_node)
        return where(n > 1, latency_s(self.gpu, maximum(n, 2), maximum(inside, 1)), 0.0)

    def send(self, nbytes: float, stride: int, n: int = 2) -> float:
        """A point-to-point send to the rank ``stride`` away (the next pipeline stage) in a pipeline of ``n`` ranks
        ``stride`` apart: over the network when the pipeline spans nodes, since then some stage boundary crosses
        one and, in the 1F1B steady state, every stage waits on it (t4 p16 on 8-GPU nodes: stages 0-1 share a node,
        1-2 do not)."""
        _, nodes = group_span(n, stride, self.gpus_per_node)
        link = where(nodes > 1, self.network, self.peer)
        return nbytes / link

    def all_to_all(self, nbytes: float, n: int, stride: int) -> float:
        """Each rank sends ``(n-1)/n`` of ``nbytes`` to the others: the share in its node over NVLink (at ``peer``)
        and the rest over its port, at once (the slower of the two)."""
        if n <= 1 or nbytes <= 0:
            return 0.0
        inside, _ = group_span(n, stride, self.gpus_per_node)
        return maximum((inside - 1) / n * nbytes / self.peer, (n - inside) / n * nbytes / self.inter_node_bandwidth)

    def describe(self) -> str:
        return (f"{self.gpus_per_node} GPUs per node on {self.link_name} ({self.intra / 1e9:,.0f} GB/s each way), "
                f"{self.inter_node_bandwidth * 8 / 1e9:,.0f} Gb/s per GPU between nodes")
