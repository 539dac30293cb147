"""A plan evaluates the layouts of one structure as columns (``derivations.search.columns``): one derivation per
structure, memory and the time model over NumPy arrays. Its rows must be what ``estimate --gpu`` says of each layout
on its own: random rows of every layout that fits, re-run one by one through the scalar path (``estimate``, its
``step_time``), bytes and FLOPs to the exact integer, times within 1e-9 relative."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from typing import Any

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.options import Options
from memderive.derivations.quantities.runtime import budget_bytes
from memderive.derivations.quantities.timing import time_of
from memderive.derivations.search.columns import ColumnBranch, column
from memderive.derivations.search.plan import plan

#: (model, GPUs, global batch, seq): tensor, pipeline (interleaved), data and context parallelism, ZeRO 0-3 and
#: recompute (llama-2-7b); routed experts over ep ranks (mixtral-8x7b); pipeline stages the layers do not divide,
#: 48 layers over 5 and 10 stages (gpt2-xl on 20 GPUs, tests/test_plan_context.py).
PLANS = [("llama-2-7b", 16, 64, 4096), ("mixtral-8x7b", 16, 16, 2048), ("gpt2-xl", 20, 20, 1024)]


@pytest.mark.parametrize("model, gpus, batch, seq", PLANS)
def test_random_rows_of_a_vectorized_plan_equal_estimate_one_by_one(model, gpus, batch, seq) -> None:
    rows = plan(model, 80 * 10**9, batch, seq, gpus, options=Options(gpu="h100-sxm"), top=10**6)
    assert rows.fit >= len(rows) > 20 and rows.evaluated >= rows.fit  # >=: cp > 1 rows only where they pay
    picked = []
    if model == "gpt2-xl":  # the uneven stages are among the rows compared
        picked = [x for x in rows if x.options.get("first_stage_layers")][:4]
        assert {x.options["pp"] for x in picked} & {5, 10}
    if model == "mixtral-8x7b":  # and expert parallelism
        picked = [x for x in rows if x.options.get("ep", 1) > 1][:4]
        assert len(picked) == 4
    picked += random.Random(25).sample(list(rows), 12)
    for x in picked:
        est = estimate(model, **x.options)
        timing = time_of(est)
        m = x.options.get("micro_batches", 1)
        assert x.total_bytes == est.number("total_bytes")
        assert x.flops_per_gpu == est.number("hardware_flops_per_gpu") * m
        for got, want in ((x.step_time_s, timing.step_s), (x.mfu, timing.mfu), (x.tokens_per_s, timing.tokens_per_s)):
            assert math.isclose(got, want, rel_tol=1e-9), (x.options, got, want)


def test_the_cli_reports_the_layouts_evaluated_and_the_rate() -> None:
    args = ["plan", "--model", "llama-2-7b", "--gpus", "8", "--gpu", "h100-sxm", "--seq", "2048", "--global-batch",
            "16"]
    data = json.loads(_cli(*args, "--json"))
    assert data["layouts_evaluated"] >= data["layouts_fit"] >= len(data["layouts"]) > 0
    assert data["layouts_per_s"] == pytest.approx(data["layouts_evaluated"] / data["plan_seconds"])
    text = _cli(*args)
    assert f"evaluated {data['layouts_evaluated']:,} layouts ({data['layouts_fit']:,} fit" in text
    assert "layouts/s" in text


def test_a_branch_the_layouts_do_not_share_is_refused() -> None:
    """A column's truth value is its rows' when they agree; a branch that differs row by row raises, never picks
    one side for all (the time model's per-layout choices go through derivations.columns' where/maximum)."""
    t = column([2, 4, 8])
    assert bool(t > 1) and not bool(t > 8)
    with pytest.raises(ColumnBranch):
        bool(t > 2)


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "memderive.commands.cli", *args], capture_output=True, text=True, check=True)
    return done.stdout


def test_a_row_fits_when_estimate_says_its_device_bytes_fit() -> None:
    """Device bytes count NCCL's buffers of each communicator, fewer for a group of 2 ranks than for a larger one
    (runtime.nccl_bytes). A plan once timed rows of cp 4 with those of a structure's first row (cp 2), so this
    llama-2-13b layout on 32 H100s passed as fitting: estimate puts its device bytes past the 80 GiB. (The row was
    micro-batch 4 of 16, v 2, until ZeRO sharded over d x cp = 16 ranks, as Megatron-LM's distributed optimizer
    does: that row now needs 64.1 GiB; micro-batch 8 of 8 needs 90.9 GiB.)"""
    capacity = 80 * 2**30
    row = {"mode": "train", "batch": 8, "seq": 4096, "pp": 2, "dp": 4, "cp": 4, "zero": 2, "flash": True,
           "micro_batches": 8, "gpu": "h100-sxm"}
    assert budget_bytes(estimate("llama-2-13b", **row))[0] > capacity
    rows = plan("llama-2-13b", capacity, 256, 4096, 32, options=Options(gpu="h100-sxm"), top=10**6,
                cp_pays=False)  # every cp row that fits, paying or not
    assert row not in [x.options for x in rows]
    context = [x for x in rows if x.options.get("cp", 1) > 1]
    assert {x.options["cp"] for x in context} >= {2, 4}
    for x in random.Random(13).sample(context, 8):
        assert budget_bytes(estimate("llama-2-13b", **x.options))[0] <= capacity


@pytest.mark.parametrize("given", [{"kernels": "eager"}, {"grad_sync": "deepspeed"}])
def test_rows_of_an_eager_or_deepspeed_plan_equal_estimate_one_by_one(given) -> None:
    """--kernels eager adds the unfused kernels' traffic per micro-batch (memory_bound.py), and ZeRO-3 rows their
    copies; --grad-sync deepspeed the fp32 accumulation and the reductions after the last backward: the columns'
    time is the scalar path's, ZeRO-3 rows among those compared."""
    rows = plan("llama-2-7b", 80 * 10**9, 64, 4096, 16, options=Options(gpu="h100-sxm", **given), top=10**6)
    picked = [x for x in rows if x.options.get("zero") == 3][:4] + random.Random(24).sample(list(rows), 8)
    assert len(picked) == 12
    for x in picked:
        est = estimate("llama-2-7b", **{**given, **x.options})
        timing = time_of(est)
        if "kernels" in given:
            assert timing.eager_s > 0 and (timing.zero3_copy_s > 0) == (x.options.get("zero") == 3)
        else:
            assert timing.fp32_accumulation_s > 0
        assert math.isclose(x.step_time_s, timing.step_s, rel_tol=1e-9), (x.options, x.step_time_s, timing.step_s)


def test_rows_of_a_block_recompute_plan_equal_estimate_one_by_one() -> None:
    """Megatron's block method (--recompute-layers 2 of each chunk's layers): the share full recompute reruns
    (``Options.recompute_share``, ``options.block_share``) over a plan's columns of p and v is each row's own, in the
    TP and CP terms that rerun with it; rows under pipeline stages (interleaved too) with tp > 1 compared."""
    given = {"recompute": "full", "recompute_method": "block", "recompute_layers": 2}
    rows = plan("llama-2-7b", 80 * 10**9, 32, 4096, 16, options=Options(gpu="h100-sxm", **given), top=10**6)
    full = [x for x in rows if x.options.get("recompute") == "full"]
    picked = ([x for x in full if x.options.get("virtual_stages")][:3]
              + [x for x in full if x.options.get("pp") and x.options.get("tp")][:3] + random.Random(26).sample(full, 4))
    assert len(picked) == 10
    for x in picked:
        timing = time_of(estimate("llama-2-7b", **{**given, **x.options}))
        assert math.isclose(x.step_time_s, timing.step_s, rel_tol=1e-9), (x.options, x.step_time_s, timing.step_s)


def test_rows_of_a_megatron_moe_plan_equal_estimate_one_by_one() -> None:
    """Megatron-Core's copies of the routed rows (memory_bound.LOCAL_SORT_MOVES where E/ep > 1, FP8_PAD_MOVES under
    fp8) differ with ep across one structure's layouts: Mixtral 8x7B's rows at ep 1, 2, 4 sort, at ep 8 (one expert
    a GPU) not; each row's time is the scalar path's."""
    given = {"framework": "megatron", "fp8": "te-current"}
    base = Options(mode="train", batch=1, seq=1024, gpu="h100-sxm", **given)
    rows = plan("mixtral-8x7b", 10**12, 8, 1024, 8, options=base, top=10**6, recomputes=("none",), zeros=(1,))
    by_ep: dict[int, Any] = {}
    for x in rows:
        by_ep.setdefault(x.options.get("ep", 1), x)
    assert {2, 8} <= set(by_ep)
    for x in by_ep.values():
        timing = time_of(estimate("mixtral-8x7b", **{**given, **x.options}))
        assert math.isclose(x.step_time_s, timing.step_s, rel_tol=1e-9), (x.options, x.step_time_s, timing.step_s)
