"""plan's bad input (issue 37, item 10): a peak that is not a finite positive number is one line and exit 2 on the
command line, a ValueError or TypeError at ``plan``'s boundary (was: ZeroDivisionError for inf, negative step times
for -5, a TypeError deep in the proxy for a string)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memderive.derivations.options import OptionsError
from memderive.derivations.search.plan import plan

PLAN = ["plan", "--model", "llama-3-8b", "--seq", "2048", "--global-batch", "8", "--gpu-memory", "80GB",
        "--gpus", "8"]


@pytest.mark.parametrize("value", ["inf", "-5", "0", "nan"])
def test_a_peak_that_is_no_finite_positive_number_is_one_line(value: str) -> None:
    run = subprocess.run([sys.executable, "-m", "memderive", *PLAN, "--peak-tflops", value], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "--peak-tflops must be a finite positive number" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("value, error", [("1e15", TypeError), (True, TypeError), (float("inf"), OptionsError),
                                          (-5e12, OptionsError), (0, OptionsError)])
def test_plan_refuses_a_bad_peak_at_its_boundary(value: object, error: type) -> None:
    with pytest.raises(error, match="peak_flops must be a"):
        plan("llama-3-8b", 80 * 10**9, 8, 2048, 8, peak_flops=value)
    assert issubclass(OptionsError, ValueError)
