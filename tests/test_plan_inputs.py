"""plan's bad input (issue 37, item 10): a peak that is not a finite positive number is one line and exit 2 on the
command line, a ValueError or TypeError at ``plan``'s boundary (was: ZeroDivisionError for inf, negative step times
for -5, a TypeError deep in the proxy for a string)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memderive.arguments import option_argv
from memderive.commands.cli import main
from memderive.derivations.options import OptionsError
from memderive.derivations.search.plan import plan

PLAN = ["plan", "--model", "llama-3-8b", "--seq", "2048", "--global-batch", "8", "--gpu-memory", "80GB",
        "--gpus", "8"]


@pytest.mark.parametrize("value", ["inf", "-5", "0", "nan"])
@pytest.mark.slow
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


@pytest.mark.slow
def test_would_fit_advice_fits_as_the_plan_budgets_it(capsys) -> None:
    """Issue 37, item 8: mistral-7b at 512 tokens, global batch 8 on 8 V100s (16 GiB) with --cp 4 fits no layout.
    Each change offered re-runs as a plan (the given --cp and GPU kept, so the runtime's terms are held too) that
    fits, each top row's device bytes through ``estimate`` within the 17,179,869,184 B, and the given --gpus 8 is
    never offered (it was, budgeted without the runtime terms and without cp, beside offloads that did not fit)."""
    words = ["plan", "--model", "mistral-7b", "--seq", "512", "--global-batch", "8", "--gpu", "v100-16gb", "--cp", "4"]
    assert main([*words, "--gpus", "8", "--json"]) == 1
    would = json.loads(capsys.readouterr().out)["would_fit"]
    assert would and "--gpus 8" not in [x["change"] for x in would]
    for advice in would:
        change = advice["change"].split()
        extra = change if change[0] == "--gpus" else ["--gpus", "8", *change]
        assert main([*words, *extra, "--json", "--top", "1"]) == 0, advice
        row = json.loads(capsys.readouterr().out)["layouts"][0]
        assert row["options"]["cp"] == 4
        assert main(["estimate", "--model", "mistral-7b", *option_argv(row["options"]), "--json"]) == 0
        est = json.loads(capsys.readouterr().out)
        assert est["fits_gpu"] is True and est["device_bytes"] <= 17_179_869_184
        assert est["device_bytes"] >= advice["total_bytes"]  # the least any of its layouts holds
