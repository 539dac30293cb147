"""LoRA on Megatron-Core's module names, as Megatron-Bridge adapts them (``adapters.MEGATRON_NAMES``).

Megatron-Bridge's ``LoRA`` (src/megatron/bridge/peft/lora.py at v0.5.0, L97-98: target_modules ``linear_qkv``,
``linear_proj``, ``linear_fc1``, ``linear_fc2``) wraps each matched module whole in one ``ParallelLinearAdapter`` of
the module's in_features and out_features (L206-212): the fused ``linear_qkv`` gets one A (r, h) and one B
((a + 2 a_kv) d_h, r), where PEFT's ``q_proj``, ``k_proj``, ``v_proj`` on transformers' Llama get three of each. The
expected counts are hand arithmetic from those shapes (Llama 3 70B: h 8,192, 64 heads of 128, 8 KV heads, f 28,672,
80 layers).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.options import OptionsError

_70B = {"mode": "train", "batch": 1, "seq": 4096, "lora_rank": 16, "framework": "megatron", "grad_buffer": "param"}


def test_linear_qkv_is_one_adapter_on_the_fused_projection() -> None:
    # one A (16, 8,192) and one B (8,192 + 2 x 1,024 = 10,240, 16) a layer: 80 x 16 x (8,192 + 10,240) = 23,592,960;
    # PEFT's q, k and v apart, three A's and three B's: 80 x 16 x (3 x 8,192 + 10,240) = 44,564,480
    fused = estimate("llama-3-70b", lora_targets=("linear_qkv",), **_70B)
    apart = estimate("llama-3-70b", lora_targets=("q_proj", "k_proj", "v_proj"), **_70B)
    assert fused.number("trainable_parameters") == 23_592_960
    assert apart.number("trainable_parameters") == 44_564_480


def test_linear_fc1_is_one_adapter_on_the_fused_gate_and_up() -> None:
    # Megatron-Core's gated linear_fc1 computes gate and up at once (out 2 x 28,672): 80 x 16 x (8,192 + 57,344)
    e = estimate("llama-3-70b", lora_targets=("linear_fc1",), **_70B)
    assert e.number("trainable_parameters") == 83_886_080


def test_megatron_names_need_the_megatron_framework_and_no_peft_names_beside() -> None:
    with pytest.raises(OptionsError, match="--framework megatron"):
        estimate("llama-3-70b", mode="train", batch=1, seq=512, lora_rank=16, lora_targets=("linear_qkv",))
    with pytest.raises(OptionsError, match="not both"):
        estimate("llama-3-70b", lora_targets=("linear_qkv", "q_proj"), **_70B)


def test_the_cli_says_it_in_one_line() -> None:
    run = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "llama-3-70b", "--mode",
                          "train", "--batch", "1", "--seq", "512", "--lora-rank", "16", "--lora-targets", "linear_qkv"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "--framework megatron" in run.stderr
