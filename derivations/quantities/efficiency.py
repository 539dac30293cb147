"""How fast a GPU runs a layer: matrix multiplies at a fraction of dense peak that depends on their width, and the
elementwise work (norms, activations, dropout, softmax) at the memory bandwidth.

A transformer layer's products under t-way tensor parallelism are ``(b s) x h`` by ``h x (width/t)`` and back, so
each GPU's products narrow as ``w = h/t`` does, and narrow products reach less of the peak (fewer tiles to fill the
SMs). Matmuls run at ``E w / (w + w_half)`` of the dense 16-bit peak. Elementwise ops are memory-bound: each moves
about ``bytes_per_flop`` bytes of HBM per elementwise FLOP the graph counts (``compute.elementwise_flops``; the
attention core's are left out under FlashAttention, which keeps the scores on chip). ``E``, ``w_half`` and
``bytes_per_flop`` are fitted once per GPU, by least squares over the published measured runs on that GPU
(``tests/published_runs.py``; ``benchmarks/published_runs.py --fit`` refits them and prints the residuals), never
per run, with the memory-bound terms derived from the graph (``memory_bound``: the optimizer step, ZeRO-3's copies,
eager kernels) in the prediction they fit (2.75 bytes per FLOP before the optimizer step was timed, 2.5 with it). A GPU without measured runs takes the A100's constants with ``w_half`` scaled by its ridge point (peak
FLOP/s over memory bandwidth), said in the time model's note. The H100 SXM's runs in the table are held out, so its
constants are the A100's with the ceiling scaled by ``H100_OVER_A100``: the fraction of peak the H100 reaches over the
A100's on the same code, models and GPU counts (llm-foundry's MPT benchmarks on both GPUs).

>>> from memderive.derivations.hardware import gpu
>>> round(matmul_efficiency(gpu("a100-80gb"), 1536), 4)  # 0.83 * 1536 / (1536 + 300): GPT-3 175B at t = 8
0.6944
"""

from __future__ import annotations

from dataclasses import dataclass

from memderive.derivations.hardware import GPU
from memderive.symbolic.formula import Citation

__all__ = ["Calibration", "CALIBRATIONS", "calibration", "matmul_efficiency", "MATMUL_SOURCE", "H100_OVER_A100"]

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
    """Matmul ceiling ``E``, the per-GPU width ``w_half`` at which matmuls reach half of it, and the HBM bytes
    elementwise work moves per FLOP; ``fitted_on`` names the GPU whose runs fixed them; ``scaled``: how they were
    carried to this GPU, with its source (None: fitted on this GPU's own runs)."""

    ceiling: float
    half_width: float
    bytes_per_flop: float
    fitted_on: str
    scaled: tuple[str, Citation] | None = None


CALIBRATIONS: dict[str, Calibration] = {
    "a100-80gb": Calibration(0.83, 300, 2.5, "a100-80gb"),
}
CALIBRATIONS["a100-40gb"] = CALIBRATIONS["a100-80gb"]
CALIBRATIONS["h100-sxm"] = Calibration(round(0.83 * H100_OVER_A100, 4), 300, 2.5, "a100-80gb",
                                       (f"ceiling x {H100_OVER_A100:g}, the H100's fraction of peak over the A100's on "
                                        "the same code", H100_SOURCE))
#: The measured GPU whose constants stand in for one without measured runs.
REFERENCE = "a100-80gb"


def calibration(gpu: GPU) -> Calibration:
    """The GPU's constants: its own, else the reference GPU's with the half width scaled by the ridge point (peak
    FLOP/s over memory bandwidth: a GPU that computes faster per byte it reads needs wider products)."""
    if gpu.name in CALIBRATIONS:
        return CALIBRATIONS[gpu.name]
    from memderive.derivations.hardware import gpu as lookup

    ref = lookup(REFERENCE)
    ridge = (gpu.bf16_flops / gpu.memory_bandwidth) / (ref.bf16_flops / ref.memory_bandwidth)
    base = CALIBRATIONS[REFERENCE]
    return Calibration(base.ceiling, base.half_width * ridge, base.bytes_per_flop, REFERENCE,
                       ("half width scaled by the ridge point", MATMUL_SOURCE))


def matmul_efficiency(gpu: GPU, width: int) -> float:
    """Fraction of ``gpu``'s dense peak its matmuls reach at per-GPU layer width ``width`` (h/t)."""
    c = calibration(gpu)
    return c.ceiling * width / (width + c.half_width)
