"""The restricted formula reader: what it accepts, what it refuses, and round trips."""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memderive.derivations.claims.check import OURS, default_symbols, parse_symbols, quantity_spec
from memderive.derivations.claims.parser import LIMITS, FormulaError, parse_formula
from memderive.symbolic.dims_sympy import V, Psi, a, a_kv, b, d, d_h, h, l, n, n_ctx, s, t

NAMES = {**default_symbols(quantity_spec("activations.per_layer")), **parse_symbols("R=l, N=a, D=h/a")}


@pytest.mark.parametrize(("text", "expected"), [
    ("4*R*N**2*D**2", 4 * l * h**2),  # Python syntax with the author's letters
    ("4RN^2D^2", 4 * l * h**2),  # the same in LaTeX juxtaposition
    ("34sbh + 5as^2b", 34 * s * b * h + 5 * a * s**2 * b),  # Korthikanti Eq. 1, expanded
    ("sbh(34 + 5as/h)", s * b * h * (34 + 5 * a * s / h)),  # juxtaposition binds tighter than /
    (r"M_\text{layer} = sbh\left(34 + \frac{5as}{h}\right)", s * b * h * (34 + 5 * a * s / h)),
    ("5as/ht", 5 * a * s / (h * t)),  # (5as)/(ht), as Korthikanti writes 5as/(ht)
    (r"\frac{sbh}{t}\left(34 + \frac{5as}{h}\right)", s * b * h / t * (34 + 5 * a * s / h)),
    (r"16\Psi", 16 * Psi), ("16Ψ/N_d", 16 * Psi / d), (r"(2 + 2 + 12)\Phi", 16 * Psi),
    (r"2 \cdot 2 \cdot n_{\text{layers}} \times d_{model}", 4 * l * h),
    (r"a_{kv} d_h", a_kv * d_h), ("n_layers*d_model", l * h),
    (r"4blh(s+n) \text{ bytes}", 4 * b * l * h * (s + n)),
    (r"\frac12 h", h / 2), ("s^22", 2 * s**2), ("1.5h", sp.Rational(3, 2) * h), ("2^{30}", 2**30),
    ("4{,}096 h", 4096 * h), (r"\left[ s + b \right] h", (s + b) * h), ("s ** -2", s**-2),
    ("−2h × 3", -6 * h), ("N ≈ 12 R D²", 12 * l * h**2 / a**2),
])
def test_reads(text: str, expected: sp.Expr) -> None:
    assert sp.expand(parse_formula(text, NAMES).expr - expected) == 0


def test_annotations() -> None:
    parsed = parse_formula(r"M_\text{layer} = 34sbh\ \text{bytes} \qquad \text{(Eq. 1)}", NAMES)
    assert (parsed.label, parsed.relation, parsed.unit) == (r"M_\text{layer}", "=", "bytes")
    assert parse_formula(r"N \approx 12lh^2", NAMES).relation == "approx"
    assert parse_formula("4*R", NAMES).names == ("R",)


@pytest.mark.parametrize(("text", "fragment"), [
    ("__import__('os').system('touch /tmp/x')", "unexpected character '_'"),
    ("(lambda: 0)()", "unknown symbol 'lambda'"),
    ("h.__class__", "unexpected character '.'"),
    ("open('x', 'w')", "unknown symbol 'open'"),
    ("exec", "unknown symbol 'exec'"),
    ("s; rm -rf /", "unexpected character ';'"),
    ("(s + b", "unbalanced '('"), ("s + b)", "unbalanced ')'"), (r"\frac{s}{b", "unbalanced"),
    (r"\left[ s \right)", "unbalanced '['"), ("{s", "unbalanced '{'"),
    ("R + Q", "unknown symbol 'Q'"), (r"\sqrt{s}", r"unsupported LaTeX command \sqrt"),
    (r"\input{/etc/passwd}", r"unsupported LaTeX command \input"),
    ("s^{1/2}", "exponents must be integers"), ("s^n", "exponents must be integers"),
    ("2**3**2", "power of a power"), ("s^99", "exponents must be integers"),
    ("(h+a+s+b+l)^8*(h+a+s+b+l)^8", "more than 10,000 terms"),
    ("1/0", "division by zero"), ("h/(h-h)", "division by zero"), ("9" * 31, "more than 30 digits"),
    ("s" * 10_000, "10,000 characters"), ("", "empty formula"), ("sbh +", "ends too early"),
    ("3 widgets", "unknown symbol 'widgets'"), ("s\\", "lone backslash"), ("ĥ", "unexpected character"),
])
def test_refuses_with_one_line(text: str, fragment: str) -> None:
    with pytest.raises(FormulaError) as info:
        parse_formula(text, NAMES)
    message = str(info.value)
    assert fragment in message and "\n" not in message and len(message) < 300


def test_python_syntax_is_strict() -> None:
    assert parse_formula("12*n_layers*d_model**2", NAMES, "python").expr == 12 * l * h**2
    for text in ("sbh", "4RN", r"16\Psi", "2(s)"):
        with pytest.raises(FormulaError):
            parse_formula(text, NAMES, "python")


def test_limits_are_the_documented_ones() -> None:
    assert LIMITS["chars"] == 2000 and parse_formula("s" + "+s" * 250, NAMES).expr == 251 * s
    with pytest.raises(FormulaError, match="tokens"):
        parse_formula("s" + "+s" * 400, NAMES)


def test_symbol_mappings() -> None:
    assert parse_symbols({"R": "l", r"\Psi": "Psi"}) == {"R": l, "Psi": Psi}
    for bad in ("R", "R=__import__('os')", "1x=h", "R=q"):
        with pytest.raises(ValueError):
            parse_symbols(bad)


# Round trip: any expression over our symbols, printed by SymPy (str, latex) or by our printer, reads back.
_atoms = st.sampled_from([a, b, h, l, s, t, V, n_ctx, a_kv, d_h, Psi, sp.Integer(2), sp.Rational(1, 3)])


@st.composite
def expressions(draw, depth: int = 3):
    if depth == 0 or draw(st.booleans()):
        return draw(_atoms)
    left, right = draw(expressions(depth - 1)), draw(expressions(depth - 1))
    op = draw(st.sampled_from(["+", "*", "/", "^"]))
    if op == "^":
        return left ** draw(st.integers(-2, 3))
    return {"+": left + right, "*": left * right, "/": left / right}[op]


@settings(max_examples=40, deadline=None)
@given(expressions())
def test_round_trip(expr: sp.Expr) -> None:
    from memderive.documents.latex import latex

    # Nested powers reach x**27; the reader refuses symbol powers beyond LIMITS["power"] (as it should).
    assume(all(abs(x.exp) <= LIMITS["power"] for x in expr.atoms(sp.Pow) if not x.base.is_Number))
    for text, syntax in ((str(expr), "python"), (sp.latex(expr), "latex"), (latex(expr), "latex")):
        assert sp.cancel(parse_formula(text, OURS, syntax).expr - expr) == 0, text


@pytest.mark.parametrize(("model", "options", "key"), [
    ("gpt3-175b", {"mode": "train", "batch": 1, "seq": 2048, "tp": 8, "sp": True}, "activation_bytes_per_layer"),
    ("gpt3-175b", {"mode": "train", "batch": 1, "seq": 2048}, "activation_bytes"),
    ("llama-2-70b", {}, "parameters"),
    ("gpt2", {"mode": "train", "batch": 1, "seq": 1024, "dp": 8, "zero": 2}, "model_state_bytes"),
])
def test_our_latex_reads_back(model: str, options: dict, key: str) -> None:
    """A closed form as our printer writes it (render/latex.py) is a claim the reader accepts."""
    from memderive.derivations.estimate import estimate

    from memderive.documents.latex import latex
    closed = estimate(model, **options).quantity(key).closed_form()
    assert sp.expand(parse_formula(latex(closed), OURS).expr - closed) == 0


@pytest.mark.parametrize(("text", "expected"), [
    # Python's ** takes its whole exponent: 10**10 is ten billion, not 10**1 * 0 (the LaTeX rule, which read 0)
    ("10**10", 10**10), ("10**64", 10**64), ("2**30", 2**30),  # 2**30 = 1,073,741,824
    ("2*h**8", 2 * h**8), ("h ** 2 * 3", 3 * h**2),  # before: h**8 read as h**1 * 8 only when split; 2*h**8 = 2h^8
    ("s^22", 2 * s**2),  # LaTeX's ^ still takes one character: s^2 * 2
])
def test_python_power_takes_every_digit(text: str, expected: sp.Expr) -> None:
    assert sp.expand(parse_formula(text, NAMES).expr - expected) == 0
    if "^" not in text:
        assert sp.expand(parse_formula(text, NAMES, "python").expr - expected) == 0


@pytest.mark.parametrize(("text", "fragment"), [
    # h**12 is h^12, beyond the symbol-power limit of 8: refused, where it used to read as h**1 * 2 (2*h**12 as 4h)
    ("h**12", "from -8 to 8"), ("2*h**12", "from -8 to 8"),
    ("10**65", "from -64 to 64"),  # numeric powers keep their limit of 64
])
def test_python_power_limits_still_hold(text: str, fragment: str) -> None:
    with pytest.raises(FormulaError, match=fragment):
        parse_formula(text, NAMES)
