"""Megatron-Core's optimizer copies a 16-bit gradient buffer to fp32 in each step unless the precision-aware
optimizer reads it in place (core 0.15, 0d8e0714: distrib_optimizer.py L2399 ``shard_main_param.grad =
shard_model_grad.float()``): under --framework megatron --grad-buffer param (--grad-reduce-in-bf16) is
param+fp32, the copy counted and the option echoed as such."""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.options import Options

KW = {"mode": "train", "batch": 1, "seq": 8, "dp": 8, "zero": 1}


def _copy(e) -> int:
    return e.quantity("model_state_bytes").value_where(e.values, lambda p: "fp32_gradient_copy" in p)


def test_megatron_counts_the_copy_of_bf16_gradients_by_hand() -> None:
    """Llama 3 8B (8,030,261,248 parameters), d 8, ZeRO-1, bf16 buffer: its fp32 copy is 4 B per parameter of the
    rank's shard, 8,030,261,248 x 4 / 8 = 4,015,130,624 B. The precision-aware optimizer reads the bf16 buffer in
    place (decoupled_grad): no copy; nor under another framework, where param keeps its meaning."""
    e = estimate("llama-3-8b", framework="megatron", grad_buffer="param", **KW)
    assert e.options.grad_buffer == "param+fp32" and _copy(e) == 8_030_261_248 * 4 // 8 == 4_015_130_624
    aware = estimate("llama-3-8b", framework="megatron", grad_buffer="param", precision_aware_optimizer=True, **KW)
    assert aware.options.grad_buffer == "param" and _copy(aware) == 0
    plain = estimate("llama-3-8b", grad_buffer="param", **KW)
    assert plain.options.grad_buffer == "param" and _copy(plain) == 0
    # Options built without the framework's preset (the planner's) run what Megatron runs too
    assert Options(mode="train", batch=1, seq=8, framework="megatron").grad_buffer == "param+fp32"


def test_the_inputs_echo_what_is_counted(capsys: pytest.CaptureFixture[str]) -> None:
    words = ["estimate", "--model", "llama-3-8b", "--mode", "train", "--batch", "1", "--seq", "8", "--framework",
             "megatron", "--dp", "8", "--zero", "1", "--grad-buffer", "param"]
    assert main(words) == 0
    assert "param+fp32" in capsys.readouterr().out
