"""memderive's step time against published measured runs (``tests/published_runs.py``; the table prints with
``python benchmarks/published_runs.py``): at least 8 runs from at least 3 papers, each with its layout, batch,
sequence and measured time. Since issue 39 no constant of the time model is fitted to any run: matmuls at the MAMF
(at the sustained MSMF on the H100 SXM, H200 and B200) and OpenXLA's per-shape GEMM table, FlashAttention at its
papers' rates, elementwise kernels' bytes at the bandwidth BabelStream's Triad reaches (the rated one where none is
measured) (``efficiency``, ``memory_bound``). The Megatron-LM runs the old constants were fitted on (``FITTED``) are
now held out as well: median 6.0%, worst 9.1% with each collective inside an A100 node at NCCL's own ring model
(nccl_cost.node_ring_s; 5.9% and 13.0% at the rated ring, python benchmarks/published_runs.py; 7.8% and 15.2% at
the rated memory bandwidth too). The other held-out runs (``HELD_OUT``: Llama 3 405B, BLOOM, torchtitan, Megatron-Bridge's fp8 Llama 3 on
H100, MT-NLG at three cluster sizes): median 10.9%, worst 16.8% over the 18 (18.2% before NCCL's ring model in an
A100 node), with the H100's matmuls at Bekman's
MSMF of 082816f (efficiency.MSMF), Megatron-FSDP's own buckets (memory_bound.MEGATRON_FSDP_BUFFERS) and torchtitan's
500 W H100s at their measured rates (published_runs._TT_500W); over all 37, median 6.1%, worst 16.8% (7.4% and
18.2% before NCCL's ring model in an A100 node). Before: the 18
at 14.9% and 18.2%, all predicted too fast but two; over all 37, median 9.7% and worst 18.2% once the data-parallel collectives that run hidden across nodes hold NCCL's SMs
(``nccl_cost.NCCL_SMS``; 9.9% and 18.5% before, the 18 then 14.8% and 18.5%; 9.7% before Transformer Engine's fp8 linears ran each at its own fp8 rate:
Megatron-Bridge's two fp8 H100 rows then +7.2% and +0.8%, now +11.7% and +3.1% (+11.8% and +3.3% before their
recipe's distributed optimizer, bf16 gradient reduction and no dropout, ``_BRIDGE_RECIPE``), +4.5% for the second before
Transformer Engine's sequence-parallel all-gathers moved 8-bit tensors; 11.4% and 20.7% at the rated bandwidth; 11.4% and 22.1% with the H100's matmuls
at the burst MAMF too). Before MT-NLG's three DeepSpeed rows (17.9-20.7% too fast then) joined: 34 runs, median 9.7%
(9.6% before NCCL's own cost model across nodes, nccl_cost), held-out 14.7%. Issue 39's worst bound (25%) and its
median (10%) hold over the 37."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities import efficiency, timing
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.symbolic.userbuffers import UB_CONFIGS

from tests.published_runs import DGXC, DGXC_LLAMA, NARAYANAN_PTD
from tests.published_runs import (BRIDGE, BRIDGE_DENSE_GAP, BRIDGE_LORA, BRIDGE_SFT, DENSE_APART, FITTED, HELD_OUT,
                                  NEMO_2407, PLAN_SLACK, RUNS, SCALING, TITAN_2025_GAP, TITAN_FLOAT8_GAP,
                                  TORCHTITAN_2025, TORCHTITAN_FLOAT8, ZERO3_2021, ZERO3_GAP, plan_against, predict)


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


#: Measured once the fitted constants were removed (issue 39; python benchmarks/published_runs.py): held-out median
#: 15.4%, worst 22.7% over the 13 runs (Llama 3 405B on 16,384 H100s, -22.7%; the other H100 runs 17-23% too fast, the
#: torchtitan A100 runs 9-15%, BLOOM 15%); 15.0% and 22.7% with Megatron-Bridge's two fp8 rows (-4.1%, -10.4%); 15.0%
#: and 21.7% once each TP all-reduce on H100s runs at OpenXLA's measured speed of its size (cluster.all_reduce_fraction);
#: 14.6% and 21.2% once FSDP's first all-gather and last reduce-scatter are exposed (timing.fsdp_edge_share); 15.0%
#: and 22.0% once the k projection torchtitan's selective-op checkpointing recomputes alone runs at its real M; 14.7%
#: and 22.1% with NCCL's own cost model for collectives across nodes (nccl_cost); over the 18 (MT-NLG's rows joined),
#: 16.3% and 22.1%, then 15.1% and 20.7% with the H100's matmuls at the sustained rate (efficiency.MSMF), 13.7% and
#: 18.5% with the memory-bound kernels at BabelStream's measured Triad bandwidth (memory_bound.achievable_bandwidth);
#: 13.2% and 18.2% with Bekman's MSMF table of 082816f (the H100 at 708.5 / 1,243.7 TFLOP/s bf16 / fp8, was 745 /
#: 1,287) and Megatron-FSDP copying no gathered weight nor gradient (memory_bound.MEGATRON_FSDP_BUFFERS); 10.9% and
#: 18.2% with torchtitan's 500 W H100s at the rates measured on Meta's 500 W H100s (published_runs._TT_500W).
#: Before, with E and w_half fitted on the Megatron-LM runs: median 4.1%, worst 10.8% over the 13.
HELD_OUT_FIGURES = ("held-out median 10.9%, worst 16.8% over 18 runs with no fitted constant (issue 39; 18.2% worst "
                    "before NCCL's ring model in an A100 node; 13.2% with "
                    "torchtitan's 500 W H100s at the 700 W rates; 14.9% and 18.2% "
                    "with the H100's bf16 matmuls at 745 TFLOP/s, before Bekman's MSMF table of 082816f; 14.8% and "
                    "18.5% before the hidden data-parallel collectives held NCCL's SMs; 15.1% and 20.7% "
                    "at the rated memory bandwidth, 16.3% and 22.1% with the H100 at its burst MAMF too; 14.7% over the "
                    "15 before MT-NLG's rows); 4.1% and 10.8% fitted over 13")


@pytest.mark.xfail(strict=True, reason=f"issue 24's guard (median <= 6%, worst <= 11%) held for the fitted model; "
                   f"{HELD_OUT_FIGURES}")
def test_held_out_errors_do_not_grow() -> None:
    """A guard, not the issue's demand: the held-out figures must not get worse than measured with the fitted
    constants (median 4.1%, worst 10.8%). Without them (issue 39) they are 10.9% and 16.8%: strict, so a model that
    meets the old guard again shows as an XPASS."""
    errors = [abs(predict(run).error) for run in HELD_OUT]
    assert statistics.median(errors) <= 0.06
    assert max(errors) <= 0.11


def test_the_held_out_runs_meet_the_issues_worst_bound() -> None:
    """Issue 24's worst bound (20%) over the 18 held-out runs: measured 16.8% (MT-NLG 530B on 3,360 A100s, too fast;
    18.2% before each collective in an A100 node ran at NCCL's own ring model, nccl_cost.node_ring_s);
    Megatron-Bridge's 8B FSDP fp8 row +14.1% with its recipe's fp8 primary weights (their transposes made again in
    each micro-batch, Megatron-FSDP dropping them with each bucket), +13.4% before, with Megatron-FSDP's gathers and
    reduce-scatters in its own buckets (memory_bound.MEGATRON_FSDP_BUFFERS), +18.8% while its copies were timed as
    torch FSDP's; 18.2% at 745 / 1,287
    TFLOP/s too (18.5% before the hidden data-parallel
    collectives held NCCL's SMs, torchtitan's 8B with torch.compile on 128 H100s); it failed at 20.7% with the memory-bound kernels at the rated bandwidth, 22.1% with the H100's matmuls
    at the burst MAMF too."""
    errors = [abs(predict(run).error) for run in HELD_OUT]
    assert max(errors) <= 0.20


@pytest.mark.xfail(strict=True, reason=f"issues 24 and 39's median bound (10%); {HELD_OUT_FIGURES}")
def test_held_out_runs_meet_the_issues_median_bound() -> None:
    errors = [abs(predict(run).error) for run in HELD_OUT]
    assert statistics.median(errors) <= 0.10


def test_every_run_is_within_issue_39s_25_percent() -> None:
    """Issue 39: every run within 25% with no constant fitted to a run. Measured: worst 16.8% over the 37 runs of both
    tables (MT-NLG 530B on 3,360 A100s, too fast; 18.2% before NCCL's ring model in an A100 node; 18.5%, torchtitan's 8B with torch.compile on 128 H100s, before the hidden data-parallel collectives held
    NCCL's SMs); 20.7% (MT-NLG on 3,360 A100s) with the memory-bound
    kernels at the rated bandwidth; 22.1% with the H100's matmuls at the burst MAMF too."""
    errors = [abs(predict(run).error) for run in RUNS]
    assert max(errors) <= 0.25


def test_the_median_over_every_run_meets_issue_39() -> None:
    """Issue 39's median (10%) over the 37 runs of both tables, with no constant fitted to a run: measured 6.1% with
    each collective inside an A100 node at NCCL's own ring model (nccl_cost.node_ring_s), 7.4% before, with
    torchtitan's 500 W H100s at their measured matmul rates (published_runs._TT_500W); 9.7% with every H100's matmuls
    at Bekman's MSMF table of 082816f (efficiency.MSMF: 708.5 / 1,243.7 TFLOP/s bf16 / fp8); 9.7%
    at 745 / 1,287 once the hidden data-parallel collectives across nodes hold NCCL's SMs (``nccl_cost.NCCL_SMS``);
    9.9% before (9.7%
    before each Transformer Engine fp8 linear ran at the fp8 rate of its own shape, not the layer's average) with
    the memory-bound kernels at BabelStream's measured Triad bandwidth (memory_bound.achievable_bandwidth) and the
    H100's matmuls at the sustained MSMF; 11.4% at the rated bandwidth. Over the 34 before MT-NLG: 9.6%
    (10.5% over the 32 before Megatron-Bridge's two fp8 H100 rows were added, 9.99% with them, 9.5% once the TP
    all-reduces on H100s run at their measured speed, 9.49% with FSDP's exposed edges, 9.6% with the k projection
    that selective-op checkpointing recomputes alone at its real shape, 9.7% with NCCL's cost model across nodes;
    11.4% over 37 with MT-NLG at three cluster sizes, 17.9-20.7% too fast). The held-out runs alone are at 10.9%
    (``test_held_out_runs_meet_the_issues_median_bound``, xfail)."""
    errors = [abs(predict(run).error) for run in RUNS]
    assert statistics.median(errors) <= 0.10


def test_one_recipe_slows_down_per_gpu_as_its_cluster_grows() -> None:
    """Issue 39: 'measured runs slow down 1-5% from a small to a large cluster of the same recipe; memderive predicts
    flat'. MT-NLG 530B (Smith et al. 2022 §2.4), global batch 1,920 on 2,240, 2,800 and 3,360 A100s: 60.1, 50.2 and
    44.4 s, step times 0.835 and 0.739 of the first (126, 121, 113 TFLOP/s per GPU). The model's: 0.828 and 0.713
    (the 1F1B bubble, 34/m of the micro-batches' time, grows as m = 1,920/d falls from 240 to 160; NCCL's rings
    lengthen with d). Within 0.03 of the measured ratios, and per GPU slower, not flat: the measured throughput per
    GPU falls 9.8% from 2,240 to 3,360 GPUs, the model's by more than 5%."""
    measured = [run.measured() for run in SCALING]
    predicted = [predict(run).predicted_s for run in SCALING]
    assert [round(x / measured[0], 3) for x in measured] == [1.0, 0.835, 0.739]
    for m, p in zip(measured[1:], predicted[1:]):
        assert abs(p / predicted[0] - m / measured[0]) <= 0.03
    per_gpu = (predicted[0] * SCALING[0].gpus) / (predicted[-1] * SCALING[-1].gpus)
    assert per_gpu < 0.95


def test_no_constant_of_the_time_model_is_fitted_to_runs() -> None:
    """Issue 39: the matmul rates are kernel benchmarks' at shapes past 4,096: the MAMF table's (Bekman: A100 SXM
    271.2 TFLOP/s), or the sustained rate where one is measured (Bekman's MSMF: H200 708.5; the H100 SXM, the same
    die at the same 700 W, "the same" burst in the MAMF table: 708.5), and the benchmark script reads no run time to
    fit (its --fit is gone)."""
    assert not hasattr(efficiency, "CALIBRATIONS") and not hasattr(efficiency, "H100_OVER_A100")
    assert efficiency.matmul_rate(gpu("a100-80gb"), "bf16", 8192, 8192, 8192) == pytest.approx(271.2e12)
    assert efficiency.matmul_rate(gpu("h100-sxm"), "bf16", 8192, 8192, 8192) == pytest.approx(708.5e12)
    script = (Path(__file__).resolve().parents[1] / "benchmarks" / "published_runs.py").read_text()
    assert "--fit" not in script and "refit" not in script


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


#: The runs whose published layout the planner's best beats by more than 15% (python benchmarks/published_runs.py
#: --plan prints each), each investigated: why the planner's pick is faster in the time model than on the cluster.
#: Megatron-LM's model states are its own (published_runs.megatron_states, --framework megatron): Narayanan et al.
#: ran fp16 (sc21/CONFIG.sh), a 16-bit gradient buffer and an fp32 copy in the optimizer step, 20 B per parameter at
#: the step; MegaScale bf16 with the fp32 main_grad buffer, 6 + 12/d under the distributed optimizer. With them the
#: 18.4B's old pick (t2 p2 v4 d64: 4.6 G parameters x 20 B = 85.7 GiB at the step) no longer fits and MegaScale's
#: published layout is within 15% (1.148). Table 1's 18.4B (t8 p1) and 39.1B (t8 p2) left this list once each
#: product runs at a curve of its own per-GPU narrow side (efficiency.gemm_efficiency) instead of every product at
#: one curve of h/t, which made t2 1.27x as fast as t8 at h 6144 (now 1.12x): their ratios went 1.253 -> 1.142 and
#: 1.174 -> 1.103 (python benchmarks/published_runs.py --plan). Korthikanti et al.'s 1T under full recompute (t8 p64)
#: left it once the planner's options (the run's recipe, no preset) count the optimizer's fp32 copy of the 16-bit
#: gradients Megatron-Core makes without the precision-aware optimizer (options.Options._megatron_copies_grads):  the
#: planner's best is now t8 p64 v2, 1.136x (was t8 p32 v4 d2, 1.210x; python benchmarks/published_runs.py --plan).
#: With every collective in an A100 node at NCCL's own ring model (nccl_cost.node_ring_s), which brought Table 1's
#: t8 rows within 9.1% of their measured times (13.0% before), the planner's smaller t gains: 7.5B 1.111 -> 1.154
#: (joined), 18.4B 1.150 -> 1.232, 39.1B 1.106 -> 1.150 (at the edge, within).
PLAN_OFF = {
    "18.4B t8 p1 d32": "the planner's t2 p4 v2 is 1.232x faster (1.150x with the TP all-reduces at the rated ring, "
                       "1.148x with the memory-bound kernels at the rated bandwidth too): each of t8's all-reduces in "
                       "an A100 node at NCCL's own ring model (nccl_cost.node_ring_s), and, without sequence "
                       "parallelism (Megatron-LM of 2021), each of t ranks runs the norms, dropout and residual adds "
                       "on the whole activations, memory-bound work t8 does not divide",
    "7.5B t4 p1 d32": "the planner's t2 d64 at micro-batch 8 is 1.154x faster (1.111x with the TP all-reduces at the "
                      "rated ring): each of t4's all-reduces in an A100 node at NCCL's own ring model "
                      "(nccl_cost.node_ring_s); Table 1 gives no micro-batch size (the row's 1 is assumed)",
}
#: Runs where the planner finds nothing that fits (``NothingFits``), with why.
#: Runs whose every layout memderive puts past the memory (none since issue 37: the Llama 3 405B 131K layout, 3.1 GB
#: over with SwiGLU unfused, fits once Megatron-LM's fused SwiGLU keeps only its input; 75,037,175,808 B,
#: tests/test_llama3_long_context_memory.py).
PLAN_NOTHING_FITS: dict[str, str] = {}


def _against_plan(run):  # noqa: ANN001, ANN202 (a Run; pytest.param)
    from memderive.derivations.search.plan import NothingFits

    if run.name in PLAN_OFF:
        return pytest.param(run, id=run.name, marks=pytest.mark.xfail(strict=True, reason=PLAN_OFF[run.name]))
    if run.name in PLAN_NOTHING_FITS:
        return pytest.param(run, id=run.name, marks=pytest.mark.xfail(strict=True, raises=NothingFits,
                                                                      reason=PLAN_NOTHING_FITS[run.name]))
    return pytest.param(run, id=run.name)


@pytest.mark.slow
@pytest.mark.parametrize("run", [_against_plan(r) for r in RUNS])
def test_the_published_layout_is_within_15_percent_of_the_planners_best(run) -> None:  # noqa: ANN001
    """Issue 24: for each run, the published layout within 15% of the planner's best for that cluster
    (``published_runs.plan_against``: the planner on the run's GPUs, network, batch and recipe, recompute fixed at the
    run's). The published layout's time is its own estimate's (``predict``), the planner's its best row's. About
    0.5-1.5 s a run (slow: 30 plans, some thousand layouts each)."""
    comparison = plan_against(run)
    assert comparison.ratio <= PLAN_SLACK, (
        f"{run.name}: published {comparison.published_s:.2f} s, planner's best {comparison.best.step_time_s:.2f} s "
        f"({comparison.ratio:.3f}x) with {comparison.best.options}")


def test_the_planner_compares_the_published_layout_it_passes() -> None:
    """On Korthikanti et al.'s 1T with selective recompute the published t8 p64 m512 is in the planner's space and
    nothing else fits as fast: the planner's best is that layout, at the published layout's own time (ratio 1)."""
    one_t = next(r for r in RUNS if r.name == "1T t8 p64 sp+sel")
    comparison = plan_against(one_t)
    assert comparison.ratio == pytest.approx(1.0, abs=1e-9)
    assert comparison.best.options["pp"] == 64 and comparison.best.options["tp"] == 8


def test_the_zero3_rows_are_table_2s() -> None:
    """Narayanan et al. 2021 Table 2, ZeRO-3 without model parallelism: GPUs x micro-batch is the global batch
    (1,536; 2,560* for the enlarged 530B row; 2,240), and the TFLOP/s imply, with Eq. 3, F = 96 B s l h^2 (1 + s/6h
    + V/16lh): 175B at 384 GPUs, 144 TFLOP/s: 96 * 1536 * 2048 * 96 * 12288^2 * (1 + 2048/73728 + 51200/18874368)
    = 4.5110e18 FLOPs / (144e12 * 384) = 81.58 s; 530B at 2,240 GPUs, 48 TFLOP/s: 96 * 2240 * 2048 * 105 * 20480^2
    * (1 + 2048/122880 + 51200/34406400) = 1.9748e19 / (48e12 * 2240) = 183.7 s. They are held out (never fitted)
    and outside the bounds of ``HELD_OUT`` (``ZERO3_GAP``)."""
    assert [(r.gpus, r.global_batch) for r in ZERO3_2021] == [(384, 1536), (768, 1536), (1536, 1536), (640, 2560),
                                                               (1120, 2240), (2240, 2240)]
    f175 = 96 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / 73728 + 51200 / 18874368)
    f530 = 96 * 2240 * 2048 * 105 * 20480**2 * (1 + 2048 / 122880 + 51200 / 34406400)
    assert ZERO3_2021[0].measured() == pytest.approx(f175 / (144e12 * 384), rel=1e-9)
    assert ZERO3_2021[-1].measured() == pytest.approx(f530 / (48e12 * 2240), rel=1e-9)
    assert all(r.held_out and r.layout["zero"] == 3 and r.layout["framework"] == "deepspeed" for r in ZERO3_2021)
    assert not {id(r) for r in ZERO3_2021} & {id(r) for r in RUNS}


def test_the_ptd_rows_of_table_2_meet_issue_39s_bounds() -> None:
    """Narayanan et al. 2021 Table 2's PTD-P rows, the ZeRO-3 rows' models and batches at t8 p12 (174.6B: 384, 768
    and 1,536 GPUs at 153, 149 and 141 TFLOP/s) and t8 p35 (529.6B: 560, 1,120 and 2,240 at 171, 167 and 159),
    micro-batch 1. The first by hand: Eq. 3's 96 x 1,536 x 2,048 x 96 x 12,288^2 x (1 + 2,048/73,728 +
    51,200/18,874,368) FLOPs over 153e12 x 384 = 76.78 s. Issue 39's bounds, each within 25% and the median within
    10%: measured 6.4-8.6% too fast, median 7.9% (python benchmarks/published_runs.py; 8.2-11.8% too fast, median
    10.4%, with an A100 node's collectives at the rated ring, before nccl_cost.node_ring_s)."""
    assert [(r.gpus, r.global_batch, r.layout["tp"], r.layout["pp"], r.layout["batch"]) for r in NARAYANAN_PTD] == [
        (384, 1536, 8, 12, 1), (768, 1536, 8, 12, 1), (1536, 1536, 8, 12, 1), (560, 2240, 8, 35, 1),
        (1120, 2240, 8, 35, 1), (2240, 2240, 8, 35, 1)]
    f175 = 96 * 1536 * 2048 * 96 * 12288**2 * (1 + 2048 / 73728 + 51200 / 18874368)
    assert NARAYANAN_PTD[0].measured() == pytest.approx(f175 / (153e12 * 384), rel=1e-9)
    assert NARAYANAN_PTD[0].measured() == pytest.approx(76.78, abs=0.005)
    assert all(r.held_out for r in NARAYANAN_PTD) and not {id(r) for r in NARAYANAN_PTD} & {id(r) for r in RUNS}
    errors = [abs(predict(run).error) for run in NARAYANAN_PTD]
    assert max(errors) <= 0.25 and statistics.median(errors) <= 0.10


@pytest.mark.parametrize("run", [pytest.param(r, id=r.name, marks=pytest.mark.xfail(strict=True, reason=ZERO3_GAP))
                                 for r in ZERO3_2021])
def test_deepspeed_zero3_of_2021_within_20_percent(run) -> None:  # noqa: ANN001
    """Issue 24's worst bound on Narayanan et al.'s ZeRO-3 rows: every one fails it today (the model predicts
    34-79% too fast: compute alone, the traffic hidden; python benchmarks/published_runs.py), strict so that a
    model that captures them shows as an XPASS and the rows join ``HELD_OUT``."""
    assert abs(predict(run).error) <= 0.20


def test_the_apart_fp8_rows_are_the_pages() -> None:
    """Megatron-Bridge docs/performance-summary.md (25.11, 25.09 and 26.02 NeMo containers), NeMo 24.07's
    performance_summary.md and NeMo's performance_long_sequence.md (Llama 2 7B on H100), read by hand: each row's #-GPUs and GBS, in the order of ``DENSE_APART``. 8B on DGX-B200
    at 25.11: 30,624 tokens/s per GPU on 8 GPUs, GBS 128 of 8,192 tokens: 128 * 8192 / (30624 * 8) = 4.2800 s. GB200
    rows sit on one NVL72 domain (72 GPUs per NVLink domain), the others on 8-GPU nodes. Llama 3.1 405B's 126 layers
    on the H100 row (PP 8 x VP 8, embedding and loss counted as a layer each): 128 / 64 = 2 per chunk, 8 x 2 - 1 = 15
    on the first and the last stage. DGX-GB300 (25.11: 8B FP8-CS and FP8-MX on 8 GPUs, GBS 128; 405B FP8-CS on 256,
    GBS 1,536; 26.02: 70B MXFP8 on 64, GBS 256; 405B FP8 and MXFP8 on 256, GBS 1,536; 26.04.01, in
    docs/performance-summary-archive.md: 70B FP8 with FSDP on 64, GBS 256), also on NVL72; DGX-GB200
    26.02: 405B FP8 on 256, GBS 1,536 (TP 4 x PP 16 leaves DP 4: 1,536 / 4 = 384 micro-batches of 1). 405B FP8-CS
    on GB300 at 25.11: 1,536 x 8,192 / (999 x 256) = 49.2012 s; TP 2 x PP 8 x CP 2 leaves DP 8, 1,536 / 8 = 192
    micro-batches of 1; PP 8 x VP 4: 128 / 32 = 4 per chunk, 4 x 4 - 1 = 15 on the first and the last stage. NeMo 24.07
    (8e3d65dcfe): GPT3-5B 64 GPUs GBS 2,048, GPT3-20B 64 / 256, Nemotron-8B 64 / 256, Nemotron-22B 64 / 256,
    Nemotron-340B 128 / 32 (TP 8 x PP 8 leaves DP 2: 32 / 2 = 16 micro-batches of 1): 32 x 4,096 / (326 x 128) =
    3.1411 s."""
    assert [(r.gpus, r.global_batch) for r in DENSE_APART] == [
        (8, 128), (8, 128), (8, 128), (8, 128), (128, 64), (128, 64), (256, 1536), (64, 128), (128, 64), (1024, 512),
        (64, 256), (256, 1536), (256, 1536), (64, 256), (1024, 1536),
        (128, 64), (64, 256),
        (8, 128), (8, 128), (256, 1536), (64, 256), (256, 1536), (256, 1536), (64, 256),
        (8, 128), (16, 128), (64, 128), (8, 128), (64, 128), (128, 256), (512, 2048),
        (64, 2048), (64, 256), (64, 256), (64, 256), (128, 32),
        (4, 1024), (8, 512), (16, 256), (32, 128), (64, 64), (128, 32), (256, 16), (512, 8), (1024, 4)]
    b200 = next(r for r in DENSE_APART if r.name == "L3 8B MCore d8 fp8cs B200")
    assert b200.measured() == pytest.approx(128 * 8192 / (30624 * 8), rel=1e-12)
    h100 = next(r for r in DENSE_APART if r.name == "L3.1 405B t8 p8 c2 v8 fp8cs H100")
    assert (h100.layout["first_stage_layers"], h100.layout["last_stage_layers"]) == (15, 15)
    gb300 = next(r for r in DENSE_APART if r.name == "L3.1 405B t2 p8 c2 v4 fp8cs GB300")
    assert gb300.measured() == pytest.approx(49.2012, abs=1e-4)
    nemotron = next(r for r in DENSE_APART if r.name == "Nemotron 340B NeMo t8 p8 v12 fp8")
    assert (nemotron.layout["micro_batches"], nemotron.measured()) == (16, pytest.approx(3.1411, abs=1e-4))
    # the CPU activation offload rows: 405B FP8-CS of 25.09, TP 2 on 128 GPUs leaves DP 64, GBS 64 = one micro-batch
    # of 1: 64 x 8,192 / (729 x 128) = 5.6187 s; 70B FP8 of 26.02, DP 64, MBS 2: 256 / (2 x 64) = 2 micro-batches,
    # 256 x 8,192 / (4,040 x 64) = 8.1109 s; GB300 70B FP8 of 26.04.01 the same layout offloading 20 of 80 layers
    # (v0.4.2 llama3_workload_base_configs.py L211-216): 256 x 8,192 / (5,248 x 64) = 6.2439 s
    off = {r.name: r for r in DENSE_APART if "offload" in r.name}
    assert {n: (r.layout["activation_offload_layers"], r.layout["micro_batches"], round(r.measured(), 4))
            for n, r in off.items()} == {"L3.1 405B t2 FSDP d64 offload95 fp8cs GB200": (95, 1, 5.6187),
                                         "L3 70B FSDP d64 offload40 b256 fp8cs GB200": (40, 2, 8.1109),
                                         "L3 70B FSDP d64 offload20 b256 fp8cs GB300": (20, 2, 6.2439)}
    assert (gb300.layout["micro_batches"], gb300.layout["first_stage_layers"], gb300.layout["last_stage_layers"]) == (
        192, 15, 15)
    assert all(r.cluster().gpus_per_node == (72 if r.gpu in ("gb200", "gb300") else 8) for r in DENSE_APART)
    assert all(r.held_out and r.layout["fp8"].startswith("te-") for r in DENSE_APART)
    assert all(r.estimate().options.micro_batches == r.layout["micro_batches"] for r in DENSE_APART)
    assert not {id(r) for r in DENSE_APART} & {id(r) for r in RUNS}


def test_bridges_sft_rows_are_the_pages() -> None:
    """Megatron-Bridge's 26.06 Llama 3 70B SFT rows (docs/performance-summary-archive.md, read by hand): 32 GPUs, GBS
    32, MBS 1, 4,096 tokens; GB300 TP 1 PP 2 VP 20 (DP 16: 32 / 16 = 2 micro-batches), GB200 PP 8 VP 10 (DP 4: 8),
    H100 TP 4 PP 4 VP 5 (DP 2: 16). GB300 FP8: 4,819 tokens/s per GPU, 32 x 4,096 / (4,819 x 32) = 0.84997 s; H100:
    32 x 4,096 / (1,638 x 32) = 2.50061 s. The recipe at v0.5.0: the distributed optimizer with fp8 parameter
    gathers, bf16 gradients copied to fp32 for the step, SP and TP overlap on the H100 (TP 4). They ran, so each fits
    its GPU (GB300 288 GB, GB200 186 GB, H100 80 GB) in memderive's device bytes."""
    assert [(r.gpu, r.gpus, r.global_batch, r.seq, r.layout["micro_batches"], r.layout["fp8"]) for r in BRIDGE_SFT] == [
        ("gb300", 32, 32, 4096, 2, "te-current"), ("gb300", 32, 32, 4096, 2, "te-mxfp8"),
        ("gb200", 32, 32, 4096, 8, "te-current"), ("gb200", 32, 32, 4096, 8, "te-mxfp8"),
        ("h100-sxm", 32, 32, 4096, 16, "te-current")]
    assert BRIDGE_SFT[0].measured() == pytest.approx(0.84997, abs=1e-5)
    assert BRIDGE_SFT[-1].measured() == pytest.approx(2.50061, abs=1e-5)
    for run in BRIDGE_SFT:
        e = run.estimate()
        assert run.held_out and (e.options.zero, e.options.fp8_param_gather, e.options.grad_buffer) == (
            1, True, "param+fp32")
        assert e.options.sp == e.options.tp_comm_overlap == (run.layout.get("tp", 1) > 1)
        assert e.number("total_bytes") <= gpu(run.gpu).memory_bytes
    assert not {id(r) for r in BRIDGE_SFT} & {id(r) for r in RUNS + DENSE_APART}


def test_bridges_sft_rows_meet_issue_39s_bounds() -> None:
    """Issue 39's bounds (median 10%, every run within 25%) on the SFT rows: median 7.9%, worst 14.4%, with the
    reduce-scatters and all-gathers in a node at NCCL's ring model (14.5% before, Cluster.node_ring); with the
    matmuls at Bekman's MSMF table of 082816f (efficiency.MSMF); 10.03% and 14.4%, every one too fast, with
    Transformer Engine's amax all-reduces timed (quantities/te_amax.py; 10.6% before them; 13.0% and 14.4% before a bulk overlap's SMs were timed while its transfer runs; 10.7% and 13.4% before Megatron-Core's interleaved sends ran behind compute) (python benchmarks/published_runs.py); strict, so a model that meets them shows as an XPASS."""
    errors = [abs(predict(run).error) for run in BRIDGE_SFT]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25


def test_dgxc_nemotron_rows_are_the_pages() -> None:
    """NVIDIA dgxc-benchmarking's Nemotron-4 "24.11" tables, read by hand (nemotron/README_340b.md and README_15b.md
    at 143b90dd91): 340B TP 8 PP 8 VP 12 MBS 1 GA 16 on 128-2,048 H100s, GBS 32-512 (128 / 64 = DP 2: 1 x 16 x 2 =
    32); 15B TP 4 MBS 4 GA 4 on 16-2,048, GBS 64-8,192 (16 / 4 = DP 4: 4 x 4 x 4 = 64); the
    "Training step time (seconds per step)" rows, BF16 then FP8. The recipe (nemotron/configure.sh at 35a9aecc8d):
    fp8 with fp8 params only in the FP8 rows, SP and TP overlap, the distributed optimizer; the 340B's synth yaml
    selective recompute and bf16 gradient reduction. They ran on 80 GB H100s, so each fits in memderive's bytes."""
    pages = ([(128 * 2**k, 32 * 2**k) for k in range(5)] * 2 + [(16 * 2**k, 64 * 2**k) for k in range(8)] * 2)
    steps = [4.61, 4.67, 4.7, 4.73, 4.84, 3.16, 3.21, 3.26, 3.34, 3.49,
             2.83, 2.86, 2.86, 2.89, 2.88, 2.92, 2.92, 2.96, 2.08, 2.07, 2.09, 2.08, 2.1, 2.12, 2.12, 2.18]
    assert [(r.gpus, r.global_batch) for r in DGXC] == pages and [r.measured() for r in DGXC] == steps
    assert [r.layout["fp8"] for r in DGXC] == ["none"] * 5 + ["te-delayed"] * 5 + ["none"] * 8 + ["te-delayed"] * 8
    for run in DGXC:
        e = run.estimate()
        big = run.layout["tp"] == 8
        assert run.held_out and run.seq == 4096 and run.gpu == "h100-sxm"
        assert (e.options.micro_batches, e.options.batch, e.options.pp) == ((16, 1, 8) if big else (4, 4, 1))
        assert (e.options.zero, e.options.sp, e.options.tp_comm_overlap) == (1, True, True)
        # neither synth yaml names a userbuffers config: the nemo:24.09 container's TE 1.10 defaults, no SM margin
        assert e.options.tp_comm_overlap_cfg == "te_v1"
        assert e.options.fp8_param_gather == (run.layout["fp8"] != "none")
        recipe = ("selective", "param+fp32") if big else ("none", "fp32")
        assert (e.options.recompute, e.options.grad_buffer) == recipe
        assert e.number("total_bytes") <= gpu(run.gpu).memory_bytes
    assert not {id(r) for r in DGXC} & {id(r) for r in RUNS + DENSE_APART + BRIDGE_SFT + BRIDGE_LORA}


def test_dgxc_nemotron_rows_meet_issue_39s_bounds() -> None:
    """Issue 39's bounds (median 10%, every run within 25%) on the dgxc Nemotron-4 rows: measured median 9.4%, worst
    21.6% (340B FP8 on 2,048 GPUs, too fast) with the H100's matmuls at Bekman's MSMF table of 082816f (708.5 / 1,243.7
    TFLOP/s bf16 / fp8, efficiency.MSMF); 12.4% and 23.8% at 745 / 1,287 with delayed scaling's amax all-reduces timed (quantities/te_amax.py); 24.5% with the hidden data-parallel collectives' NCCL SMs; 12.7%, 24.7% once TE's userbuffers run each overlapped GEMM in parts (``UbComm.splits``);
    13.1%, worst 28.6% before, every row too fast (python benchmarks/published_runs.py); 14.8% and 29.8% while
    TE 1.10's bulk and pipelined overlaps without set_sm_margin took no SM; strict."""
    errors = [abs(predict(run).error) for run in DGXC]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25


@pytest.mark.xfail(strict=True, reason="issue 39: measured runs slow down from a small to a large cluster of the same "
                                       "recipe; memderive predicts them flat (tests/published_runs.DGXC)")
def test_dgxc_weak_scaling_slows_down_as_measured() -> None:
    """The same 340B recipe from 128 to 2,048 H100s (weak scaling: GBS / GPUs fixed) slows down 4.61 -> 4.84 s in BF16
    (x 1.050) and 3.16 -> 3.49 s in FP8 (x 1.104) on the page; memderive predicts 4.063 -> 4.052 s and 2.738 ->
    2.737 s (x 0.997, x 1.000: delayed scaling's amax all-reduces, quantities/te_amax.py, lengthen with the nodes). Held: the predicted slowdown at least half the measured one on both."""
    for first, last in ((DGXC[0], DGXC[4]), (DGXC[5], DGXC[9])):
        measured = last.measured() / first.measured() - 1
        assert predict(last).predicted_s / predict(first).predicted_s - 1 >= measured / 2


def test_lora_times_no_weight_gradient_of_the_frozen_base() -> None:
    """Transformer Engine runs a linear's weight-gradient GEMM only where its weight requires a gradient
    (module/linear.py and layernorm_linear.py: ctx.requires_wgrad = weight.requires_grad), so under LoRA the
    frozen base computes none and the layers' weight-gradient FLOPs are the adapters' (``strategies.RequiresGrad``
    drops a frozen weight's term; before, ``efficiency.gemm_products`` read 279,870,806,425,600). Megatron-Bridge
    26.06's GB300 LoRA layout (Llama 3 70B, PP 2 VP 20: 40 layers a GPU, 4,096 tokens a micro-batch, rank 16 on q, k and v): per
    layer, 2 x 4,096 x 16 x (in + out) for each adapter's A and B, q (8,192 + 8,192), k and v (8,192 + 1,024) each:
    2 x 4,096 x 16 x 34,816 = 4,563,402,752; x 40 layers = 182,536,110,080 FLOPs."""
    run = BRIDGE_SFT[0]  # the GB300 SFT row's recipe, its LoRA layout (DP 4 on 8 GPUs) and rank-16 adapters
    layout = {**run.layout, "dp": 4, "micro_batches": 8, "grad_buffer": "param", "lora_rank": 16,
              "lora_targets": ("q_proj", "k_proj", "v_proj")}
    e = estimate(run.model, mode="train", seq=run.seq, **layout)
    wgrad = sum(layout_int(p[3], e.values) for p in efficiency.gemm_products(e.graph) if p[0] == "linear")
    assert wgrad == 182_536_110_080


def test_lora_busiest_stage_drops_the_frozen_weight_gradients() -> None:
    """Under pipeline parallelism the time model reads the busiest stage's hardware FLOPs (``timing._stage_flops``),
    derived before with the layout's strategies alone, so a LoRA stage kept its frozen base's weight gradients (the
    GB300 LoRA row, PP 2: the same FLOPs with or without LoRA, and 4.08 s predicted where full fine-tuning's layout
    gave 3.20). Full fine-tuning's last stage (40 layers and the head) less LoRA's on linear_qkv, by hand: the 40
    layers' weight gradients 40 x 2 x 4,096 x 855,638,016 (each layer's linear weights: 8,192 x (10,240 + 8,192 +
    3 x 28,672)) = 280,375,465,082,880, the head's 2 x 4,096 x 8,192 x 128,256 = 8,607,114,461,184, less the
    adapters' three GEMMs 3 x 40 x 2 x 4,096 x 16 x (8,192 + 10,240) = 289,910,292,480: 288,692,669,251,584."""
    run = BRIDGE_LORA[0]
    full = {k: v for k, v in run.layout.items() if not k.startswith("lora")}
    lora_stage = timing._stage_flops(run.estimate())
    assert timing._stage_flops(estimate(run.model, mode="train", seq=run.seq, **full)) - lora_stage == (
        288_692_669_251_584)


def test_bridges_lora_rows_are_the_pages() -> None:
    """Megatron-Bridge's 26.06 Llama 3 70B LoRA rows (docs/performance-summary-archive.md, read by hand): 8 GPUs, GBS
    32, MBS 1, 4,096 tokens; GB300 FP8 and MXFP8 and GB200 FP8 PP 2 VP 20 (DP 4: 32 / 4 = 8 micro-batches), GB200
    MXFP8 PP 4 VP 20 (DP 2: 16), H100 TP 2 PP 4 VP 20 (DP 1: 32). GB300 FP8: 7,481 tokens/s per GPU, 32 x 4,096 /
    (7,481 x 8) = 2.19008 s; H100: 32 x 4,096 / (2,643 x 8) = 6.19902 s. The recipe at v0.5.0: rank 16 on the fused
    linear_qkv alone, one adapter of A (16, 8,192) and B (10,240, 16) a layer: 40 x 16 x (8,192 + 10,240) =
    11,796,480 trainable parameters a GB300 GPU (PP 2). Model FLOPs: Megatron-Bridge's LoRA count (flop_utils.py
    L388-396) at whole 4,096-token sequences, 4,096 x 80 x 8,192^2 x (12 + 12 x 8 / 64 + 18 x 28,672 / 8,192 + 6 x
    128,256 / (80 x 8,192)) x 2/3 + 80 x 8,192^2 x 12 x 4,096^2 / 8,192 = 1,270,657,484,587,008 a sequence, to
    0.1% (that count leaves out the adapters). They ran, so each fits its GPU (GB300 288 GB, GB200 186 GB, H100 80
    GB) in memderive's device bytes for that GPU."""
    assert [(r.gpu, r.gpus, r.global_batch, r.seq, r.layout.get("tp", 1), r.layout["pp"], r.layout["virtual_stages"],
             r.layout["micro_batches"], r.layout["fp8"]) for r in BRIDGE_LORA] == [
        ("gb300", 8, 32, 4096, 1, 2, 20, 8, "te-current"), ("gb300", 8, 32, 4096, 1, 2, 20, 8, "te-mxfp8"),
        ("gb200", 8, 32, 4096, 1, 2, 20, 8, "te-current"), ("gb200", 8, 32, 4096, 1, 4, 20, 16, "te-mxfp8"),
        ("h100-sxm", 8, 32, 4096, 2, 4, 20, 32, "te-current")]
    assert BRIDGE_LORA[0].measured() == pytest.approx(2.19008, abs=1e-5)
    assert BRIDGE_LORA[-1].measured() == pytest.approx(6.19902, abs=1e-5)
    e = BRIDGE_LORA[0].estimate()
    assert e.number("trainable_parameters") == 11_796_480
    assert e.number("model_flops") == pytest.approx(1_270_657_484_587_008, rel=1e-3)
    for run in BRIDGE_LORA:
        e = estimate(run.model, mode="train", seq=run.seq, gpu=run.gpu, **run.layout)
        assert run.held_out and (e.options.lora_rank, e.options.lora_targets) == (16, ("linear_qkv",))
        assert e.options.sp == e.options.tp_comm_overlap == (run.layout.get("tp", 1) > 1)
        assert e.number("total_bytes") <= gpu(run.gpu).memory_bytes
    assert not {id(r) for r in BRIDGE_LORA} & {id(r) for r in RUNS + DENSE_APART + BRIDGE_SFT}


def test_bridges_lora_rows_meet_issue_39s_bounds() -> None:
    """Issue 39's bounds (median 10%, every run within 25%) on the LoRA rows: measured +7.0%, +6.1%, -11.2%, -11.5%,
    +5.7% (GB300 FP8, MXFP8, GB200 FP8, MXFP8, H100; python benchmarks/published_runs.py), median 7.0%, worst 11.5%,
    with Bekman's MSMF of 082816f (efficiency.MSMF; the H100 row +0.4% and the median 6.9% before; 7.9% and 10.4% before Megatron-Core's interleaved sends ran behind compute)."""
    errors = [abs(predict(run).error) for run in BRIDGE_LORA]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25


def test_dgxc_llama_rows_are_the_pages() -> None:
    """NVIDIA/dgxc-benchmarking at 143b90dd91f9 (NeMo 24.09; the 175B 24.11) and at 8f5cbb3799ea (NeMo 24.12), read by
    hand: "Training step time (seconds per step)" of each table by GPU count. llama3.1/README_8b.md (TP 1 PP 1 CP 2
    MBS 1 GA 32, GBS 16 x GPUs), README_70b.md (TP 4 PP 4 CP 2 VP 5, GA 64, GBS 2 x GPUs), README_405b.md (TP 8 PP 9
    CP 2 VP 7, GA 63; the 32/96/192-GPU proxies at 7/21/42 layers, PP 1/3/3, GBS 126/126/252; the BF16 96-GPU cell
    printed "8.7 5"), nemo_megatron/README_175b.md (TP 4 PP 8 VP 12 MBS 1, GBS 2 x GPUs, DP = GPUs / 32, so GA 64).
    Each page's "model flops for GBS=1" (its Notes: 8B 4.74E+14, 70B 3.94E+15, 405B 2.17E+16, 175B 2.20E+15, three
    figures) is memderive's model FLOPs of one sequence to 1% (the shapes are right). FP8 rows run Transformer
    Engine's delayed scaling with fp8 parameter gathers (configure.sh: fp8, fp8_hybrid, +model.fp8_params), BF16
    rows neither. They ran on 80 GB H100s, so each fits."""
    steps = {  # (table, fp8) -> [(GPUs, GBS, s)], 143b90dd91f9's pages
        ("8B", False): [(8, 128, 12.91), (16, 256, 13.00), (32, 512, 13.05), (64, 1024, 13.08), (128, 2048, 13.10)],
        ("8B", True): [(8, 128, 9.67), (16, 256, 9.73), (32, 512, 9.75), (64, 1024, 9.80), (128, 2048, 9.82)],
        ("70B", False): [(64, 128, 14.72), (128, 256, 14.73), (256, 512, 14.8), (512, 1024, 14.89),
                         (1024, 2048, 14.92), (2048, 4096, 14.98)],
        ("70B", True): [(64, 128, 11.01), (128, 256, 10.93), (256, 512, 11.16), (512, 1024, 11.18),
                        (1024, 2048, 11.28), (2048, 4096, 11.39)],
        ("405B", False): [(32, 126, 8.85), (96, 126, 8.75), (192, 252, 16.93), (576, 252, 17.20), (1152, 504, 17.52),
                          (2304, 1008, 17.62)],
        ("405B", True): [(32, 126, 5.80), (96, 126, 5.71), (192, 252, 11.00), (576, 252, 11.24), (1152, 504, 11.31),
                         (2304, 1008, 12.35)],
        ("175B", False): [(128, 256, 8.91), (256, 512, 8.95), (512, 1024, 9.09), (1024, 2048, 9.01),
                          (2048, 4096, 9.02)],
        ("175B", True): [(128, 256, 5.92), (256, 512, 5.96), (512, 1024, 6.44), (1024, 2048, 6.72),
                         (2048, 4096, 6.24)],
    }
    steps_2412 = {  # 8f5cbb3799ea's pages
        ("8B", False): [(8, 128, 12.78), (16, 256, 12.99), (32, 512, 13.00), (64, 1024, 13.00), (128, 2048, 13.16)],
        ("8B", True): [(8, 128, 9.44), (16, 256, 9.47), (32, 512, 9.60), (64, 1024, 9.64), (128, 2048, 9.73)],
        ("70B", False): [(64, 128, 14.61), (128, 256, 14.70), (256, 512, 14.72), (512, 1024, 14.80),
                         (1024, 2048, 14.86), (2048, 4096, 14.84)],
        ("70B", True): [(64, 128, 10.46), (128, 256, 10.52), (256, 512, 10.75), (512, 1024, 10.76),
                        (1024, 2048, 10.83), (2048, 4096, 10.99)],
        ("405B", False): [(32, 126, 9.00), (96, 126, 8.87), (192, 252, 17.30), (576, 252, 17.50), (1152, 504, 17.60),
                          (2304, 1008, 17.70)],
        ("405B", True): [(32, 126, 5.75), (96, 126, 5.63), (192, 252, 10.8), (576, 252, 11.00), (1152, 504, 11.10),
                         (2304, 1008, 11.20)],
        ("175B", False): [(128, 256, 8.309), (256, 512, 8.408), (512, 1024, 8.42), (1024, 2048, 8.453),
                          (2048, 4096, 8.49)],
        ("175B", True): [(128, 256, 5.626), (256, 512, 5.725), (512, 1024, 5.774), (1024, 2048, 5.82),
                         (2048, 4096, 5.96)],
    }
    release = {"8B": "24.09", "70B": "24.09", "405B": "24.09", "175B": "24.11"}
    assert [(r.name.split()[-1], r.gpus, r.global_batch, r.measured(), r.layout.get("fp8") == "te-delayed")
            for r in DGXC_LLAMA] == [(release[size], g, b, t, fp8) for (size, fp8), cols in steps.items()
                                     for g, b, t in cols] + [
        ("24.12", g, b, t, fp8) for (_, fp8), cols in steps_2412.items() for g, b, t in cols]
    micro = {"8B": 32, "70B": 64, "405B": 63, "175B": 64}
    flops = {"8B": 4.74e14, "70B": 3.94e15, "405B": 2.17e16, "175B": 2.20e15}
    for run in DGXC_LLAMA:
        size = run.name.split()[1]
        e = run.estimate()
        o = e.options
        assert run.held_out and run.gpu == "h100-sxm" and run.layout["micro_batches"] == micro[size]
        assert (o.fp8 != "none") == o.fp8_param_gather == ("fp8" in run.name.split())
        assert (o.tp, o.cp) == {"8B": (1, 2), "70B": (4, 2), "405B": (8, 2), "175B": (4, 1)}[size]
        assert o.sp == o.tp_comm_overlap == (o.tp > 1) and o.dropout == (size == "175B") and o.zero == 1
        # the userbuffers yaml the launcher's defaults list names (70B: ub_cfg_h100_h8192_tp4_mbs1_seqlen8192; 405B:
        # ub_cfg_h100_bf16_h16384_tp8_cp2_mbs1_seqlen8192, proj_fprop 24 SMs, fc2_fprop 8, its rings aggregate 1);
        # the 175B's inline one in gpt3_175b_hydra.yaml (L176-220)
        assert run.layout.get("tp_comm_overlap_cfg") == {
            "70B": "ub_cfg_h100_h8192_tp4_mbs1_seqlen8192",
            "405B": "ub_cfg_h100_bf16_h16384_tp8_cp2_mbs1_seqlen8192", "175B": "dgxc_gpt3_175b_hydra"}.get(size)
        if "L " not in run.name.replace("L3.1", ""):  # the whole model, not a 405B proxy
            assert e.number("model_flops") == pytest.approx(flops[size], rel=0.01)
        assert e.number("total_bytes") <= gpu("h100-sxm").memory_bytes
    assert not {id(r) for r in DGXC_LLAMA} & {id(r) for r in RUNS + DENSE_APART + BRIDGE_SFT + BRIDGE_LORA}


@pytest.mark.xfail(strict=True, reason="issue 39: the rows predicted too fast, the GPT-3 175B's most "
                                       "(tests/published_runs.DGXC_LLAMA_GAP)")
def test_dgxc_llama_rows_meet_issue_39s_bounds() -> None:
    """Issue 39's bounds (median 10%, every run within 25%) on the 88 DGX Cloud Benchmarking rows: median 6.8%, worst
    26.6% (GPT-3 175B FP8 at 1,024 GPUs on 24.11, too fast) with the H100's matmuls at Bekman's MSMF table of 082816f
    (708.5 / 1,243.7 TFLOP/s bf16 / fp8, efficiency.MSMF); median 10.3%, worst 28.6% at 745 / 1,287 with delayed scaling's amax all-reduces (quantities/te_amax.py;
    29.9% before them) once TE's userbuffers run each overlapped GEMM in parts, each at its
    shape's rate (``UbComm.splits``; the 405B's launcher yaml aggregates its rings, 4 GEMMs of 1,024 tokens at TP 8:
    its BF16 rows -15.4% -> -14.2% at 2,304 GPUs; 9.2% while the aggregate was not read) and the hidden data-parallel
    collectives hold NCCL's SMs; 11.5%, worst 32.6% once the bulk overlaps' SMs are timed while their transfers run (11.9%, 32.9% before); 11.9%, 32.9% once Megatron-Core's interleaved sends run behind compute (overlap_p2p_comm); before, median 10.2%, worst
    26.9% (GPT-3 175B FP8 at 1,024 GPUs on 24.11, -26.9%; python benchmarks/published_runs.py), all but two (the 8B
    FP8 at 8 and 16 GPUs on 24.12: +1.0%, +0.6%) predicted too fast; nothing tuned. Held (median 9.5%, worst 24.4%)
    while the 175B rows ran TE's default userbuffers (16 SMs from six GEMMs of a layer) in place of their
    gpt3_175b_hydra.yaml's inline config (``dgxc_gpt3_175b_hydra``: 24 and 20 SMs from o's and fc2's forward GEMMs,
    none from the data and weight gradients')."""
    errors = [abs(predict(run).error) for run in DGXC_LLAMA]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25


def test_dgxc_fp8_recipes_slow_down_with_the_cluster_more_than_their_bf16_twins() -> None:
    """On the DGX Cloud pages each multi-node recipe's FP8 rows slow down more from its smallest cluster to its largest
    than its BF16 rows (70B 64-2,048 GPUs: x 1.035 against x 1.018 on 24.09, x 1.051 against x 1.016 on 24.12; 405B
    576-2,304: x 1.099 against x 1.024, x 1.018 against x 1.011; GPT-3 175B 128-2,048: x 1.054 against x 1.012,
    x 1.059 against x 1.022). Delayed scaling's amax all-reduces run over the stage's tensor-, data- and
    context-parallel ranks (Megatron-Core 0.9 on), so their latency grows with the nodes the stage spans
    (quantities/te_amax.py); the BF16 rows have none. Held: the same order in memderive's predictions, pair by pair."""
    recipes: dict[str, list] = {}
    for run in DGXC_LLAMA:
        if "L " not in run.name.replace("L3.1", "") and "8B" not in run.name:  # multi-node recipes, not the proxies
            recipes.setdefault(" ".join(w for w in run.name.split() if not w.startswith("d")), []).append(run)
    assert len(recipes) == 12
    growth = {name: predict(runs[-1]).predicted_s / predict(runs[0]).predicted_s for name, runs in recipes.items()}
    measured = {name: runs[-1].measured() / runs[0].measured() for name, runs in recipes.items()}
    pairs = [(name, name.replace("fp8", "bf16")) for name in growth if " fp8 " in name]
    assert len(pairs) == 6
    for fp8, bf16 in pairs:
        assert measured[fp8] > measured[bf16] and growth[fp8] > growth[bf16]


@pytest.mark.xfail(strict=True, reason="issue 39: measured runs slow down from a small to a large cluster of the same "
                                       "recipe; memderive predicts them flat (tests/published_runs.DGXC_LLAMA_GAP)")
def test_dgxc_llama_weak_scaling_slows_down_as_measured() -> None:
    """Each of the 16 DGXC_LLAMA recipes (8B 8-128, 70B 64-2,048, 405B 576-2,304, 175B 128-2,048 GPUs; BF16 and FP8;
    24.09/24.11 and 24.12) from its smallest to its largest cluster at a fixed GBS per GPU: the pages' step grows
    x 1.011 (405B BF16 24.12: 17.50 -> 17.70 s) to x 1.099 (405B FP8 24.09: 11.24 -> 12.35 s); memderive's x 0.999 to
    x 1.010 (python benchmarks/published_runs.py, "weak scaling": the FP8 recipes' delayed-scaling amax all-reduces
    over the stage's ranks lengthen with the nodes, quantities/te_amax.py; x 0.997 to x 1.001 before). Held: the predicted slowdown at least half the
    measured one on each."""
    recipes: dict[str, list] = {}
    for run in DGXC_LLAMA:
        if "L " not in run.name.replace("L3.1", ""):  # the 405B's proxies are other models
            recipes.setdefault(" ".join(w for w in run.name.split() if not w.startswith("d")), []).append(run)
    assert len(recipes) == 16
    for runs in recipes.values():
        first, last = runs[0], runs[-1]
        measured = last.measured() / first.measured() - 1
        assert predict(last).predicted_s / predict(first).predicted_s - 1 >= measured / 2


def test_nemotron_340b_runs_its_yamls_bf16_optimizer_and_fits() -> None:
    """NeMo 24.07's Nemotron-4 340B row: the launcher's nemotron_340b.yaml (L158-165 at tag 24.07) gives its
    distributed_fused_adam grad_sync_dtype bf16 and dtype bf16, which NeMo runs with no fp32 master (store_params False
    where the optimizer's dtype is the model's): bf16 gradients and bf16 Adam states, --grad-buffer param --precision
    pure. It ran on 80 GB H100s, so it fits; with fp32 gradients and states memderive needed 93.5 GiB."""
    run = next(r for r in DENSE_APART if r.name == "Nemotron 340B NeMo t8 p8 v12 fp8")
    e = run.estimate()
    assert (e.options.grad_buffer, e.options.precision) == ("param", "pure")
    assert e.number("total_bytes") <= gpu("h100-sxm").memory_bytes


def test_bridges_fsdp_fp8_rows_fit() -> None:
    """Megatron-Bridge's Megatron-FSDP fp8 rows (the 8B on 8 H100s; the 405B and the two 70B rows offloading
    activations on GB200 and GB300) ran with their mixed-precision recipe's fp8_param_gather (v0.1.0rc3 L268, v0.2.0
    and v0.3.0 L289, v0.4.2 L308 of src/megatron/bridge/training/mixed_precision.py; set_megatron_fsdp_overrides keeps
    it): each layer linear's weight an 8-bit shard, no whole 8-bit copy cached. They ran, so each fits its GPU; before
    the option was modelled under --zero 3, memderive cached every whole 8-bit weight (the 70B's 64 GiB, the 405B's
    182 GiB at TP 2) and three of the four did not (234.2, 294.8 and 304.2 GiB against 186, 186 and 288)."""
    rows = [r for r in BRIDGE + DENSE_APART if r.layout.get("zero") == 3 and r.layout.get("fp8", "").startswith("te-")]
    assert len(rows) == 4
    for run in rows:
        e = run.estimate()
        assert e.options.fp8_param_gather, run.name
        assert not any(path.endswith("weight_workspace") for path, _ in e.quantity("total_bytes").term_ints(e.values))
        assert e.number("total_bytes") <= (run.memory_bytes or gpu(run.gpu).memory_bytes), run.name


def test_megatron_bridges_h100_llama_rows_run_their_recipe() -> None:
    """Megatron-Bridge 25.11's H100 Llama 3 rows (``BRIDGE``) as their recipe sets what the page does not say
    (``_BRIDGE_RECIPE``, Megatron-Bridge v0.2.0): the distributed optimizer (recipes/llama/llama3.py L555-559; the
    8B's page FSDP 1: ZeRO-3), gradients reduced in bf16 (configs/llama3/llama3_llm_pretrain.py L46-47,
    grad_reduce_in_fp32 False; the optimizer's fp32 copy of each shard in the step, distrib_optimizer.py L2399:
    param+fp32), no dropout (llama_provider.py L115-116). The 70B's t4 p8 v5 layout ran on 80 GB
    H100s, so it fits: with --framework megatron's fp32 gradient buffer, dropout and no distributed optimizer
    memderive had needed 85.4 GiB."""
    options = {r.name: r.estimate().options for r in BRIDGE}
    assert {n: (o.zero, o.grad_buffer, o.dropout) for n, o in options.items()} == {
        "L3 8B MCore FSDP d8 fp8": (3, "param+fp32", False), "L3 70B MCore t4 p8 v5 fp8": (1, "param+fp32", False)}
    assert all(o.fp8_param_gather for o in options.values())
    seventy = next(r for r in BRIDGE if r.name == "L3 70B MCore t4 p8 v5 fp8")
    assert seventy.estimate().number("total_bytes") <= gpu("h100-sxm").memory_bytes


def test_nemos_gpt3_rows_keep_their_launcher_configs_dropout() -> None:
    """NeMo 24.07's GPT-3 175B rows keep the dropout of their own launcher config (NeMo-Framework-Launcher
    launcher_scripts/conf/training/gpt3/175b.yaml L74-75 at tag 24.07: hidden_dropout 0.1, attention_dropout 0.1),
    the Llama rows none (llama/*.yaml: 0.0); ``_NEMO_GPT3_DROPOUT``; GPT-3 5B and 20B theirs (gpt3/5b.yaml, 20b.yaml
    L74-75: 0.1), Nemotron none (nemotron/nemotron_8b.yaml, 22b, 340b: hidden_dropout, attention_dropout 0.0)."""
    assert {r.name: r.estimate().options.dropout for r in NEMO_2407} == {
        "L2 7B NeMo d8 fp8": False, "L2 13B NeMo p4 v10 fp8": False, "L2 70B NeMo t4 p4 v20 fp8": False,
        "L3 8B NeMo c2 fp8": False, "L3 70B NeMo t4 p4 c2 v5 fp8": False, "GPT3 175B NeMo t4 p8 v6 d4 fp8": True,
        "GPT3 175B NeMo t4 p8 v6 d16 fp8": True, "GPT3 5B NeMo d64 fp8": True, "GPT3 20B NeMo t2 d32 fp8": True,
        "Nemotron 8B NeMo t2 d32 fp8": False, "Nemotron 22B NeMo t2 p4 v10 fp8": False,
        "Nemotron 340B NeMo t8 p8 v12 fp8": False}


def test_nemos_rows_run_the_userbuffers_config_their_launcher_yaml_selects() -> None:
    """Each NeMo 24.07 row's userbuffers config, read by hand from NeMo-Framework-Launcher at tag 24.07 (8325688d):
    the model yaml's defaults list, L3 ``- optional tp_overlap@model.ub_tp_comm_overlap_cfg: <name>`` (no name: none,
    and NeMo 2.0.0rc1 hands TE 1.8.0.dev0 None, whose add_ub sets no SM margin: ``te_v1``), under its
    ub_tp_comm_overlap; None where the row runs no userbuffers. Each config's SMs taken from a GEMM (num_sm where
    set_sm_margin 1) read from the yaml at 24.07."""
    options = {r.name: r.estimate().options for r in NEMO_2407}
    assert {n: o.tp_comm_overlap_cfg if o.tp_comm_overlap else None for n, o in options.items()} == {
        "L2 7B NeMo d8 fp8": None,  # llama/llama2_7b.yaml L60: tensor_model_parallel_size 1
        "L2 13B NeMo p4 v10 fp8": None,  # llama/llama2_13b.yaml L60: 1
        "L2 70B NeMo t4 p4 v20 fp8": "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096",  # llama/llama2_70b.yaml L3, L136 true
        # llama/llama3_70b.yaml L3 ub_cfg_h100_h8192_tp4_mbs1_seqlen8192 (L136 true); the launcher's FP8 example of
        # this layout, examples/training/llama/h100/llama3_70b_fp8.sh L22, overrides it with the fp8 file
        "L3 8B NeMo c2 fp8": None,  # llama/llama3_8b.yaml L60: 1
        "L3 70B NeMo t4 p4 c2 v5 fp8": "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192",
        # gpt3/175b.yaml L3 names ub_cfg_h100_h12288_tp4_mbs1_seqlen2048, but L149: ub_tp_comm_overlap False
        "GPT3 175B NeMo t4 p8 v6 d4 fp8": None, "GPT3 175B NeMo t4 p8 v6 d16 fp8": None,
        "GPT3 5B NeMo d64 fp8": None,  # gpt3/5b.yaml L62: 1
        "GPT3 20B NeMo t2 d32 fp8": "ub_cfg_h100_h6144_tp2_mbs2_seqlen2048",  # gpt3/20b.yaml L3, L149 true
        "Nemotron 8B NeMo t2 d32 fp8": "te_v1",  # nemotron/nemotron_8b.yaml L3 names none, L158 true
        "Nemotron 22B NeMo t2 p4 v10 fp8": "te_v1",  # nemotron/nemotron_22b.yaml L3 none, L158 true
        "Nemotron 340B NeMo t8 p8 v12 fp8": None}  # nemotron/nemotron_340b.yaml L156: ub_tp_comm_overlap False
    # launcher_scripts/conf/training/tp_overlap/<name>.yaml at tag 24.07, L47-59 (the fp8 file's L47-61; proj_fprop,
    # fc2_fprop: pipeline, set_sm_margin 1); L5-27 the bulk ones qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad,
    # set_sm_margin 0; L29-44 the ring exchanges, no num_sm, no margin. te_v1: TE 1.8.0.dev0 base.py L107-118 add_ub
    # num_sm 16, set_sm_margin 0 for all ten
    names = ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad", "proj_fprop", "fc2_fprop")
    assert {name: tuple((UB_CONFIGS[name][g].num_sm, UB_CONFIGS[name][g].margin) for g in names) for name in (
        "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096", "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192",
        "ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07", "ub_cfg_h100_h6144_tp2_mbs2_seqlen2048", "te_v1")} == {
        "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096": ((8, 0), (16, 0), (2, 0), (4, 0), (24, 1), (16, 1)),
        "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192": ((4, 0), (24, 0), (2, 0), (4, 0), (24, 1), (16, 1)),
        "ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07": ((4, 0), (8, 0), (2, 0), (4, 0), (24, 1), (20, 1)),
        "ub_cfg_h100_h6144_tp2_mbs2_seqlen2048": ((8, 0), (16, 0), (4, 0), (16, 0), (16, 1), (24, 1)),
        "te_v1": ((16, 0),) * 6}
    assert all(UB_CONFIGS[name][g].method == "ring_exchange" and not UB_CONFIGS[name][g].margin
               for name in ("te_v1", "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096")
               for g in ("qkv_fprop", "proj_dgrad", "fc1_fprop", "fc2_dgrad"))


@pytest.mark.xfail(strict=True, reason=BRIDGE_DENSE_GAP)
def test_the_apart_fp8_rows_meet_issue_39s_bounds() -> None:
    """Issue 39's bounds (median 10%, every run within 25%) on the fp8 rows kept apart: median 10.3%, worst 26.3%
    (GB200 MXFP8 405B CP2 of 25.09) with Bekman's MSMF of 082816f and Megatron-FSDP's own buckets; 10.7% and 26.5%
    once TE's userbuffers run each overlapped GEMM in parts (``UbComm.splits``) and
    its ring-exchanged reduce-scatters sum their chunks (``RING_REDUCE``); median 11.7%, worst 36.1% over
    the 45 once Megatron-Core's interleaved sends run behind compute (overlap_p2p_comm); median 10.1%, worst 30.9% once NeMo 24.07's rows ran their launcher yamls' userbuffers configs (``_NEMO_GPT3_NO_UB``'s comment:
    GPT-3 175B d4 -8.1%, d16 +0.8%, no TP overlap; 20B -11.2%; Nemotron 8B -19.0%, 22B -8.2%; python
    benchmarks/published_runs.py); before, 10.1% and 30.9% on that benchmark; measured median 10.2%, worst 31.0% over
    the 45 with NeMo 24.07's GPT-3 5B/20B and Nemotron 8B/22B/340B rows (-19.4%, -12.4%, -19.1%, -8.3%, -3.9%), 10.1% over the 40 before them; median 9.4%, worst 31.3% over the 39 (the two GB200 CPU activation offload rows -15.4% and -11.5%; 9.4% over the 37 before them;
    26.02's GB200 405B FP8 row -7.8%; the benchmark printed 9.4% over the 36 before it); 9.7%, worst
    31.3% over the 36 as first written, 10.7% over the 27 at 2K-8K tokens (python benchmarks/published_runs.py; 10.0% over the 36
    before NeMo's GPT-3 175B rows kept their launcher config's dropout, ``_NEMO_GPT3_DROPOUT``; with the six GB300
    rows, predicted 3.1-13.2% too slow; before them 10.0% and 31.3% over 30, 12.2% over 21; 8.9%, 31.1% and 11.0%
    before Transformer Engine's sequence-parallel all-gathers moved 8-bit tensors, 14.7%, 41.1% and
    16.3% before each linear ran at its own fp8 rate and the GB200 at the B200's sustained over burst ratio, 16.6%,
    42.3% and 20.5% before Transformer Engine's quantization was timed, memory_bound.fp8_cast_bytes); strict, so a
    model that meets them shows as an XPASS and the rows join ``HELD_OUT``."""
    errors = [abs(predict(run).error) for run in DENSE_APART]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25


def test_torchtitans_float8_rows_are_expressible() -> None:
    """torchtitan's December 2024 Float8 rows (benchmarks/llama3_h100_202412_torchtitan.md, Tables 1-6: Llama 3.1
    8B, 70B, 405B) run as its default tensorwise recipe under FSDP2, CP, TP (its Float8 TP plan), PP and
    torch.compile: each layout is an estimate, its linears in 8 bits, and its step is the page's tokens per GPU over
    its throughput: Table 1, local batch 2 at 8,192 tokens, 8,532 TPS/GPU: 2 x 8,192 / 8,532 = 1.9203 s; Table 2,
    FSDP 1 CP 8, one 262,144-token sequence over 8 GPUs, 548 TPS/GPU: 262,144 / 8 / 548 = 59.796 s; Table 4, local
    batch 16 of 8,192 over TP 8, 829 TPS/GPU: 16 x 8,192 / 8 / 829 = 19.764 s; Table 5, local batch 32 over TP 8 x
    PP 8, interleaved 1F1B, 128 TPS/GPU: 32 x 8,192 / 64 / 128 = 32.0 s; Table 6, FSDP 1 CP 8, local batch 8 of
    262,144 over TP 8 x PP 8 x CP 8, 16 TPS/GPU: 8 x 262,144 / 512 / 16 = 256.0 s."""
    assert len(TORCHTITAN_FLOAT8) == 14 and all(r.held_out for r in TORCHTITAN_FLOAT8)
    assert all(r.estimate().graph.float8 and r.estimate().options.fp8 == "tensorwise" for r in TORCHTITAN_FLOAT8)
    assert [r.estimate().options.float8_tp_plan for r in TORCHTITAN_FLOAT8] == [False] * 6 + [True] * 8
    assert TORCHTITAN_FLOAT8[0].measured() == pytest.approx(2 * 8192 / 8532, rel=1e-12)
    assert TORCHTITAN_FLOAT8[5].measured() == pytest.approx(262144 / 8 / 548, rel=1e-12)
    assert TORCHTITAN_FLOAT8[6].measured() == pytest.approx(16 * 8192 / 8 / 829, rel=1e-12)
    assert TORCHTITAN_FLOAT8[9].measured() == pytest.approx(32 * 8192 / 64 / 128, rel=1e-12)
    assert TORCHTITAN_FLOAT8[-1].measured() == pytest.approx(8 * 262144 / 512 / 16, rel=1e-12)
    assert not {id(r) for r in TORCHTITAN_FLOAT8} & {id(r) for r in RUNS + DENSE_APART}


@pytest.mark.xfail(strict=True, reason=TITAN_FLOAT8_GAP)
def test_torchtitans_float8_rows_meet_issue_39s_bounds() -> None:
    """Issue 39's bounds on torchtitan's fourteen Float8 rows: measured median 10.2%, worst 32.7% (the 8B's 64K CP row,
    too slow) with the page's 500 W H100s at the rates measured on Meta's 500 W H100s (published_runs._TT_500W; 13.6%
    and 31.4% at the 700 W H100's; python benchmarks/published_runs.py); strict, so a model that meets them shows as an XPASS."""
    errors = [abs(predict(run).error) for run in TORCHTITAN_FLOAT8]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25


def test_torchtitans_2025_rows_are_expressible() -> None:
    """torchtitan's June 2025 AsyncTP page (benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md, 820504e) and
    Trainy's H200 page (benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md, e7c0cae): bf16, then Float8
    tensorwise (with Float8's TP plan), then rowwise (regular TP: parallelize_llama.py enable_float8_tensorwise_tp),
    each with vanilla TP and AsyncTP, for the 70B and the 8B; then the two H200 rows (tensorwise, no TP). Steps from
    the pages' TPS/GPU by hand: 70B bf16, local batch 16 of 8,192 over TP 8 at 597.3: 16 x 8,192 / 8 / 597.3 =
    27.430 s; 8B tensorwise AsyncTP, local batch 12 over TP 8 at 5,570.1: 12 x 8,192 / 8 / 5,570.1 = 2.2061 s; H200
    FSDP 64, local batch 2 at 10,753: 2 x 8,192 / 10,753 = 1.5237 s."""
    rows = TORCHTITAN_2025
    assert len(rows) == 14 and all(r.held_out for r in rows)
    options = [r.estimate().options for r in rows]
    assert [o.fp8 for o in options] == (["none"] * 2 + ["tensorwise"] * 2 + ["rowwise"] * 2) * 2 + ["tensorwise"] * 2
    assert [o.float8_tp_plan for o in options] == ([False] * 2 + [True] * 2 + [False] * 2) * 2 + [False] * 2
    assert [o.async_tp for o in options] == [False, True] * 6 + [False] * 2
    assert [bool(r.estimate().graph.float8) for r in rows] == ([False] * 2 + [True] * 4) * 2 + [True] * 2
    assert all(o.fp8_keep_output for o in options if o.fp8 != "none")  # filter_fqns = ["output"] in the tomls
    assert [r.gpus for r in rows] == [256] * 6 + [64] * 6 + [32, 64]
    assert rows[0].measured() == pytest.approx(16 * 8192 / 8 / 597.3, rel=1e-12)
    assert rows[9].measured() == pytest.approx(12 * 8192 / 8 / 5570.1, rel=1e-12)
    assert rows[-1].measured() == pytest.approx(2 * 8192 / 10753, rel=1e-12)
    assert not {id(r) for r in rows} & {id(r) for r in RUNS + DENSE_APART + TORCHTITAN_FLOAT8}


def test_trainys_h200_rows_meet_issue_39s_median_bound() -> None:
    """Trainy's two H200 rows (FSDP 32 and 64, Float8 tensorwise, torch.compile) within issue 39's 10%: measured
    +0.9% and -0.8% with the H200 at Bekman's MSMF of 082816f (efficiency.MSMF; -1.6% and -3.3% at 745 TFLOP/s; python
    benchmarks/published_runs.py), FSDP's Float8 all-gather not modelled."""
    assert [abs(predict(run).error) <= 0.10 for run in TORCHTITAN_2025[-2:]] == [True, True]


@pytest.mark.xfail(strict=True, reason=TITAN_2025_GAP)
def test_torchtitans_2025_rows_meet_issue_39s_bounds() -> None:
    """Issue 39's bounds on the fourteen rows of torchtitan's 2025 pages: measured median 18.8%, worst 52.5% (the
    8B's rowwise AsyncTP row) with the 500 W H100s at the rates measured on Meta's 500 W H100s (published_runs._TT_500W;
    27.5% and 54.2% at the 745 TFLOP/s once used; python benchmarks/published_runs.py); strict, so a model that meets them shows as an
    XPASS."""
    errors = [abs(predict(run).error) for run in TORCHTITAN_2025]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25
