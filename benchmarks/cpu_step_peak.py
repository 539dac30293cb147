"""memderive's step timeline beside a measured CPU training step, case by case (what the timeline tests check).

    python benchmarks/cpu_step_peak.py

Each case of ``tests/step_cases.py`` (``CASES`` and ``FP8_CASES``: torchao's Float8 linears) runs one steady-state training step of a small transformers model on
CPU, counting live tensor storages exactly (``tests/hf_step.py``), and derives the same step from
memderive's graph (``symbolic.timeline``). Prints the derived and measured high-water marks, their ratio
and where the peak falls; exits 1 if any differs.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.step_cases import CASES, FP8_CASES, derived, measured  # noqa: E402


def main() -> int:
    print(f"{'case':62} {'derived peak':>13} {'measured peak':>13} {'ratio':>7}  peak at (derived | measured)")
    bad = 0
    for case in CASES + FP8_CASES:
        got, want = derived(case), measured(case)
        bad += got.peak_bytes != want.peak
        print(f"{str(case):62} {got.peak_bytes:>13,} {want.peak:>13,} {got.peak_bytes / want.peak:>7.4f}  "
              f"{got.peak_at} | {want.peak_at}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
