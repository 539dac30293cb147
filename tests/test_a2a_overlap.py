"""Megatron-Core's EP A2A overlap (``--moe-a2a-overlap``, --overlap-moe-expert-parallel-comm; Megatron-LM
combined_1f1b.py, model_chunk_schedule_plan.py ``TransformerLayerSchedulePlan.run``): one micro-batch's
dispatch and combine behind another's attention and expert GEMMs, layer by layer; the warmup's forwards and the
cooldown's backwards alone. Expected numbers are hand arithmetic written beside each."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.models.architectures import LLAMA, Moe
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.a2a_overlap import exposed_s
from memderive.derivations.quantities.timing import step_time
from memderive.derivations.search.plan import plan


def test_no_pipelining_pairs_each_backward_with_the_next_forward() -> None:
    # combined_1f1b_schedule_for_no_pipelining, m 4: F0 | B0+F1 | B1+F2 | B2+F3 | B3: 3 pairs, F0 and B3 alone.
    # 10 s of all-to-alls per micro-batch, q = 10/4 = 2.5 s each of combine_bwd, dispatch_fwd, dispatch_bwd,
    # combine_fwd, behind attn_fwd 1, mlp_bwd 6, mlp_fwd 3, attn_bwd 2: a pair exposes (2.5 - 1) + 0 + 0 + (2.5 - 2)
    # = 2; F0's two and B3's two all-to-alls: 5 + 5 = 10. Step: 3 x 2 + 10 = 16 s (in series: 4 x 10 = 40 s).
    assert exposed_s(10.0, (1.0, 6.0, 3.0, 2.0), 4, 1, 1) == pytest.approx(16.0)


def test_interleaved_warmup_runs_alone() -> None:
    # p 2, v 2, m 4: m v = 8 chunk micro-batches; the first stage's warmup (p - 1) 2 + (v - 1) p + 1 = 2 + 2 + 1 = 5
    # (schedules.py get_pp_rank_microbatches, + 1 under the overlap): 5 forwards and 5 backwards alone, 3 pairs.
    # Per chunk (1/v of a micro-batch): all-to-alls 12/2 = 6 s, q = 1.5 behind 0.5, 4, 2, 1 -> (1.5 - 0.5) + 0 + 0 +
    # (1.5 - 1) = 1.5 per pair. Step: 3 x 1.5 + 5 x 6 = 34.5 s (in series: 4 x 12 = 48 s).
    assert exposed_s(12.0, (1.0, 8.0, 4.0, 2.0), 4, 2, 2) == pytest.approx(34.5)


def test_compute_that_hides_every_pair_leaves_one_micro_batch_exposed() -> None:
    # Mixtral 8x7B, p 1, m 8, s 4,096 on H100s over NVLink: each of the four all-to-alls is far shorter than the
    # attention or experts it hides behind, so every pair hides it all and only F0's and B7's stay: 1/8 of them
    options = dict(mode="train", batch=1, seq=4096, dp=8, ep=8, zero=1, micro_batches=8, flash=True,
                   framework="megatron", gpu="h100-sxm")
    off = step_time(estimate("mixtral-8x7b", **options), "h100-sxm")
    on = step_time(estimate("mixtral-8x7b", **options, moe_a2a_overlap=True), "h100-sxm")
    assert off.ep_s > 0 and on.ep_s == pytest.approx(off.ep_s / 8)
    assert on.compute_s == off.compute_s
    assert any("--moe-a2a-overlap" in line for line in on.model())


@pytest.mark.parametrize("options, fragment", [
    (dict(dp=2), "give --ep greater than 1"),
    (dict(dp=2, ep=2, pp=2, micro_batches=2), "give --virtual-stages"),
    (dict(dp=2, ep=2, recompute="full"), "without full recompute"),
    (dict(dp=2, ep=2, framework="torchtitan"), "--framework torchtitan runs none"),
])
def test_refused_where_megatron_core_asserts(options: dict, fragment: str) -> None:
    # TransformerConfig.__post_init__: expert_model_parallel_size > 1, virtual_pipeline_model_parallel_size with
    # pipeline_model_parallel_size > 1, recompute_granularity != 'full'; another framework has no such schedule
    with pytest.raises(OptionsError) as err:
        estimate("mixtral-8x7b", mode="train", batch=1, seq=64, moe_a2a_overlap=True, **options)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--model", "mixtral-8x7b", "--mode", "train", "--batch", "1", "--seq", "64",
                 "--dp", "2", "--moe-a2a-overlap"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "give --ep greater than 1" in err


def test_the_planner_sets_it_where_megatron_core_runs_it_and_times_as_estimate_does() -> None:
    # 16 experts, 2 per token, h 64, 4 layers on 16 H100s: every row with ep > 1 and (p 1 or v > 1) carries the
    # overlap, the others not (Options would refuse them); each row's step time is its own estimate's
    model = Model("wide-moe", replace(LLAMA, moe=Moe()), {"h": 64, "a": 4, "a_kv": 2, "l": 4, "V": 128, "f": 128,
                                                          "E": 16, "k": 2, "f_e": 64})
    cluster = Cluster(gpu("h100-sxm"), 8, 50e9)
    rows = plan(model, 80 * 2**30, 32, 64, 16, options=Options(gpu="h100-sxm"), top=10**6, cluster=cluster,
                recomputes=("none",), zeros=(0,), a2a_overlap=True)
    runs = {(r.options.get("ep", 1) > 1 and (r.options.get("pp", 1) == 1 or (r.options.get("virtual_stages") or 1) > 1),
             bool(r.options.get("moe_a2a_overlap"))) for r in rows}
    assert runs == {(True, True), (False, False)}
    for row in [r for r in rows if r.options.get("moe_a2a_overlap")][::5]:
        assert row.step_time_s == pytest.approx(step_time(estimate(model, **row.options), cluster).step_s)


@pytest.mark.slow  # a whole plan, about a second
def test_plan_takes_the_flag_and_its_rows_time_as_estimate_does(capsys: pytest.CaptureFixture[str]) -> None:
    # memderive plan --moe-a2a-overlap: the best row carries the overlap (ep 8 given, p 1 or v > 1 there) and its
    # options, through estimate, give the row's own step time
    argv = ["plan", "--model", "mixtral-8x7b", "--gpus", "64", "--global-batch", "256", "--seq", "4096", "--gpu",
            "h100-sxm", "--ep", "8", "--framework", "megatron", "--moe-a2a-overlap", "--top", "1", "--json"]
    assert main(argv) == 0
    row = json.loads(capsys.readouterr().out)["layouts"][0]
    assert row["options"]["moe_a2a_overlap"] is True
    assert step_time(estimate("mixtral-8x7b", **row["options"]), "h100-sxm").step_s == pytest.approx(row["step_time_s"])
