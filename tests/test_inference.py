"""Inference memory: quantized weights, transient buffers and totals by hand arithmetic; bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sympy as sp

from memderive.derivations.models.architectures import LLAMA
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.inference import rule_of_thumb_tokens
from memderive.derivations.models.model import Model

# h 256, 4 heads of d_h 64, 2 KV heads, 2 layers, SwiGLU f 512, vocab 1000, untied embeddings.
# Per layer, linear weights (elements): qkv (4 + 2 + 2) * 64 = 512 rows x 256 = 131,072; proj 256 x 256
# = 65,536; gate and up 512 x 256 = 131,072 each; down 256 x 512 = 131,072: 589,824; two layers
# 1,179,648. Everything else: embedding and LM head 1000 x 256 = 256,000 each, norms 2 x 256 per layer
# and a final 256: 513,280 elements.
SMALL = Model("small", LLAMA, {"h": 256, "a": 4, "a_kv": 2, "l": 2, "f": 512, "V": 1000})
LINEAR, OTHER = 1_179_648, 513_280
# int8/int4 scales, g = 128 (fp16, 2 bytes): one per 128 inputs of each row; qkv 512 x 2, proj
# 256 x 2, gate 512 x 2, up 512 x 2, down 256 x 4 = 4,608 per layer, 9,216 in all: 18,432 bytes.
SCALES_128 = 18_432


@pytest.mark.parametrize(("weight_dtype", "expected"), [
    ("fp32", (LINEAR + OTHER) * 4),  # 6,771,712
    ("bf16", (LINEAR + OTHER) * 2),  # 3,385,856
    ("fp16", (LINEAR + OTHER) * 2),
    ("fp8", LINEAR + OTHER * 2),  # linear layers 1 byte, the rest stays bf16: 2,206,208
    ("int8", LINEAR + SCALES_128 + OTHER * 2),  # 2,224,640
    ("int4", LINEAR // 2 + SCALES_128 + OTHER * 2),  # 589,824 + 18,432 + 1,026,560 = 1,634,816
])
def test_weight_bytes_by_hand(weight_dtype: str, expected: int) -> None:
    est = estimate(SMALL, mode="infer", batch=1, seq=1, weight_dtype=weight_dtype)
    assert est.number("weight_bytes") == expected


def test_group_that_does_not_divide_rounds_groups_up() -> None:
    # g = 96: ceil(256/96) = 3 groups a row of 256 inputs, ceil(512/96) = 6 for down's 512 inputs:
    # qkv 512 x 3 + proj 256 x 3 + gate 512 x 3 + up 512 x 3 + down 256 x 6 = 6,912 per layer;
    # 13,824 scales, 27,648 bytes.
    est = estimate(SMALL, mode="infer", batch=1, seq=1, weight_dtype="int4", quant_group=96)
    assert est.number("weight_bytes") == LINEAR // 2 + 27_648 + OTHER * 2


def test_tensor_parallel_weights_by_hand() -> None:
    # t = 2: linear layers split in half (589,824), vocabulary split (2 x 128,000), norms whole (1,280).
    bf16 = estimate(SMALL, mode="infer", batch=1, seq=1, tp=2)
    assert bf16.number("weight_bytes") == (589_824 + 256_000 + 1_280) * 2  # 1,694,208
    # int4 scales per GPU: qkv 256 x 2, proj 256 x ceil(128/128), gate and up 256 x 2, down
    # 256 x ceil(256/128) = 2,304 per layer: 4,608 scales, 9,216 bytes.
    int4 = estimate(SMALL, mode="infer", batch=1, seq=1, tp=2, weight_dtype="int4")
    assert int4.number("weight_bytes") == 589_824 // 2 + 9_216 + (256_000 + 1_280) * 2  # 818,688


@pytest.mark.parametrize(("batch", "seq", "new", "attention", "expected"), [
    (1, 4096, 0, "eager", 2 * 4 * 4096**2),  # eager prefill scores b a s s, 2 bytes: 134,217,728
    # sdpa (the default) and flash hold no scores: the MLP's b s f = qkv's b s (a + 2 a_kv) d_h outputs,
    # 4096 * 512 * 2 = 4,194,304; the logits are the last position's only (b V, fp32 copy 4,000)
    (1, 4096, 0, None, 4096 * 512 * 2),
    (1, 4096, 0, "sdpa", 4096 * 512 * 2),
    (1, 4096, 0, "flash", 4096 * 512 * 2),
    (1, 1, 10_000, "eager", 2 * 4 * 10_001),  # decode: one query over s + n keys, 80,008
    (1, 1, 10_000, "flash", 4 * 1000),  # decode without scores: generate's fp32 copy of the logits, 4 b V
])
def test_largest_transient_buffer(batch: int, seq: int, new: int, attention: str | None, expected: int) -> None:
    est = estimate(SMALL, mode="infer", batch=batch, seq=seq, new_tokens=new, attention=attention)
    assert est.number("activation_bytes") == expected


def test_total_is_weights_plus_the_larger_phase() -> None:
    est = estimate(SMALL, mode="infer", batch=2, seq=100, new_tokens=28, weight_dtype="int4", overhead_bytes=1000)
    token = 2 * 2 * 2 * 2 * 64 * 2  # K and V, b 2, l 2, a_kv 2, d_h 64, bf16: 2,048 bytes per position
    assert est.number("kv_cache_bytes") == token * 128  # s + n = 128: 262,144
    # prefill: KV of the 100 prompt tokens, 204,800, and the largest buffer, the MLP's b s f in bf16,
    # 2 * 100 * 512 * 2 = 204,800; decode: KV 262,144 and the fp32 last-position logits 2 * 1000 * 4 = 8,000
    prefill, decode = 1_634_816 + 1000 + token * 100 + 204_800, 1_634_816 + 1000 + token * 128 + 8_000
    assert (est.number("prefill_bytes"), est.number("decode_bytes")) == (prefill, decode)
    assert est.number("total_bytes") == max(prefill, decode) == prefill
    assert est.peak_phase() == "prefill" and est.to_json()["peak_phase"] == "prefill"
    parts = est.quantity("total_bytes").term_values(est.values)
    assert sum(v for _, _, v in parts) == est.number("total_bytes")
    # 200 new tokens: the decode cache, 2,048 * 300 = 614,400, outgrows the prefill's 409,600
    longer = estimate(SMALL, mode="infer", batch=2, seq=100, new_tokens=200, weight_dtype="int4")
    assert longer.peak_phase() == "decode"
    assert longer.number("total_bytes") == 1_634_816 + token * 300 + 8_000


def test_fp32_serving_computes_in_fp32() -> None:
    est = estimate(SMALL, mode="infer", batch=1, seq=1, new_tokens=9_999, weight_dtype="fp32", attention="eager")
    assert est.number("kv_cache_bytes_per_token") == 2 * 2 * 2 * 64 * 4  # l a_kv d_h, 4 bytes
    assert est.number("activation_bytes") == 4 * 4 * 10_000  # decode scores a (s+n) > logits V, in fp32


def test_rule_of_thumb_is_a_special_case() -> None:
    # LLaMA-2 7B in bf16: W = 2 * 6,738,415,616 bytes, KV 524,288 bytes a token; KV = W/5 at
    # b(s+n) = 13,476,831,232 / 2,621,440 = 1,645,121/320 = 5,141.003 tokens.
    tokens = rule_of_thumb_tokens(estimate("llama-2-7b").model)
    assert tokens == sp.Rational(13_476_831_232, 2_621_440)
    below = estimate("llama-2-7b", mode="infer", batch=1, seq=5141, flash=True)
    above = estimate("llama-2-7b", mode="infer", batch=1, seq=5142, flash=True)
    assert 5 * below.number("kv_cache_bytes") <= below.number("weight_bytes") < 5 * above.number("kv_cache_bytes")


def test_symbolic_kv_heads_replicated() -> None:
    est = estimate("llama-3-8b", mode="infer", batch=1, seq=1, tp=16)
    assert "Max(1, a_kv/t)" in str(est.quantity("kv_cache_bytes").closed_form())


# --- bad input: one line, exit code 2 ---------------------------------------------------------

def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", *args], capture_output=True, text=True, timeout=120)


def config(tmp_path, **fields) -> str:
    base = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "intermediate_size": 96, "vocab_size": 50}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**base, **fields}))
    return str(path)


INFER = ("--mode", "infer", "--batch", "1", "--seq", "8")


@pytest.mark.parametrize(("args", "fragment"), [
    (("--model", "llama-2-7b", *INFER, "--kv-dtype", "fp5"), "unknown dtype 'fp5'"),
    (("--model", "llama-2-7b", *INFER, "--kv-dtype", "int64"), "--kv-dtype must be one of"),
    (("--model", "llama-2-7b", *INFER, "--weight-dtype", "bool"), "--weight-dtype must be one of"),
    (("--model", "llama-2-7b", *INFER, "--tp", "3"), "32 attention heads are not divisible by tensor-parallel"),
    (("--model", "llama-2-70b", *INFER, "--tp", "16", "--pp", "2"), "--pp does not apply to --mode infer"),
    (("--model", "llama-2-7b", *INFER, "--quant-group", "0"), "--quant-group must be a positive integer"),
])
def test_bad_inference_options(args: tuple[str, ...], fragment: str) -> None:
    result = cli("estimate", *args)
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


@pytest.mark.parametrize(("fields", "tp", "fragment"), [
    (dict(num_key_value_heads=3), "1", "not divisible by 3 key/value heads"),
    # 12 heads and f = 192 split over 6 GPUs, but 4 KV heads neither divide 6 nor are divided by it
    (dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=4, intermediate_size=192), "6",
     "4 key/value heads cannot be spread over tensor-parallel degree 6"),
    (dict(hidden_size=96, num_attention_heads=12, num_key_value_heads=6, intermediate_size=192), "4",
     "6 key/value heads are not divisible by tensor-parallel degree 4"),
])
def test_bad_kv_head_layouts(tmp_path, fields: dict, tp: str, fragment: str) -> None:
    result = cli("estimate", "--model", config(tmp_path, **fields), *INFER, "--tp", tp)
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


def test_json_breakdown_keys() -> None:
    result = cli("estimate", "--model", "mistral-7b", *INFER, "--new-tokens", "4", "--weight-dtype", "int4",
                 "--kv-dtype", "fp8", "--tp", "2", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    # decode: the cache of s + n = 12 tokens and generate's fp32 logits of the last position, b V/t 4 bytes =
    # 64,000; the prefill's 8 tokens (2/3 of the cache) and its largest buffer, s f/t in bf16 = 114,688, are less
    assert out["decode_bytes"] == out["weight_bytes"] + out["kv_cache_bytes"] + 32_000 // 2 * 4
    assert out["prefill_bytes"] == out["weight_bytes"] + out["kv_cache_bytes"] * 8 // 12 + 8 * 14_336 // 2 * 2
    assert out["total_bytes"] == out["decode_bytes"] and out["peak_phase"] == "decode"
    assert out["kv_cache_bytes_per_token"] == 2 * 32 * 4 * 128  # fp8, 8 KV heads over 2 GPUs
