"""Context parallelism (``--cp``: ring attention as Megatron-Core and torchtitan run it): memory of s/cp tokens per
rank and the K/V chunks in flight, FLOPs divided by cp, and the ring's sends timed on the links the group spans,
each behind its step's attention. Expected values by hand in each test's comment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memderive.derivations.estimate import estimate
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.timing import step_time, te_cp_merge_bytes

STEP = dict(mode="train", batch=1, seq=4096, flash=True)


def test_each_rank_holds_s_over_cp_tokens_and_the_chunks_it_receives() -> None:
    """llama-2-7b, t = 2 with SP, flash (no scores): per layer b s (4 a + 6 f + 16 h)/t bytes (the per-layer form
    the graph gives llama at t with SP, checked against PyTorch elsewhere; Megatron-LM's fused SwiGLU saves gate and
    up, 4 f, and fc2 its input, 2 f) = 4,096 (128 + 66,048 + 65,536)/2 = 269,746,176 at s = 4,096; each of cp = 4 ranks holds s/4 tokens: a quarter, exactly. The K/V chunks: 32/2 = 16 KV heads per rank x 4096/4 = 1,024 tokens x 128 x 2 bytes
    = 4,194,304 each for k and v; cp - 1 = 3 received chunks of both: 25,165,824 bytes."""
    one = estimate("llama-2-7b", **STEP, tp=2, sp=True)
    four = estimate("llama-2-7b", **STEP, tp=2, sp=True, cp=4)
    assert one.number("activation_bytes_per_layer") == 4 * four.number("activation_bytes_per_layer")
    assert one.number("activation_bytes_per_layer") == 4096 * (4 * 32 + 6 * 11008 + 16 * 4096) // 2 == 269_746_176
    chunks = dict(four.quantity("total_bytes").term_ints(four.values))["context_parallel/kv_chunks"]
    assert chunks == 3 * 2 * 16 * 1024 * 128 * 2 == 25_165_824
    assert four.number("parameters_per_gpu") == one.number("parameters_per_gpu")  # weights whole on each cp rank


def test_per_gpu_flops_times_t_and_cp_are_the_whole() -> None:
    """Every product runs on s/cp rows; the attention's rank's s/cp queries against all s keys: a 1/cp share."""
    est = estimate("llama-2-7b", **STEP, tp=2, sp=True, cp=4)
    for key in ("forward_flops", "model_flops", "hardware_flops"):
        assert est.number(f"{key}_per_gpu") * 2 * 4 == est.number(key)


def test_the_ring_hides_inside_a_node_and_shows_across_nodes() -> None:
    """llama-2-7b, s 4,096, H100 at efficiency 0.5 (494.75 TFLOP/s), 32 layers. t = 8, cp = 2: the cp ranks are 8
    apart, in two nodes: sends at 48 GB/s (NCCL's per-channel speed for a 50 GB/s port, search.cc
    sm90SpeedArrayInter). Per layer a chunk (k and v) is 4 heads x 2,048 tokens x 128 x 2 B x 2 = 4,194,304 B:
    87.381 us forward, twice (with dK, dV) in backward; a step's attention products are 1/cp of 4 a b d_h s^2/(cp t)
    = 17,179,869,184 forward, 34,359,738,368 backward: 17.362 us and 34.725 us. Exposed per layer (cp - 1) x
    ((87.381 - 17.362) + (174.763 - 34.725)) us, x 32 layers: 6.7218 ms.
    t = 4, cp = 2: both ranks in one node (NVLink at NCCL's per-link speed, 18 x 20.6 = 370.8 GB/s each way),
    8 heads: 8,388,608 B in 22.623 us behind 34.725 us of attention: hidden (0)."""
    across = step_time(estimate("llama-2-7b", **STEP, tp=8, sp=True, cp=2), "h100-sxm", efficiency=0.5)
    flops = 989.5e12 * 0.5
    by_hand = 32 * ((4_194_304 / 48e9 - 8_589_934_592 / flops) + (8_388_608 / 48e9 - 17_179_869_184 / flops))
    assert across.cp_s == pytest.approx(by_hand, rel=1e-9)
    assert across.gpus == 16
    inside = step_time(estimate("llama-2-7b", **STEP, tp=4, sp=True, cp=2), "h100-sxm", efficiency=0.5)
    assert inside.cp_s == 0.0


def test_the_ring_sends_k_and_v_under_full_recompute_too() -> None:
    """Full recompute saves each layer's input alone, yet the ring still sends k and v (and reruns the forward's
    sends in the recompute): llama-2-7b, t = 8, cp = 2 across two nodes as above, per layer (cp - 1) x (2 x (87.381
    - 17.362) + (174.763 - 34.725)) us, x 32 layers: 8.9626 ms (before, 0: the chunk was read off the saved k, v)."""
    est = estimate("llama-2-7b", **STEP, tp=8, sp=True, cp=2, recompute="full")
    flops = 989.5e12 * 0.5
    by_hand = 32 * (2 * (4_194_304 / 48e9 - 8_589_934_592 / flops) + (8_388_608 / 48e9 - 17_179_869_184 / flops))
    assert step_time(est, "h100-sxm", efficiency=0.5).cp_s == pytest.approx(by_hand, rel=1e-9)
    assert by_hand == pytest.approx(8.9626e-3, rel=1e-4)


def test_transformer_engine_merges_the_steps_at_memory_bandwidth() -> None:
    """Transformer Engine's p2p ring (v2.9 context_parallel.py) merges each step's partial attention outside its
    overlapped loop: llama-2-7b, s 4,096, t = 4, cp = 2 on one H100 node (the sends hidden, as above). Per rank q,
    the output, k and v are each 8 heads x 2,048 tokens x 128 x 2 B = 4,194,304 B. The last rank, forward: k and v
    into the send buffer (read, write: 2 x 8,388,608), the first step's output scaled (2 x 4,194,304), the second
    added (3 x 4,194,304): 37,748,736 B; backward: k and v copied (2 x 8,388,608), dq copied then added (5 x
    4,194,304), dk and dv half copied at step 0 (8,388,608) and added whole at the last (3 x 8,388,608):
    71,303,168 B. 109,051,904 B a layer x 32 layers = 3,489,660,928 B at the H100's Triad 2.97 TB/s: 1.17497 ms.
    Without --framework megatron (torchtitan's ring, its own merges) nothing is added."""
    est = estimate("llama-2-7b", **STEP, tp=4, sp=True, cp=2, framework="megatron")
    assert step_time(est, "h100-sxm", efficiency=0.5).cp_s == pytest.approx(3_489_660_928 / 2.97e12, rel=1e-12)
    assert te_cp_merge_bytes(2, 4_194_304, 4_194_304, 8_388_608) == (37_748_736, 71_303_168)
    # cp = 4, the last rank: forward 2 kv + (2 + 3 x 3) out; backward 2 kv + 11 q + (copy 1 + 2 x 1.5 + 3) kv
    assert te_cp_merge_bytes(4, 10, 10, 20) == (2 * 20 + 11 * 10, 2 * 20 + 11 * 10 + 7 * 20)


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"flash": False, "attention": "eager"}, "fused kernel"),
    ({"seq": 4100}, "2 x cp = 8 chunks"),
])
def test_context_parallelism_needs_a_fused_kernel_and_a_divisible_sequence(extra: dict, fragment: str) -> None:
    with pytest.raises(OptionsError, match=fragment):
        estimate("llama-2-7b", **{**STEP, **extra}, cp=4)


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["gpt2", "llama-2-7b", "mixtral-8x7b"]), st.sampled_from([1, 2, 4, 8]),
       st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 8]), st.sampled_from([1, 3]), st.sampled_from([0, 1, 3]),
       st.sampled_from(["none", "full"]), st.sampled_from(["a100-80gb", "h100-sxm"]))
def test_mfu_never_exceeds_the_efficiency_and_per_gpu_flops_times_t_cp_are_the_whole(
        name: str, t: int, cp: int, d: int, p: int, zero: int, recompute: str, hw: str) -> None:
    """Issue 24's property with context parallelism and pipeline stages (uneven where the layers do not divide):
    MFU never exceeds the matmul efficiency the model assumes; without a pipeline, per-GPU FLOPs x t x cp are the
    whole model's (data parallelism repeats it)."""
    z = estimate(name).model.sizes
    if z["a"] % t or (zero and d == 1):
        return  # a layout the model does not divide (refused elsewhere)
    stages = {} if z["l"] % p == 0 else {"first_stage_layers": (z["l"] - (p - 2) * (z["l"] // p + 1)) // 2}
    if stages and (z["l"] - 2 * stages["first_stage_layers"]) % (p - 2):
        return
    if stages:
        stages["last_stage_layers"] = stages["first_stage_layers"]
    est = estimate(name, mode="train", batch=1, seq=512, tp=t, cp=cp, pp=p, dp=d, sp=t > 1, zero=zero, flash=True,
                   recompute=recompute, micro_batches=4, **stages)
    timing = step_time(est, hw)
    assert 0 < timing.mfu <= timing.efficiency
    if p == 1:
        for key in ("model_flops", "hardware_flops"):
            assert est.number(f"{key}_per_gpu") * t * cp == est.number(key)


def test_fsdp_shards_over_context_parallel_ranks_without_dp() -> None:
    """--zero 3 --dp 1 --cp 8 (issue 39): Megatron-LM and torchtitan shard the model states over the dp x cp ranks,
    so FSDP over 8 context-parallel ranks alone holds 1/8 of them: Llama 3 8B's 8,030,261,248 parameters x 16 B
    (bf16 weight and gradient, fp32 master and two moments) / 8 = 16,060,522,496 B, as over 8 data-parallel ranks.
    Without dp or cp to shard over, ZeRO is still refused."""
    e = estimate("llama-3-8b", mode="train", batch=1, seq=8192, dp=1, cp=8, zero=3, flash=True)
    assert e.number("model_state_bytes") == 8_030_261_248 * 16 // 8 == 16_060_522_496
    with pytest.raises(OptionsError, match="--dp or --cp greater than 1"):
        estimate("llama-3-8b", mode="train", batch=1, seq=8192, zero=3)
