"""Transformer Engine's amax all-reduces under fp8, each a blocking NCCL call of a few bytes timed at NCCL's own
latency (derivations/quantities/te_amax.py). The latencies by hand from NCCL's tuning.cc constants (5067397c26,
L149-176: base tree LL 6.8 us, ring LL 6.6; NVLink hop LL 0.6; network hop tree LL 5.0), the call counts from TE's
and Megatron-Core's code as the module cites it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.nccl_cost import latency_s
from memderive.derivations.quantities.timing import step_time

_MEGATRON = {"mode": "train", "batch": 1, "seq": 4096, "framework": "megatron", "flash": True}


def test_nccl_latency_of_a_tiny_all_reduce_by_hand() -> None:
    """One node of 2 and of 4 H100s: the ring LL, 6.6 + 2(n - 1) x 0.6 = 7.8 and 10.2 us (the tree's 6.8 +
    2(n - 1) x 0.6 is 0.2 us more). 128 ranks over 16 nodes of 8: the tree LL, 6.8 + 2 (7 x 0.6 + log2(16) x 5.0) =
    55.2 us (the ring's 254 steps, 30 of them across nodes at 2.7 us and the rest at the network's 1.0 us post
    overhead, 6.6 + 224 + 81 = 311.6)."""
    h100 = gpu("h100-sxm")
    assert latency_s(h100, 2, 2) * 1e6 == pytest.approx(7.8)
    assert latency_s(h100, 4, 4) * 1e6 == pytest.approx(10.2)
    assert latency_s(h100, 128, 8) * 1e6 == pytest.approx(55.2)


def test_delayed_scaling_reduces_twice_per_chunk_over_the_stage_or_its_tensor_ranks() -> None:
    """Llama 2 7B at t4 p2 v2 d32 under --fp8 te-delayed, 8 micro-batches: 2 x v = 4 calls a micro-batch, 32 a
    step. Over the stage's 4 x 32 = 128 ranks (Megatron-Core 0.9 on): 32 x 55.2 us = 1.7664 ms. Under
    --tp-only-amax-red (Megatron-Core 0.8's group) over the 4 tensor-parallel ranks in one node: 32 x 10.2 us."""
    common = {**_MEGATRON, "tp": 4, "sp": True, "pp": 2, "virtual_stages": 2, "dp": 32, "zero": 1, "micro_batches": 8,
              "fp8": "te-delayed"}
    stage = step_time(estimate("llama-2-7b", **common), "h100-sxm")
    tensor = step_time(estimate("llama-2-7b", **common, tp_only_amax_red=True), "h100-sxm")
    assert stage.fp8_amax_s == pytest.approx(32 * 55.2e-6)
    assert tensor.fp8_amax_s == pytest.approx(32 * 10.2e-6)
    assert stage.step_s == pytest.approx(replace(stage, fp8_amax_s=0.0).step_s + stage.fp8_amax_s)
    assert stage.to_json()["fp8_amax_time_s"] == stage.fp8_amax_s
    assert "the stage's tensor-, data- and context-parallel ranks" in " ".join(stage.model())
    assert "(--tp-only-amax-red)" in " ".join(tensor.model())


def test_current_scaling_reduces_each_gathered_input_and_output_gradient_over_tp() -> None:
    """Llama 2 7B at t2 with sequence parallelism under --fp8 te-current, 4 micro-batches: per layer the qkv's input
    and the MLP's input (gate and up read one, quantized once) in the forward, the output projection's and fc2's
    output gradients in the backward: 4 x 32 layers = 128 calls a micro-batch over 2 ranks at 7.8 us, 4 x 128 x 7.8
    us a step. Full recompute reruns the forward's two: 6 x 32 a micro-batch."""
    common = {**_MEGATRON, "tp": 2, "sp": True, "micro_batches": 4, "fp8": "te-current"}
    step = step_time(estimate("llama-2-7b", **common), "h100-sxm")
    rerun = step_time(estimate("llama-2-7b", **common, recompute="full"), "h100-sxm")
    assert step.fp8_amax_s == pytest.approx(4 * 128 * 7.8e-6)
    assert rerun.fp8_amax_s == pytest.approx(4 * 6 * 32 * 7.8e-6)
    assert "output-gradient amax (backward)" in " ".join(step.model())


def test_no_amax_all_reduce_where_the_recipe_or_layout_needs_none() -> None:
    """MXFP8's block scales, bf16, current scaling without sequence parallelism, and delayed scaling on one GPU
    reduce nothing."""
    cases = [{"tp": 2, "sp": True, "fp8": "te-mxfp8"}, {"tp": 2, "sp": True}, {"tp": 2, "fp8": "te-current"},
             {"fp8": "te-delayed"}]
    for case in cases:
        est = estimate("llama-2-7b", **_MEGATRON, **case)
        step = step_time(est, "b200" if case.get("fp8") == "te-mxfp8" else "h100-sxm")
        assert step.fp8_amax_s == 0 and "blocking" not in " ".join(step.model())


def test_tp_only_amax_red_needs_delayed_scaling() -> None:
    with pytest.raises(OptionsError, match="--tp-only-amax-red narrows delayed scaling"):
        estimate("llama-2-7b", **_MEGATRON, tp=2, sp=True, fp8="te-current", tp_only_amax_red=True)


def test_one_node_calls_pay_no_network_post_overhead() -> None:
    """An A100 node's host is AMD (network post overhead 2.0 us, tuning.cc:228-233), but a ring inside one node posts
    nothing to the network (tuning.cc:404-410: the overhead only where nNodes > 1): 2 ranks, ring LL 6.6 + 2 x 0.6 =
    7.8 us; the A100 (Ampere) has no NVLink SHARP."""
    assert gpu("a100-80gb").host == "amd"
    assert latency_s(gpu("a100-80gb"), 2, 2) * 1e6 == pytest.approx(7.8)


def test_per_layer_calls_follow_the_busiest_stage_and_each_module() -> None:
    """Current scaling at t2 with sequence parallelism, 4 calls a layer (qkv's and the MLP's inputs forward, proj's and
    fc2's output gradients backward) at 7.8 us: Llama 2 7B's 32 layers over 2 stages, 16 each: 64 calls a
    micro-batch; 12 on the first stage and 20 on the last: 80. A selective recompute of the MLP reruns its fc1 and its
    input's reduction: 5 a layer, 160 on one stage. DeepSeek-V2 (60 layers, the first dense): MLA's q_b and kv_b
    inputs, the dense MLP's or the shared experts' input (two modules: each its share of the layers), proj's and the
    MLP's or shared experts' fc2 output gradients: 5 a layer, 300."""
    common = {**_MEGATRON, "tp": 2, "sp": True, "fp8": "te-current"}
    even = step_time(estimate("llama-2-7b", **common, pp=2, micro_batches=4), "h100-sxm")
    uneven = step_time(estimate("llama-2-7b", **common, pp=2, micro_batches=4, first_stage_layers=12,
                                last_stage_layers=20), "h100-sxm")
    mlp = step_time(estimate("llama-2-7b", **common, recompute="selective", recompute_modules=("core_attn", "mlp")),
                    "h100-sxm")
    deepseek = step_time(estimate("deepseek-v2", **common), "h100-sxm")
    assert even.fp8_amax_s == pytest.approx(4 * 64 * 7.8e-6)
    assert uneven.fp8_amax_s == pytest.approx(4 * 80 * 7.8e-6)
    assert mlp.fp8_amax_s == pytest.approx(160 * 7.8e-6)
    assert deepseek.fp8_amax_s == pytest.approx(300 * 7.8e-6)
