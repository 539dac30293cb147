"""Accelerators: peak dense FLOP/s, memory, memory bandwidth and intra-node link, each from its datasheet.

Conventions (NOTE(memderive)):

* Peak FLOP/s are **dense** tensor-core figures; datasheets that lead with the 2:4-sparsity figure
  are halved ("with sparsity" footnotes). ``bf16`` is the 16-bit (BF16/FP16, FP32 accumulate) rate.
* Memory capacities are the datasheet's "GB" of HBM/GDDR, which are binary gigabytes (an A100 80GB
  reports 81,920 MiB): ``80 * 2**30`` bytes. What a program can allocate is slightly less.
* GB200 NVL72: the datasheet's rack figures over its 72 GPUs (13.4 TB / 72 = 186 GB, 576 TB/s / 72 = 8 TB/s, 130
  TB/s / 72 = 1.8 TB/s of NVLink), its 72 GPUs one NVLink domain (``nvlink_domain``: the node of the time model).
* Blackwell Ultra: B300 (DGX/HGX B300, 8 GPUs a node) from the DGX and HGX B300 figures over 8 GPUs (FP8 72 and
  FP16/BF16 36 PFLOPS with sparsity, 2.3 TB, NVLink 14.4 TB/s); GB300 NVL72 from its datasheet over 72 GPUs as the
  GB200 (FP8 720, BF16 360 PFLOPS with sparsity, 576 TB/s, NVLink 130 TB/s). Both GPUs' HBM3e is NVIDIA's
  Blackwell Ultra figure, 288 GB at 8 TB/s (the rack's "up to 21 TB" is not a whole number of GB over 72).
* ``fp4``: the dense NVFP4 tensor rate of Blackwell (``--fp8 te-nvfp4``), the datasheets' FP4 figures halved where
  given with sparsity only: B200 144 / 8 / 2 = 9, GB200 1,440 / 72 / 2 = 10, B300 108 / 8 = 13.5 and GB300 1,080 /
  72 = 15 PFLOPS dense (Blackwell Ultra's FP4 is three times its FP8, Blackwell's twice).
* Link bandwidth is the datasheet's intra-node figure (NVLink, Infinity Fabric, or PCIe where a card
  has no such link), the total of both directions; a collective moves data at half of it each way.
* ``host``: the CPU of the NVIDIA system the GPU ships in, for what depends on the host (NCCL's network post
  overhead, ``nccl_cost``; the time an eager step takes to issue, ``host_timeline``): DGX-1 and DGX-2 (V100): Intel
  Xeon (E5-2698 v4, Platinum 8168; the DGX-1 and DGX-2 user guides); DGX A100: two AMD EPYC 7742 (the DGX A100 user
  guide); DGX H100 and H200: two Intel Xeon Platinum 8480C (``nvidia-dgx-h100-guide``); DGX B200: two Intel Xeon
  8570 (the DGX B200 user guide); DGX B300: two Intel Xeon 6776P (``nvidia-dgx-b300-datasheet``); GB200 and GB300
  NVL72: Grace, 36 per rack (``nvidia-gb200-nvl72-datasheet``, ``nvidia-gb300-nvl72-datasheet``); H800 and A800: their
  full GPU's DGX host standing in (no DGX H800 or DGX A800 guide is read here); GH200: its superchip's Grace. ``None``
  for a card no such system fixes the host of (PCIe cards, MI300X, MI325X).
* ``sms``: the streaming multiprocessors a GPU runs kernels on, from NVIDIA's architecture whitepapers (``SM_COUNTS``):
  A100 108, H100 SXM5 132, H100 PCIe 114 (the H100 whitepaper's Table 3), V100 80, RTX 4090 128, RTX 3090 82, RTX
  A6000 84; H200 132 (the H100 SXM's GH100 with HBM3e: its datasheet's tensor peaks are the H100 SXM's, the same SMs at
  the same clocks; inferred, not said in words); GH200 132, H800 132 and A800 108 inferred likewise (their peaks their
  full GPU's). ``None`` where no NVIDIA datasheet or whitepaper read here gives the shipping part's count: B200,
  GB200, B300, GB300 (the Blackwell Ultra blog gives the full die's 160 SMs only), L40S, A10, L4, T4; MI300X and
  MI325X (compute units, not SMs). What depends on it (Transformer Engine's userbuffers' SM margin,
  ``quantities.tp_overlap.overlap_time``) is not timed where it is ``None``. NVIDIA's code does not name them either:
  CUTLASS (v4.7.0-6, 7107b0553) uses 148 as an sm_100 device's SMs without naming the part (the CuTe DSL
  mixed_input_fmha_decode.py example's fallback ``sm_count = 148``; tile_scheduler_params.h's worked example);
  TransformerEngine, Megatron-LM, NCCL and Megatron-Bridge as mirrored here have no Blackwell SM count; 148 for
  the B200 is third-party (Chips and Cheese's B200 article; kernels' comments).
* GH200: the Hopper GPU of a Grace Hopper superchip, at the H100 SXM's dense peaks (Bekman's table: 989 and 1,979;
  NVIDIA's 989.5 kept, as the H100's), in its two memories (96 GB HBM3 at 4.00 TB/s, 141 GB HBM3e at 4.80), NVLink 4
  at 900 GB/s, Grace its host, 132 SMs (its peaks the H100 SXM's: inferred, as the H200's). How many GPUs one NVLink
  domain joins depends on the GH200 system: ``--gpus-per-node`` says it (8 where not given: a DGX's, not any GH200
  system's); its TP all-reduces in one take the H100's measured curve (``cluster.all_reduce_fraction``), the same
  NVLink 4, measured on NVSwitch nodes. MI325X: the MI300X's compute (Bekman's note 18; its datasheet's
  1,307.4 and 2,614.9 kept) with 256 GB of HBM3e at 6.00 TB/s, Infinity Fabric at the MI300X's 896 GB/s.
* ``die``: the export variants, the same GPU as one of the table's with fewer NVLink links (``kernels_of``): H800 SXM
  the H100 SXM's Hopper with NVLink cut to 400 GB/s of 900 (``deepseek-v3-isca``; the early press figure of about 300,
  a Reuters source in ``tomshardware-h800``, is not used): 8 NVLink 4 links at 50 GB/s (400 / 50, inferred: no source
  read here counts them); DeepEP measured 153-158 GB/s each way over it (``deepep-v1``). A800 80GB SXM: the A100 80GB
  with NVLink cut to 400 GB/s of 600 (``tomshardware-h800``), 8 NVLink 3 links (inferred likewise). Their tensor
  rates, HBM and SMs are taken as the full GPU's (the same die: inferred, as the H200's SMs; no H800 or A800
  datasheet is read here). What is measured on the die's kernels (matmul rates, HBM streams, NCCL's per-link speed,
  FlashAttention, the cuBLAS workspace, its PCIe slot) stands for the variant's; what is measured over the full GPU's
  link (OpenXLA's all-reduce) does not.
* ``arch``: the architecture the toolkits choose kernels and tables by (``ARCH_SOURCES``): NVIDIA's compute capability
  as ``sm_XY`` (V100 sm_70, T4 sm_75, A100 sm_80, A10, RTX A6000 and RTX 3090 sm_86, L4, L40S and RTX 4090 sm_89,
  H100, H200 and GH200 sm_90, B200 and GB200 sm_100, B300 and GB300 sm_103; the H800 and A800, which NVIDIA's table
  does not list, their die's), AMD's LLVM target for the MI300X and MI325X (gfx942). The tables chosen by
  architecture are built from it, not from lists of names: OpenXLA's GEMM curve (``efficiency.CURVE``), the
  FlashAttention kernel (``efficiency.flash_kernel``), NCCL's row (``nccl_cost.NCCL_ARCH``, for GPUs NVLink joins
  through switches) and the cuBLAS workspace (``runtime.SM90``).
* ``fabric``: how the link joins the GPUs of a node (``FABRICS``, ``FABRIC_SOURCES``): NVSwitch (the DGX/HGX nodes
  of A100, H100, H200, B200 and B300, the NVL72 racks; the GH200 as the H100), DGX-1's hybrid cube-mesh (V100 SXM2), a
  two-card NVLink bridge (H100 PCIe, RTX A6000), PCIe alone (the other cards), Infinity Fabric (MI300X, MI325X).
  NCCL's NVLink rows (``nccl_cost.NCCL_ARCH``: NVSwitch and hybrid cube) and the GPUs that take OpenXLA's measured
  all-reduce curves (``cluster._ARCH``: 8-GPU NVSwitch nodes of Hopper and Blackwell) are built from it and ``arch``;
  ``link`` names the link for people.
* V100 and T4 have no BF16 tensor cores: ``bf16`` holds their FP16 tensor rate (what mixed precision
  there runs); RTX 3090's is the GeForce rate with FP32 accumulate (half the FP16-accumulate one).

>>> gpu("H100-SXM").bf16_flops, gpu("a100-80gb").memory_bytes
(989500000000000, 85899345920)
>>> gpu("A100")
Traceback (most recent call last):
...
memderive.derivations.hardware.HardwareError: unknown GPU 'A100'; choose one of a100-40gb, a100-80gb, a800-80gb, h100-sxm, h100-pcie, h200, h800, b200, gb200, b300, gb300, l40s, rtx-4090, v100-16gb, v100-32gb, a10, a6000, l4, t4, rtx-3090, mi300x, mi325x, gh200-96gb, gh200-141gb
>>> kernels_of(gpu("h800")), kernels_of(gpu("h100-sxm"))
('h100-sxm', 'h100-sxm')
"""

from __future__ import annotations

from dataclasses import dataclass

from memderive.derivations.references import cite
from memderive.symbolic.errors import DerivationError
from memderive.symbolic.formula import Citation

__all__ = ["GPU", "GPUS", "gpu", "HardwareError", "PCIE", "intra_bandwidth", "HOSTS", "SM_COUNTS", "ARCH_SOURCES",
           "ARCHES", "FABRICS", "FABRIC_SOURCES", "kernels_of"]

T, G, GIB = 10**12, 10**9, 2**30

#: The host CPUs a GPU's system can have (``GPU.host``): x86 Intel Xeon, x86 AMD EPYC, NVIDIA Grace (Arm).
HOSTS = ("intel", "amd", "grace")

_A100 = Citation("nvidia-a100-datasheet",
                 "BF16 312 TFLOPS (624 with sparsity); 1,555 GB/s (40GB), 2,039 GB/s (80GB SXM); NVLink 600 GB/s")
_H100 = Citation("nvidia-h100-datasheet",
                 "SXM: BF16 1,979 / FP8 3,958 TFLOPS with sparsity, 3.35 TB/s, NVLink 900 GB/s; PCIe: BF16 1,513 / "
                 "FP8 3,026 with sparsity, 2 TB/s, NVLink bridge 600 GB/s")
_H200 = Citation("nvidia-h200-datasheet",
                 "H200 SXM: BF16 1,979 / FP8 3,958 TFLOPS with sparsity, 141 GB, 4.8 TB/s, NVLink 900 GB/s")
_B200 = Citation("nvidia-dgx-b200-datasheet",
                 "8 GPUs: FP4 144 PFLOPS, FP8 72 PFLOPS, FP16/BF16 36 PFLOPS with sparsity, 1,440 GB, 64 TB/s "
                 "HBM3e; NVLink 5 1.8 TB/s per GPU")
_GB200 = Citation("nvidia-gb200-nvl72-datasheet",
                  "72 GPUs: FP4 1,440 PFLOPS, FP8 720 PFLOPS, FP16/BF16 360 PFLOPS with sparsity, up to 13.4 TB "
                  "HBM3e, 576 TB/s; NVLink 130 TB/s, one NVLink domain of 72 GPUs",
                  also=(Citation("bekman-mamf", "GB200 SXM theory: BF16 2,500, FP8 5,000 TFLOPS"),))
_B300 = Citation("nvidia-dgx-b300-datasheet",
                 "8 GPUs: FP8 72 PFLOPS with sparsity, FP4 144 | 108 PFLOPS, 2.3 TB of GPU memory; NVLink 14.4 TB/s "
                 "(1.8 TB/s per GPU)", also=(Citation("nvidia-hgx-b300", "HGX B300, 8 GPUs: FP16/BF16 36 PFLOPS, "
                                                                     "FP8/FP6 72 PFLOPS with sparsity"),
                                             Citation("nvidia-blackwell-ultra-blog", "288 GB of HBM3e per GPU, 8 TB/s; "
                                                      "NVLink 5: 1.8 TB/s per GPU")))
_GB300 = Citation("nvidia-gb300-nvl72-datasheet",
                  "72 GPUs: FP8/FP6 720 PFLOPS, FP16/BF16 360 PFLOPS with sparsity, FP4 1,440 | 1,080 PFLOPS; up to "
                  "21 TB HBM3e, 576 TB/s; NVLink 130 TB/s, one NVLink domain of 72 GPUs",
                  also=(Citation("nvidia-blackwell-ultra-blog", "288 GB of HBM3e per GPU, 8 TB/s; 15 PFLOPS dense "
                                 "NVFP4"),))
_L40S = Citation("nvidia-l40s-datasheet",
                 "BF16 362.05 (733 with sparsity), FP8 733 (1,466) TFLOPS; 48 GB GDDR6, 864 GB/s; PCIe Gen4 x16 "
                 "64 GB/s")
_ADA = Citation("nvidia-ada-whitepaper",
                "Appendix A, Table 2 (GeForce RTX 4090): BF16 with FP32 "
                "accumulate 165.2, FP8 330.3 dense TFLOPS; 24 GB GDDR6X, 1,008 GB/s; PCIe Gen4 x16 64 GB/s")
_V100 = Citation("nvidia-v100-datasheet",
                 "V100 SXM2: Tensor Performance 125 TFLOPS (FP16, no BF16); 16 or 32 GB HBM2, 900 GB/s; NVLink 300 GB/s")
_A10 = Citation("nvidia-a10-datasheet",
                "BF16/FP16 Tensor Core 125 TFLOPS (250 with sparsity); 24 GB GDDR6, 600 GB/s; PCIe Gen4 64 GB/s")
_A6000 = Citation("nvidia-rtx-a6000-datasheet",
                  "Tensor Performance 309.7 TFLOPS with sparsity (FP16/BF16, FP32 accumulate: 154.8 dense); 48 GB "
                  "GDDR6, 768 GB/s; NVLink bridge 112.5 GB/s", also=(Citation("nvidia-ga102-whitepaper", "Table 9"),))
_L4 = Citation("nvidia-l4-datasheet",
               "FP16/BF16 Tensor Core 242 TFLOPS, FP8 485 TFLOPS, both with sparsity; 24 GB GDDR6, 300 GB/s; "
               "PCIe Gen4 x16 64 GB/s")
_T4 = Citation("nvidia-t4-datasheet",
               "Mixed precision (FP16/FP32) 65 TFLOPS (no BF16); 16 GB GDDR6, 320+ GB/s; PCIe Gen3 x16 32 GB/s")
_RTX3090 = Citation("nvidia-ga102-whitepaper",
                    "Table 9 (GeForce RTX 3090): peak FP16/BF16 Tensor TFLOPS with FP32 accumulate 71 (142 with "
                    "sparsity); 24 GB GDDR6X, 936 GB/s; PCIe Gen4 x16 64 GB/s")
_H800 = Citation("deepseek-v3-isca", "the H800 SXM is Hopper like the H100, its FP64 and NVLink cut for "
                 "export (NVLink 400 GB/s of the H100's 900); eight 400 Gb/s CX7 InfiniBand NICs a node",
                 also=(Citation("deepep-v1", "H800, ~160 GB/s NVLink maximum bandwidth; intranode EP 8 dispatch "
                                "153 GB/s, combine 158 GB/s (NVLink)"),
                       Citation("philisun-h800", "H100: 900 GB/s of NVLink bidirectional; H800: 400 GB/s; the same "
                                "die, 80 GB, 3.35 TB/s")))
_A800 = Citation("tomshardware-h800", "A800: the A100's 600 GB/s chip-to-chip interconnect trimmed to 400 GB/s",
                 also=(_A100,))
_GH200 = Citation("bekman-mamf", "TFLOPS comparison table: NVIDIA GH200 SXM bf16 989, fp8 1979 dense; accelerator "
                  "memory table: GH200 (1) 96 GB HBM3 4.00 TB/s, (2) 141 GB HBM3e 4.80 TB/s",
                  also=(Citation("bekman-network", "NVLink 4: 18 links, 450 GB/s unidirectional, 900 duplex: H100, "
                                 "H200, GH200"),))
_MI325X = Citation("bekman-mamf", "TFLOPS comparison table: AMD MI325X bf16 1300, fp8 2610 dense, note 18 'the same "
                   "compute as MI300X, but has more memory and more power'; accelerator memory table: MI325X 256 GB "
                   "HBM3e 6.00 TB/s",
                   also=(Citation("bekman-network", "AMD XGMI MI325X: 64 GB/s peer-to-peer, 7 links, 448 GB/s "
                                  "unidirectional, 896 duplex"),
                         Citation("amd-mi300x-datasheet", "BF16 1,307.4, FP8 2,614.9 dense TFLOPS")))
_MI300X = Citation("amd-mi300x-datasheet",
                   "BF16 1,307.4, FP8 2,614.9 dense TFLOPS; 192 GB HBM3, 5.3 TB/s; Infinity Fabric 896 GB/s")


#: ``GPU.arch``: NVIDIA's compute capabilities (its CUDA GPUs table: V100 7.0, T4 7.5, A100 8.0, A10, RTX A6000 and
#: RTX 3090 8.6, L4, L40S and RTX 4090 8.9, H100, H200 and GH200 9.0, B200 and GB200 10.0, B300 and GB300 10.3; the
#: export variants H800 and A800, which the table does not list, their die's) and AMD's LLVM target for CDNA 3 (the
#: ROCm GPU specifications: MI300X and MI325X gfx942).
ARCH_SOURCES = (Citation("nvidia-cuda-gpus", "compute capability: V100 7.0, T4 7.5, A100 8.0, A10 / RTX A6000 / RTX "
                         "3090 8.6, L4 / L40S / RTX 4090 8.9, H100 / H200 / GH200 9.0, B200 / GB200 10.0, B300 / "
                         "GB300 10.3"),
                Citation("amd-rocm-gpu-specs", "MI300X, MI325X: LLVM target gfx942"))
#: Every ``GPU.arch`` the table holds (``ARCH_SOURCES``).
ARCHES = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_103", "gfx942")

#: How the link joins the GPUs of a node (``GPU.fabric``): NVLink through NVSwitch chips (DGX/HGX A100, H100, H200,
#: B200, B300 nodes; the GB200 and GB300 NVL72 racks' NVLink switch trays; the GH200's NVLink 4 taken as the H100's),
#: DGX-1's NVLink hybrid cube-mesh (V100 SXM2), a two-card NVLink bridge (H100 PCIe, RTX A6000), none but PCIe
#: (the other cards), AMD's Infinity Fabric (each MI300X or MI325X of an 8-GPU platform linked to each other).
FABRICS = ("nvswitch", "hybrid-cube", "bridge", "pcie", "infinity-fabric")
FABRIC_SOURCES = (Citation("nvidia-dgx-h100-guide", "DGX H100/H200: 4 NVSwitch chips join the 8 GPUs"),
                  Citation("nvidia-volta-whitepaper", "DGX-1 with Tesla V100: NVLink hybrid cube-mesh"),
                  Citation("nvidia-h100-datasheet", "H100 PCIe: NVLink bridge 600 GB/s"),
                  Citation("amd-mi300x-datasheet", "Infinity Fabric: 896 GB/s peer to peer"))

#: The sources of ``GPU.sms`` (the module's docstring).
SM_COUNTS = (Citation("nvidia-a100-whitepaper", "A100: 108 SMs"),
             Citation("nvidia-h100-whitepaper", "H100 SXM5 132 SMs, H100 PCIe 114"),
             Citation("nvidia-volta-whitepaper", "Tesla V100: 80 SMs"),
             Citation("nvidia-ada-whitepaper", "Appendix A, Table 2: GeForce RTX 4090, 128 SMs"),
             Citation("nvidia-ga102-whitepaper", "GeForce RTX 3090 82 SMs, RTX A6000 84"))


class HardwareError(DerivationError):
    """An accelerator the table does not have."""


@dataclass(frozen=True, slots=True)
class GPU:
    """One accelerator: FLOP/s, bytes and bytes per second as exact integers."""

    name: str
    title: str
    bf16_flops: int  # dense 16-bit tensor FLOP/s
    fp8_flops: int | None  # dense FP8 tensor FLOP/s; None: no FP8 tensor cores
    memory_bytes: int
    memory_bandwidth: int  # bytes/s
    link_bandwidth: int  # bytes/s, intra-node, both directions together
    link: str
    source: Citation
    nvlink_domain: int = 8  # GPUs one NVLink/NVSwitch domain joins (an 8-GPU node; GB200 NVL72: 72)
    fp4_flops: int | None = None  # dense NVFP4 tensor FLOP/s (Blackwell); None: no FP4 tensor cores
    host: str | None = None  # the CPU of the system it ships in (``HOSTS``; the module's docstring); None: any server
    sms: int | None = None  # streaming multiprocessors (``SM_COUNTS``); None: no NVIDIA document read here gives it
    #: The sustained matmul FLOP/s (bf16, fp8; fp8 None: the table's fp8 over bf16) measured on this cluster's own GPUs
    #: where they run other than the table's (a lower power limit): replaces ``efficiency``'s level; None: the table's.
    matmul_rates: tuple[int, int | None] | None = None
    #: The table's GPU this one is apart from its link (an export variant: H800, A800; the module's docstring), whose
    #: kernels' measurements stand for its own (``kernels_of``); None: its own.
    die: str | None = None
    #: Its architecture as the toolkits name it (``ARCH_SOURCES``): NVIDIA's compute capability ``sm_XY`` (CUDA's
    #: 9.0 is ``sm_90``), AMD's LLVM target ``gfx942``; what a kernel, a library's table or NCCL's rows are chosen by.
    arch: str = ""  # required: ``__post_init__`` refuses one not in ``ARCHES`` (after the defaulted fields, so keyword)
    #: How its link joins the GPUs of a node (``FABRICS``): what NCCL's tables and the measured all-reduce curves
    #: are chosen by, beside ``arch``; ``link`` names the link for people.
    fabric: str = ""  # required, as ``arch``

    def __post_init__(self) -> None:
        if self.arch not in ARCHES:
            raise HardwareError(f"GPU {self.name}: arch {self.arch!r} is none of {', '.join(ARCHES)}; give its compute "
                                "capability (sm_XY) or AMD target")
        if self.fabric not in FABRICS:
            raise HardwareError(f"GPU {self.name}: fabric {self.fabric!r} is none of {', '.join(FABRICS)}; say how its "
                                "link joins the GPUs of a node")
        if self.host is not None and self.host not in HOSTS:
            raise ValueError(f"a GPU's host is one of {', '.join(HOSTS)} or None, got {self.host!r}")

    def peak_flops(self, dtype: str = "bf16") -> int:
        """Dense peak for a compute dtype: fp8 where the GPU has it, else the 16-bit rate.

        NOTE(memderive): fp32 work is timed at the 16-bit tensor rate (TF32 is slower); int8/int4
        weight-only quantization computes in 16 bits.
        """
        if dtype == "fp4" and self.fp4_flops is not None:
            return self.fp4_flops
        return self.fp8_flops if dtype in ("fp8", "fp4") and self.fp8_flops is not None else self.bf16_flops

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "title": self.title, "bf16_flops": self.bf16_flops, "fp8_flops": self.fp8_flops,
                "fp4_flops": self.fp4_flops,
                "memory_bytes": self.memory_bytes, "memory_bandwidth": self.memory_bandwidth,
                "link_bandwidth": self.link_bandwidth, "link": self.link, "nvlink_domain": self.nvlink_domain,
                "host": self.host, "arch": self.arch, "fabric": self.fabric, "source": cite(self.source)}


GPUS: dict[str, GPU] = {x.name: x for x in (
    GPU("a100-40gb", "NVIDIA A100 40GB SXM", 312 * T, None, 40 * GIB, 1555 * G, 600 * G, "NVLink 3", _A100, host="amd",
        sms=108, arch="sm_80", fabric="nvswitch"),
    GPU("a100-80gb", "NVIDIA A100 80GB SXM", 312 * T, None, 80 * GIB, 2039 * G, 600 * G, "NVLink 3", _A100, host="amd",
        sms=108, arch="sm_80", fabric="nvswitch"),
    GPU("a800-80gb", "NVIDIA A800 80GB SXM", 312 * T, None, 80 * GIB, 2039 * G, 400 * G, "NVLink 3 (8 links)", _A800,
        host="amd", sms=108, die="a100-80gb", arch="sm_80", fabric="nvswitch"),
    GPU("h100-sxm", "NVIDIA H100 SXM5 80GB", 9895 * T // 10, 1979 * T, 80 * GIB, 3350 * G, 900 * G,
        "NVLink 4", _H100, host="intel", sms=132, arch="sm_90", fabric="nvswitch"),
    GPU("h100-pcie", "NVIDIA H100 PCIe 80GB", 7565 * T // 10, 1513 * T, 80 * GIB, 2000 * G, 600 * G,
        "NVLink bridge", _H100, sms=114, arch="sm_90", fabric="bridge"),
    GPU("h200", "NVIDIA H200 SXM 141GB", 9895 * T // 10, 1979 * T, 141 * GIB, 4800 * G, 900 * G,
        "NVLink 4", _H200, host="intel", sms=132, arch="sm_90", fabric="nvswitch"),
    GPU("h800", "NVIDIA H800 SXM5 80GB", 9895 * T // 10, 1979 * T, 80 * GIB, 3350 * G, 400 * G, "NVLink 4 (8 links)",
        _H800, host="intel", sms=132, die="h100-sxm", arch="sm_90", fabric="nvswitch"),
    GPU("b200", "NVIDIA B200 (DGX/HGX) 180GB", 2250 * T, 4500 * T, 180 * GIB, 8000 * G, 1800 * G, "NVLink 5", _B200,
        fp4_flops=9000 * T, host="intel", arch="sm_100", fabric="nvswitch"),
    GPU("gb200", "NVIDIA GB200 NVL72 (per Blackwell GPU) 186GB", 2500 * T, 5000 * T, 186 * GIB, 8000 * G,
        1800 * G, "NVLink 5 (NVL72)", _GB200, nvlink_domain=72, fp4_flops=10000 * T, host="grace", arch="sm_100",
        fabric="nvswitch"),
    GPU("b300", "NVIDIA B300 Blackwell Ultra (DGX/HGX) 288GB", 2250 * T, 4500 * T, 288 * GIB, 8000 * G, 1800 * G,
        "NVLink 5", _B300, fp4_flops=13500 * T, host="intel", arch="sm_103", fabric="nvswitch"),
    GPU("gb300", "NVIDIA GB300 NVL72 (per Blackwell Ultra GPU) 288GB", 2500 * T, 5000 * T, 288 * GIB, 8000 * G,
        1800 * G, "NVLink 5 (NVL72)", _GB300, nvlink_domain=72, fp4_flops=15000 * T, host="grace", arch="sm_103",
        fabric="nvswitch"),
    GPU("l40s", "NVIDIA L40S 48GB", 36205 * T // 100, 733 * T, 48 * GIB, 864 * G, 64 * G, "PCIe 4.0 x16", _L40S,
        arch="sm_89", fabric="pcie"),
    GPU("rtx-4090", "NVIDIA GeForce RTX 4090 24GB", 1652 * T // 10, 3303 * T // 10, 24 * GIB, 1008 * G, 64 * G,
        "PCIe 4.0 x16", _ADA, sms=128, arch="sm_89", fabric="pcie"),
    GPU("v100-16gb", "NVIDIA Tesla V100 SXM2 16GB", 125 * T, None, 16 * GIB, 900 * G, 300 * G,
        "NVLink 2", _V100, host="intel", sms=80, arch="sm_70", fabric="hybrid-cube"),
    GPU("v100-32gb", "NVIDIA Tesla V100 SXM2 32GB", 125 * T, None, 32 * GIB, 900 * G, 300 * G,
        "NVLink 2", _V100, host="intel", sms=80, arch="sm_70", fabric="hybrid-cube"),
    GPU("a10", "NVIDIA A10 24GB", 125 * T, None, 24 * GIB, 600 * G, 64 * G, "PCIe 4.0 x16", _A10, arch="sm_86",
        fabric="pcie"),
    GPU("a6000", "NVIDIA RTX A6000 48GB", 1548 * T // 10, None, 48 * GIB, 768 * G, 1125 * G // 10, "NVLink bridge",
        _A6000, sms=84, arch="sm_86", fabric="bridge"),
    GPU("l4", "NVIDIA L4 24GB", 121 * T, 2425 * T // 10, 24 * GIB, 300 * G, 64 * G, "PCIe 4.0 x16", _L4, arch="sm_89",
        fabric="pcie"),
    GPU("t4", "NVIDIA T4 16GB", 65 * T, None, 16 * GIB, 320 * G, 32 * G, "PCIe 3.0 x16", _T4, arch="sm_75",
        fabric="pcie"),
    GPU("rtx-3090", "NVIDIA GeForce RTX 3090 24GB", 71 * T, None, 24 * GIB, 936 * G, 64 * G, "PCIe 4.0 x16", _RTX3090,
        sms=82, arch="sm_86", fabric="pcie"),
    GPU("mi300x", "AMD Instinct MI300X 192GB", 13074 * T // 10, 26149 * T // 10, 192 * GIB, 5300 * G, 896 * G,
        "Infinity Fabric", _MI300X, arch="gfx942", fabric="infinity-fabric"),
    GPU("mi325x", "AMD Instinct MI325X 256GB", 13074 * T // 10, 26149 * T // 10, 256 * GIB, 6000 * G, 896 * G,
        "Infinity Fabric", _MI325X, arch="gfx942", fabric="infinity-fabric"),
    GPU("gh200-96gb", "NVIDIA GH200 Grace Hopper (its GPU) 96GB HBM3", 9895 * T // 10, 1979 * T, 96 * GIB, 4000 * G,
        900 * G, "NVLink 4", _GH200, host="grace", sms=132, arch="sm_90", fabric="nvswitch"),
    GPU("gh200-141gb", "NVIDIA GH200 Grace Hopper (its GPU) 141GB HBM3e", 9895 * T // 10, 1979 * T, 141 * GIB,
        4800 * G, 900 * G, "NVLink 4", _GH200, host="grace", sms=132, arch="sm_90", fabric="nvswitch"),
)}


def gpu(name: str) -> GPU:
    """Look a GPU up by name (case-insensitive); unknown names list the choices."""
    key = name.strip().lower()
    if key not in GPUS:
        raise HardwareError(f"unknown GPU {name!r}; choose one of {', '.join(GPUS)}")
    return GPUS[key]


def kernels_of(hw: GPU) -> str:
    """The table name whose kernel measurements (matmul, HBM, NCCL's per-link speed, FlashAttention) stand for
    ``hw``'s: its ``die`` (an export variant's full GPU), else its own name."""
    return hw.die or hw.name


#: The PCIe x16 slot of GPUs whose intra-node link is NVLink (both directions, bytes/s; ``--intra-node-link pcie``:
#: a node without NVLink/NVSwitch, the GPUs reaching each other through PCIe switches), from their datasheets.
PCIE: dict[str, tuple[int, Citation]] = {
    **{name: (64 * 10**9, Citation("nvidia-a100-datasheet", "PCIe Gen4: 64 GB/s")) for name in ("a100-40gb", "a100-80gb")},
    **{name: (128 * 10**9, Citation("nvidia-h100-datasheet", "PCIe Gen5: 128 GB/s")) for name in ("h100-sxm", "h100-pcie")},
    "h200": (128 * 10**9, Citation("nvidia-h200-datasheet", "PCIe Gen5: 128 GB/s")),
    **{name: (32 * 10**9, Citation("nvidia-v100-datasheet", "V100 PCIe: interconnect 32 GB/s"))
       for name in ("v100-16gb", "v100-32gb")},
}


def intra_bandwidth(gpu: GPU, link: str | None) -> int:
    """Both directions of the link between the GPUs of a node: the GPU's own (``link`` None or ``nvlink``), or its
    PCIe slot (``pcie``; a GPU whose own link is PCIe already is that). Raises ``ValueError`` for a GPU without a
    PCIe figure."""
    if link != "pcie" or gpu.fabric == "pcie":
        return gpu.link_bandwidth
    if kernels_of(gpu) not in PCIE:
        raise ValueError(f"--intra-node-link pcie: no PCIe figure for {gpu.name} in the table (it has "
                         f"{', '.join(PCIE)}); leave the link at the GPU's own ({gpu.link})")
    return PCIE[kernels_of(gpu)][0]
