"""Published training runs with their measured step time or throughput, and what memderive predicts for them.

Each run names its source (paper, table), model shape, layout (t, p, v, d), global batch, sequence, the cluster's
GPU and network, and what was measured. Throughputs published as TFLOP/s per GPU are turned into the step time they
imply with the paper's own FLOPs count (Narayanan et al. 2021 Eq. 3, hardware FLOPs with full recompute; Llama 3's
MFU over model FLOPs): ``measured_s = FLOPs per step / (TFLOP/s x GPUs)``. Assumptions where a paper does not say
(micro-batch 1, interleaving) are written in the row. ``benchmarks/published_runs.py`` prints the table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memderive.derivations.estimate import estimate
from memderive.derivations.models.architectures import GPT
from memderive.derivations.models.model import Model
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.hardware import gpu

HDR = 200 * 10**9 // 8  # one 200 Gb/s HDR InfiniBand port per A100 (DGX A100: 8 ConnectX-6 per 8 GPUs; Selene)
NDR = 400 * 10**9 // 8  # one 400 Gb/s port per H100 (Llama 3 §3.3.1)


def gpt(h: int, a: int, l: int, vocab: int = 51200, ctx: int = 2048) -> Model:
    """A GPT of Narayanan et al. 2021 / Korthikanti et al. 2022: FFN 4h, learned positions, V = 51,200."""
    return Model(f"gpt-h{h}-l{l}", GPT, {"h": h, "a": a, "l": l, "V": vocab, "f": 4 * h, "n_ctx": ctx})


@dataclass(frozen=True)
class Run:
    name: str
    source: str
    model: Any
    layout: dict  # estimate's options: tp, pp, dp, virtual_stages, batch (micro-batch), micro_batches, ...
    seq: int
    gpu: str
    network: int  # bytes/s per GPU between nodes
    measured_s: float | None = None  # the published step time
    tflops_per_gpu: float | None = None  # or the published throughput, with ``flops`` counting it
    flops: str = "hardware"  # which FLOPs the throughput counts: "hardware" (Eq. 3) or "model"
    note: str = ""

    @property
    def gpus(self) -> int:
        return self.layout.get("tp", 1) * self.layout.get("pp", 1) * self.layout.get("dp", 1)

    @property
    def global_batch(self) -> int:
        return self.layout["batch"] * self.layout.get("micro_batches", 1) * self.layout.get("dp", 1)

    def estimate(self) -> Any:
        return estimate(self.model, mode="train", seq=self.seq, **self.layout)

    def measured(self) -> float:
        """The measured step time in seconds (or the one the published throughput implies)."""
        if self.measured_s is not None:
            return self.measured_s
        est = self.estimate()
        key = "hardware_flops" if self.flops == "hardware" else "model_flops"
        per_step = est.number(key) * self.layout.get("micro_batches", 1) * self.layout.get("dp", 1)
        return per_step / (self.tflops_per_gpu * 1e12 * self.gpus)

    def cluster(self) -> Cluster:
        return Cluster(gpu(self.gpu), 8, self.network)


def _korthikanti(size: str, model: Model, t: int, p: int, v: int, batch: int, micro: int, sel: float,
                 full: float) -> list[Run]:
    """Korthikanti et al. 2022 (arXiv:2205.05198) Table 3 configs (s 2048, V 51,200) and Table 5 iteration times
    on A100 80GB (Selene): full recompute, and sequence parallelism + selective recompute ("present work")."""
    m = batch // micro
    base = {"tp": t, "pp": p, "dp": 1, "batch": micro, "micro_batches": m, "flash": False}
    if v > 1:
        base["virtual_stages"] = v
    src = "Korthikanti et al. 2022, Tables 3 and 5"
    return [Run(f"{size} t{t} p{p} full", src, model, {**base, "recompute": "full"}, 2048, "a100-80gb", HDR, full),
            Run(f"{size} t{t} p{p} sp+sel", src, model, {**base, "recompute": "selective", "sp": True}, 2048,
                "a100-80gb", HDR, sel)]


KORTHIKANTI = [
    *_korthikanti("22B", gpt(6144, 64, 48), 8, 1, 1, 4, 4, 1.10, 1.42),
    *_korthikanti("175B", gpt(12288, 96, 96), 8, 8, 3, 64, 1, 13.75, 18.13),
    *_korthikanti("530B", gpt(20480, 128, 105), 8, 35, 3, 280, 1, 37.83, 49.05),
    *_korthikanti("1T", gpt(25600, 160, 128), 8, 64, 1, 512, 1, 71.49, 94.42),
]


def _narayanan(size: str, h: int, a: int, l: int, t: int, p: int, gpus: int, batch: int, tflops: float) -> Run:
    """Narayanan et al. 2021 (arXiv:2104.04473) Table 1: weak scaling on A100 80GB (Selene, 8 HDR ports per node),
    s 2048, V 51,200, full recompute; TFLOP/s per GPU counted with Eq. 3. Not said in the table: micro-batch 1,
    no interleaving (assumed)."""
    d = gpus // (t * p)
    layout = {"tp": t, "pp": p, "dp": d, "batch": 1, "micro_batches": batch // d, "recompute": "full",
              "flash": False}
    return Run(f"{size} t{t} p{p} d{d}", "Narayanan et al. 2021, Table 1", gpt(h, a, l), layout, 2048,
               "a100-80gb", HDR, tflops_per_gpu=tflops, note="micro-batch 1, no interleaving (assumed)")


NARAYANAN = [
    _narayanan("1.7B", 2304, 24, 24, 1, 1, 32, 512, 137),
    _narayanan("3.6B", 3072, 32, 30, 2, 1, 64, 512, 138),
    _narayanan("7.5B", 4096, 32, 36, 4, 1, 128, 512, 142),
    _narayanan("18.4B", 6144, 48, 40, 8, 1, 256, 1024, 135),
    _narayanan("39.1B", 8192, 64, 48, 8, 2, 512, 1536, 138),
    _narayanan("76.1B", 10240, 80, 60, 8, 4, 1024, 1792, 140),
    _narayanan("145.6B", 12288, 96, 80, 8, 8, 1536, 2304, 148),
    _narayanan("310.1B", 16384, 128, 96, 8, 16, 1920, 2160, 155),
    _narayanan("529.6B", 20480, 128, 105, 8, 35, 2520, 2520, 163),
    _narayanan("1008B", 25600, 160, 128, 8, 64, 3072, 3072, 163),
]

MEGASCALE = [
    Run("175B t8 p8 d192", "Jiang et al. 2024 (MegaScale), Table 2", gpt(12288, 96, 96),
        {"tp": 8, "pp": 8, "virtual_stages": 3, "dp": 192, "batch": 1, "micro_batches": 32, "sp": True,
         "recompute": "selective", "zero": 1}, 2048, "a100-80gb", HDR, 6.34,
        note="12,288 A100s, batch 6,144; interleaved 1F1B (MegaScale §3.2) with v = 3 as Korthikanti et al. ran this model, "
             "micro-batch 1, SP + selective recompute, distributed optimizer (assumed)"),
]

RUNS = KORTHIKANTI + NARAYANAN + MEGASCALE


@dataclass
class Prediction:
    run: Run
    predicted_s: float
    measured_s: float
    parts: dict = field(default_factory=dict)

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1


def predict(run: Run) -> Prediction:
    from memderive.derivations.quantities.timing import step_time

    timing = step_time(run.estimate(), run.cluster())
    parts = {k: v for k, v in timing.to_json().items() if k.endswith("_s")}
    return Prediction(run, timing.step_s, run.measured(), parts)
