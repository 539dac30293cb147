"""The planner's layouts fit and re-run through ``estimate`` to the same bytes; the fewest GPUs is the fewest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from derivations.estimate import estimate
from derivations.search.plan import PlanError, plan, smallest_gpu_count

GB80 = 80 * 10**9


def test_llama_70b_on_1024_gpus_rows_rerun_to_the_same_bytes() -> None:
    layouts = plan("llama-2-70b", GB80, 1024, 4096, 1024, top=8)
    assert layouts
    for x in layouts:
        o = x.options
        assert o["tp"] * o.get("pp", 1) * o["dp"] == 1024
        assert o["batch"] * o["micro_batches"] * o["dp"] == 1024  # b * m * d = the global batch
        assert estimate("llama-2-70b", **o).number("total_bytes") == x.total_bytes <= GB80
    times = [x.flops_per_gpu * (1 + x.bubble) for x in layouts]
    assert times == sorted(times)


def test_pipeline_layouts_rerun_too() -> None:
    """A budget that needs pipelining: every row's bytes are estimate's (first stage, m micro-batches)."""
    layouts = plan("llama-2-70b", 40 * 10**9, 64, 4096, 64, top=40)
    staged = [x for x in layouts if x.options.get("pp", 1) > 1]
    for x in staged or layouts:
        assert estimate("llama-2-70b", **x.options).number("total_bytes") == x.total_bytes <= 40 * 10**9


def test_fewest_gpus_is_the_fewest() -> None:
    fewest = smallest_gpu_count("llama-2-7b", 24 * 10**9, 64, 2048)
    smaller = [n for n in (1, 2, 4, 8, 16, 32) if n < fewest]
    for n in smaller:
        with pytest.raises(PlanError):
            plan("llama-2-7b", 24 * 10**9, 64, 2048, n)
    assert plan("llama-2-7b", 24 * 10**9, 64, 2048, fewest)


def test_cli_json_rows_rerun_through_estimate() -> None:
    out = subprocess.run([sys.executable, "-m", "render.cli", "plan", "--model", "llama-2-7b", "--gpus", "8",
                          "--gpu-memory", "40GB", "--seq", "4096", "--global-batch", "64", "--json", "--top", "2"],
                         capture_output=True, text=True, check=True)
    for row in json.loads(out.stdout)["layouts"]:
        flags = []
        for key, value in row["options"].items():
            if value is True:
                flags.append("--" + key.replace("_", "-"))
            elif value is not False:
                flags += ["--" + key.replace("_", "-"), str(value)]
        again = subprocess.run([sys.executable, "-m", "render.cli", "estimate", "--model", "llama-2-7b", *flags,
                                "--json"], capture_output=True, text=True, check=True)
        assert json.loads(again.stdout)["total_bytes"] == row["total_bytes"]


def test_nothing_fits_is_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "render.cli", "plan", "--model", "llama-2-70b", "--gpus", "8",
                             "--gpu-memory", "8GB", "--seq", "4096", "--global-batch", "8"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no layout fits" in result.stderr


def test_inference_plan_rows_fit_and_the_next_batch_does_not() -> None:
    from derivations.search.plan import plan_infer

    layouts = plan_infer("llama-2-70b", GB80, 4096, 8, new_tokens=512)
    assert [x.options["tp"] for x in layouts] == [8, 4, 2]  # 70B in bf16 (140 GB) needs t >= 2
    for x in layouts:
        assert estimate("llama-2-70b", **x.options).number("total_bytes") == x.total_bytes <= GB80
        bigger = {**x.options, "batch": x.options["batch"] + 1}
        assert estimate("llama-2-70b", **bigger).number("total_bytes") > GB80
