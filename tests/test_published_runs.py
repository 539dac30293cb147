"""memderive's step time against published measured runs (``tests/published_runs.py``; the table prints with
``python benchmarks/published_runs.py``): at least 8 runs from at least 3 papers, each with its layout, batch,
sequence and measured time. The constants of the time model (``efficiency.CALIBRATIONS``) are fitted once per GPU
over the in-sample runs (``FITTED``), never per run: there the median error is at most 10%, the worst at most 20%.
The held-out runs (``HELD_OUT``: Llama 3 405B, BLOOM, torchtitan) were never fitted on; issue 24 asks the same bounds
of them, which the model does not meet today (the strict xfail below says by how much and why)."""

from __future__ import annotations

import statistics

import pytest

from tests.published_runs import FITTED, HELD_OUT, RUNS, predict


def test_the_table_names_its_runs() -> None:
    assert len(RUNS) >= 8 and len({r.source for r in RUNS}) >= 3
    for run in RUNS:
        assert run.source and run.seq > 0 and run.global_batch > 0 and run.gpus > 0
        # a step time, a FLOP/s or a tokens/s throughput: exactly one
        assert [run.measured_s, run.tflops_per_gpu, run.tokens_per_s_per_gpu].count(None) == 2
        assert run.estimate().options.micro_batches == run.layout.get("micro_batches")


def test_predicted_step_times_are_within_bounds_in_sample() -> None:
    errors = [abs(predict(run).error) for run in FITTED]
    assert statistics.median(errors) <= 0.10
    assert max(errors) <= 0.20


def test_the_held_out_runs_are_named_and_kept_out_of_the_fit() -> None:
    assert len(HELD_OUT) >= 8 and len({r.source.split(",")[0] for r in HELD_OUT}) >= 3
    assert all(r.held_out for r in HELD_OUT) and not any(r.held_out for r in FITTED)
    assert {id(r) for r in RUNS} == {id(r) for r in FITTED} | {id(r) for r in HELD_OUT}


def test_held_out_errors_do_not_grow() -> None:
    """A guard, not the issue's demand: the held-out figures measured when the table was added (median 17.0%, worst
    44.7%, python benchmarks/published_runs.py) must not get worse."""
    errors = [abs(predict(run).error) for run in HELD_OUT]
    assert statistics.median(errors) <= 0.18
    assert max(errors) <= 0.45


@pytest.mark.xfail(strict=True, reason="held out, the model misses issue 24's bounds: Llama 3 405B +18% to +45% "
                   "(its interleaving is not published: v = 1 leaves a 47-94% bubble), torchtitan's 500 W H100s "
                   "-39% (no H100 run is fitted: the A100 constants scaled by the ridge point give 73% matmul "
                   "efficiency), torchtitan's A100 FSDP runs -10% to -17%")
def test_held_out_runs_meet_the_issues_bounds() -> None:
    errors = [abs(predict(run).error) for run in HELD_OUT]
    assert statistics.median(errors) <= 0.10
    assert max(errors) <= 0.20


def test_a_throughput_turns_into_the_step_time_it_implies() -> None:
    """Narayanan et al. 2021 Table 1, 1.7B: 137 TFLOP/s per GPU on 32 GPUs, batch 512 of 2048 tokens, counted
    with Eq. 3: F = 96 B s l h^2 (1 + s/6h + V/16lh) = 96 * 512 * 2048 * 24 * 2304^2 * (1 + 2048/13824
    + 51200/884736) = 1.5461e16 FLOPs, over 137e12 * 32: 3.527 s."""
    run = next(r for r in RUNS if r.name.startswith("1.7B"))
    eq3 = 96 * 512 * 2048 * 24 * 2304**2 * (1 + 2048 / (6 * 2304) + 51200 / (16 * 24 * 2304))
    assert abs(run.measured() - eq3 / (137e12 * 32)) < 1e-9 * run.measured()


def test_tokens_per_second_turn_into_the_step_time_they_imply() -> None:
    """torchtitan Table 1: 5,762 tokens/s per GPU on 8 H100s, global batch 16 of 8,192 tokens:
    16 * 8192 / (5762 * 8) = 2.8434 s per step."""
    run = next(r for r in HELD_OUT if r.name == "8B FSDP d8")
    assert abs(run.measured() - 16 * 8192 / (5762 * 8)) < 1e-12
