"""FSDP2 under torch.distributed.pipelining (torchtitan with pipeline stages, ZeRO 2-3): every micro-batch's backward
runs with gradient sync and resharding off (PyTorch 2.13 stage.py ``backward_maybe_with_nosync``), so the stage holds
its gradients whole, upcast to torchtitan's fp32 reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``), and its
16-bit weights whole; only the fp32 master and Adam's states stay 1/d (``model_states.pipelined_fsdp2``)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.model_states import states_breakdown
from memderive.symbolic.dims import Psi, d

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


def _held_before_the_reduce(reshard_after_forward: bool) -> tuple[int, int, int, set]:
    """Run torch 2.13's pipelining over an FSDP2 stage on CPU (gloo, one rank; torchtitan's MixedPrecisionPolicy
    bf16 / fp32, each Linear its own unit, then the root), 4 micro-batches; just before the stage's one
    reduce-scatter (``perform_reduce_grad``, after every backward), read what FSDP2 holds: (parameters, bytes of
    the unsharded parameters, bytes of the accumulated unsharded gradients, their dtypes)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 16), nn.Linear(16, 8))
    policy = dict(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
                  reshard_after_forward=reshard_after_forward)
    for layer in model:
        fully_shard(layer, **policy)
    fully_shard(model, **policy)
    stage = PipelineStage(model, 0, 1, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=lambda y, _: y.float().pow(2).mean())
    held: list = []
    reduce = stage.perform_reduce_grad

    def probe(*args, **kwargs):
        groups = [m._get_fsdp_state()._fsdp_param_group for m in model.modules() if hasattr(m, "_get_fsdp_state")]
        params = [p for g in groups if g is not None for p in g.fsdp_params]
        held.append((sum(p._unsharded_param.untyped_storage().nbytes() for p in params),
                     sum(p.unsharded_accumulated_grad.untyped_storage().nbytes() for p in params),
                     {p.unsharded_accumulated_grad.dtype for p in params}))
        return reduce(*args, **kwargs)

    stage.perform_reduce_grad = probe
    schedule.step(torch.randn(8, 16), target=torch.zeros(8, 8))
    return (sum(p.numel() for p in model.parameters()), *held[0])


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg')}/store", rank=0, world_size=1)
    try:
        yield {zero: _held_before_the_reduce(reshard_after_forward=zero == 3) for zero in (2, 3)}
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("zero", [2, 3])
def test_torch_pipelining_holds_what_the_derivation_counts(measured, zero: int) -> None:
    """Measured on torch 2.13 (CPU): 1,208 parameters (16 x 32 + 32 + 32 x 16 + 16 + 16 x 8 + 8, by hand); after
    the last micro-batch's backward FSDP2 holds 2,416 B of bf16 unsharded parameters (2 B each) and 4,832 B of fp32
    accumulated gradients (4 B each), under reshard_after_forward False (ZeRO-2) and True (ZeRO-3) alike: the
    weights and gradients terms of states_breakdown(..., whole=True), whatever d."""
    n, params, grads, dtypes = measured[zero]
    assert (n, params, grads, dtypes) == (1_208, 2_416, 4_832, {torch.float32})
    terms = {t.path: t.expr for t in states_breakdown(Psi, "bf16", "adamw", zero, d, whole=True).terms}
    assert terms["model_states/weights"] == params // n * Psi
    assert terms["model_states/gradients"] == grads // n * Psi
