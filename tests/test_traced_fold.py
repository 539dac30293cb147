"""A deep traced model's symbolic run on a few of its layers (derivations/quantities/traced_fold.py): one of each
kind and one more of each repeated kind, summed with coefficients, equal to the run over the whole stack.

Independent source: the symbolic run over the whole stack (``traced_symbolic.symbolic_bytes`` without a fold, as
every traced estimate ran before), and the coefficients worked by hand in the comments.
"""

from __future__ import annotations

import sympy as sp

from memderive.derivations.quantities import traced, traced_fold
from memderive.derivations.quantities import traced_symbolic as ts
from memderive.symbolic.dims import by_name
from tests.test_traced import SAMPLE

b, s = by_name("b").symbol, by_name("s").symbol

#: Qwen3-Next's tiny sample at 8 layers: 3 gated-DeltaNet layers then one full-attention layer, twice.
HYBRID = {**SAMPLE["qwen3_next"], "num_hidden_layers": 8,
          "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 2}
#: A llama-like stack of 4 identical layers (arcee: no hand-written family takes it).
DENSE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=4,
             intermediate_size=96, vocab_size=128)


def test_runs_by_hand() -> None:
    # the hybrid: kinds DeltaNet at 0, 1, 2, 4, 5, 6 (6 layers) and attention at 3, 7 (2). R = (0, 3); one more
    # DeltaNet (0, 1, 3), 5 more times; one more attention (0, 3, 7), once: Q = (1 - 5 - 1) Q(R) + 5 Q(0,1,3)
    # + Q(0,3,7): 2 + 3 + 3 = 8 layers run, not fewer than 8, so no fold; at 12 layers 9 DeltaNet, 3 attention:
    # (1 - 8 - 2) Q(R) + 8 Q(0,1,3) + 2 Q(0,3,7), 8 layers run of 12
    model, _ = traced.build(traced.hf_config({"model_type": "qwen3_next", **HYBRID}), "eager")
    assert traced_fold.fold(model) is None
    twelve = {**HYBRID, "num_hidden_layers": 12, "layer_types": HYBRID["layer_types"] + HYBRID["layer_types"][:4]}
    model, _ = traced.build(traced.hf_config({"model_type": "qwen3_next", **twelve}), "eager")
    assert traced_fold.fold(model).runs == (((0, 3), -9), ((0, 1, 3), 8), ((0, 3, 7), 2))
    assert traced_fold.fold(model).layers_run == 8


def test_folded_equals_the_whole_stack_and_puts_it_back() -> None:
    # 4 identical layers: (1 - 3) Q(0) + 3 Q(0, 1) = Q(0) + 3 (Q(0, 1) - Q(0)); the saved activations, the cache
    cfg = traced.hf_config({"model_type": "arcee", **DENSE})
    for count in (traced.saved_bytes, traced.cache_total):
        model, mode = ts.symbolic_model(cfg, "eager")
        plan = traced_fold.fold(model)
        assert plan.runs == (((0,), -2), ((0, 1), 3))
        folded, _ = ts.symbolic_bytes(count, model, mode, folded=plan)
        assert len(model.model.layers) == 4 and model.config.num_hidden_layers == 4
        assert [layer.self_attn.layer_idx for layer in model.model.layers] == list(range(4))
        whole, _ = ts.symbolic_bytes(count, *ts.symbolic_model(cfg, "eager"))
        assert sp.expand(folded - whole) == 0
    # by hand, the cache: 4 layers x 2 (K, V) x 2 KV heads x 16 dims x 2 B x b x (s + 1) = 512 b (s + 1)
    assert sp.expand(folded - 512 * b * (s + 1)) == 0


def test_a_fold_that_misses_the_measured_bytes_runs_the_whole_stack(monkeypatch) -> None:
    # a wrong fold (coefficients that count 5 layers, not 4) gives other bytes than the full model's trace measures
    # at (2, 24): symbolic() runs the whole stack instead and its expression is the whole stack's
    cfg = traced.hf_config({"model_type": "arcee", **DENSE})
    fake, fake_mode = traced.build(cfg, "eager")
    measured = traced.saved_bytes(fake, fake_mode, 2, 24)
    real = traced_fold.fold

    asked = []

    def wrong(model):
        plan = real(model)
        asked.append(plan)
        return traced_fold.Fold(plan.parent, plan.attr, plan.config, (((0,), -3), ((0, 1), 4)))

    monkeypatch.setattr(traced_fold, "fold", wrong)
    got = ts.symbolic(traced.saved_bytes, *ts.symbolic_model(cfg, "eager"), 2, 24, measured)
    assert len(asked) == 1 and got(2, 24) == measured
    whole, _ = ts.symbolic_bytes(traced.saved_bytes, *ts.symbolic_model(cfg, "eager"))
    assert sp.expand(got.general - whole) == 0


def test_a_fit_through_folded_points_is_the_whole_stacks() -> None:
    # the polynomial route (a prepared model: recompute, LoRA, --tp) fits through small (b, s) counted on the fold's
    # few layers, checked at the user's (2, 24) against the whole model's count: the same polynomial as the 11 points
    # counted on all 4 layers
    cfg = traced.hf_config({"model_type": "arcee", **DENSE})
    model, mode = traced.build(cfg, "eager")
    assert traced_fold.fold(model) is not None
    plan = traced_fold.fold(model)
    measured = traced.saved_bytes(model, mode, 2, 24)
    fit = traced.checked_fit(traced.saved_bytes, model, mode, 2, 24, measured)
    whole = traced.polynomial(lambda bb, ss: traced.saved_bytes(model, mode, bb, ss))
    folded = traced.polynomial(lambda bb, ss: plan.count(traced.saved_bytes, model, mode, bb, ss))
    assert fit is not None and str(fit) == str(whole) == str(folded) and fit(2, 24) == measured
