"""vLLM's start-up (issue 37, item 7): an engine that cannot start is said to, exit 1 and fits false; the profiling
run's forward is max_num_batched_tokens split over dummy requests (not one sequence of that length); the H200's
total as torch reports it; the dummy sampler's buffers as vLLM's code allocates them. Expected values by hand."""

from __future__ import annotations

import json

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.serving import SAMPLER_FP32_BYTES, vllm_startup

GIB = 2**30
L4 = ["estimate", "--model", "llama-3-8b", "--mode", "infer", "--batch", "1", "--framework", "vllm", "--gpu", "l4"]


def test_an_engine_without_kv_memory_refuses_to_start(capsys) -> None:
    """The issue's command: llama-3-8b on an L4 (24 GiB) at utilization 0.5: the budget 0.5 x 24 GiB =
    12,884,901,888 B is less than the 16,060,522,496 B of bf16 weights alone (2 x 8,030,261,248 parameters), so
    the KV cache gets a negative amount: vLLM raises 'No available memory for the cache blocks'."""
    code = main([*L4, "--seq", "8192", "--gpu-memory-utilization", "0.5", "--json"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 1 and data["fits_gpu"] is False and data["vllm"]["starts"] is False
    assert data["vllm"]["kv_cache_memory_bytes"] < 12_884_901_888 - 16_060_522_496 < 0
    assert "vLLM refuses to start: no available memory for the cache blocks" in err and err.count("\n") == 1
    assert main([*L4, "--seq", "8192", "--gpu-memory-utilization", "0.5"]) == 1
    assert "vLLM refuses to start" in capsys.readouterr().out


def test_an_engine_that_cannot_hold_one_request_refuses_to_start(capsys) -> None:
    """At utilization 0.9 the L4's KV memory holds 32,768 tokens (a page 2 x 8 KV heads x 128 x 2 B x 32 layers =
    131,072 B per token: 4,294,967,296 B for one request) but not 60,000 (7,864,320,000 B): vLLM's
    check_enough_kv_cache_memory refuses the second."""
    assert main([*L4, "--seq", "32768", "--json"]) == 0
    fits = json.loads(capsys.readouterr().out)
    assert 32_768 * 131_072 <= fits["vllm"]["kv_cache_memory_bytes"] < 60_000 * 131_072
    assert main([*L4, "--seq", "60000", "--json"]) == 1
    data = json.loads(capsys.readouterr()[0])
    assert data["fits_gpu"] is False and "one request of max_model_len 60,000 tokens needs 7,864,320,000 B" in \
        data["vllm"]["refusal"]


def test_the_profiling_run_splits_its_tokens_over_requests(capsys) -> None:
    """gpt2 (1,024 learned positions) under vLLM: the profile's 2,048 tokens (the L4's default; 8,192 on an H100)
    run as min(256, 2,048) = 256 requests of 8 tokens, not one of 2,048 tokens past its positions."""
    assert main(["estimate", "--model", "gpt2", "--mode", "infer", "--batch", "1", "--seq", "512", "--framework",
                 "vllm"]) == 0
    capsys.readouterr()
    assert main(["estimate", "--model", "gpt2", "--mode", "infer", "--batch", "1", "--seq", "512", "--framework",
                 "vllm", "--gpu", "h100-sxm", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vllm"]["starts"] is True


def test_h200_total_and_the_sampler_peak_by_hand() -> None:
    """The H200's total is 139.81 GiB as torch reports it (not the datasheet's 141). llama-3-8b on it (8,192 tokens,
    1,024 sequences by default): the dummy sampler holds 1,024 x 128,256 logits at 2 (bf16) + 4 (fp32 copy) + 4
    (sorted) + 8 (int64 indices) + 1 + 1 (masks) + 4 (softmax) + 4 (scatter) = 28 B each = 3,677,356,032 B, with
    the forward's hidden states (8,192 + 1,024) x 4,096 x 2 B = 75,497,472 B held: 3,752,853,504 B, more than the
    forward's transient of 8,192 tokens."""
    v = vllm_startup(estimate("llama-3-8b", mode="infer", batch=1, seq=8192, framework="vllm", gpu="h200"))
    assert v.total_memory == int(139.81 * GIB)
    assert SAMPLER_FP32_BYTES + 2 == 28
    assert v.activation_peak == 1024 * 128_256 * 28 + (8192 + 1024) * 4096 * 2 == 3_752_853_504
