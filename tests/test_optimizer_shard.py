"""The optimizer step's bytes shard the routed experts over their own expert data-parallel group, as the memory does
(``expert_states.expert_zero_ranks``; Megatron-Core's distributed optimizer over ``intra_expt_dp_group``)."""

from __future__ import annotations

from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.memory_bound import fp8_cast_bytes, optimizer_bytes
from memderive.derivations.quantities.timing import step_time

# Mixtral 8x7B (hidden 4,096, FFN 14,336, 32 layers, 8 experts, vocab 32,000, 8 KV heads of 128):
# routed experts 8 x 3 x 4,096 x 14,336 x 32 = 45,097,156,608, half of them on a GPU under ep 2: 22,548,578,304;
# the rest: embedding and output 2 x 32,000 x 4,096 = 262,144,000, attention (2 x 4,096^2 + 2 x 4,096 x 1,024)
# x 32 = 1,342,177,280, routers 4,096 x 8 x 32 = 1,048,576, norms 2 x 4,096 x 32 + 4,096 = 266,240:
# 1,605,636,096 on every GPU.
ROUTED, DENSE = 22_548_578_304, 1_605_636_096
RUN = {"mode": "train", "batch": 1, "seq": 8, "dp": 4, "ep": 2, "zero": 1}


def test_the_experts_step_over_their_own_group_by_hand() -> None:
    """ep 2, d 4: the dense parameters over 4 ranks (401,409,024), the experts over d/ep = 2 (11,274,289,152):
    11,675,698,176 parameters stepped, 46 B each (fused AdamW (7 + 3) x 4 and the 16-bit copy 6) =
    537,082,116,096 B. Before: all 24,154,214,400 over 4 = 6,038,553,600 x 46 = 277,773,465,600 B."""
    e = estimate("mixtral-8x7b", **RUN)
    assert e.number("parameters_per_gpu") == DENSE + ROUTED
    assert optimizer_bytes(e) == (DENSE // 4 + ROUTED // 2) * 46 == 537_082_116_096
    # without expert parallelism every parameter (45,097,156,608 + 1,605,636,096) steps over the 4 ranks
    assert optimizer_bytes(estimate("mixtral-8x7b", **{**RUN, "ep": 1})) == 46_702_792_704 // 4 * 46


def test_the_fp8_step_cast_quantizes_the_experts_shard_by_hand() -> None:
    """--fp8-param-gather, current scaling, H100: the rank's fp32 shard of the linear weights cast (5 B per element,
    the 16-bit copy counted by optimizer_bytes) and each whole weight transposed after the gather (2 B). Linear
    weights: attention 1,342,177,280 over 4 ranks = 335,544,320, experts 22,548,578,304 over 2 = 11,274,289,152:
    5 x 11,609,833,472 = 58,049,167,360 + 2 x 23,890,755,584 = 47,781,511,168: 105,830,678,528 B (before, every
    weight over 4: 5 x 5,972,688,896 + 47,781,511,168 = 77,644,955,648)."""
    e = estimate("mixtral-8x7b", **RUN, implementation="megatron", fp8="te-current", fp8_param_gather=True,
                 gpu="h100-sxm")
    assert fp8_cast_bytes(e, True)[1] == 105_830_678_528


def test_the_time_says_where_the_step_cast_comes_from() -> None:
    """Under --fp8-param-gather (current scaling) the weights are not cast from a cached 16-bit copy: the time's
    note names the fp32 main shard's quantization after the optimizer; MXFP8 quantizes the gathered 16-bit bucket."""
    def words(**kw) -> str:  # noqa: ANN003
        e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, implementation="megatron", dp=2, zero=1, **kw)
        return next(line for line in step_time(e, kw["gpu"]).model() if "once per step" in line)
    assert "cached across micro-batches" in words(fp8="te-current", gpu="h100-sxm")
    on = words(fp8="te-current", fp8_param_gather=True, gpu="h100-sxm")
    assert "fp32 main shard" in on and "quantize_master_weights" in on and "cached across" not in on
    mx = words(fp8="te-mxfp8", fp8_param_gather=True, gpu="b200")
    assert "16-bit bucket" in mx and "cached across" not in mx
