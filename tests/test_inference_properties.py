"""Property tests of inference compute and time over random sizes (hypothesis): a tensor-parallel rank's prefill
and decode FLOPs times t are the whole model's (what every rank repeats added back: the router, which each rank
runs whole), and end-to-end tokens/s (prefill plus n decode steps) never exceeds decode alone."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from memderive.derivations.estimate import estimate
from memderive.derivations.models.architectures import GPT, LLAMA, Moe
from memderive.derivations.models.model import Model
from memderive.derivations.quantities.timing import time_of

TP = (1, 2, 4, 8)


@st.composite
def layouts(draw):
    """A random dense (GPT, LLaMA) or MoE (LLaMA with a router and E experts) model, with a tensor-parallel degree
    that divides its heads, KV heads, FFN and vocabulary (so every split is whole), a batch and a step."""
    t = draw(st.sampled_from(TP))
    moe = draw(st.booleans())
    arch = replace(LLAMA, moe=Moe()) if moe else draw(st.sampled_from([GPT, LLAMA]))
    a_kv = t * draw(st.integers(1, 2))
    a = a_kv * draw(st.integers(1, 3))
    sizes = {"h": a * draw(st.integers(1, 8)), "a": a, "a_kv": a_kv, "l": draw(st.integers(1, 4)),
             "V": t * draw(st.integers(1, 60)), "f": t * draw(st.integers(1, 40))}
    if arch is GPT:
        sizes["n_ctx"] = 64
    if moe:
        sizes.update(E=draw(st.integers(2, 8)), f_e=t * draw(st.integers(1, 20)))
        sizes["k"] = draw(st.integers(1, sizes["E"]))
    step = {"batch": draw(st.integers(1, 4)), "seq": draw(st.integers(1, 32)), "new_tokens": draw(st.integers(1, 16))}
    return Model("random", arch, sizes), t, step


@settings(max_examples=25, deadline=None)
@given(layouts())
def test_per_gpu_flops_times_t_is_the_whole(case) -> None:
    """Every matmul is split over the t ranks but the router (h -> E, replicated: each rank routes every token),
    whose 2 h E FLOPs per token per layer each of the t ranks runs: per_gpu * t = whole + (t - 1) * router."""
    model, t, step = case
    est = estimate(model, mode="infer", tp=t, **step)
    z, b, s = model.sizes, step["batch"], step["seq"]
    router_per_token = 2 * z["h"] * z["E"] * z["l"] if "E" in z else 0
    assert est.number("prefill_flops_per_gpu") * t == est.number("prefill_flops") + (t - 1) * router_per_token * b * s
    assert est.number("decode_flops_per_token_per_gpu") * t == (est.number("decode_flops_per_token")
                                                               + (t - 1) * router_per_token)


@settings(max_examples=25, deadline=None)
@given(layouts(), st.sampled_from(["a100-80gb", "h100-sxm", "l4"]))
def test_end_to_end_tokens_per_s_never_exceeds_decode_alone(case, gpu: str) -> None:
    """b n / (prefill + n step) <= b / step: the prefill only adds time."""
    model, t, step = case
    timing = time_of(estimate(model, mode="infer", tp=t, gpu=gpu, **step))
    assert timing.prefill_s > 0
    assert timing.end_to_end_tokens_per_s < timing.tokens_per_s
    assert timing.generate_s == timing.prefill_s + step["new_tokens"] * timing.decode_step_s
