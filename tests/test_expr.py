"""The SymPy-free expression core (symbolic.expr) against SymPy, the reference algebra.

Every number the engine prints comes from ``Expr.evaluate``; closed forms come from ``to_sympy``. These
tests state that the two paths agree to the byte: random Laurent polynomials with min/max, and every
quantity of random estimates, per-term rounding included (each node rounded up on its own).
"""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memderive.derivations.estimate import estimate
from memderive.symbolic.dims import a, b, h, l, n, p, s, t, v, w
from memderive.symbolic.expr import Expr, Max, Min, ceiling, const, prod, shifted_nonnegative, to_sympy, total

SYMBOLS = (a, b, h, l, n, p, s, t, v, w)
sizes = st.integers(min_value=1, max_value=2**70)  # beyond 2^63: Python ints never wrap


@st.composite
def monomials(draw, lowest: int = -2) -> Expr:
    coeff = draw(st.fractions(min_value=-50, max_value=50, max_denominator=7).filter(bool))
    factors = draw(st.lists(st.tuples(st.sampled_from(SYMBOLS), st.integers(lowest, 3)), max_size=3))
    return prod([coeff, *(x**e for x, e in factors)])


@st.composite
def exprs(draw, depth: int = 1, lowest: int = -2) -> Expr:
    terms = draw(st.lists(monomials(lowest), min_size=1, max_size=4))
    if depth and draw(st.booleans()):
        # min/max of sizes without division, as graphs build them (SymPy 1.14 settles Min(1, 1/(a*b)) to 1
        # for positive integers a, b: wrong at a*b > 1, so it cannot be the reference there)
        fn = draw(st.sampled_from((Min, Max)))
        terms.append(draw(monomials()) * fn(draw(exprs(depth - 1, 0)), draw(exprs(depth - 1, 0))))
    return total(terms)


def _sympy_value(x: Expr, values: dict) -> sp.Expr:
    return to_sympy(x).xreplace({to_sympy(k): sp.Integer(v) for k, v in values.items()})


@settings(max_examples=60, deadline=None)
@given(exprs(), exprs(), st.fixed_dictionaries({x: sizes for x in SYMBOLS}))
def test_arithmetic_and_values_equal_sympys(x: Expr, y: Expr, values: dict) -> None:
    for ours, theirs in ((x + y, to_sympy(x) + to_sympy(y)), (x - y, to_sympy(x) - to_sympy(y)),
                         (x * y, to_sympy(x) * to_sympy(y)), (x**2, to_sympy(x) ** 2)):
        assert sp.expand(to_sympy(ours) - theirs) == 0
        exact = ours.evaluate(values)
        assert isinstance(exact, int | Fraction)
        assert sp.Rational(exact.numerator, exact.denominator) == _sympy_value(ours, values)
    part = {k: values[k] for k in (a, s, w)}  # some sizes bound, the others left: subs by numbers
    expected = to_sympy(x).xreplace({to_sympy(k): sp.Integer(val) for k, val in part.items()})
    assert sp.expand(to_sympy(x.subs(part)) - expected) == 0
    assert sp.sympify(str(x)).xreplace({sp.Symbol(k.name): to_sympy(k) for k in x.free_symbols}) == to_sympy(x)


def test_beyond_int64_stays_exact() -> None:
    big = 2**62 + 1
    x = 3 * h**3 * s / t + Min(s, w) * h
    value = x.evaluate({h: big, s: big, t: 3, w: 2**80})
    assert value == big**4 + big * big and isinstance(value, int)


def test_division_only_by_a_monomial() -> None:
    assert (h / (p * v)).evaluate({h: 12, p: 2, v: 3}) == 2
    assert ((p - 1) / (p * v)).evaluate({p: 4, v: 3}) == Fraction(1, 4)
    with pytest.raises(ValueError, match="monomial"):
        _ = h / (s + n)
    with pytest.raises(TypeError, match="exact size"):
        _ = const(0.5)


def test_minmax_numbers_and_printing() -> None:
    assert Min(s + n, w).subs({s: 100, n: 28}) == Min(128, w)
    assert Max(3 * b, 2 * b) == 3 * b  # sizes are positive: SymPy decides it too
    assert str(Min(s + n, w)) == "Min(w, n + s)" == str(to_sympy(Min(s + n, w)))
    assert ceiling(h / 128).subs({h: 4097}) == 33
    assert str(4 * b * h * l * (s + n)) == str(to_sympy(4 * b * h * l * (s + n))) == "4*b*h*l*n + 4*b*h*l*s"


def test_shifted_nonnegative_is_sympys_test() -> None:
    for diff in (h * s - h, h - s, h**2 / t - h / t, b * Min(s, w) - b):
        shift = {to_sympy(x): to_sympy(x) + 1 for x in diff.free_symbols}
        terms = sp.Add.make_args(sp.expand(to_sympy(diff).xreplace(shift)))
        assert shifted_nonnegative(diff) == all(term.as_coeff_Mul()[0] >= 0 for term in terms)


CASES = [
    ("llama-2-7b", {"mode": "train", "tp": 8, "sp": True, "recompute": "selective"}),
    ("llama-2-70b", {"mode": "train", "dp": 3, "zero": 3, "pp": 2, "micro_batches": 3, "virtual_stages": 4}),
    ("gpt2", {"mode": "train", "dp": 3, "zero": 2, "flash": True}),
    ("gemma-2-9b", {"mode": "infer", "weight_dtype": "int4", "tp": 2}),
    ("mistral-7b", {"mode": "infer", "kv_dtype": "fp8"}),
    ("llama-3-8b", {"mode": "infer", "tp": 16}),
]


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(CASES), st.integers(1, 2**20), st.integers(1, 2**17), st.integers(0, 9000))
def test_estimate_numbers_equal_the_sympy_path(case, batch: int, seq: int, new: int) -> None:
    """Each quantity: the engine's per-term ceil equals SymPy's substitution of the same term, then
    ceil; the JSON formula (printed without SymPy) equals the SymPy closed form."""
    model, options = case
    seq = 1 + seq % 1024 if model == "gpt2" else seq  # learned positions: 1,024
    extra = {"new_tokens": new} if options["mode"] == "infer" else {}
    est = estimate(model, batch=batch, seq=seq, **options, **extra)
    values = {to_sympy(k): sp.Integer(v) for k, v in est.values.items()}
    for q in est.quantities:
        reference = sum(math.ceil(Fraction(str(to_sympy(term.expr).xreplace(values))))
                        for term in q.breakdown.terms)
        assert est.number(q.key) == reference, q.key
        printed = sp.sympify(q.formula(), locals={x.name: x.symbol for x in _dims()})
        assert sp.expand(printed - q.closed_form()) == 0, q.key


def _dims():
    from memderive.symbolic.dims import DIMS

    return DIMS


def test_estimate_json_imports_no_sympy() -> None:
    code = ("import sys, json; from memderive.derivations.estimate import estimate; "
            "e = estimate('gemma-2-9b', mode='infer', batch=2, seq=9000, new_tokens=5, weight_dtype='int4'); "
            "json.dumps(e.to_json()); "
            "e = estimate('llama-2-7b', mode='train', batch=1, seq=4096, tp=8, sp=True, recompute='selective'); "
            "json.dumps(e.to_json()); print('sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
