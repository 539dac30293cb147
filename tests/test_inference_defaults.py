"""Inference defaults as serving runs them (issue 14, item 1), through the command line.

transformers' ``generate`` runs sdpa by default (``get_correct_attn_implementation``: ``"sdpa" if
requested_attention is None``), computes the last position's logits only (``logits_to_keep = 1``)
and copies them to fp32; a sliding-window layer pins the whole prompt until the first decode step.
Every expected number below is hand arithmetic on the models' config.json sizes.
"""

from __future__ import annotations

import json

import pytest

from memderive.commands.cli import main

GB = 10**9
# llama-3-8b: 8,030,261,248 parameters (Meta's model card: 8.03B); 32 layers, 8 KV heads of 128, f 14,336,
# V 128,256. One cached token: K and V (2) * 32 layers * 8 heads * 128 * 2 bytes = 131,072 B.
LLAMA3_WEIGHTS = 8_030_261_248 * 2  # 16,060,522,496 B = 16.1 GB
TOKEN = 2 * 32 * 8 * 128 * 2  # 131,072
LONG = ("--model", "llama-3-8b", "--mode", "infer", "--batch", "1", "--seq", "131072", "--new-tokens", "1024")


def run_json(capsys, *args: str) -> dict:
    assert main(["estimate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_long_prompt_by_default_is_what_serving_holds(capsys) -> None:
    out = run_json(capsys, *LONG)
    # KV cache at the end: 131,072 B * (131,072 + 1,024) tokens = 17,314,086,912 B = 17.3 GB
    assert (out["weight_bytes"], out["kv_cache_bytes"]) == (LLAMA3_WEIGHTS, TOKEN * 132_096)
    # prefill: the prompt's KV 131,072 * 131,072 = 17,179,869,184 B and the largest buffer, the MLP's gate
    # output b s f in bf16 = 131,072 * 14,336 * 2 = 3,758,096,384 B (no s x s scores: sdpa):
    # 16,060,522,496 + 17,179,869,184 + 3,758,096,384 = 36,998,488,064 B = 37.0 GB
    assert out["prefill_bytes"] == LLAMA3_WEIGHTS + TOKEN * 131_072 + 131_072 * 14_336 * 2 == 36_998_488_064
    # decode: the full cache and generate's fp32 last-position logits, 128,256 * 4 = 513,024 B:
    # 16,060,522,496 + 17,314,086,912 + 513,024 = 33,375,122,432 B
    assert out["decode_bytes"] == LLAMA3_WEIGHTS + TOKEN * 132_096 + 128_256 * 4 == 33_375_122_432
    assert (out["total_bytes"], out["peak_phase"]) == (36_998_488_064, "prefill")
    assert 33 * GB < out["total_bytes"] < 40 * GB  # weights 16.1 GB + KV cache 17.3 GB + buffers
    assert out["inputs"]["attention"] == "sdpa"


def test_eager_keeps_the_score_matrix(capsys) -> None:
    out = run_json(capsys, *LONG, "--attention", "eager")
    # b a s s in bf16: 32 heads * 131,072^2 * 2 = 1,099,511,627,776 B (1.1 TB), held in prefill
    assert out["activation_bytes"] == 32 * 131_072**2 * 2 == 1_099_511_627_776
    assert out["total_bytes"] == LLAMA3_WEIGHTS + TOKEN * 131_072 + 1_099_511_627_776
    assert out["inputs"]["attention"] == "eager"


def test_text_names_the_peak_phase(capsys) -> None:
    assert main(["estimate", *LONG]) == 0
    text = capsys.readouterr().out
    assert "peak: prefill" in text and "memory-efficient attention (sdpa)" in text
    assert "Prefill memory per GPU" in text and "Decode memory per GPU" in text


def test_sliding_window_pins_the_prompt_after_prefill(capsys) -> None:
    # mistral-7b: window 4,096 in every layer, one token 131,072 B as llama-3-8b. Prompt 8,192 tokens:
    # right after the prefill each layer still holds all 8,192 (the view's storage), then 4,096.
    out = run_json(capsys, "--model", "mistral-7b", "--mode", "infer", "--batch", "1", "--seq", "8192")
    assert out["kv_cache_bytes"] == TOKEN * 4096
    # prefill buffer: the MLP's s f = 8,192 * 14,336 * 2 = 234,881,024 B; decode: fp32 logits 32,000 * 4
    assert out["prefill_bytes"] == out["weight_bytes"] + TOKEN * 8192 + 8192 * 14_336 * 2
    assert out["decode_bytes"] == out["weight_bytes"] + TOKEN * 4096 + 32_000 * 4
    assert out["peak_phase"] == "prefill"


def test_paged_cache_holds_whole_blocks(capsys) -> None:
    # 100 prompt + 10 new tokens in blocks of 16: ceil(110/16) = 7 blocks = 112 tokens; the prefill
    # ceil(100/16) = 7 blocks as well
    out = run_json(capsys, "--model", "llama-3-8b", "--mode", "infer", "--batch", "2", "--seq", "100",
                   "--new-tokens", "10", "--kv-block", "16")
    assert out["kv_cache_bytes"] == 2 * 112 * TOKEN
    plain = run_json(capsys, "--model", "llama-3-8b", "--mode", "infer", "--batch", "2", "--seq", "100",
                     "--new-tokens", "10")
    assert plain["kv_cache_bytes"] == 2 * 110 * TOKEN
    assert out["inputs"]["kv_block"] == 16


def test_training_sdpa_is_flash_and_flash_is_the_default(capsys) -> None:
    """Issue 37 item 1: training assumes what today's frameworks run (Megatron-Core: Transformer Engine's flash
    kernel); the textbook eager profile is one flag away."""
    train = ("--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "1024")
    default, sdpa, flash, eager = (run_json(capsys, *train, *extra) for extra in
                                   ((), ("--attention", "sdpa"), ("--flash",), ("--attention", "eager")))
    assert default["activation_bytes"] == sdpa["activation_bytes"] == flash["activation_bytes"] < eager["activation_bytes"]
    assert default["inputs"]["attention"] == "flash" and eager["inputs"]["attention"] == "eager"


@pytest.mark.parametrize(("args", "fragment"), [
    ((*LONG, "--flash", "--attention", "eager"), "--flash is short for --attention flash; it contradicts"),
    (("--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "8", "--kv-block", "16"),
     "--kv-block does not apply to --mode train"),
    ((*LONG, "--kv-block", "0"), "--kv-block must be a positive integer"),
])
def test_contradictions_are_refused(capsys, args: tuple[str, ...], fragment: str) -> None:
    assert main(["estimate", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
