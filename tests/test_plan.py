"""The planner's layouts fit and re-run through ``estimate`` to the same bytes; the fewest GPUs is the fewest."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from dataclasses import replace

from memderive.derivations.estimate import estimate
from memderive.derivations.search.plan import PlanError, plan, smallest_gpu_count

GB80 = 80 * 10**9


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_llama_70b_on_1024_gpus_rows_rerun_to_the_same_bytes() -> None:
    layouts = plan("llama-2-70b", GB80, 1024, 4096, 1024, top=8)
    assert layouts
    for x in layouts:
        o = x.options
        assert o["tp"] * o.get("pp", 1) * o["dp"] * o.get("cp", 1) == 1024  # GPUs = t p d cp
        assert o["batch"] * o["micro_batches"] * o["dp"] == 1024  # b * m * d = the global batch
        assert estimate("llama-2-70b", **o).number("total_bytes") == x.total_bytes <= GB80
    times = [x.flops_per_gpu * (1 + x.bubble) for x in layouts]
    assert times == sorted(times)


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_pipeline_layouts_rerun_too() -> None:
    """A budget that needs pipelining: every row's bytes are estimate's (first stage, m micro-batches)."""
    layouts = plan("llama-2-70b", 40 * 10**9, 64, 4096, 64, top=40)
    staged = [x for x in layouts if x.options.get("pp", 1) > 1]
    for x in staged or layouts:
        assert estimate("llama-2-70b", **x.options).number("total_bytes") == x.total_bytes <= 40 * 10**9


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_fewest_gpus_is_the_fewest() -> None:
    fewest = smallest_gpu_count("llama-2-7b", 24 * 10**9, 64, 2048)
    smaller = [n for n in (1, 2, 4, 8, 16, 32) if n < fewest]
    for n in smaller:
        with pytest.raises(PlanError):
            plan("llama-2-7b", 24 * 10**9, 64, 2048, n)
    assert plan("llama-2-7b", 24 * 10**9, 64, 2048, fewest)


def test_cli_json_rows_rerun_through_estimate() -> None:
    out = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "plan", "--model", "llama-2-7b", "--gpus", "8",
                          "--gpu-memory", "40GB", "--seq", "4096", "--global-batch", "64", "--json", "--top", "2"],
                         capture_output=True, text=True, check=True)
    for row in json.loads(out.stdout)["layouts"]:
        flags = []
        for key, value in row["options"].items():
            if value is True:
                flags.append("--" + key.replace("_", "-"))
            elif value is not False:
                flags += ["--" + key.replace("_", "-"), str(value)]
        again = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "llama-2-7b", *flags,
                                "--json"], capture_output=True, text=True, check=True)
        assert json.loads(again.stdout)["total_bytes"] == row["total_bytes"]


def test_nothing_fits_is_an_answer_with_what_would_fit() -> None:
    """As ``fit``: exit 1 (an answer, not bad input), and a GPU count that fits, which a plan of that many GPUs
    confirms."""
    argv = [sys.executable, "-m", "memderive.commands.cli", "plan", "--model", "llama-2-70b", "--gpu-memory", "8GB", "--seq",
            "4096", "--global-batch", "8"]
    result = subprocess.run([*argv, "--gpus", "8"], capture_output=True, text=True)
    assert result.returncode == 1 and result.stderr == "" and "no layout fits" in result.stdout
    suggested = result.stdout.split("would fit with:")[1].split()[1]
    again = subprocess.run([*argv, "--gpus", suggested, "--json", "--top", "1"], capture_output=True, text=True)
    assert again.returncode == 0 and json.loads(again.stdout)["layouts"][0]["total_bytes"] <= 8 * 10**9
    data = json.loads(subprocess.run([*argv, "--gpus", "8", "--json"], capture_output=True, text=True).stdout)
    assert data["fits"] is False and data["needed_bytes"] > 8 * 10**9 and data["would_fit"]


def test_inference_plan_rows_fit_and_the_next_batch_does_not() -> None:
    from memderive.derivations.search.plan import plan_infer

    layouts = plan_infer("llama-2-70b", GB80, 4096, 8, new_tokens=512)
    assert [x.options["tp"] for x in layouts] == [8, 4, 2]  # 70B in bf16 (140 GB) needs t >= 2
    budget = GB80  # fit's rule (issue 37): the whole GPU; vLLM's gpu_memory_utilization under --framework vllm only
    for x in layouts:
        assert estimate("llama-2-70b", **x.options).number("total_bytes") == x.total_bytes <= budget
        bigger = {**x.options, "batch": x.options["batch"] + 1}
        assert estimate("llama-2-70b", **bigger).number("total_bytes") > budget


# --- with --gpu: the compute model's step time (derivations.quantities.timing) ranks and is reported ---

H100_HBM_BYTES_PER_S = 3_350 * 10**9  # H100 SXM datasheet: 3.35 TB/s


def _cli_json(*argv: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "memderive.commands.cli", *argv, "--json"], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def _flags(options: dict) -> list[str]:
    flags = []
    for key, value in options.items():
        if value is True:
            flags.append("--" + key.replace("_", "-"))
        elif value is not False and value is not None:
            flags += ["--" + key.replace("_", "-"), str(value)]
    return flags


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_gpu_plan_ranks_by_the_step_time_estimate_reports() -> None:
    """Every row's step time, tokens/s and MFU are what ``estimate`` with its options reports; rows come
    fastest first; and the top row is no slower than the proxy's favourite timed the same way (the proxy
    ignores tensor-parallel all-reduces, so it cannot see that t = 8 costs more communication)."""
    from memderive.derivations.options import Options

    base = Options(mode="train", batch=1, seq=4096, gpu="h100-sxm")
    layouts = plan("llama-2-70b", 80 * 2**30, 1024, 4096, 1024, options=base, top=6)
    times = [x.step_time_s for x in layouts]
    assert times == sorted(times) and None not in times
    for x in layouts:
        e = estimate("llama-2-70b", **x.options).to_json()
        assert (e["total_bytes"], e["step_time_s"], e["mfu"]) == (x.total_bytes, x.step_time_s, x.mfu)
        assert x.tokens_per_s == 1024 * 4096 / x.step_time_s  # the global batch's tokens per step
        assert 0 < x.mfu < e["efficiency"]  # below the matmul efficiency once the rest of the step counts
    proxy_top = plan("llama-2-70b", 80 * 2**30, 1024, 4096, 1024, options=replace(base, gpu=None), top=1)[0]
    timed = estimate("llama-2-70b", **{**proxy_top.options, "gpu": "h100-sxm"}).to_json()["step_time_s"]
    assert layouts[0].step_time_s <= timed


def test_gpu_cli_json_rows_rerun_to_the_same_bytes_and_step_time() -> None:
    plan_json = _cli_json("plan", "--model", "llama-2-7b", "--gpus", "8", "--gpu", "a100-40gb", "--seq", "4096",
                          "--global-batch", "64", "--top", "2")
    assert plan_json["capacity_bytes"] == 40 * 2**30  # A100 40GB: binary GB (the datasheet's 40,960 MiB)
    assert any("NVIDIA A100 40GB" in line for line in plan_json["step_time_model"])
    for row in plan_json["layouts"]:
        again = _cli_json("estimate", "--model", "llama-2-7b", *_flags(row["options"]))
        assert (again["total_bytes"], again["step_time_s"]) == (row["total_bytes"], row["step_time_s"])


def test_without_gpu_the_output_says_proxy() -> None:
    out = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "plan", "--model", "llama-2-7b", "--gpus", "8",
                          "--gpu-memory", "40GB", "--seq", "4096", "--global-batch", "64", "--top", "1"],
                         capture_output=True, text=True, check=True).stdout
    assert "no --gpu: step time is a proxy" in out and "MFU<=" in out


def test_gpu_errors_are_one_line() -> None:
    for extra in (["--gpu", "A100"], ["--gpu", "h100-sxm", "--peak-tflops", "989"], ["--efficiency", "0.4"]):
        result = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "plan", "--model", "llama-2-7b", "--gpus", "8",
                                 "--seq", "4096", "--global-batch", "64", *extra], capture_output=True, text=True)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, (extra, result.stderr)


def test_gpu_inference_plan_reports_the_roofline() -> None:
    """Decode tokens/s over the replicas from the roofline, equal to estimate's per replica; a decode step
    is no faster than reading the GPU's weights and KV cache at the datasheet's bandwidth."""
    found = _cli_json("plan", "--model", "llama-2-70b", "--mode", "infer", "--gpus", "8", "--gpu", "h100-sxm",
                      "--seq", "4096", "--new-tokens", "512")
    rows = found["layouts"]
    e2e = [r["end_to_end_tokens_per_s"] for r in rows]  # ranked end to end: prefill plus 512 decode steps
    assert e2e == sorted(e2e, reverse=True)
    for r in rows:
        e = estimate("llama-2-70b", **r["options"]).to_json()
        # with --gpu the budget is the device bytes (runtime included) against the whole 80 GiB
        assert e["total_bytes"] == r["total_bytes"] and e["device_bytes"] <= 80 * 2**30
        assert e["decode_time_per_token_s"] == r["decode_time_per_token_s"] == r["step_time_s"]
        assert e["prefill_time_s"] == r["prefill_time_s"]
        assert r["tokens_per_s"] == r["tokens_per_step"] / r["decode_time_per_token_s"]
        # b n new tokens over the prefill and n decode steps, per replica, times the replicas
        replicas = r["tokens_per_step"] // r["options"]["batch"]
        generate = r["prefill_time_s"] + 512 * r["decode_time_per_token_s"]
        assert r["end_to_end_tokens_per_s"] == pytest.approx(replicas * r["options"]["batch"] * 512 / generate)
        assert r["end_to_end_tokens_per_s"] < r["tokens_per_s"]
        assert r["decode_time_per_token_s"] >= r["bytes_read_per_step"] / H100_HBM_BYTES_PER_S
