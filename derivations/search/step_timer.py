"""The planner's timer with a GPU: the compute model (``quantities.timing.step_time``) of a layout's estimate, as
``plan`` ranks rows by it; ``plan`` runs it once per structure on the columns of its layouts (``search.columns``).

>>> from memderive.derivations.options import Options
>>> from memderive.derivations.models.resolve import resolve_model
>>> base = Options(mode="train", batch=1, seq=1024, gpu="a100-80gb")
>>> row = {"tp": 1, "pp": 1, "dp": 8, "micro_batches": 4, "virtual_stages": None, "sp": False, "zero": 1,
...        "recompute": "none", "batch": 1}
>>> per_gpu, model_flops, bubble, step_s, mfu = plan_step_time(resolve_model("gpt2"), base, row, 32, None, 0)
>>> bubble, step_s > 0, 0 < mfu < 1
(0.0, True, True)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import GPUS
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options
from memderive.derivations.quantity import Evaluated
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.timing import DEFAULT_EFFICIENCY, step_time

__all__ = ["plan_step_time", "layout_times"]


def plan_step_time(model: Model, base: Options, row: dict, global_batch: int, peak_flops: float | None,
                   params: int, cluster: Cluster | None = None) -> tuple[int, int, float, float | None, float]:
    """``derivations.search.plan.STEP_TIME`` with the compute model: (hardware FLOPs per GPU per step,
    model FLOPs per step, bubble fraction, step time in seconds or None, MFU) of one row (``layout_times`` of its
    estimate)."""
    return layout_times(estimate(model, replace(base, **row)), base, peak_flops, cluster)


def layout_times(est: Evaluated, base: Options, peak_flops: float | None, cluster: Cluster | None = None
                 ) -> tuple[Any, Any, Any, Any, Any]:
    """``plan_step_time`` of an estimate: one layout's, or the layouts of one structure at once
    (``search.columns.LayoutColumns``: each item a column of them).

    The GPU is ``base.gpu`` (on ``cluster``, else the default cluster of such GPUs); without one, a GPU of
    ``peak_flops`` with no communication modelled, or no time at all without ``peak_flops``.
    """
    o = est.options
    m, v, p = o.micro_batches, o.virtual_stages or 1, o.pp
    bubble = (p - 1) / (m * v)
    per_gpu = est.number("hardware_flops_per_gpu") * m
    model_flops = est.number("model_flops") * m * o.dp
    gpus = o.tp * o.pp * o.dp * o.cp
    if base.gpu is not None:
        timing = step_time(est, cluster or base.gpu, base.efficiency)
    elif not peak_flops:
        return per_gpu, model_flops, bubble, None, model_flops / (gpus * per_gpu * (1 + bubble))
    else:  # a bare peak: compute and bubble only (a link too fast to count)
        bare = replace(GPUS["h100-sxm"], name="given", title=f"a {peak_flops / 1e12:g} TFLOP/s GPU",
                       bf16_flops=int(peak_flops), link_bandwidth=10**30)
        timing = step_time(est, bare, base.efficiency or DEFAULT_EFFICIENCY)
    return per_gpu, model_flops, bubble, timing.step_s, timing.mfu
