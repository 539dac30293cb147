"""plan's search space beyond tp/pp/dp/ZeRO/recompute/micro-batches: expert parallelism for models with routed
experts (every ep dividing E and dp, unless --ep pins one), offload, and weight and KV dtypes for serving; each row
re-runs through estimate to the same bytes (and, with --gpu, the same step time)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.models.architectures import LLAMA, Moe
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options
from memderive.derivations.search.plan import plan

# a small MoE model: 4 experts, top-2
TINY_MOE = Model("tiny-moe", replace(LLAMA, moe=Moe()), {"h": 64, "a": 4, "a_kv": 2, "l": 2, "V": 128, "f": 128,
                                                         "E": 4, "k": 2, "f_e": 64})
GIB = 2**30


def _rerun(row) -> dict:
    return estimate(TINY_MOE, **row.options).to_json()


@pytest.mark.slow  # 1.6 s in process
def test_plan_compares_every_expert_parallel_degree() -> None:
    """On 4 GPUs, global batch 4: layouts with ep 1, 2 and 4 (the divisors of E = 4), each dp a multiple of ep;
    every row re-runs to its bytes and step time."""
    rows = plan(TINY_MOE, 80 * GIB, 4, 64, 4, options=Options(gpu="a100-80gb"), top=10**6)
    eps = {row.options.get("ep", 1) for row in rows}
    assert eps == {1, 2, 4}
    for row in rows:
        o = row.options
        assert o.get("dp", 1) % o.get("ep", 1) == 0 and 4 % o.get("ep", 1) == 0
    for row in rows[:3] + [r for r in rows if r.options.get("ep", 1) == 4][:2]:
        again = _rerun(row)
        assert (again["total_bytes"], again["step_time_s"]) == (row.total_bytes, row.step_time_s)


def test_a_given_ep_is_kept() -> None:
    rows = plan(TINY_MOE, 80 * GIB, 4, 64, 4, options=Options(mode="train", batch=1, seq=64, dp=2, ep=2,
                                                              gpu="a100-80gb"), top=10**6)
    assert {row.options.get("ep", 1) for row in rows} == {2}


def test_expert_parallelism_holds_a_share_of_the_experts() -> None:
    """ZeRO 0, tp = pp = 1, dp 4, micro-batch 1: the routed experts' weights per GPU are E/ep of them. Experts:
    E * 3 h f_e * l = 4 * 3 * 64 * 64 * 2 = 98,304 parameters at 16 bytes each under mixed-precision AdamW
    (2 weight + 2 gradient + 4 master + 4 + 4 moments): ep 1 -> 2 frees half, 49,152 * 16 = 786,432 B; ep 2 -> 4 a
    quarter, 393,216 B."""
    rows = plan(TINY_MOE, 80 * GIB, 4, 64, 4, options=Options(gpu="a100-80gb"), top=10**6)
    same = {row.options.get("ep", 1): row.total_bytes for row in rows
            if (row.options.get("tp", 1), row.options.get("pp", 1), row.options.get("zero", 0), row.options["batch"],
                row.options.get("recompute", "none")) == (1, 1, 0, 1, "none")}
    assert same[1] - same[2] == 786_432 and same[2] - same[4] == 393_216


def test_expert_all_to_alls_under_full_recompute_are_timed() -> None:
    """Full recompute runs the forward's dispatch and combine again: 6 all-to-alls per micro-batch where there are
    4 without it (timing.expert_parallel_s), so 3/2 the time; it raised StopIteration before (the recomputed graph
    saves no gathered tokens to size them by)."""
    common = dict(mode="train", batch=1, seq=64, dp=4, ep=2, gpu="h100-sxm")
    plain = estimate(TINY_MOE, **common).to_json()["ep_comm_time_s"]
    full = estimate(TINY_MOE, recompute="full", **common).to_json()["ep_comm_time_s"]
    assert plain > 0 and abs(full - 1.5 * plain) <= 1e-12 * full
