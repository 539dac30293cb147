"""Published GPU memory of real runs beside memderive's derivation (a benchmark, not a test).

    python benchmarks/published_memory.py           # each measurement: measured, derived, ratio; the distribution
    python benchmarks/published_memory.py --verbose # also each entry's setup, source and what is not modelled

The measurements, their sources and setups are in ``tests/published_memory.py``;
``tests/test_published_memory.py`` holds the distribution printed here to the bounds achieved.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.published_memory import MEASUREMENTS, Measurement  # noqa: E402

BAND = (0.8, 1.25)


def _amount(m: Measurement, value: float) -> str:
    return f"{value:,.0f} blk" if m.kind == "vllm_kv_blocks" else f"{value / 2**30:,.2f} GiB"


def distribution(ratios: list[float]) -> dict[str, float]:
    """Median, range and how many of the ratios are within ``BAND``."""
    inside = sum(BAND[0] <= x <= BAND[1] for x in ratios)
    return {"count": len(ratios), "median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "within": inside}


def table(verbose: bool = False) -> list[float]:
    print(f"{'measurement':56s} {'kind':15s} {'measured':>12s} {'derived':>12s} {'ratio':>6s}  not modelled")
    ratios = []
    for m in MEASUREMENTS:
        derived, ratio = m.derived(), m.ratio()
        ratios.append(ratio)
        missing = ", ".join(f"{k}={v}" for k, v in m.unmodelled.items()) or "-"
        flag = " " if BAND[0] <= ratio <= BAND[1] else "*"
        print(f"{m.name:56s} {m.kind:15s} {_amount(m, m.measured):>12s} {_amount(m, derived):>12s} "
              f"{ratio:6.2f}{flag} {missing}")
        if verbose:
            print(f"    setup: {m.setup}\n    source: {m.source}" + (f"\n    note: {m.note}" if m.note else ""))
    d = distribution(ratios)
    print(f"\n{d['count']} measurements, measured / derived: median {d['median']:.2f}, range {d['min']:.2f} to "
          f"{d['max']:.2f}; {d['within']} of {d['count']} within {BAND[0]}-{BAND[1]} (* outside)")
    print("\noutside the band, and why:")
    for m, ratio in zip(MEASUREMENTS, ratios):
        if not BAND[0] <= ratio <= BAND[1]:
            print(f"  {m.name} ({ratio:.2f}): {m.reason()}")
    return ratios


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--verbose", action="store_true")
    table(parser.parse_args().verbose)
