"""NCCL's own cost model of a collective whose group spans nodes, and of a ring in one node (``node_ring_s``), read
off NCCL's source (NVIDIA/nccl at commit 5067397c26, ``src/graph/tuning.cc``: ``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime``; ``src/graph/search.cc``; ``src/graph/topo.h``), the model NCCL itself uses to pick an
algorithm and protocol for each call.

For each algorithm a (ring; tree for the all-reduce; PAT for the all-gather and reduce-scatter with one GPU per
node) and protocol p (LL128, Simple) NCCL predicts ``time = latency + nBytes / algorithm bandwidth`` and runs the
fastest (``ncclTopoGetAlgoTime``, tuning.cc:630-655). ``nBytes`` is the buffer: an all-reduce's, the whole gathered
or scattered buffer of an all-gather or reduce-scatter (``ncclFuncMaxSendRecvCount``, enqueue.h:39-41).

* **Bus bandwidth** ``busBw = nChannels x bw`` (tuning.cc:306, 324), ``bw`` the speed the topology search settles
  on per channel: the first of the search's speeds no faster than the path to the NIC (search.cc:1170-1174:
  ``speedArrayInter``, ``sm90SpeedArrayInter``, ``sm100SpeedArrayInter``) from the NIC's own ``speed / 8000`` GB/s
  (topo.cc:418: a 400 Gb/s NDR port is 50 GB/s, the search's 48; a 200 Gb/s HDR port 25, the search's 24; the NCCL
  maintainers: "For NDR @ 400Gbps you should see 46-48GB/s per NIC", nccl-tests#290). Here the group's channels
  cross the nodes on one NIC per GPU of the group in a node (every GPU its own port, ``cluster.INTER_NODE``), so
  ``busBw = ppn x bw``, no more than the node's NVLink carries at NCCL's per-link speed (topo.h:19-24, ``SMxx_NVLINK_BW``:
  20.0 GB/s per NVLink 3 link, 20.6 per NVLink 4 link, 40.1 per NVLink 5 link; "an effective NVLink bandwidth of
  370GB/s" on H100, nccl-tests#212: 18 x 20.6 = 370.8).
* **Refinements** (tuning.cc:328-337): ring LL128 ``x 0.92``; tree all-reduce Simple ``x 0.92``, tree LL128
  ``x 120/128`` across nodes; PAT ``x 0.75``; each no more than its channels at the per-channel cap of the GPU
  generation and node count (``perChMaxRingLL128Bws``, ``perChMaxTreeLL128Bws``, ``perChMaxTreeBws``,
  tuning.cc:184-204; 1, 2 or more nodes), two channels per NIC (the search's one, doubled by
  ``ncclTopoDupChannels``, search.cc:1036).
* **Algorithm bandwidth** (tuning.cc:376-382): ring ``busBw x nRanks / nsteps``, ``nsteps`` ``2(n - 1)`` for an
  all-reduce and ``n - 1`` for the others (tuning.cc:289-291); tree ``busBw / 2``; PAT's all-gather and
  reduce-scatter bandwidth is its bus bandwidth.
* **Latency** in microseconds (tuning.cc:384-435, the constants tuning.cc:149-176): the base latency (ring and tree
  LL128 14.0, Simple 8.4; PAT 8.0) plus, for a ring, ``(nsteps - nInterSteps) x intraLat + nInterSteps x interLat``
  with ``nInterSteps`` ``2(nNodes - 1)`` for an all-reduce, ``nNodes - 1`` else; ``intraLat`` the NVLink hop (ring
  LL128 1.9, Simple 3.4) but no less than the network's post overhead (x86 Intel 1.0, AMD 2.0, three times that for
  Simple; tuning.cc:228-233, 404-410); ``interLat`` the network hop (ring LL128 4.0, Simple 14.0; with one GPU per
  node the tree's: LL128 8.5, Simple 14.0) plus the net device's own latency, 0 for InfiniBand (search.cc:1087, the
  plugin reports none). A tree all-reduce: ``2((ppn - 1) x intraLat + log2(nNodes) x interLat)`` (tree NVLink LL128
  1.25, Simple 4.0; network LL128 8.5, Simple 14.0). PAT: ``log2(nNodes) x interLat / 3.5 + nRanks x 2.8``.
  A multi-node ring all-reduce under Simple counts its latency 1.4 times once each rank's share per channel is 64
  bytes or more (the "plateau effect", compute capability 8.0 and up; tuning.cc:647-650; two channels per NIC,
  ``ncclTopoDupChannels``, search.cc:1036); a tree all-reduce's bandwidth is corrected by size (``treeCorrectionFactor``,
  64 B to 256 MB, tuning.cc:623-627).

Across nodes the LL protocol (tree LL 6.8 us base, NVLink 0.6, network 5.0; ring LL 6.6, 0.6, 2.7) only for a call
of a few bytes (``latency_s``: Transformer Engine's amax all-reduces, ``te_amax``), a group in one node too: the
buffers timed by bandwidth across nodes are megabytes, where LL's bandwidth (a quarter of the bus's or less) never
wins; a ring in one node (``node_ring_s``) takes LL among its protocols, a tensor-parallel message being kilobytes
at decode. Left out: NVLink
SHARP and CollNet (SHARP switches: off unless the cluster has them; the runs here name none).

>>> from memderive.derivations.hardware import gpu
>>> # 1 GB all-reduce over 16 nodes of 8 H100s: busBw = min(8 x 48, 18 x 20.6) = 370.8 GB/s. Ring Simple: algBw
>>> # 370.8 x 128/254 = 186.86 GB/s, 5,351.6 us, latency 1.4 x (8.4 + 224 x 3.4 + 30 x 14.0) = 1,666.2 us: 7,017.8;
>>> # ring LL128: 0.92 x 370.8 x 128/254 = 171.91 GB/s, 5,817.0 us + 14.0 + 224 x 1.9 + 30 x 4.0 = 559.6: 6,376.6;
>>> # tree Simple: 0.92 x 370.8 / 2 = 170.57 GB/s, 5,862.8 us + 8.4 + 2 (7 x 4.0 + 4 x 14.0) = 176.4: 6,039.2;
>>> # tree LL128 (16 channels x 29.0 = 464 above 120/128 x 370.8 = 347.625): 173.81 GB/s, 5,753.3 us
>>> # + 14.0 + 2 (7 x 1.25 + 4 x 8.5) = 99.5: 5,852.8, the fastest
>>> round(collective_s(gpu("h100-sxm"), "all_reduce", 10**9, 128, 8, 50 * 10**9) * 1e6, 1)
5852.8
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memderive.derivations.columns import column_class, is_column
from memderive.derivations.columns import maximum as _maximum, minimum as _minimum, where as _where
from memderive.derivations.hardware import GPU, GPUS, kernels_of
from memderive.symbolic.formula import Citation
from memderive.symbolic.lazy import lazy

np = lazy("numpy")

__all__ = ["NCCL_COST", "NCCL_ROWS", "NVLINK_FABRICS", "NCCL_ARCH", "NCCL_SMS", "nccl_arch", "net_channel_bw", "bus_bandwidth",
           "collective_s", "collective_sms", "net_channels", "latency_s", "latency_us", "algorithm_bandwidth",
           "node_ring_s", "nvlink_bus"]

NCCL_COST = Citation("nccl-tuning", "ncclTopoTuneModel, ncclTopoGetAlgoTime (tuning.cc:149-212, 228-233, 289-435, 623-655)",
                     also=(Citation("nccl-search", "speedArrayInter, sm90/sm100SpeedArrayInter; ncclTopoCompute "
                                    "search.cc:1051-1067, 1170-1174"),
                           Citation("nccl-topo", "SM80/SM90/SM100_NVLINK_BW, topo.h:19-24"),
                           Citation("nccl-tests-290", "NDR 400 Gb/s: 46-48 GB/s per NIC"),
                           Citation("nccl-tests-212", "H100: effective NVLink bandwidth 370 GB/s"),
                           Citation("nccl-tests-252", "ring all-reduce, 2 nodes of 4 H100s: bus bandwidth 93-97 GB/s, "
                                    "'~24GB/s per NIC'")))

#: Per compute capability (``GPU.arch``): (NCCL's row: 0 Volta, 1 Ampere, 2 Hopper, 3 Blackwell; NCCL's speed of one
#: NVLink link in GB/s, topo.h:19-24; the link's rated GB/s each way). NVLink 3/4 links are 25 GB/s each way (A100:
#: 12 x 2 x 25 = 600 GB/s; H100: 18 x 2 x 25 = 900), NVLink 5 links 50 (B200: 18 x 2 x 50 = 1,800; hardware.py).
#: Blackwell Ultra (compute capability 10.3): NCCL's Blackwell row and speeds for every cc >= 100 (tuning.cc:263
#: compCapIndex, search.cc:1156-1160, topo.h:274-275 ncclTopoNVLinkBw).
NCCL_ROWS: dict[str, tuple[int, float, float]] = {
    "sm_70": (0, 20.0, 25.0), "sm_80": (1, 20.0, 25.0), "sm_90": (2, 20.6, 25.0),
    "sm_100": (3, 40.1, 50.0), "sm_103": (3, 40.1, 50.0),
}
#: Per GPU kind whose GPUs NVLink joins through switches or in a hybrid cube (``GPU.fabric``; not a two-card bridge,
#: not PCIe): its architecture's row (``NCCL_ROWS``). The host CPU, for the network post overhead, is the GPU's own
#: (``GPU.host``).
NVLINK_FABRICS = ("nvswitch", "hybrid-cube")
NCCL_ARCH: dict[str, tuple[int, float, float]] = {
    name: NCCL_ROWS[hw.arch] for name, hw in GPUS.items() if hw.arch in NCCL_ROWS and hw.fabric in NVLINK_FABRICS}

#: search.cc:1052-1053, 1058-1059, 1064-1065: the per-channel speeds (GB/s) the topology search tries across nodes.
SPEEDS_INTER = {
    0: (48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    2: (48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12),
    3: (96.0, 86.0, 80.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24,
        0.12),
}
SPEEDS_INTER[1] = SPEEDS_INTER[0]  # Volta and Ampere search with the generic array

#: tuning.cc:149-176 (microseconds), (algorithm, protocol) -> value; LL's only for the latency of a call of a few
#: bytes (``latency_s``), where NCCL runs it (its bandwidth, a quarter of the bus's or less, never wins on megabytes).
BASE_LATENCY = {("tree", "ll"): 6.8, ("tree", "ll128"): 14.0, ("tree", "simple"): 8.4, ("ring", "ll"): 6.6,
                ("ring", "ll128"): 14.0, ("ring", "simple"): 8.4, ("pat", "simple"): 8.0}
NVLINK_LATENCY = {("tree", "ll"): 0.6, ("tree", "ll128"): 1.25, ("tree", "simple"): 4.0, ("ring", "ll"): 0.6,
                  ("ring", "ll128"): 1.9, ("ring", "simple"): 3.4}
NET_LATENCY = {("tree", "ll"): 5.0, ("tree", "ll128"): 8.5, ("tree", "simple"): 14.0, ("ring", "ll"): 2.7,
               ("ring", "ll128"): 4.0, ("ring", "simple"): 14.0, ("pat", "simple"): 14.0}
#: tuning.cc:161, 424-426: NVLink SHARP's all-reduce in one NVLink domain, its NVLink hop alone (base 0), us.
NVLS_LATENCY = 25.0
#: tuning.cc:228-233: the network's post overhead (us) by host CPU (``GPU.host``); x86 Intel 1.0, AMD 2.0, others
#: (Grace, Arm) 1.0.
NET_OVERHEAD = {"intel": 1.0, "amd": 2.0, "grace": 1.0}
#: tuning.cc:177-182, 269-272: LL's bus bandwidth cap (GB/s) in one node, by NCCL's compute-capability row
#: (Volta-N1, Ampere-N1, Hopper-N1, Blackwell-N1 of ``llMaxBws``; across nodes the cap goes by the host CPU).
LL_MAX_ONE_NODE = {0: 39.0, 1: 87.7, 2: 141.0, 3: 2 * 141.0}
#: tuning.cc:184-204: GB/s per channel, by NCCL's compute-capability row and nodes (1, 2, more).
RING_LL128_CAP = {0: (20.0,) * 3, 1: (20.0,) * 3, 2: (36.7,) * 3, 3: (40.0,) * 3}
TREE_LL128_CAP = {0: (20.0, 20.0, 20.0), 1: (20.0, 20.0, 20.0), 2: (36.7, 36.7, 29.0), 3: (55.6, 31.67, 20.0)}
TREE_CAP = {0: (26.5, 18.5, 10.0), 1: (24.0, 23.6, 17.8), 2: (38.7, 41.4, 36.0), 3: (70.0, 42.8, 24.0)}
#: tuning.cc:623-627: the tree all-reduce's bandwidth correction by log2(bytes / 64), 64 B to 256 MB (LL128, Simple).
TREE_CORRECTION = {
    "ll128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}


def _fast(x: Any) -> bool:
    """Whether ``x`` is a float or boolean NumPy array (``collective_s`` evaluates a column of layouts in floats)."""
    return getattr(x, "dtype", None) is not None and x.dtype != object


def where(cond: Any, a: Any, b: Any) -> Any:
    return np.where(cond, a, b) if _fast(cond) else _where(cond, a, b)


def _extreme(name: str, slow: Any, a: Any, rest: tuple[Any, ...]) -> Any:
    """NumPy's ``name`` (minimum, maximum) across float arrays, else the columns' ``slow`` one (NumPy is not
    touched on numbers: the cold path imports none)."""
    if not any(_fast(x) for x in (a, *rest)):
        return slow(a, *rest)
    out = a
    for x in rest:
        out = getattr(np, name)(out, x)
    return out


def minimum(a: Any, *rest: Any) -> Any:
    return _extreme("minimum", _minimum, a, rest)


def maximum(a: Any, *rest: Any) -> Any:
    return _extreme("maximum", _maximum, a, rest)


def nccl_arch(gpu: GPU) -> tuple[int, float, float] | None:
    """``NCCL_ARCH``'s row for ``gpu``, None for a GPU NCCL's tables do not cover here (PCIe cards, MI300X)."""
    return NCCL_ARCH.get(kernels_of(gpu))


def net_channel_bw(row: int, port: float) -> float:
    """GB/s of one channel over a NIC of ``port`` bytes/s each way: the first of the search's speeds no faster
    than the port (search.cc:1170); a port slower than the slowest speed, the port itself.

    >>> net_channel_bw(2, 50e9), net_channel_bw(1, 25e9), net_channel_bw(2, 6.25e9)
    (48.0, 24.0, 6.0)
    """
    gbs = port / 1e9
    return next((s for s in SPEEDS_INTER[row] if s <= gbs), gbs)


def net_channels(ppn: Any) -> Any:
    """NCCL's channels of a collective whose group spans nodes: two per NIC (the search's one, doubled by
    ``ncclTopoDupChannels``, search.cc:1036), one NIC per GPU of the group in a node (``bus_bandwidth``)."""
    return 2 * ppn


def collective_sms(ppn: Any) -> Any:
    """SMs a GPU's NCCL kernel holds while a collective whose group spans nodes runs: one CUDA block per channel
    (``net_channels``), each on an SM of its own that no compute kernel shares (``NCCL_SMS``).

    >>> collective_sms(8)  # a DGX's 8 GPUs, 8 NICs: the maintainer's "16 SMs"
    16
    """
    return net_channels(ppn)


#: NCCL's kernel and the compute beside it: one block per channel, on an SM no compute kernel shares.
NCCL_SMS = Citation("nccl-sms-689", "one CUDA block per channel, each limited by one SM; NCCL CTAs won't share an SM "
                    "with compute kernels; 16 SMs on a DGX with 8 NICs", also=(Citation("nccl-search",
                    "ncclTopoDupChannels: two channels per NIC"),))


def nvlink_bus(gpu: GPU, intra: float) -> float:
    """GB/s each way the GPU's NVLink carries at NCCL's per-link speed (topo.h:19-24) where it is rated ``intra``
    bytes/s each way: 12 x 20.0 = 240 of an A100's 300, 18 x 20.6 = 370.8 of an H100's 450."""
    _, link_bw, rated_link = NCCL_ARCH[kernels_of(gpu)]
    return intra / 1e9 * link_bw / rated_link


def bus_bandwidth(gpu: GPU, ppn: Any, port: float, intra: float) -> Any:
    """NCCL's bus bandwidth (GB/s) of a group with ``ppn`` GPUs in each node: one channel at ``net_channel_bw`` per
    GPU's NIC, no more than the GPU's NVLink at NCCL's per-link speed (``nvlink_bus``; ``intra``: the link's rated
    bytes/s each way)."""
    row = NCCL_ARCH[kernels_of(gpu)][0]
    return where(ppn > 1, minimum(ppn * net_channel_bw(row, port), nvlink_bus(gpu, intra)), net_channel_bw(row, port))


def _log2i(x: Any) -> Any:
    """floor(log2 x) for x >= 1 (NCCL's ``log2i``), cell by cell on a column."""
    if _fast(x):
        return np.floor(np.log2(np.maximum(x, 1.0)))
    if not is_column(x):
        return max(int(x), 1).bit_length() - 1
    out: Any = 0
    for k in range(1, 48):
        out = out + where(x >= 2**k, 1, 0)
    return out


def latency_us(gpu: GPU, coll: str, algorithm: str, protocol: str, n: Any, ppn: Any, nodes: Any) -> Any:
    """NCCL's latency (us) of one call (tuning.cc:384-435), before the ring's plateau factor; a ring's NVLink hop no
    less than the network's post overhead where the group spans nodes (tuning.cc:404-410: none in one node)."""
    cpu = gpu.host
    if cpu is None:
        raise ValueError(f"{gpu.name} has no host CPU in the hardware table; NCCL's latency needs one")
    key = (algorithm, protocol)
    base = BASE_LATENCY[key]
    if algorithm == "ring":
        nsteps = 2 * (n - 1) if coll == "all_reduce" else n - 1
        inter_steps = 2 * (nodes - 1) if coll == "all_reduce" else nodes - 1
        overhead = where(nodes > 1, NET_OVERHEAD[cpu] * (3 if protocol == "simple" else 1), 0.0)
        intra = maximum(NVLINK_LATENCY[key], overhead)
        inter = where(ppn == 1, NET_LATENCY[("tree", protocol)], NET_LATENCY[key])
        return base + (nsteps - inter_steps) * intra + inter_steps * inter
    if algorithm == "tree":
        return base + 2 * ((ppn - 1) * NVLINK_LATENCY[key] + _log2i(nodes) * NET_LATENCY[key])
    return base + _log2i(nodes) * NET_LATENCY[("tree", protocol)] / 3.5 + n * 2.8  # PAT


def latency_s(gpu: GPU, n: Any, ppn: Any) -> Any:
    """Seconds of an all-reduce of a few bytes over ``n`` ranks, ``ppn`` in each node (one node where ``ppn`` is
    ``n``): the least of NCCL's latencies over its tree and ring and its LL, LL128 and Simple protocols, the pick
    ``ncclTopoGetAlgoTime`` makes where the bytes over the bandwidth are nothing beside them (4 KB at the LL
    protocol's 10 GB/s or more: under half a microsecond). In one NVLink domain of Hopper or Blackwell GPUs NVLink
    SHARP too (NVLS: ``NVLS_LATENCY``, its NVLink hop alone, tuning.cc:424-426), the least from 17 ranks (a GB200
    NVL72's); across nodes its tree (25 us and 20.9 per level, twice) never is.

    >>> from memderive.derivations.hardware import gpu
    >>> # 8 H100s in one node: ring LL 6.6 + 2 x 7 x 0.6 = 15.0 us (tree LL 6.8 + 2 x 7 x 0.6 = 15.2; NVLS 25)
    >>> round(latency_s(gpu("h100-sxm"), 8, 8) * 1e6, 2)
    15.0
    >>> # 256 over 32 nodes: tree LL 6.8 + 2 (7 x 0.6 + 5 x 5.0) = 65.2 us, a ring's 510 steps far more
    >>> round(latency_s(gpu("h100-sxm"), 256, 8) * 1e6, 2)
    65.2
    >>> # 64 GB200s in one NVL72 domain: NVLS's 25 us (ring LL 6.6 + 126 x 0.6 = 82.2)
    >>> round(latency_s(gpu("gb200"), 64, 64) * 1e6, 2)
    25.0
    """
    nodes = -(-n // ppn)
    lat = minimum(*(latency_us(gpu, "all_reduce", algorithm, protocol, n, ppn, nodes)
                    for algorithm in ("tree", "ring") for protocol in ("ll", "ll128", "simple")))
    if NCCL_ARCH[kernels_of(gpu)][0] >= 2:  # NVLS: Hopper and later (NVSwitch multicast)
        lat = where(nodes == 1, minimum(lat, NVLS_LATENCY), lat)
    return lat * 1e-6


def _cap(table: Mapping[int, tuple[float, ...]], row: int, channels: Any, nodes: Any) -> Any:
    """``channels`` times the per-channel cap for ``nodes`` (tuning.cc:267: index 0, 1 or 2 for 1, 2, more)."""
    return channels * where(nodes > 2, table[row][2], table[row][1])


def algorithm_bandwidth(bus: Any, coll: str, algorithm: str, protocol: str, n: Any, row: int = 2, ppn: Any = 1,
                        nodes: Any = 3) -> Any:
    """GB/s of data through the call (tuning.cc:326-382) from the bus bandwidth ``bus``, ``2 ppn`` channels
    capped per channel as NCCL's generation ``row`` does."""
    channels = net_channels(ppn)
    if algorithm == "ring":
        if protocol == "ll128":
            bus = minimum(bus * 0.92, _cap(RING_LL128_CAP, row, channels, nodes))
        return bus * n / (2 * (n - 1) if coll == "all_reduce" else n - 1)
    if algorithm == "tree":
        if protocol == "simple":
            return minimum(bus * 0.92, _cap(TREE_CAP, row, channels, nodes)) / 2
        return minimum(bus * 120 / 128, _cap(TREE_LL128_CAP, row, channels, nodes)) / 2
    return bus * 0.75  # PAT: its all-gather and reduce-scatter keep the bus bandwidth


def _tree_correction(protocol: str, nbytes: Any) -> Any:
    """tuning.cc:639-642: the factor for ``log2(nbytes >> 6)`` in 0..22, else 1."""
    table = TREE_CORRECTION[protocol]
    if _fast(nbytes):
        k = np.floor(np.log2(np.maximum(nbytes, 1.0) / 64))
        inside = (k >= 0) & (k <= 22)
        return np.where(inside, np.asarray(table)[np.clip(k, 0, 22).astype(int)], 1.0)
    out: Any = 1.0
    for k in range(23):
        out = where(nbytes >= 64 * 2**k, table[k], out)
    return where(nbytes >= 64 * 2**23, 1.0, out)


def collective_s(gpu: GPU, coll: str, nbytes: Any, n: Any, ppn: Any, port: float, intra: float | None = None) -> Any:
    """Seconds NCCL's model gives a ``coll`` (all_reduce, reduce_scatter, all_gather) of an ``nbytes`` buffer over
    ``n`` ranks, ``ppn`` in each node (``n / ppn`` nodes, more than one), each GPU with a NIC of ``port`` bytes/s
    each way and ``intra`` bytes/s each way of NVLink (the GPU's own when not given): the fastest algorithm and
    protocol, as NCCL picks."""
    intra = gpu.link_bandwidth / 2 if intra is None else intra
    if any(is_column(x) and not _fast(x) for x in (nbytes, n, ppn)):  # a column of layouts: in floats, back to a column at the end
        floats = [np.asarray(x, dtype=float) for x in (nbytes, n, ppn)]
        sizes, ranks, per_node = np.broadcast_arrays(*floats)
        out = collective_s(gpu, coll, sizes, ranks, per_node, port, intra)
        return np.asarray(out, dtype=float).astype(object).view(column_class())
    nodes = -(-n // ppn)
    bus = bus_bandwidth(gpu, ppn, port, intra)
    row = NCCL_ARCH[kernels_of(gpu)][0]
    candidates = []
    algorithms = ("ring", "tree") if coll == "all_reduce" else ("ring", "pat")
    for algorithm in algorithms:
        for protocol in (("ll128", "simple") if algorithm != "pat" else ("simple",)):
            lat = latency_us(gpu, coll, algorithm, protocol, n, ppn, nodes)
            if algorithm == "ring" and protocol == "simple" and coll == "all_reduce":
                # the ring's plateau (tuning.cc:647-650: 1.4 from compute capability 8.0, 1.9 below), two channels
                # per NIC
                lat = where(nbytes / (net_channels(ppn) * n) >= 64, lat * (1.4 if row else 1.9), lat)
            bw = algorithm_bandwidth(bus, coll, algorithm, protocol, n, row, ppn, nodes)
            if algorithm == "tree":
                bw = bw * _tree_correction(protocol, nbytes)
            t = lat * 1e-6 + nbytes / (bw * 1e9)
            # PAT runs with one GPU per node only (ncclPatEnable, tuning.cc:216-222)
            candidates.append(where(ppn == 1, t, float("inf")) if algorithm == "pat" else t)
    return minimum(*candidates)


def node_ring_s(gpu: GPU, coll: str, nbytes: Any, n: Any, intra: float | None = None) -> Any:
    """Seconds NCCL's model gives a ``coll`` (all_reduce, reduce_scatter, all_gather) of an ``nbytes`` buffer over
    ``n`` GPUs of one node on NVLink, as a ring (tuning.cc:306-382 with ``nNodes`` 1): the bus bandwidth the
    node's NVLink carries at NCCL's per-link speed (``nvlink_bus``: 12 x 20.0 = 240 GB/s on an A100's NVLink 3,
    18 x 20.6 = 370.8 on an H100's NVLink 4), LL at half of it up to its one-node cap (``LL_MAX_ONE_NODE``: the
    fastest below about 2 MiB over 8 A100s, 3.5 MiB over 8 H100s), LL128 at 0.92 of it or Simple whole, times ``n / nsteps``; the base latency plus
    ``nsteps`` NVLink hops (no network overhead, no plateau factor in one node: tuning.cc:404-411, 647-650); the
    fastest protocol. Left out: the tree (with its one-node factors and size correction, tuning.cc:330-337 and
    623-642, slower than this ring at every size from 1 KiB to 2 GiB over 8 A100s), NVLink SHARP (Hopper and later,
    where a measured curve stands for the all-reduce: ``cluster.all_reduce_fraction``) and LL128's per-channel cap
    (``RING_LL128_CAP``: 20 GB/s a channel on Ampere, where the search's channels at 20 GB/s each carry the bus: it
    does not bind; on Blackwell it may, by a few percent, with channels the search settles on). Cell by cell on
    columns of layouts.

    >>> from memderive.derivations.hardware import gpu
    >>> # 2^25 B over 8 A100s: Simple 8.4 + 14 x 3.4 = 56.0 us + 2^25 / (240 x 8/14 GB/s) = 244.67 us: 300.67 us;
    >>> # LL128: 14.0 + 14 x 1.9 = 40.6 us + 2^25 / (220.8 x 8/14 GB/s) = 265.94 us: 306.54 us
    >>> round(node_ring_s(gpu("a100-80gb"), "all_reduce", 2**25, 8) * 1e6, 2)
    300.67
    >>> # 2^14 B: LL, 6.6 + 14 x 0.6 = 15.0 us + 2^14 x 14 / (87.7e9 x 8) = 0.33 us (LL128 40.6 us, Simple 56.0)
    >>> round(node_ring_s(gpu("a100-80gb"), "all_reduce", 2**14, 8) * 1e6, 2)
    15.33
    """
    row = NCCL_ARCH[kernels_of(gpu)][0]
    bus = nvlink_bus(gpu, gpu.link_bandwidth / 2 if intra is None else intra)
    nsteps = 2 * (n - 1) if coll == "all_reduce" else n - 1
    times = []
    for protocol, speed in (("ll", min(LL_MAX_ONE_NODE[row], bus * 0.5)), ("ll128", bus * 0.92), ("simple", bus)):
        latency = BASE_LATENCY[("ring", protocol)] + nsteps * NVLINK_LATENCY[("ring", protocol)]
        times.append(latency * 1e-6 + nbytes * nsteps / (speed * n * 1e9))
    return minimum(*times)
