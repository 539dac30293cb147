"""How fast a GPU runs a layer: each matrix multiply at a fraction of dense peak that depends on its per-GPU shape,
and the elementwise work (norms, activations, dropout, softmax) at the memory bandwidth.

Under t-way tensor parallelism each GPU's products are ``(b s) x h`` by ``h x (a + 2 a_kv) d/t`` (QKV),
``(b s) x (a d/t)`` by ``(a d/t) x h`` (the output projection), ``h x f/t`` (twice, gated) and ``f/t x h`` (the MLP;
an expert's ``h x f_e/t``): only the output projection has an ``h/t`` side. A product reaches less of the peak the
narrower its weight's narrow side ``w = min(rows, columns)`` of the per-GPU weight (fewer tiles along it to fill
the SMs, a shorter reduction). Each runs at ``E w / (w + w_half)``; the attention core's products (not fused:
``q k^T`` and ``P v``, batched per head) at the same curve of the head dim ``d``, which does not shrink with t. A
layer's efficiency is the FLOP-weighted one of its products (``gemm_efficiency``: their FLOPs over their time at
their rates); FlashAttention's fused core and the router's small product run at it. Elementwise ops are
memory-bound: each moves about ``bytes_per_flop`` bytes of HBM per elementwise FLOP the graph counts
(``compute.elementwise_flops``; the attention core's are left out under FlashAttention, which keeps the scores on
chip). ``E``, ``w_half`` and ``bytes_per_flop`` are fitted once per GPU, by least squares over the published
measured runs on that GPU (``tests/published_runs.py``; ``benchmarks/published_runs.py --fit`` refits them and
prints the residuals), never per run, with the memory-bound terms derived from the graph (``memory_bound``: the
optimizer step, ZeRO-3's copies, eager kernels) in the prediction they fit. On the A100 the least squares puts
``bytes_per_flop`` at 0: the unfused attention core's products at the head dim, whose share of a layer grows as
s/h as the unfused softmax's elementwise work does, carry the time the elementwise term carried (2.5 bytes per FLOP
when every product ran at one curve of h/t; 0.5 bytes at w_half 400 fits almost as well). A GPU without measured
runs takes the A100's constants with ``w_half`` scaled by its ridge point (peak FLOP/s over memory bandwidth), said
in the time model's note. The H100 SXM's runs in the table are held out, so its constants are the A100's with the
ceiling scaled by ``H100_OVER_A100``: the fraction of peak the H100 reaches over the A100's on the same code, models
and GPU counts (llm-foundry's MPT benchmarks on both GPUs).

>>> from memderive.derivations.hardware import gpu
>>> round(matmul_efficiency(gpu("a100-80gb"), 768), 4)  # 0.77 * 768 / (768 + 500): the 18.4B's projection at t 8
0.4664
>>> # Narayanan et al.'s 18.4B (h 6144, f 4h) per layer: QKV 3 FLOPs of 12 at w = min(3h/t, h), the projection 1 at
>>> # h/t, the MLP 8 at min(4h/t, h). t 8: 12 / (3 / 0.6327 + 1 / 0.4664 + 8 / 0.6622) = 0.6327 (w 2304, 768, 3072;
>>> # for f = 4h and t >= 4 the linears together run at the curve of 3h/t); t 2: 12 / (3 / 0.7121 + 1 / 0.6622
>>> # + 8 / 0.7121) = 0.7076 (w 6144, 3072, 6144): t 2 runs 1.118x as fast (a curve of h/t alone made it
>>> # 1.27x)
>>> [round(weighted_efficiency(((3, min(3 * 6144 // t, 6144)), (1, 6144 // t), (8, min(4 * 6144 // t, 6144))),
...                             0.77, 500), 4) for t in (8, 2)]
[0.6327, 0.7076]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from memderive.derivations.hardware import GPU, gpu as lookup
from memderive.derivations.memo import per_graph
from memderive.symbolic.formula import Citation
from memderive.derivations.columns import minimum
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.derivations.quantities.compute import HARDWARE

__all__ = ["Calibration", "CALIBRATIONS", "calibration", "matmul_efficiency", "weighted_efficiency", "gemm_efficiency",
           "gemm_widths", "MATMUL_SOURCE", "H100_OVER_A100"]

#: The published A100 runs the constants are fitted to (``tests/published_runs.py``).
MATMUL_SOURCE = Citation("narayanan-2021", "Table 1", also=(Citation("korthikanti-2022", "Table 5"),
                                                            Citation("jiang-2024-megascale", "Table 2")))


#: The H100 SXM's fraction of dense peak over the A100 80GB's on the same code and models: llm-foundry's MPT
#: benchmarks (Composer FSDP, FlashAttention, BF16), the HFU of each (model, sequence, GPUs) row in both its "A100 80GB"
#: and "H100 80GB BF16" tables, H100 over A100: 39 rows, 0.57 to 0.90, median 0.682 (``tests/published_runs.py``
#: ``MPT_HFU`` holds the rows; ``tests/test_published_runs.py`` recomputes the median).
H100_OVER_A100 = 0.682
H100_SOURCE = Citation("llm-foundry-benchmarks", "HFU of the 39 rows in both the A100 80GB and H100 80GB BF16 tables: "
                       "median H100/A100 0.682")


@dataclass(frozen=True, slots=True)
class Calibration:
    """Matmul ceiling ``E``, the narrow side ``w_half`` of a per-GPU product at which it reaches half of it, and the
    HBM bytes elementwise work moves per FLOP; ``fitted_on`` names the GPU whose runs fixed them; ``scaled``: how
    they were carried to this GPU, with its source (None: fitted on this GPU's own runs)."""

    ceiling: float
    half_width: float
    bytes_per_flop: float
    fitted_on: str
    scaled: tuple[str, Citation] | None = None


CALIBRATIONS: dict[str, Calibration] = {
    "a100-80gb": Calibration(0.77, 500, 0, "a100-80gb"),
}
CALIBRATIONS["a100-40gb"] = CALIBRATIONS["a100-80gb"]
CALIBRATIONS["h100-sxm"] = Calibration(round(0.77 * H100_OVER_A100, 4), 500, 0, "a100-80gb",
                                       (f"ceiling x {H100_OVER_A100:g}, the H100's fraction of peak over the A100's on "
                                        "the same code", H100_SOURCE))
#: The measured GPU whose constants stand in for one without measured runs.
REFERENCE = "a100-80gb"


def calibration(gpu: GPU) -> Calibration:
    """The GPU's constants: its own, else the reference GPU's with the half width scaled by the ridge point (peak
    FLOP/s over memory bandwidth: a GPU that computes faster per byte it reads needs wider products)."""
    if gpu.name in CALIBRATIONS:
        return CALIBRATIONS[gpu.name]

    ref = lookup(REFERENCE)
    ridge = (gpu.bf16_flops / gpu.memory_bandwidth) / (ref.bf16_flops / ref.memory_bandwidth)
    base = CALIBRATIONS[REFERENCE]
    return Calibration(base.ceiling, base.half_width * ridge, base.bytes_per_flop, REFERENCE,
                       ("half width scaled by the ridge point", MATMUL_SOURCE))


def matmul_efficiency(gpu: GPU, width: Any) -> Any:
    """Fraction of ``gpu``'s dense peak one product reaches whose per-GPU weight's narrow side is ``width``."""
    c = calibration(gpu)
    return c.ceiling * width / (width + c.half_width)


def weighted_efficiency(gemms: Iterable[tuple[Any, Any]], ceiling: float, half_width: float) -> Any:
    """The efficiency of products ``(FLOPs, narrow side)`` together: their FLOPs over their time, each at
    ``ceiling w / (w + half_width)`` (the ceiling where there are none)."""
    flops = time = 0.0
    for count, width in gemms:
        flops += count
        time += count * (width + half_width) / (ceiling * width)
    return flops / time if time else ceiling


def gemm_efficiency(gpu: GPU, est: Any) -> Any:
    """The FLOP-weighted matmul efficiency of ``est``'s layers on ``gpu`` (``gemm_widths`` read off its graph)."""
    c = calibration(gpu)
    gemms = [(layout_int(count, est.values), minimum(layout_int(rows, est.values), layout_int(cols, est.values)))
             for count, rows, cols in gemm_widths(est.graph)]
    return weighted_efficiency(gemms, c.ceiling, c.half_width)


@per_graph
def gemm_widths(graph: Any) -> tuple[tuple[Any, Any, Any], ...]:
    """Per product of the layers (blocks other than the embedding and the head): its FLOPs (every phase, recompute
    included, times the op's share of the repeats) and the per-GPU sides whose smaller is its narrow side: a
    linear's or an expert's weight ``(out, in)``, the attention core's head dim for both (FlashAttention's fused
    core and the router are left to the others' rate), once per graph."""
    out = []
    for blk in graph.blocks:
        if blk.name in ("embed", "head"):
            continue
        for op in blk.ops:
            terms = [f for f in op.flops if f.kind == "matmul" and f.phase in HARDWARE]
            if op.kind in ("linear", "experts"):
                by_weight: dict[str, list[Any]] = {}
                for f in terms:
                    weight = f.operands[1]
                    by_weight.setdefault(weight.name, [weight, 0])[1] += f.count
                out += [(blk.repeat * op.share * count, w.shape[0], w.shape[1]) for w, count in by_weight.values()]
            elif op.kind == "attention":
                # NOTE(gemm_widths): ops._attention_flops writes each product as coef x the scores' elements with
                # coef 2 d (forward, recompute) or 4 d (input gradient): the forward's coef / 2 is its head dim
                widths = {f.name: f.coef / 2 for f in terms if f.phase == "forward"}
                for name, width in widths.items():
                    count = sum((f.count for f in terms if f.name == name), 0)
                    out.append((blk.repeat * op.share * count, width, width))
    return tuple(out)
