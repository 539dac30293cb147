"""torchao's tensorwise Float8 casts (``--fp8 tensorwise``) timed at the memory-bound line's bandwidth: each a pass
reading the 16-bit tensor and writing its 8-bit copy (3 bytes per element), counted by hand per linear."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.memory_bound import achievable_bandwidth
from memderive.derivations.quantities.timing import step_time
from memderive.derivations.quantities.torchao_casts import torchao_cast_bytes

KW = dict(mode="train", batch=1, seq=4096, framework="torchtitan", fp8="tensorwise", zero=3, dp=2, flash=True)


def test_fsdp_only_casts_by_hand() -> None:
    """Llama 3 8B (h 4,096, q k v 6,144 wide, FFN 14,336, V 128,256, 32 layers), M = 4,096 tokens, no recompute.
    Per layer, elements: forward inputs once per distinct input (norm1, the attention's output, norm2: M h each;
    the activation: M f) = 109,051,904, cast again for the weight gradients = 109,051,904; weights (6,144 + 4,096 +
    3 x 14,336) x 4,096 = 218,103,808; output gradients M (6,144 + 4,096 + 2 x 14,336 + 4,096) = 176,160,768; in
    all 612,368,384 x 3 B x 32 = 58,787,364,864. The Float8 head: its input M h twice, weight V h, gradient M V:
    1,084,227,584 x 3 = 3,252,682,752. Total 62,040,047,616 B, at the H100's streaming bandwidth per step."""
    est = estimate("llama-3-8b", recompute="none", **KW)
    assert torchao_cast_bytes(est) == 62_040_047_616
    st = step_time(est, "h100-sxm")
    assert st.fp8_cast_s == pytest.approx(62_040_047_616 / achievable_bandwidth(gpu("h100-sxm")), rel=1e-12)
    assert any("torchao's tensorwise casts" in line for line in st.model())


def test_float8_tp_plan_casts_by_hand() -> None:
    """Llama 3 70B on t = 8 under torchtitan's Float8 TP plan, full recompute (forward casts twice), M = 4,096.
    Inputs: norm1 and norm2 on their sequence shard (M h / 8 = 4,194,304 each), the attention's output and the
    activation sharded by width (M x 1,024 and M x 3,584): 27,262,976 x 2 passes; weights (1,280 x 8,192 + 8,192 x
    1,024 + 2 x 3,584 x 8,192 + 8,192 x 3,584) = 106,954,752 x 2; output gradients q k v M x 1,280, gate and up
    M x 3,584 each, o and down on their sequence shard M x 8,192 / 8 each: 42,991,616; inputs saved in 8 bits, not
    cast again. 311,427,072 x 3 B x 80 layers = 74,742,497,280. The head, outside the plan: its gathered input
    M h twice, weight 16,032 x 8,192, gradient M x 16,032: 264,110,080 x 3 = 792,330,240."""
    est = estimate("llama-3-70b", tp=8, sp=True, recompute="full", **KW)
    assert torchao_cast_bytes(est) == 74_742_497_280 + 792_330_240
    assert torchao_cast_bytes(estimate("llama-3-70b", tp=8, sp=True, recompute="full",
                                       **{**KW, "fp8": "rowwise"})) == 0  # its casts not counted
