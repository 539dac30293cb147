"""Property tests over random sizes (hypothesis)."""

from __future__ import annotations

import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memderive.derivations.estimate import estimate
from memderive.derivations.models.model import Model
from memderive.derivations.models.architectures import GPT, LLAMA
from memderive.symbolic.dims_sympy import SYMBOLS

sym = SYMBOLS.__getitem__  # closed forms are SymPy: their symbols


@st.composite
def models(draw):
    arch = draw(st.sampled_from([GPT, LLAMA]))
    a_kv = draw(st.integers(1, 4))
    a = a_kv * draw(st.integers(1, 4))
    d_head = draw(st.integers(1, 16))
    sizes = {"h": a * d_head, "a": a, "a_kv": a_kv, "l": draw(st.integers(1, 6)), "V": draw(st.integers(1, 999)),
             "f": draw(st.integers(1, 300)), "n_ctx": draw(st.integers(1, 99))}
    if arch is LLAMA:
        sizes.pop("n_ctx")
    return Model("random", arch, sizes)


def _numeric_count(model: Model) -> int:
    """Substitute sizes into every parameter tensor's shape first, then add plain integers."""
    values = {sym(k): v for k, v in model.sizes.items()}
    total = 0
    for blk, op in model.graph().ops():
        repeat = int(blk.repeat.xreplace(values))
        for tensor in op.params:
            numel = 1
            for axis in tensor.shape:
                numel *= int(sp.sympify(axis).xreplace(values))
            total += repeat * numel
    return total


@settings(max_examples=40, deadline=None)
@given(models())
def test_closed_form_equals_numeric_graph(model: Model) -> None:
    est = estimate(model)
    closed = est.quantity("parameters").closed_form()
    assert int(closed.xreplace({sym(k): v for k, v in model.sizes.items()})) == _numeric_count(model)


@settings(max_examples=20, deadline=None)
@given(models())
def test_breakdown_leaves_sum_to_total(model: Model) -> None:
    """The rows tables and plots show (render.steps, grouped by node) add up to the JSON total, and
    each leaf's closed form, evaluated on its own, gives its row (two code paths, one answer)."""
    from memderive.documents.steps import breakdown_rows

    est = estimate(model)
    rows = breakdown_rows(est, "parameters")
    assert sum(row.value for row in rows) == est.number("parameters")
    values = {sym(k): v for k, v in model.sizes.items()}
    for path, form, value in est.quantity("parameters").term_values(est.values):
        assert int(form.xreplace(values)) == value, path
