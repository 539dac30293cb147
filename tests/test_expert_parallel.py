"""Expert parallelism: each of ep ranks holds E/ep routed experts with their gradients and optimizer states;
ZeRO shards the experts' states over the d/ep ranks that hold the same experts; layouts that do not divide
are refused; the existing strategies' properties hold for MoE models."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memderive.derivations.estimate import estimate
from memderive.derivations.models.architectures import LLAMA, Moe
from memderive.derivations.models.model import Model
from memderive.derivations.options import OptionsError
from memderive.symbolic.errors import InvalidLayoutError

TRAIN = dict(mode="train", batch=1, seq=64)
EXPERTS = "layer/moe/experts"


def rows(est, key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for path, value in est.quantity(key).term_ints(est.values):
        out[path] = out.get(path, 0) + value
    return out


@pytest.mark.parametrize("ep", [1, 2, 4, 8])
def test_each_rank_holds_e_over_ep_experts(ep: int) -> None:
    """Mixtral 8x7B: the routed experts are 32 layers * 8 * 3 * 4096 * 14336 = 45,097,156,608 parameters;
    each of ep ranks holds 1/ep of them, everything else whole."""
    est = estimate("mixtral-8x7b", **TRAIN, dp=8, ep=ep)
    per_gpu = rows(est, "parameters_per_gpu")
    assert per_gpu[EXPERTS] * ep == 45_097_156_608
    assert sum(per_gpu.values()) - per_gpu[EXPERTS] == 46_702_792_704 - 45_097_156_608


def test_expert_states_divide_by_ep() -> None:
    """Without ZeRO, bf16 + Adam: 16 bytes per parameter; the experts' 16 * 45,097,156,608 bytes over ep = 4."""
    one, four = (rows(estimate("mixtral-8x7b", **TRAIN, dp=4, ep=ep), "model_state_bytes") for ep in (1, 4))
    experts = [key for key in one if "/experts/" in key]
    assert sum(one[key] for key in experts) == 16 * 45_097_156_608
    assert all(one[key] == 4 * four[key] for key in experts)
    assert all(one[key] == four[key] for key in one if key not in experts)


def test_zero_shards_expert_states_over_the_ranks_holding_them() -> None:
    """d = 8, ep = 2, ZeRO-1: each GPU holds 4 of the 8 experts (22,548,578,304 parameters); their fp32 master
    weights and Adam moments (12 bytes each) are sharded over the d/ep = 4 ranks holding the same experts; the
    dense parameters' over all 8."""
    est = estimate("mixtral-8x7b", **TRAIN, dp=8, ep=2, zero=1)
    states = rows(est, "model_state_bytes")
    assert states["model_states/experts/optimizer"] == 12 * 22_548_578_304 // 4
    assert states["model_states/experts/weights"] == 2 * 22_548_578_304
    dense = 46_702_792_704 - 45_097_156_608
    assert states["model_states/optimizer"] == 12 * dense // 8


@pytest.mark.parametrize(("model", "options", "fragment"), [
    ("mixtral-8x7b", dict(dp=6, ep=3), "8 experts are not divisible by expert-parallel degree 3"),
    ("mixtral-8x7b", dict(dp=4, ep=8), "--etp 1 x --ep 8 must divide --tp x --cp x --dp (4)"),
    ("llama-2-7b", dict(dp=2, ep=2), "no mixture-of-experts layers"),
    ("llama-2-7b", dict(capacity_factor="1.25"), "no mixture-of-experts layers"),
    ("mixtral-8x7b", dict(capacity_factor="-1"), "--capacity-factor must be a positive number"),
    ("qwen3-30b-a3b", dict(tp=3), "not divisible by tensor-parallel degree 3"),
])
def test_layouts_that_do_not_divide_are_refused(model: str, options: dict, fragment: str) -> None:
    with pytest.raises((InvalidLayoutError, OptionsError)) as err:
        estimate(model, **{**TRAIN, **options})
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_inference_refuses_ep() -> None:
    with pytest.raises(OptionsError, match="--ep is modelled in training"):
        estimate("mixtral-8x7b", mode="infer", batch=1, seq=8, dp=2, ep=2)


@st.composite
def moe_models(draw):
    a_kv = draw(st.sampled_from([1, 2]))
    a = a_kv * draw(st.sampled_from([1, 2, 4]))
    experts = draw(st.sampled_from([2, 4, 8]))
    shared = draw(st.booleans())
    sizes = {"h": 8 * a, "a": a, "a_kv": a_kv, "l": draw(st.integers(1, 4)), "V": 64, "f": 32, "E": experts,
             "k": draw(st.integers(1, experts)), "f_e": 8 * draw(st.integers(1, 4))}
    if shared:
        sizes["f_s"] = 16
    return Model("random-moe", replace(LLAMA, moe=Moe(shared=shared)), sizes)


@settings(max_examples=25, deadline=None)
@given(moe_models(), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([0, 1, 2, 3]),
       st.sampled_from(["none", "selective", "full"]))
def test_expert_parallel_properties(model: Model, ep: int, tp: int, zero: int, recompute: str) -> None:
    z = model.sizes
    assume(z["E"] % ep == 0 and z["a_kv"] % tp == 0 and z["a"] % tp == 0)
    common = dict(TRAIN, dp=4, zero=zero, recompute=recompute)
    base = estimate(model, **common)
    assert estimate(model, **common, ep=1).number("total_bytes") == base.number("total_bytes")  # ep = 1: identity
    sharded = estimate(model, **common, ep=ep)
    assert sharded.number("activation_bytes") == base.number("activation_bytes")  # tokens travel, not activations
    assert sharded.number("model_state_bytes") <= base.number("model_state_bytes")
    if zero == 0:  # per-GPU expert states divide by ep exactly
        before, after = rows(base, "model_state_bytes"), rows(sharded, "model_state_bytes")
        assert all(before[key] == ep * after[key] for key in before if "/experts/" in key)
    parallel = estimate(model, **common, ep=ep, tp=tp)
    assert parallel.number("total_bytes") <= sharded.number("total_bytes")  # tensor parallelism never adds
    assert base.number("parameters") == sum(rows(base, "parameters_per_gpu").values())
