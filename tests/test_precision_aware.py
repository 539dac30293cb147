"""Megatron-Core's precision-aware optimizer (``--precision-aware-optimizer``, ``--moments``, ``--main-params``)
against bytes per parameter by hand, from the code that allocates them (Megatron-LM core_v0.15.0, Transformer Engine
v2.9 ``FusedAdam``):

* ``get_megatron_optimizer`` passes ``exp_avg_dtype`` / ``exp_avg_sq_dtype`` to FusedAdam, and unless the run is fp8
  with current or MX scaling and fp32 main params, ``master_weights=True, master_weight_dtype=main_params_dtype,
  store_param_remainders=True`` (OptimizerConfig's default): FusedAdam's ``_initialize_state`` makes the master an
  ``int16`` tensor of the parameter's shape for bf16 weights (2 B), ``empty_like(dtype=fp16)`` for fp16 ones (2 B).
* ``_copy_model_grads_to_main_grads``: ``decoupled_grad = shard_model_grad`` (the buffer, no copy), else
  ``main_grad.float()`` (4 B, a copy of a 16-bit buffer), in the step only.
* ``FusedAdam.step``: ``get_unscaled_state`` is ``.float()`` of each state not in fp32, 4 B each, in the step only.

The distributed optimizer (ZeRO-1) shards the main params, the moments and the step's copies over d; weights and
gradients stay whole.
"""

from __future__ import annotations

import json

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.frameworks import preset_values
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.model_states import states_breakdown
from memderive.derivations.quantities.precision_aware import PrecisionAware
from memderive.symbolic.dims import Psi, d
from tests.published_runs import MOE

#: (moments, main params, --fp8, --dtype, --grad-buffer) -> the terms by hand, bytes per parameter:
CASES = [
    # DeepSeek-V3's recipe on bf16: weights 2, bf16 main grads 2; sharded: int16 remainder 2 + bf16 moments 2 + 2;
    # in the step: the two moments' fp32 copies 4 + 4. Held 4 + 6/d; with the step's 12 + 2 + ... = 4 + 14/d.
    (("bf16", "fp32", "none", "bf16", "param"),
     {"weights": 2 * Psi, "gradients": 2 * Psi, "fp32_unscaled_states": 8 * Psi / d, "optimizer": 6 * Psi / d}),
    # the same under te-mxfp8: Megatron-Core keeps fp32 main params 4 and makes main_grad.float() 4 in the step
    (("bf16", "fp32", "te-mxfp8", "bf16", "param"),
     {"weights": 2 * Psi, "gradients": 2 * Psi, "fp32_gradient_copy": 4 * Psi / d,
      "fp32_unscaled_states": 8 * Psi / d, "optimizer": 8 * Psi / d}),
    # te-delayed keeps FusedAdam's master (delayed scaling is the exception in optimizer_config.py)
    (("bf16", "fp32", "te-delayed", "bf16", "param"),
     {"weights": 2 * Psi, "gradients": 2 * Psi, "fp32_unscaled_states": 8 * Psi / d, "optimizer": 6 * Psi / d}),
    # Megatron-LM's defaults with the flag alone: fp32 main grads 4; remainder 2 + fp32 moments 4 + 4; no step copy
    (("fp32", "fp32", "none", "bf16", "fp32"),
     {"weights": 2 * Psi, "gradients": 4 * Psi, "optimizer": 10 * Psi / d}),
    # fp16 weights: no remainders (bf16 only), fp32 main params 4 + moments 8
    (("fp32", "fp32", "none", "fp16", "param"),
     {"weights": 2 * Psi, "gradients": 2 * Psi, "optimizer": 12 * Psi / d}),
    # fp16 main params 2, fp8 moments 1 + 1; in the step fp32 copies of all three states, 12
    (("fp8", "fp16", "none", "bf16", "param"),
     {"weights": 2 * Psi, "gradients": 2 * Psi, "fp32_unscaled_states": 12 * Psi / d, "optimizer": 4 * Psi / d}),
]


@pytest.mark.parametrize("given,expected", CASES)
def test_bytes_per_parameter_by_hand(given: tuple, expected: dict) -> None:
    moments, main_params, fp8, dt, buffer = given
    states = states_breakdown(Psi, dt, "adam", 1, d, grad_buffer=buffer,
                              aware=PrecisionAware(moments, main_params, fp8))
    assert {t.path.removeprefix("model_states/"): t.expr for t in states.terms} == expected


def test_the_zero_stages_shard_as_before() -> None:
    # bf16 moments, the 18 bytes of the first case: ZeRO 0 none sharded, 2 the gradients too, 3 everything
    aware = PrecisionAware("bf16")
    totals = [states_breakdown(Psi, "bf16", "adam", z, d, aware=aware).total for z in range(4)]
    assert totals == [18 * Psi, 4 * Psi + 14 * Psi / d, 2 * Psi + 16 * Psi / d, 18 * Psi / d]


def test_an_estimate_holds_the_step_copies_only_over_the_activations() -> None:
    # GPT-2 on 2 ranks: held 2 + 2 + 6/2 = 7 B per parameter, the unscaled moments 8/2 = 4 B in the step; GPT-2's activations at
    # 8 x 1,024 tokens exceed 4 B per parameter, so total_bytes = the held states + the activations
    est = estimate("gpt2", mode="train", batch=8, seq=1024, dp=2, zero=1, precision_aware_optimizer=True,
                   moments="bf16", attention="eager")
    n = est.number("parameters_per_gpu")
    assert est.number("model_state_bytes") == 11 * n
    acts = est.number("activation_bytes")
    assert acts > 4 * n and est.number("total_bytes") == 7 * n + acts


def test_the_cli_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    # bf16 weights and buffer 2 + 2; sharded over 2: fp16 main params 2 + bf16 moments 2 + 2, and in the step the
    # fp32 copies of all three 4 + 4 + 4: 4 + (6 + 12)/2 = 13 B per parameter
    argv = ["estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "8", "--dp", "2", "--zero",
            "1", "--precision-aware-optimizer", "--moments", "bf16", "--main-params", "fp16"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {k: out["inputs"][k] for k in ("precision_aware_optimizer", "moments", "main_params")} == {
        "precision_aware_optimizer": True, "moments": "bf16", "main_params": "fp16"}
    assert out["model_state_bytes"] == 13 * out["parameters_per_gpu"]
    assert main(argv) == 0
    assert "precision aware optimizer on, moments bf16, main params fp16" in capsys.readouterr().out


def test_megatron_reads_a_16_bit_buffer_in_place() -> None:
    # --framework megatron under --fp16 sets the param+fp32 buffer; with the precision-aware optimizer it does not
    assert preset_values("megatron", {"dtype": "fp16"})["grad_buffer"] == "param+fp32"
    assert "grad_buffer" not in preset_values("megatron", {"dtype": "fp16", "precision_aware_optimizer": True})


def test_the_step_bytes_by_hand() -> None:
    # te-mxfp8, bf16 buffer and moments: the gradient to fp32 (r 2, w 4) 6; AdamFunctor on fp32 params r g 4, r w p 8;
    # each moment r w 8 at fp32 + unscale 6 + rescale 10; main params into the bf16 weights 6; clipping 3 x 4
    assert PrecisionAware("bf16", fp8="te-mxfp8").step_bytes("bf16", "param") == 6 + 4 + 8 + 2 * 24 + 6 + 12
    # fp16 main params, fp32 moments, bf16 buffer: r g 2; AdamFunctorMaster r w master 8 + w p 2, the master's
    # unscale (r 2 w 4, r 4 w 4) 14 and rescale (aminmax r 4, mul_ r 4 w 4, copy_ r 4 w 2) 18; moments 16; clip 6
    assert PrecisionAware(main_params="fp16").step_bytes("bf16", "param") == 2 + 10 + 32 + 16 + 6


@pytest.mark.parametrize("given,fragment", [
    ({"moments": "bf16"}, "give --precision-aware-optimizer"),
    ({"main_params": "fp16"}, "give --precision-aware-optimizer"),
    ({"precision_aware_optimizer": True, "optimizer": "sgd"}, "not with --optimizer sgd"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 0}, "give --zero 1, not --zero 0"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 3}, "give --zero 1, not --zero 3"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 1, "grad_buffer": "param+fp32"}, "not param+fp32"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 1, "dtype": "fp32"}, "give --dtype bf16 or fp16"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 1, "precision": "pure"}, "give --dtype bf16 or fp16"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 1, "implementation": "hf"}, "--implementation hf"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 1, "offload": True}, "not modelled with --offload"),
    ({"precision_aware_optimizer": True, "dp": 2, "zero": 1, "moments": "int8"}, "--moments must be one of"),
])
def test_refused_where_megatron_core_refuses_or_memderive_does_not_model(given: dict, fragment: str) -> None:
    with pytest.raises(OptionsError) as err:
        estimate("gpt2", mode="train", batch=1, seq=8, **given)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "8", "--moments", "fp8"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "give --precision-aware-optimizer" in err


def test_the_bridge_rows_run_it_as_their_scripts_and_recipes_set_it() -> None:
    # Megatron-Bridge's performance scripts set use_precision_aware_optimizer for every BF16 run (v0.2.0
    # scripts/performance/utils/helpers.py L254-255, v0.3.0 utils/overrides.py L420-421), not for the fp8 ones, whose
    # recipes leave it off but DeepSeek-V3's (recipes/deepseek/deepseek_v3.py L272-276: bf16 moments)
    bridge = [r for r in MOE if r.source.startswith("Megatron-Bridge")]
    for run in bridge:
        deepseek = run.model == "deepseek-v3"
        assert run.layout["precision_aware_optimizer"] == ("fp8" not in run.layout or deepseek), run.name
        assert run.layout.get("moments", "fp32") == ("bf16" if deepseek else "fp32"), run.name
    # 6 of 25.11 and 26.02, 4 of 26.04.01, 26.06 and 26.08 (B200 p8 v2, B300 p8, GB300 p2 v8 at GBS 15360 and 4096)
    assert len(bridge) >= 44 and sum(r.model == "deepseek-v3" for r in bridge) == 10
