"""plan's search space beyond tp/pp/dp/ZeRO/recompute/micro-batches: expert parallelism for models with routed
experts (every ep dividing E and dp, unless --ep pins one), offload, and weight and KV dtypes for serving; each row
re-runs through estimate to the same bytes (and, with --gpu, the same step time)."""

from __future__ import annotations

import json
import subprocess
import sys
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
                row.options.get("recompute", "none"), row.options.get("cp", 1)) == (1, 1, 0, 1, "none", 1)}
    assert same[1] - same[2] == 786_432 and same[2] - same[4] == 393_216


def test_expert_all_to_alls_under_full_recompute_are_timed() -> None:
    """Full recompute runs the forward's dispatch and combine again: 6 all-to-alls per micro-batch where there are
    4 without it (timing.expert_parallel_s), so 3/2 the time; it raised StopIteration before (the recomputed graph
    saves no gathered tokens to size them by)."""
    common = dict(mode="train", batch=1, seq=64, dp=4, ep=2, gpu="h100-sxm")
    plain = estimate(TINY_MOE, **common).to_json()["ep_comm_time_s"]
    full = estimate(TINY_MOE, recompute="full", **common).to_json()["ep_comm_time_s"]
    assert plain > 0 and abs(full - 1.5 * plain) <= 1e-12 * full


# --- serving: weight and KV dtypes compared (plan --mode infer --weight-dtype bf16,fp8 --kv-dtype bf16,fp8) ---

def _plan_json(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", "plan", *argv], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow  # subprocesses
def test_serving_plan_compares_weight_and_kv_dtypes() -> None:
    """llama-2-70b on 8 H100s, 4096 + 512 tokens, weights bf16 or fp8, KV cache bf16 or fp8: every pair is planned;
    fp8 weights are 1 byte per matrix element where bf16 are 2, so at the same tp and batch fp8 reads fewer bytes;
    rows re-run through estimate to the same bytes; end to end never above decode alone."""
    argv = ["--model", "llama-2-70b", "--mode", "infer", "--gpus", "8", "--gpu", "h100-sxm", "--seq", "4096",
            "--new-tokens", "512", "--top", "100", "--json"]
    rows = json.loads(_plan_json(*argv, "--weight-dtype", "bf16,fp8", "--kv-dtype", "bf16,fp8").stdout)["layouts"]
    pairs = {(r["options"].get("weight_dtype", "bf16"), r["options"].get("kv_dtype", "bf16")) for r in rows}
    assert pairs == {("bf16", "bf16"), ("bf16", "fp8"), ("fp8", "bf16"), ("fp8", "fp8")}
    for r in rows:
        assert r["end_to_end_tokens_per_s"] < r["tokens_per_s"]
        again = estimate("llama-2-70b", **r["options"]).to_json()
        assert again["total_bytes"] == r["total_bytes"]
    e2e = [r["end_to_end_tokens_per_s"] for r in rows]
    assert e2e == sorted(e2e, reverse=True)
    # one pair only is what --weight-dtype fp8 --kv-dtype fp8 plans
    only = json.loads(_plan_json(*argv, "--weight-dtype", "fp8", "--kv-dtype", "fp8").stdout)["layouts"]
    assert [r["total_bytes"] for r in only] == [r["total_bytes"] for r in rows
                                                 if r["options"].get("weight_dtype") == "fp8"
                                                 and r["options"].get("kv_dtype") == "fp8"]


def test_a_dtype_the_kv_cache_does_not_take_is_refused_not_skipped() -> None:
    """int4 is a weight format, not a KV-cache dtype: one line, exit 2 (it was silently planned as 'does not fit')."""
    proc = _plan_json("--model", "gpt2", "--mode", "infer", "--gpus", "1", "--gpu", "h100-sxm", "--seq", "64",
                      "--kv-dtype", "bf16,int4")
    assert proc.returncode == 2 and "--kv-dtype must be one of" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# --- nothing fits: what would (more GPUs, --offload, another dtype) ---

def test_training_nothing_fits_names_offload() -> None:
    """llama-2-13b on 2 H100s, global batch 8 of 2048: no layout fits 80 GiB (16 bytes per parameter of
    mixed-precision AdamW are 13.0e9 * 16 / 2 = 104 GB per GPU even split over both); ZeRO-Offload keeps the
    16-bit weights, 2 bytes per parameter, 13.0e9 * 2 / 2 = 13 GB per GPU over tp 2, and fits: --offload is named."""
    proc = _plan_json("--model", "llama-2-13b", "--gpus", "2", "--gpu", "h100-sxm", "--seq", "2048",
                      "--global-batch", "8", "--json")
    assert proc.returncode == 1
    would = {x["change"]: x["total_bytes"] for x in json.loads(proc.stdout)["would_fit"]}
    assert "--offload" in would and 13 * 10**9 < would["--offload"] < 80 * 2**30
    assert "--gpus 4" in would


def test_serving_nothing_fits_names_more_gpus() -> None:
    """llama-2-70b in bf16 on one H100: 69.0e9 * 2 = 138 GB of weights; tp 2 holds 69 GB per GPU and fits: --gpus 2."""
    proc = _plan_json("--model", "llama-2-70b", "--mode", "infer", "--gpus", "1", "--gpu", "h100-sxm", "--seq",
                      "4096", "--json")
    assert proc.returncode == 1
    would = [x["change"] for x in json.loads(proc.stdout)["would_fit"]]
    assert would[0] == "--gpus 2" and "--weight-dtype fp8" in would


def test_tensor_parallel_groups_stay_inside_a_node() -> None:
    """GPT-2 has 12 heads, so t may be 1, 2, 3, 4 or 6 within 8 GPUs a node. Past one node a t that does not divide
    8 puts groups across two nodes (ranks numbered tp-first: t 6 on 12 GPUs makes ranks 6-11 one group, over nodes 0
    and 1; t 3 ranks 6-8), so on 12 GPUs the planner keeps t 1, 2, 4; on 6 GPUs, one node, t 3 and 6 stay."""
    across = plan("gpt2", 80 * 2**30, 12, 256, 12, top=10**6)
    assert {x.options.get("tp", 1) for x in across} == {1, 2, 4}
    inside = plan("gpt2", 80 * 2**30, 6, 256, 6, top=10**6)
    assert {3, 6} <= {x.options.get("tp", 1) for x in inside}


def test_the_planner_takes_the_recompute_zero_stages_and_sequence_parallelism_it_is_given() -> None:
    """``plan(recomputes=, zeros=, sequence_parallel=)``: only those are compared (the published-runs comparison
    plans a run under its framework's features); the defaults compare ZeRO 0-3, none and full recompute under
    FlashAttention, and sequence parallelism with every t > 1."""
    rows = plan("gpt2", 80 * 2**30, 16, 1024, 8, top=10**6, recomputes=("selective",), zeros=(0, 1),
                sequence_parallel=False)
    assert {x.options.get("recompute") for x in rows} == {"selective"}
    assert {x.options.get("zero", 0) for x in rows} == {0, 1}
    assert not any(x.options.get("sp") for x in rows) and any(x.options.get("tp", 1) > 1 for x in rows)
    default = plan("gpt2", 80 * 2**30, 16, 1024, 8, top=10**6)
    assert {x.options.get("recompute", "none") for x in default} == {"none", "full"}
    assert {x.options.get("zero", 0) for x in default} == {0, 1, 2, 3}
    assert all(x.options.get("sp") for x in default if x.options.get("tp", 1) > 1)
