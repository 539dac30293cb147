"""Derivation steps: every quantity, every layout; the steps add up and end on the estimate's number."""

from __future__ import annotations

import pytest
import sympy as sp

from memderive.derivations.estimate import estimate
from memderive.documents.steps import LEVELS, Step, breakdown_rows, derivation, single_device
from memderive.symbolic.derive import evaluate
from memderive.symbolic.simplify import closed_form

CASES = {
    "gpt2 params": ("gpt2", {}),
    "llama-2-7b tp sp selective": ("llama-2-7b", dict(mode="train", batch=1, seq=4096, tp=8, sp=True,
                                                      recompute="selective")),
    "gpt3 tp pp interleaved zero": ("gpt3-175b", dict(mode="train", batch=2, seq=2048, tp=8, pp=8, sp=True,
                                                      virtual_stages=2, micro_batches=4, dp=4, zero=1)),
    "llama-2-70b full recompute flash": ("llama-2-70b", dict(mode="train", batch=1, seq=4096, tp=8,
                                                             recompute="full", flash=True)),
    "llama-2-7b infer tp": ("llama-2-7b", dict(mode="infer", batch=4, seq=2048, new_tokens=128, tp=2)),
}


#: The GPT-3 case takes seconds per test (measured): slow, the others fast.
@pytest.fixture(scope="module", params=[pytest.param(name, marks=pytest.mark.slow) if name.startswith("gpt3") else name
                                        for name in CASES])
def est(request):
    model, kwargs = CASES[request.param]
    return estimate(model, **kwargs)


def test_every_quantity_ends_on_its_number(est) -> None:
    for q in est.quantities:
        steps = derivation(est, q.key)
        assert steps[-1].level == "closed form"
        assert steps[-1].value == est.number(q.key)
        assert sp.srepr(steps[-1].symbolic) == sp.srepr(q.closed_form())


def test_levels_come_in_order_and_values_are_exact(est) -> None:
    base = single_device(est)
    for q in est.quantities:
        steps = derivation(est, q.key, base=base)
        order = [LEVELS.index(step.level) for step in steps]
        assert order == sorted(order)
        for step in steps:
            values = base.values if step.level in ("term", "layer", "model") else est.values
            assert step.value == int(sp.ceiling(evaluate(step.symbolic, values))), step.label
            assert step.unit == q.unit


def test_terms_add_up_to_the_layer_and_the_layer_to_the_model(est) -> None:
    base = single_device(est)
    for q in est.quantities:
        steps = derivation(est, q.key, base=base)
        terms = [s for s in steps if s.level == "term"]
        layer = [s for s in steps if s.level == "layer"]
        if layer:
            assert sum(s.value for s in terms) == layer[0].value
        model = [s for s in steps if s.level == "model"]
        if model and q.key in {x.key for x in base.quantities}:
            assert model[0].value == base.number(q.key)
        gpu = [s for s in steps if s.level == "gpu"]
        if gpu:
            assert gpu[0].value == est.number(q.key)
            assert sp.expand(closed_form(gpu[0].symbolic - q.closed_form())) == 0


def test_term_sources_are_graph_paths(est) -> None:
    paths = {t.path for q in single_device(est).quantities for t in q.breakdown.terms}
    for q in est.quantities:
        for step in derivation(est, q.key):
            if step.level == "term":
                assert step.source in paths


def test_breakdown_rows_add_up_and_follow_values(est) -> None:
    for q in est.quantities:
        rows = breakdown_rows(est, q.key)
        assert sum(r.value for r in rows) == est.number(q.key)
        assert sp.expand(sp.Add(*(r.expr for r in rows)) - closed_form(q.breakdown.total, q.relations)) == 0


def test_step_is_frozen_and_checks_its_level() -> None:
    step = Step("x", sp.Integer(1), "layer/x", "1", 1, "bytes", "term")
    with pytest.raises(AttributeError):
        step.value = 2
    with pytest.raises(ValueError, match="level"):
        Step("x", sp.Integer(1), "layer/x", "1", 1, "bytes", "per-op")


def test_single_layer_quantity_has_no_whole_model_step() -> None:
    est = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, sp=True)
    levels = [s.level for s in derivation(est, "activation_bytes_per_layer")]
    assert "model" not in levels and levels.count("layer") == 1 and "gpu" in levels


def test_substituted_numbers_are_the_models_sizes() -> None:
    est = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, sp=True)
    layer = next(s for s in derivation(est, "activation_bytes_per_layer") if s.level == "layer")
    assert "11{,}008" in layer.substituted and "4{,}096" in layer.substituted
