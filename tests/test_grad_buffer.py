"""Megatron-LM's gradient buffers (``--grad-buffer``, ``--framework megatron``) against its own bytes-per-parameter
table.

Megatron-LM docs/source/distrib_optimizer.md (NVIDIA/Megatron-LM at 40ce7c8), "the theoretical number of bytes per
parameter is (where 'd' is the data parallel size)":

    |                              | Non-distributed optim | Distributed optim |
    | float16 param, float16 grads | 20                    | 4 + 16/d          |
    | float16 param, fp32 grads    | 18                    | 6 + 12/d          |
    | fp32 param, fp32 grads       | 16                    | 8 + 8/d           |

The distributed optimizer shards the optimizer's states and not the model's weights and gradients: ZeRO stage 1
(``--zero 1``). Where the bytes come from: under --bf16 ``megatron/training/arguments.py`` sets
``accumulate_allreduce_grads_in_fp32 = True``, and the DDP buffer is ``torch.float`` (4 B of gradients, row 2);
under --fp16 the buffer is 16-bit (2 B) and the optimizer's ``main_param.grad = model_param.main_grad.float()``
makes an fp32 copy (4 B more, row 1, sharded with the states: the distributed optimizer copies its shard).
"""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.frameworks import preset_values
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.model_states import states_breakdown
from memderive.symbolic.dims import Psi

D = 8


def _per_param(**options) -> float:
    """Model-state bytes per parameter of GPT-2 on one GPU's shard (every parameter held: tp = pp = 1)."""
    est = estimate("gpt2", mode="train", batch=1, seq=8, **options)
    return est.number("model_state_bytes") / est.number("parameters_per_gpu")


# The docs' rows by hand, bytes per parameter:
#   fp16 param + fp16 grads: 2 (weights) + 2 (grads) + 4 (fp32 grad copy) + 4 + 4 + 4 (master, Adam m, v) = 20;
#     distributed: 2 + 2 unsharded, (4 + 12)/d sharded -> 4 + 16/8 = 6.
#   bf16 param + fp32 grads: 2 + 4 + 12 = 18; distributed: 2 + 4 unsharded, 12/d sharded -> 6 + 12/8 = 7.5.
#   fp32 param + fp32 grads: 4 + 4 + 8 (Adam m, v; no master) = 16; distributed: 8 + 8/8 = 9.
MEGATRON_TABLE = [
    ("fp16", 1, 20), ("fp16", D, 4 + 16 / D),
    ("bf16", 1, 18), ("bf16", D, 6 + 12 / D),
    ("fp32", 1, 16), ("fp32", D, 8 + 8 / D),
]


@pytest.mark.parametrize("dt,d,expected", MEGATRON_TABLE)
def test_megatron_framework_reproduces_the_distributed_optimizer_table(dt: str, d: int, expected: float) -> None:
    zero = 0 if d == 1 else 1  # the distributed optimizer: optimizer states over the d ranks, ZeRO stage 1
    assert _per_param(framework="megatron", dtype=dt, dp=d, zero=zero) == expected


def test_the_table_is_a_graph_of_named_terms() -> None:
    """The bytes are terms of the model-states breakdown: the buffer's gradients and the optimizer's fp32 copy."""
    fp16 = states_breakdown(Psi, "fp16", "adamw", 1, D, grad_buffer="param+fp32")
    assert {t.path: t.expr for t in fp16.terms} == {
        "model_states/weights": 2 * Psi, "model_states/gradients": 2 * Psi,
        "model_states/fp32_gradient_copy": 4 * Psi / D, "model_states/optimizer": 12 * Psi / D}
    bf16 = states_breakdown(Psi, "bf16", "adamw", 1, D, grad_buffer="fp32")
    assert {t.path: t.expr for t in bf16.terms} == {
        "model_states/weights": 2 * Psi, "model_states/gradients": 4 * Psi, "model_states/optimizer": 12 * Psi / D}


def test_the_default_stays_zeros_sixteen_bytes() -> None:
    """Without a framework the gradients are in the weights' dtype: ZeRO's 2 + 2 + 12 (Rajbhandari et al. §3.1)."""
    assert _per_param(dp=D, zero=0) == 16
    assert _per_param(dp=D, zero=1) == 4 + 12 / D


def test_megatron_sets_the_buffer_by_dtype() -> None:
    assert preset_values("megatron", {})["grad_buffer"] == "fp32"  # Megatron's preset dtype is bf16
    assert preset_values("megatron", {"dtype": "fp16"})["grad_buffer"] == "param+fp32"
    assert "grad_buffer" not in preset_values("megatron", {"dtype": "fp32"})
    assert "grad_buffer" not in preset_values("megatron", {"precision": "pure"})
    # DeepSpeed's BF16_Optimizer (bf16 under ZeRO 0-1, as its --grad-sync): fp32 gradients of the whole model
    assert preset_values("deepspeed", {"dtype": "bf16", "zero": 1})["grad_buffer"] == "fp32"
    assert _per_param(framework="deepspeed", dtype="bf16", dp=D, zero=1) == 6 + 12 / D
    assert "grad_buffer" not in preset_values("deepspeed", {"dtype": "bf16", "zero": 2})
    assert "grad_buffer" not in preset_values("deepspeed", {"dtype": "fp16", "zero": 1})


def test_the_fp32_copy_lives_in_the_step_only() -> None:
    """total_bytes holds the 16-bit states beside the activations, and the copy only where it exceeds them: under
    full recompute GPT-2's few saved activations are smaller than 4 B per parameter, with none they are larger."""
    def parts(recompute: str):  # noqa: ANN202
        est = estimate("gpt2", mode="train", batch=1, seq=1024, framework="megatron", dtype="fp16",
                       recompute=recompute, attention="eager")
        states, acts = est.number("model_state_bytes"), est.number("activation_bytes")
        return states, acts, est.number("total_bytes"), est.number("parameters_per_gpu")

    states, acts, total, n = parts("none")
    assert acts > 4 * n and total == states - 4 * n + acts
    states, acts, total, n = parts("full")
    assert acts < 4 * n and total == states  # max(16 B + activations, 20 B): the step's 20 B


@pytest.mark.parametrize("given,message", [
    ({"dtype": "fp32", "grad_buffer": "fp32"}, "16-bit weights with an fp32 master copy"),
    ({"precision": "pure", "grad_buffer": "fp32"}, "16-bit weights with an fp32 master copy"),
    ({"grad_buffer": "fp32", "offload": True}, "not modelled with --offload"),
    ({"grad_buffer": "fp64"}, "--grad-buffer must be one of"),
])
def test_unmodelled_buffers_are_refused(given: dict, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        Options(mode="train", batch=1, seq=8, **given)
