"""``plan --framework X`` plans only what X runs (issue 39, item 5): each framework's limits are declared once, beside
its preset (``derivations/frameworks.py``, ``Framework.limits``, each with its source), and no layout outside them is
ever shown; the plan says in one line what was kept out. Also: ``--implementation`` and ``--fp8`` are a plan's
options, and a row of cp > 1 is shown only where context parallelism pays."""

from __future__ import annotations

import json

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.frameworks import FRAMEWORKS, plan_space
from memderive.derivations.quantities.timing import time_of
from memderive.derivations.search.plan import PlanError, plan

#: llama-2-7b on 16 H100s (two nodes), global batch 64 of 4,096 tokens: tp, cp, pp with v, dp and every ZeRO stage fit.
CASE = ("llama-2-7b", 80 * 2**30, 64, 4096, 16)


def _rows(**options) -> list[dict]:
    return [x.options for x in plan(*CASE, gpu="h100-sxm", top=10**6, **options)]


def _cli(capsys, *words: str) -> tuple[int, str, str]:
    code = main(["plan", "--model", "llama-2-7b", "--gpus", "16", "--gpu", "h100-sxm", "--seq", "4096",
                 "--global-batch", "64", *words])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_deepspeed_runs_zero_0_1_with_pipeline_stages_and_no_interleaving_or_cp() -> None:
    """DeepSpeed's PipelineEngine asserts ``self.zero_optimization_stage() < 2``: "ZeRO-2 and ZeRO-3 are incompatible
    with pipeline parallelism" (deepspeed/runtime/pipe/engine.py); its TrainSchedule is one 1F1B schedule (no virtual
    stages); its sequence parallelism is Ulysses, not ring attention. Before: rows of pp 2 with ZeRO-2, v 2 and cp 2."""
    rows = _rows(framework="deepspeed")
    staged = [r for r in rows if r.get("pp", 1) > 1]
    assert staged and {r.get("zero", 0) for r in staged} <= {0, 1}
    assert {r.get("zero", 0) for r in rows if r.get("pp", 1) == 1} >= {2, 3}  # ZeRO-2/3 without pipeline stages: kept
    assert all((r.get("virtual_stages") or 1) == 1 and r.get("cp", 1) == 1 for r in rows)
    # deepspeed.checkpointing recomputes the function it wraps whole: no attention-core (selective) recompute, which
    # the planner compares without FlashAttention
    assert {r.get("recompute", "none") for r in _rows(framework="deepspeed", flash=False)} == {"none", "full"}
    with pytest.raises(PlanError, match="--framework deepspeed runs no context parallelism"):
        plan(*CASE, gpu="h100-sxm", framework="deepspeed", cp=2, flash=True)


def test_torchtune_runs_fsdp_only_and_no_pipeline() -> None:
    """torchtune's full_finetune_distributed recipe: FSDP2 with reshard after forward (ZeRO-3) or not (ZeRO-2), "DDP is
    currently not supported"; no pipeline stages. Before: rows of ZeRO-0 and ZeRO-1 over 16 ranks."""
    rows = _rows(framework="torchtune")
    assert rows and {r.get("zero", 0) for r in rows} == {2, 3}
    assert all(r.get("pp", 1) == 1 for r in rows)
    assert {r.get("recompute", "none") for r in _rows(framework="torchtune", flash=False)} <= {"none", "full"}


def test_torchtitan_has_no_zero_1_and_compares_its_selective_op_checkpointing() -> None:
    """torchtitan: DDP (ZeRO-0) or FSDP2 (reshard after forward: ZeRO-3; 'never': ZeRO-2), never ZeRO-1
    (torchtitan/distributed/fsdp.py); activation checkpointing none, selective (per op) or full. Before: ZeRO-1 rows,
    and selective-op (its own default) never compared."""
    rows = _rows(framework="torchtitan")
    assert {r.get("zero", 0) for r in rows if r.get("dp", 1) > 1} <= {0, 2, 3}
    assert "selective-op" in {r.get("recompute", "none") for r in rows}


def test_hf_trainer_runs_no_pipeline_and_recomputes_whole_layers() -> None:
    """The Trainer offers DDP, FSDP and DeepSpeed ZeRO, no pipeline stages; gradient_checkpointing wraps each decoder
    layer whole (recompute none or full). The limit is the Trainer's, not its preset's implementation's: with
    ``--implementation megatron`` (layers that can be staged) and without FlashAttention (where selective recompute
    is compared) neither appears. Before: rows of pp 2 and selective recompute."""
    rows = _rows(framework="hf-trainer", implementation="megatron", flash=False)
    assert rows and all(r.get("pp", 1) == 1 for r in rows)
    assert {r.get("recompute", "none") for r in rows} <= {"none", "full"}


def test_every_limit_names_its_source_and_the_plan_says_it_in_one_line(capsys) -> None:
    """Each limit of each framework cites the framework's code or docs (a file path); the text output says in one NOTE
    line what --framework kept out, the JSON lists each limit with its source."""
    for framework in FRAMEWORKS.values():
        for limit in framework.limits:
            assert ".py" in limit.source or ".md" in limit.source, (framework.name, limit)
    assert plan_space("deepspeed").zeros_with_pp == (0, 1)
    code, out, err = _cli(capsys, "--framework", "deepspeed")
    assert code == 0, err
    lines = [x for x in out.splitlines() if x.startswith("NOTE: --framework deepspeed plans what it runs: ")]
    assert len(lines) == 1 and "ZeRO 0-1 with pipeline stages" in lines[0]
    code, out, err = _cli(capsys, "--framework", "deepspeed", "--json")
    limits = json.loads(out)["framework_limits"]
    assert any("deepspeed/runtime/pipe/engine.py" in x["source"] for x in limits)
    code, out, err = _cli(capsys)  # no framework: no limits, no line
    assert "plans what it runs" not in out


def test_cp_rows_only_where_they_pay() -> None:
    """Context parallelism only where it pays: with every degree fitting, a row of cp > 1 is shown only when it is
    faster than every row of cp 1 (before: cp 2 rows at 1.336 s below the best cp 1 row's 1.302 s under DeepSpeed's
    preset, and the like under Megatron's)."""
    layouts = plan(*CASE, gpu="h100-sxm", top=10**6)
    whole = min(x.step_time_s for x in layouts if x.options.get("cp", 1) == 1)
    assert all(x.step_time_s < whole for x in layouts if x.options.get("cp", 1) > 1)
    every = plan(*CASE, gpu="h100-sxm", top=10**6, cp_pays=False)
    assert any(x.options.get("cp", 1) > 1 for x in every) and len(every) > len(layouts)


def test_plan_takes_the_implementation_and_fp8(capsys) -> None:
    """``plan --implementation hf`` (before: "unrecognized arguments") and ``--fp8 tensorwise`` with it (before: a
    TypeError traceback, the Float8 FLOPs read as one int off a column of layouts): each row carries them and re-runs
    through estimate to its bytes and step time."""
    code, out, err = _cli(capsys, "--implementation", "hf", "--dtype", "bf16", "--fp8", "tensorwise", "--top", "2",
                          "--json")
    assert code == 0, err
    rows = json.loads(out)["layouts"]
    assert rows and all(r["options"]["implementation"] == "hf" and r["options"]["fp8"] == "tensorwise" for r in rows)
    for row in rows:
        est = estimate("llama-2-7b", **row["options"])
        assert (est.number("total_bytes"), time_of(est).step_s) == (row["total_bytes"], row["step_time_s"])


def test_published_runs_are_planned_with_their_own_framework() -> None:
    """``benchmarks/published_runs.py --plan`` plans each run within its framework's limits (``run_framework``):
    every run but Llama 3's (Meta's own framework) names a framework memderive has, and torchtitan's FSDP2 run is
    compared with torchtitan's layouts: the planner's best is ZeRO-2 (FSDP2 without resharding after forward), never
    the ZeRO-1 it picked before (FSDP2 has no optimizer-only sharding)."""
    from tests.published_runs import RUNS, plan_against, run_framework

    named = {run.name: run_framework(run) for run in RUNS}
    assert {n for n, f in named.items() if f is None} == {r.name for r in RUNS if r.source.startswith("Dubey")}
    assert set(named.values()) - {None} <= set(FRAMEWORKS)
    titan = next(r for r in RUNS if r.name == "8B FSDP d8")
    best = plan_against(titan).best.options
    assert best["framework"] == "torchtitan" and best["zero"] in (0, 2, 3)
