"""FSDP2 under torch.distributed.pipelining (torchtitan with pipeline stages, ZeRO 2-3): every micro-batch's backward
runs with gradient sync and resharding off (PyTorch 2.13 stage.py ``backward_maybe_with_nosync``), so the stage holds
its gradients whole, upcast to torchtitan's fp32 reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``), and its
16-bit weights whole; only the fp32 master and Adam's states stay 1/d (``model_states.pipelined_fsdp2``)."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate

# llama-2-7b's first stage of two, counted by hand from its config (hidden 4,096, MLP 11,008, vocabulary 32,000,
# 32 layers): the embedding 32,000 x 4,096 = 131,072,000 and 16 layers of 4 x 4,096^2 (attention) + 3 x 4,096 x
# 11,008 (MLP) + 2 x 4,096 (norms) = 202,383,360 each: 131,072,000 + 16 x 202,383,360 = 3,369,205,760.
STAGE = 3_369_205_760
STEP = dict(mode="train", batch=1, seq=1024, dp=2, pp=2, framework="torchtitan")


@pytest.mark.parametrize("zero", [2, 3])
def test_torchtitan_stage_holds_whole_fp32_gradients_and_16bit_weights(zero: int) -> None:
    """Bytes per parameter of a torchtitan pp 2 dp 2 stage: 2 (bf16 weights, whole) + 4 (fp32 gradients, whole) +
    (4 fp32 master + 8 Adam) / 2 = 12, under ZeRO-2 and ZeRO-3 alike. Before: ZeRO-2 2 + (2 + 12) / 2 = 9, ZeRO-3
    16 / 2 = 8 (30,322,851,840 and 26,953,646,080 B)."""
    est = estimate("llama-2-7b", **STEP, zero=zero)
    assert est.number("parameters_per_gpu") == STAGE
    assert est.number("model_state_bytes") == 12 * STAGE == 40_430_469_120
    assert any("gradients are held whole in the fp32 reduce dtype" in n
               for n in est.quantity("model_state_bytes").assumptions)


def test_zero3_under_pipeline_stages_adds_no_gathered_layer() -> None:
    """ZeRO-3's total adds the gathered root and layer beside 1/d shards (param_offload.gathered_weights); held whole,
    the weights already include them: ZeRO-3's total is ZeRO-2's to the byte (same activations, same 12 B/param)."""
    z2, z3 = (estimate("llama-2-7b", **STEP, zero=z) for z in (2, 3))
    assert z3.number("total_bytes") == z2.number("total_bytes")
    assert not [t for t in z3.quantity("total_bytes").breakdown.terms if "gathered_weights" in t.path]


def test_other_frameworks_and_no_pipeline_keep_the_shards() -> None:
    """The rule is FSDP2's under pipeline stages only: torchtitan without stages shards ZeRO-3's 16 bytes over d = 2
    (8 B/param of the whole 6,738,415,616), and Megatron-LM's pipelines keep ZeRO-2's sharded fp32 main_grad
    (2 + (4 + 12) / 2 = 10 B/param of the stage)."""
    flat = estimate("llama-2-7b", **{**STEP, "pp": 1}, zero=3)
    assert flat.number("model_state_bytes") == 8 * 6_738_415_616
    megatron = estimate("llama-2-7b", **{**STEP, "framework": "megatron"}, zero=2)
    assert megatron.number("model_state_bytes") == 10 * STAGE


def test_the_finetuning_path_holds_the_stage_whole_too() -> None:
    """A paged optimizer takes the fine-tuning path (finetune.finetune_states): its states leave the GPU, the stage
    keeps 2 B bf16 weights + 4 B fp32 gradients whole = 6 B/param (before: 2 + 2 / 2 = 3, 10,107,617,280 B)."""
    est = estimate("llama-2-7b", **STEP, zero=2, optimizer="paged-adamw-8bit")
    assert est.number("model_state_bytes") == 6 * STAGE == 20_215_234_560
