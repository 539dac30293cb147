"""How fast a GPU runs a layer's products, from published kernel benchmarks only: no constant here is fitted to any
run's step time.

* **Matmuls** (each linear, expert and unfused attention product of the layers): at the GPU's **maximum sustainable
  matmul FLOP/s** where it is measured (MSMF: the best rate a shape holds steady once the GPU runs at its power limit
  and its clock has settled, Bekman's mamf-finder; ``MSMF``: H200, and the H100 SXM, the same GH100 die at the same
  700 W, B200), else its **maximum achievable matmul FLOP/s** (MAMF: the best rate of a brute-force shape search
  with cuBLAS/hipBLASLt, Bekman's ml-engineering table, by GPU and dtype; ``MAMF``: a burst at the boost clock,
  which a training step, drawing the GPU's full power, does not hold) times the **shape fraction** of the
  product's per-GPU sides:
  OpenXLA's measured GEMM table (``gemm_table``: FLOP/s by (m, n, k) from 256 to 4,096 on H100, B200 and MI300X),
  over its rate at 4096^3. A product ``(M tokens) x (in) -> (out)`` runs three times per micro-batch, as the forward
  ``(M, out, in)``, the input gradient ``(M, in, out)`` and the weight gradient ``(out, in, M)`` (m, n, k), each
  phase's FLOPs at its own rate (inference: the forward alone). A GPU without its own curve takes the H100's (``CURVE``), without its own MAMF
  the fraction of peak its stand-in reached (``MAMF_STAND_IN``), both said in the time model's note.
* **FlashAttention's fused core** (``flash-attention`` ops): at the fraction of the 16-bit peak its paper reports,
  forward and backward (``FLASH``): FlashAttention-2 on the A100 (up to 73% forward, 63% backward: Dao 2023 §1) and
  on the H100 (35%: Shah et al. 2024, abstract); FlashAttention-3 on the H100 (75% forward, 740 TFLOP/s; backward
  1.5-1.75x FlashAttention-2's: the lower end, 52.5%) where the framework runs a Hopper kernel (Megatron-Core with
  Transformer Engine's fused attention). The fractions apply to the full ``s x s`` FLOPs the count gives, of which a
  causal kernel runs half: on its own work that is 37.5% / 26.3% of the peak (FlashAttention-2 on the H100: 17.5%),
  below the kernels' published causal speeds (FlashAttention-3's Figs. 5 and 6: cuDNN 518-539 TFLOP/s forward at
  4K-16K on the H100). Those speeds are not what a training step's attention reaches: with them, the H100 runs
  where attention weighs most (NeMo's 16K-1M rows, torchtitan's 32K-256K context-parallel ones) come out a median
  34.0% too fast, against +5.3% as it is (``python benchmarks/attention_whatif.py``), so no per-shape table from the
  microbenchmarks is taken up.
* A layer's efficiency is the FLOP-weighted one of its products (their FLOPs over their time); the elementwise
  work is timed apart, at the memory bandwidth (``timing``, ``memory_bound``).

>>> from memderive.derivations.hardware import gpu
>>> # the H200's MSMF, its die's burst "the same" as the H100's in Bekman's table: 708.5 x 794.5 / 794.5
>>> round(matmul_rate(gpu("h100-sxm"), "bf16", 4096, 4096, 4096) / 1e12, 1)
708.5
>>> # OpenXLA's H100 entry (m 4096, n 1024, k 4096) is 0.963 of its 4096^3 rate: 0.963 x 708.5 = 682.3
>>> round(matmul_rate(gpu("h100-sxm"), "bf16", 4096, 1024, 4096) / 1e12, 1)
682.3
>>> # the A100 has no curve of its own: the H100's fraction at the shape times the A100's MAMF, 271.2 x 0.963
>>> round(matmul_rate(gpu("a100-80gb"), "bf16", 4096, 1024, 4096) / 1e12, 1)
261.2
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from memderive.derivations.columns import is_column
from memderive.derivations.hardware import GPU, GPUS, gpu as lookup, kernels_of
from memderive.derivations.memo import per_graph
from memderive.derivations.options import TE_FP8
from memderive.derivations.quantities.compute import HARDWARE
from memderive.derivations.quantities.gemm_table import SHAPE_CURVES, XLA_GEMM_TABLE, shape_fraction
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.derivations.references import cite
from memderive.symbolic.dims import sym
from memderive.symbolic.float8 import is_float8, weight_grad_in_float8
from memderive.symbolic.formula import Citation
from memderive.symbolic.lazy import lazy
from memderive.symbolic.mcore_recompute import CHECKPOINTED

np = lazy("numpy")

__all__ = ["MAMF", "MAMF_SOURCE", "MSMF", "MSMF_SOURCE", "CURVE", "FLASH", "FLASH_SOURCES", "matmul_rate", "gemm_efficiency",
           "gemm_products", "float8_phases", "weighted_rate", "flash_kernel", "fp8_rate_ratio", "rate_note", "XLA_GEMM_TABLE",
           "FP4_STAND_IN", "FP4_MAMF", "FP4_SOURCE", "fp4_burst", "low_precision"]

MAMF_SOURCE = Citation("bekman-mamf", "Maximum Achievable Matmul FLOPS comparison table, BF16 and FP8 "
                       "(float8_e4m3fn) rows")

#: Maximum achievable matmul TFLOP/s (bf16, fp8; None: not measured), Bekman's table (``MAMF_SOURCE``: one method,
#: the best shape's mean over 100 iterations): A100 SXM 271.2; H100 SXM 794.5 and fp8 1,402.6; H200 SXM fp8 1,453.4
#: (bf16: "H200 is the same" as the H100's); B200 SXM 1,745.0 and 3,432.5; B300 SXM 1,769.0 and 3,353.3 (torch
#: 2.9.1+cu130: "same as B200, newer torch/cuda"); GB200 SXM 1,822.0 and 3,615.6; MI300X 668.4 (PyTorch 2.5.1, ROCm
#: 6.3, TunableOp); GH200 SXM 828.6 and 1,535.0 ("900W 141GiB HBM3e version"); MI325X 784.9 (TunableOp, 1000 W).
#: These compare GPUs with each other (``_level``); the MSMF runs' own bursts (H200 841.9 and
#: 1,491.9, B200 1,770.9 and 3,435.2: the peak of short bursts held to the boost clock, a newer method and torch) are
#: not mixed with them.
MAMF: dict[str, tuple[float, float | None]] = {
    "a100-80gb": (271.2, None),
    "a100-40gb": (271.2, None),
    "h100-sxm": (794.5, 1402.6),
    "h200": (794.5, 1453.4),
    "b200": (1745.0, 3432.5),
    "b300": (1769.0, 3353.3),
    "gb200": (1822.0, 3615.6),
    "mi300x": (668.4, None),
    "gh200-141gb": (828.6, 1535.0),
    "mi325x": (784.9, None),
}
#: GPUs without a measured MAMF: the GPU whose fraction of its own dense peak stands in (same architecture where
#: the table has one, else the A100's 86.9%).
MAMF_STAND_IN = {"h100-pcie": "h100-sxm", "gb300": "gb200", "gh200-96gb": "gh200-141gb"}

MSMF_SOURCE = Citation("bekman-msmf", "compute/accelerator/README.md at 082816f (branch fast-mamf, 2026-08-10), "
                       "Maximum Achievable Matmul FLOPS comparison table, MSMF column: H200 SXM 708.5 bf16 (@ "
                       "8192x8448x20480, ~693 W, 1,465 MHz), 1,288.7 fp8; B200 SXM 1,456.3 bf16, 2,795.7 fp8; MAMF "
                       "and MSMF 'freshly measured on the same node/software (torch 2.13.0+cu130)'; "
                       "compute/accelerator/benchmarks/README.md at 082816f, What we measured: alone vs all-8 "
                       "concurrent")

#: Maximum sustainable matmul TFLOP/s (bf16, fp8; None: not measured): the best rate a shape holds once the GPU is
#: saturated at its power limit and its clock has settled (mamf-finder.py --search auto after a thermal soak, a
#: trimmed median of repeated confirms, Bekman), where its MAMF is a short burst at the boost clock drawing a fraction
#: of the power. H200 SXM: 708.5 bf16, 1,288.7 fp8; B200 SXM: 1,456.3 bf16, 2,795.7 fp8. A training step keeps the GPU
#: at its power limit, so its matmuls run at the sustained rate, where one is measured. Not modelled: with all eight
#: GPUs of a node busy, as in training, the source measured the bf16 MSMF 0.6% lower on the H200 (698.6 against 702.9
#: alone, means of its runs) and 2.0% lower on the B200 (1,426.4 against 1,455.7): the node's shared power and cooling.
MSMF: dict[str, tuple[float, float | None]] = {
    "h200": (708.5, 1288.7),
    "b200": (1456.3, 2795.7),
}

#: GPUs without a measured MSMF take the sustained rate of the GPU whose is measured, scaled by their burst MAMF over
#: its, both from the one table (``MAMF``): the H100 SXM is the H200's GH100 die (132 SMs, the same dense peaks) at the
#: same 700 W power limit (nvidia-h100-datasheet), "the same" in the table: 708.5 bf16; fp8 1,288.7 x 1,402.6 /
#: 1,453.4. The GB200 is the B200's die (its burst 4.4% above the B200's: 1,822.0 against 1,745.0) at a higher power
#: limit, which may hold a little more: no GB200 MSMF is published. The GH200's GPU has the H100 SXM's dense peaks
#: (Bekman's table) and was measured at 900 W (his "900W 141GiB HBM3e version"), its burst 4.3% above the H100's
#: (828.6 against 794.5): the H200's sustained over burst ratio, measured at 700 W, stands in; at its higher limit it
#: may hold a little more: no GH200 MSMF is published. The B300 is Blackwell Ultra, its burst 1.4% above
#: the B200's (1,769.0 against 1,745.0, "same as B200"): no B300 MSMF is published.
MSMF_STAND_IN = {"h100-sxm": "h200", "gb200": "b200", "b300": "b200", "gh200-141gb": "h200"}
#: NVIDIA's architectures from Hopper on (``GPU.arch``), whose attention runs FlashAttention's Hopper kernels
#: (``flash_kernel``).
HOPPER_AND_LATER = ("sm_90", "sm_100", "sm_103")
#: OpenXLA's curve for each architecture (``GPU.arch``) it measured or that runs the same tensor cores: Blackwell
#: Ultra (sm_103) takes the B200's sm_100 curve.
ARCH_CURVE = {"sm_90": "sm_90", "sm_100": "sm_100_B200", "sm_103": "sm_100_B200", "gfx942": "gfx942"}
#: The GPU's curve in OpenXLA's table: its own architecture's, else the H100's (no Ampere, Ada or Volta table).
CURVE = {name: ARCH_CURVE[hw.arch] for name, hw in GPUS.items() if hw.arch in ARCH_CURVE}

#: The GPU each of OpenXLA's curves was measured on.
CURVE_DEVICE = {"sm_90": "h100-sxm", "sm_100_B200": "b200", "gfx942": "mi300x"}

#: FlashAttention's fraction of the dense 16-bit peak, (forward, backward), by kernel.
FLASH: dict[str, tuple[float, float]] = {
    "fa2-ampere": (0.73, 0.63),
    "fa2-hopper": (0.35, 0.35),
    "fa3-hopper": (0.75, 0.35 * 1.5),
}
FLASH_SOURCES = {
    "fa2-ampere": Citation("dao-2023", "§1: up to 73% of the theoretical max throughput forward, 63% backward (A100)"),
    "fa2-hopper": Citation("shah-2024", "Abstract: FlashAttention-2 achieves only 35% utilization on H100"),
    "fa3-hopper": Citation("shah-2024", "Abstract, §4: forward up to 740 TFLOP/s (75%); backward 1.5-1.75x "
                           "FlashAttention-2"),
}


def _measured_sustained(name: str) -> str | None:
    """The GPU whose MSMF stands for ``name``'s: its own, its MSMF stand-in's, or its MAMF stand-in's (None)."""
    if name in MSMF:
        return name
    if name in MSMF_STAND_IN:
        return MSMF_STAND_IN[name]
    return _measured_sustained(MAMF_STAND_IN[name]) if name in MAMF_STAND_IN else None


def _level(gpu: GPU, dtype: str) -> float:
    """The GPU's matmul level in FLOP/s for ``dtype`` (bf16 or fp8): the MSMF of the GPU whose MSMF is measured,
    itself or the same die standing in (the GB200's B200, the H100's H200), times this GPU's MAMF over that one's
    (``_burst``, one table), else its MAMF. fp8 without a measured fp8 MSMF: the bf16 ratio. A cluster's own measured
    rates (``GPU.matmul_rates``: its GPUs at a lower power limit) replace the table's; fp8 not measured there: its
    bf16 rate times the table's fp8 over bf16."""
    if gpu.matmul_rates is not None:
        bf16, fp8 = gpu.matmul_rates
        if dtype != "fp8" or gpu.fp8_flops is None:
            return float(bf16)
        if fp8 is not None:
            return float(fp8)
        return bf16 * fp8_rate_ratio(replace(gpu, matmul_rates=None))
    burst = _burst(gpu, dtype)
    name = _measured_sustained(kernels_of(gpu))
    if name is None:
        return burst
    ref, (bf16, fp8) = lookup(name), MSMF[name]
    if dtype == "fp8" and gpu.fp8_flops is not None and fp8 is not None:
        return burst * fp8 * 1e12 / _burst(ref, "fp8")
    return burst * bf16 * 1e12 / _burst(ref, "bf16")


def _burst(gpu: GPU, dtype: str) -> float:
    """The GPU's MAMF in FLOP/s for ``dtype`` (bf16 or fp8): measured, or its stand-in's fraction of peak."""
    own = kernels_of(gpu)
    name = own if own in MAMF else MAMF_STAND_IN.get(own, "a100-80gb")
    ref = lookup(name)
    bf16, fp8 = MAMF[name]
    if dtype == "fp8" and gpu.fp8_flops is not None:
        if fp8 is None:  # no measured fp8 MAMF: OpenXLA's own 4096^3 rate where its table has an fp8 curve
            arch = ARCH_CURVE.get(ref.arch, "sm_90")
            device = CURVE_DEVICE.get(arch)
            if (arch, "fp8") in SHAPE_CURVES and name == own and device in MAMF:
                # measured on ``device``; another GPU of that compute (the MI325X's, the MI300X's) scaled by their
                # measured bf16 MAMFs
                return SHAPE_CURVES[(arch, "fp8")][0] * 1e12 * bf16 / MAMF[device][0]
            return bf16 * 1e12 / ref.bf16_flops * gpu.fp8_flops
        return fp8 * 1e12 / (ref.fp8_flops or ref.bf16_flops) * gpu.fp8_flops
    return bf16 * 1e12 / ref.bf16_flops * gpu.bf16_flops


def matmul_rate(gpu: GPU, dtype: str, m: int, n: int, k: int) -> float:
    """FLOP/s of one ``m x k`` by ``k x n`` product on ``gpu`` in ``dtype``: its MAMF times the shape fraction.
    ``fp4`` (NVFP4): the fp8 rate of the shape times the measured 4-bit over fp8 burst rate (``fp4_burst``), so the
    fp8 shape curve and sustained-over-burst ratio stand in for 4 bits' (``FP4_STAND_IN``)."""
    if dtype == "fp4":
        return matmul_rate(gpu, "fp8", m, n, k) * fp4_burst(gpu) / _burst(gpu, "fp8")
    arch = ARCH_CURVE.get(gpu.arch, "sm_90")  # CURVE's, read by architecture (a renamed copy keeps its own)
    curve = (arch, "fp8") if dtype == "fp8" and (arch, "fp8") in SHAPE_CURVES else (arch, "bf16")
    return _level(gpu, dtype) * shape_fraction(*curve, int(m), int(n), int(k))


#: The one measured large 4-bit GEMM found: cuBLAS (cublasTest 13.3) on a B200, MXFP4 x MXFP4 at 8192 x 8192 x 8192,
#: 5,239 TFLOP/s, 58.2% of the B200's 9,000 dense FP4 peak (``FP4_SOURCE``). NVFP4 runs the same block-scaled 4-bit
#: tensor-core MMA (tcgen05 kind::mxf4nvf4), with an E4M3 scale per 16 elements where MXFP4 has an E8M0 per 32; no
#: NVFP4 GEMM benchmark of a training shape is published (vLLM's CUTLASS NVFP4 at 16384 x 6144 x 4096, 3,904
#: TFLOP/s without quantization, vllm-project/vllm#20646, is an inference kernel's early configs).
FP4_MAMF = ("b200", 5239.0)
FP4_SOURCE = Citation("deepgemm-348", "Dense GEMM perf (B200, CUDA 12.9, vs cublasTest 13.3): 8192x8192x8192, "
                      "cBLT 5,239 TFLOPS (MXFP4)")
#: The stand-in behind NVFP4 matmul rates (``matmul_rate``), in words for the time model's output.
FP4_STAND_IN = (f"NVFP4 GEMMs at cuBLAS's measured MXFP4 rate on a B200 ({FP4_MAMF[1]:,.0f} TFLOP/s at 8192^3, "
                f"{cite(FP4_SOURCE)}) as a fraction of the FP4 peak, on this GPU's FP4 peak, with the fp8 shape curve "
                "and sustained-over-burst ratio: a stand-in, no NVFP4 GEMM benchmark being published")


def fp4_burst(gpu: GPU) -> float:
    """The GPU's 4-bit burst matmul rate in FLOP/s: the measured B200 rate's fraction of its dense FP4 peak
    (``FP4_MAMF``) on this GPU's FP4 peak (the fp8 peak where it has none)."""
    name, tflops = FP4_MAMF
    return tflops * 1e12 / lookup(name).peak_flops("fp4") * gpu.peak_flops("fp4")


def low_precision(fp8: str) -> str:
    """The dtype a recipe's quantized GEMMs run in: ``fp4`` under Transformer Engine's NVFP4, ``fp8`` otherwise."""
    return "fp4" if fp8 == "te-nvfp4" else "fp8"


def fp8_rate_ratio(gpu: GPU) -> float:
    """How much faster the same product runs as fp8 than as bf16 at the MAMF (1: no fp8 tensor cores)."""
    return _level(gpu, "fp8") / _level(gpu, "bf16") if gpu.fp8_flops is not None else 1.0


def flash_kernel(gpu: GPU, framework: str | None) -> str:
    """Which FlashAttention runs: a Hopper kernel under Megatron-Core (Transformer Engine's fused attention) on
    Hopper and later NVIDIA GPUs, FlashAttention-2 otherwise (PyTorch's SDPA flash backend, flash-attn 2)."""
    if gpu.arch not in HOPPER_AND_LATER:
        return "fa2-ampere"
    return "fa3-hopper" if framework == "megatron" else "fa2-hopper"


def weighted_rate(products: Iterable[tuple[Any, Any]]) -> float:
    """FLOPs over time of products ``(FLOPs, FLOP/s)`` together (0 where there are none)."""
    flops = time = 0.0
    for count, rate in products:
        flops += count
        time += count / rate
    return flops / time if time else 0.0


def _cells(values: Any, size: int | None) -> list[Any]:
    """A value's cells as a list (a column's elements as Python numbers, a scalar repeated)."""
    if size is None:
        return [values]
    return values.tolist() if is_column(values) else [values] * size


def gemm_efficiency(gpu: GPU, est: Any, forward_only: bool = False, fp8: str = "none") -> Any:
    """The FLOP-weighted fraction of ``gpu``'s dense 16-bit peak that ``est``'s layer products reach (matmuls at
    their shapes' rates, FlashAttention's core at its kernel's), cell by cell on columns of layouts;
    ``forward_only``: the forward's products alone (inference); ``fp8``: the recipe whose GEMMs run at the fp8 rate
    of their shapes (``float8_phases``), the rest at the 16-bit rate, so a layer's time is each product's own (the
    fraction may pass 1). Cells with the same products (layouts that differ in data parallelism or ZeRO alone) are
    computed once."""
    values = est.values
    evaluated = [(kind, [layout_int(x, values) for x in rest]) for kind, *rest in gemm_products(est.graph)]
    seq = layout_int(sym("s"), values)
    kernel = flash_kernel(gpu, est.options.framework)
    size = next((len(x) for x in (seq, *(x for _, xs in evaluated for x in xs)) if is_column(x)), None)
    fields = [x for _, xs in evaluated for x in xs] + [seq, est.options.cp]
    varying = [j for j, x in enumerate(fields) if is_column(x)]  # the rest: one value for every cell
    kinds = tuple(kind for kind, _ in evaluated)
    unique: dict[tuple, int] = {(): 0} if not varying else {}
    index = ([0] * (size or 1) if not varying else
             [unique.setdefault(key, len(unique)) for key in zip(*(_cells(fields[j], size) for j in varying))])
    cells = []
    for key in unique:  # each distinct cell whole: its varying fields in their places
        cell = list(fields)
        for j, value in zip(varying, key):
            cell[j] = value
        cells.append(tuple(cell))
    low = low_precision(fp8)
    dtypes = tuple(tuple(low if x else "bf16" for x in row) for row in float8_phases(est.graph, fp8))
    rates = _cell_efficiencies(gpu, kernel, kinds, cells, forward_only, dtypes)
    if size is None:
        return rates[0]
    column = np.empty(size, dtype=object)
    column[:] = [rates[i] for i in index]
    return column


def _cell_efficiencies(gpu: GPU, kernel: str, kinds: tuple[str, ...], cells: list[tuple],
                       forward_only: bool, dtypes: tuple[tuple[str, str, str], ...]) -> list[float]:
    """``gemm_efficiency`` of each cell, all at once: a cell holds each product's values (``gemm_products``' fields
    after its kind: 2 for a FlashAttention core, 7 otherwise) in ``kinds``' order, then the sequence and the cp
    degree; each product's phases (forward, input and weight gradient) at the rates of ``dtypes``' row for it. The
    products' FLOPs and times are summed in ``weighted_rate``'s order, each sum a double as there (a
    product of no FLOPs adds 0.0); each GEMM shape's rate is taken once."""
    fields = list(zip(*cells))
    seq, cp = fields[-2], fields[-1]
    one = len(cells) == 1  # one estimate: Python floats (the cold path loads no NumPy), the same doubles
    flops, time = ([0.0], [0.0]) if one else (np.zeros(len(cells)), np.zeros(len(cells)))
    rates: dict[tuple, float] = {}

    def rate(shape: tuple, dtype: str) -> float:
        if (shape, dtype) not in rates:
            rates[(shape, dtype)] = matmul_rate(gpu, dtype, *shape)
        return rates[(shape, dtype)]

    triples: dict[tuple, tuple[float, float, float]] = {}

    def three(sides: tuple, dtype: str) -> tuple[float, float, float]:
        """The rates of a product of sides (m, n, k) in its three phases: forward (m, n, k), input gradient
        (m, k, n), weight gradient (n, k, m)."""
        if (sides, dtype) not in triples:
            m, n, k = sides
            triples[(sides, dtype)] = (rate((m, n, k), dtype), rate((m, k, n), dtype), rate((n, k, m), dtype))
        return triples[(sides, dtype)]

    def add(counts: Any, speeds: Any) -> None:
        nonlocal flops, time
        if one:
            speed = speeds[0] if isinstance(speeds, list) else speeds
            flops, time = [flops[0] + counts[0]], [time[0] + counts[0] / speed]
            return
        count = np.array(counts, dtype=np.float64)  # Python ints to doubles, rounded as int + float rounds them
        flops = flops + count
        time = time + count / np.asarray(speeds, dtype=np.float64)

    at = 0
    for kind, phase_dtypes in zip(kinds, dtypes):
        if kind == "flash":
            fwd, bwd = FLASH[kernel]
            add(fields[at], fwd * gpu.bf16_flops)
            add([0] * len(cells) if forward_only else fields[at + 1], bwd * gpu.bf16_flops)
            at += 2
            continue
        ahead, dgrad, wgrad, forward, out_side, in_side, experts = fields[at:at + 7]
        at += 7
        if forward_only:  # inference: no recompute, no gradients
            dgrad = wgrad = (0,) * len(cells)
        if kind == "attention":  # head-batched products: sides s/cp, s and the head dim d
            sides = [(s // c, int(s), int(i)) for s, c, i in zip(seq, cp, in_side)]
        else:  # the tokens one weight multiplies: forward / (2 out in experts)
            sides = [((f // (2 * o * i * e) if f else 1), o, i) for f, o, i, e in zip(forward, out_side, in_side, experts)]
        for phase, counts in enumerate((ahead, dgrad, wgrad)):
            if any(counts):
                rated = [three(x, phase_dtypes[phase])[phase] for x in sides]
                add(counts, [r if c else 1.0 for c, r in zip(counts, rated)])
    level = _level(gpu, "bf16") / gpu.bf16_flops
    if one:
        reached = flops[0] / time[0] if time[0] else 0.0
        return [reached / gpu.bf16_flops if reached else level]
    reached = np.where(time != 0, flops / np.where(time != 0, time, 1.0), 0.0)
    return np.where(reached != 0, reached / gpu.bf16_flops, level).tolist()


@per_graph
def gemm_products(graph: Any) -> tuple[tuple[Any, ...], ...]:
    """The layers' products (blocks other than the embedding and the head), once per graph, each FLOP count times
    the op's share of the repeats:

    * ``("linear", forward and recompute FLOPs, input-gradient FLOPs, weight-gradient FLOPs, one forward's FLOPs,
      out, in, experts)`` per linear or expert weight ``(.., out, in)``: the forward runs ``(M, out, in)`` as
      (m, n, k), the input gradient ``(M, in, out)``, the weight gradient ``(out, in, M)``, with M the tokens it
      multiplies, one forward's FLOPs / (2 out in experts) (a slice recomputed alone: its recompute's);
    * ``("attention", forward FLOPs, input-gradient FLOPs, 0, 0, d, d, 1)`` per product of the unfused core (its
      head dim d: ``ops._attention_flops`` writes each as coef x the scores' elements, the forward's coef 2 d);
    * ``("flash", forward FLOPs, the other phases' FLOPs)`` per FlashAttention core (a checkpoint's rerun of its
      forward, ``mcore_recompute.CHECKPOINTED``, with the forward).
    """
    return tuple(row for row, _ in _products(graph))


@per_graph
def _products(graph: Any) -> tuple[tuple[tuple[Any, ...], bool], ...]:
    """``gemm_products``' rows, each beside whether it is a Float8 linear's (``symbolic.float8.is_float8``)."""
    out: list[tuple[tuple[Any, ...], bool]] = []
    ahead = ("forward", "recompute")
    for blk in graph.blocks:
        if blk.name in ("embed", "head"):
            continue
        for op in blk.ops:
            terms = [f for f in op.flops if f.kind == "matmul" and f.phase in HARDWARE]
            if not terms:
                continue
            scale = blk.repeat * op.share
            if op.kind in ("linear", "experts"):
                by_weight: dict[str, list[Any]] = {}
                for f in terms:
                    weight = f.operands[1]
                    row = by_weight.setdefault(weight.name, [weight, 0, 0, 0, 0, 0])
                    row[1 if f.phase in ahead else 2 if f.phase == "input-grad" else 3] += f.count
                    if f.phase in ahead:  # one forward's FLOPs, and one recompute's
                        row[4 if f.phase == "forward" else 5] += f.count
                for w, fwd, dgrad, wgrad, forward, recomputed in by_weight.values():
                    # a slice recomputed alone (torchtitan's selective-op checkpointing recomputes every other mm:
                    # the k projection of the fused qkv) multiplies the same M tokens: its recompute is its forward
                    forward = forward or recomputed
                    experts = 1
                    for side in w.shape[:-2]:
                        experts *= side
                    if op.kind == "experts":  # one expert's (out, in): the GPU's E/ep experts share its b s k rows
                        experts = next(p.shape[0] for p in op.params if f"{p.name}.one_expert" == w.name)
                    out.append((("linear", scale * fwd, scale * dgrad, scale * wgrad, forward, w.shape[-2],
                                 w.shape[-1], experts), is_float8(graph, blk.name, op)))
            elif op.kind == "flash-attention":  # a checkpoint's rerun of the forward kernel: at the forward's rate
                ahead_kernel = [f.phase == "forward" or f.name.endswith(CHECKPOINTED) for f in terms]
                forward = sum((f.count for f, a in zip(terms, ahead_kernel) if a), 0)
                rest = sum((f.count for f, a in zip(terms, ahead_kernel) if not a), 0)
                out.append((("flash", scale * forward, scale * rest), False))
            elif op.kind == "attention":
                # NOTE(gemm_products): the forward's coef / 2 is the head dim (ops._attention_flops)
                widths = {f.name: f.coef / 2 for f in terms if f.phase == "forward"}
                for name, width in widths.items():
                    fwd = sum((f.count for f in terms if f.name == name and f.phase in ahead), 0)
                    back = sum((f.count for f in terms if f.name == name and f.phase not in ahead), 0)
                    out.append((("attention", scale * fwd, scale * back, 0, 0, width, width, 1), False))
    return tuple(out)


def float8_phases(graph: Any, fp8: str) -> tuple[tuple[bool, bool, bool], ...]:
    """For each of ``gemm_products``' rows, which of its forward, input- and weight-gradient GEMMs run in fp8 under
    the recipe ``fp8``: under Transformer Engine (``te-*``) all three of every layer linear's and expert's
    (Megatron-Core's TE linears and grouped GEMMs), under torchao's Float8 those of the converted linears, less the
    weight gradient that ``rowwise_with_gw_hp`` keeps 16-bit; none for the attention core or without ``--fp8``."""
    rows = _products(graph)
    if fp8 == "none":
        return tuple((False, False, False) for _ in rows)
    te = fp8 in TE_FP8
    grad = te or weight_grad_in_float8(fp8)
    return tuple((False, False, False) if row[0] != "linear" or not (te or converted) else (True, True, grad)
                 for row, converted in rows)


def rate_note(gpu: GPU, framework: str | None) -> str:
    """Where the GPU's rates come from, in words (for the time model's compute line)."""
    own = kernels_of(gpu)
    mamf, sustained = MAMF.get(own), _measured_sustained(own)
    if gpu.matmul_rates is not None:  # the cluster's own (``GPU.matmul_rates``)
        level = (f"this cluster's measured sustained rate, {gpu.matmul_rates[0] / 1e12:,.1f} TFLOP/s bf16"
                 + (f", {gpu.matmul_rates[1] / 1e12:,.1f} fp8" if gpu.matmul_rates[1] else ""))
    elif sustained is not None:  # the rate a training step holds at the power limit (MSMF)
        level = (f"sustained rate (MSMF) {MSMF[sustained][0]:,.1f} TFLOP/s" if sustained == own else
                 f"no measured MSMF: {sustained}'s sustained rate times this GPU's MAMF over its"
                 f"{'' if mamf else ' (this GPU: its stand-in fraction of peak)'}") + \
            f" ({cite(MSMF_SOURCE)}; the burst MAMF: {cite(MAMF_SOURCE)})"
    else:
        level = (f"MAMF {mamf[0]:,.1f} TFLOP/s" if mamf else
                 f"no measured MAMF: {MAMF_STAND_IN.get(own, 'a100-80gb')}'s fraction of its peak") + \
            f" ({cite(MAMF_SOURCE)})"
    arch = ARCH_CURVE.get(gpu.arch)
    curve = f"OpenXLA's {arch} GEMM curve" if arch else "no GEMM curve of its own: the H100's (sm_90)"
    kernel = flash_kernel(gpu, framework)
    fwd, bwd = FLASH[kernel]
    die = f"{own}'s measurements, the same die (hardware.py): " if own != gpu.name else ""
    return (f"{die}{level} times the shape fraction of each product's per-GPU sides, {curve} "
            f"({cite(XLA_GEMM_TABLE)}); FlashAttention's core at {fwd:.1%} forward and {bwd:.1%} backward of the peak "
            f"({kernel}: {cite(FLASH_SOURCES[kernel])})")
