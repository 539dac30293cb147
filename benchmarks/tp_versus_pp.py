"""Tensor against pipeline parallelism in the time model (a benchmark, not a test): how far the planner's pick with
less tensor parallelism and more pipelining runs ahead of Narayanan et al. 2021's t8 for Table 1's 18.4B and 39.1B
runs (within 15% since each product runs at a curve of its own narrow side, ``efficiency.gemm_efficiency``).

    python benchmarks/tp_versus_pp.py

Prints (1) the step-time breakdown of each published layout and the planner's pick on the same cluster, (2) the
same two layouts with the matmul efficiency held at the published layout's for both (the share of the gap that the
efficiency's dependence on t carries), and (3) Figure 13's 161B on 64 A100s at t 2..32, whose peak §5.4.1 puts at t8
(``tests/test_pipeline_span.py`` checks it).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import memderive.derivations.quantities.timing as timing  # noqa: E402
from tests.published_runs import NARAYANAN, Run  # noqa: E402
from tests.test_pipeline_span import _fig13  # noqa: E402

#: The planner's pick for each run (``benchmarks/published_runs.py --plan``), as layout changes.
PICKS = {"18.4B t8 p1 d32": {"tp": 2, "pp": 4, "virtual_stages": 2},
         "39.1B t8 p2 d32": {"tp": 4, "pp": 4, "virtual_stages": 2}}


def _with(run: Run, **changes: int) -> Run:
    layout = {**run.layout, **changes}
    layout["micro_batches"] = run.global_batch // (layout["dp"] * layout["batch"])
    return replace(run, layout=layout)


def _line(run: Run) -> tuple[str, float]:
    st = timing.step_time(run.estimate(), run.cluster())
    o = run.layout
    parts = {k.removesuffix("_time_s").removesuffix("_comm"): v for k, v in st.to_json().items()
             if k.endswith("_time_s") and k != "step_time_s" and v}
    text = (f"t{o['tp']} p{o['pp']} v{o.get('virtual_stages', 1)} d{o['dp']} m{o['micro_batches']}: "
            f"step {st.step_s:6.2f} s, efficiency {st.efficiency:.3f}; "
            + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    return text, st.step_s


def main() -> None:
    runs = {r.name: r for r in NARAYANAN}
    original = timing.gemm_efficiency
    for name, pick in PICKS.items():
        run = runs[name]
        print(name)
        published, a = _line(run)
        picked, b = _line(_with(run, **pick))
        print(f"  published {published}\n  pick      {picked}\n  ratio {a / b:.3f}")
        held = original(run.cluster().gpu, run.estimate())
        timing.gemm_efficiency = lambda _hw, _est, e=held: e  # type: ignore[misc]
        try:
            _, a2 = _line(run)
            _, b2 = _line(_with(run, **pick))
        finally:
            timing.gemm_efficiency = original
        print(f"  both at the published layout's efficiency {held:.3f}: {a2:.2f} s against {b2:.2f} s, "
              f"ratio {a2 / b2:.3f}")
    print("Narayanan et al. 2021 Figure 13: 161B (32 layers, 128 heads, h 20480) on 64 A100s, micro-batch 1")
    for batch in (32, 128):
        for t in (2, 4, 8, 16, 32):
            text, _ = _line(_fig13(t, batch))
            print(f"  batch {batch:3} {text}")


if __name__ == "__main__":
    main()
