"""DerivationPrinter, text escaping and render settings: small units as parametrized tables."""

from __future__ import annotations

import pytest
import sympy as sp

from memderive.documents.latex import latex, number, printer_class, tex_escape, visible_width
from memderive.documents.units import RenderOptions, scaled_bytes, scaled_count
from memderive.symbolic.dims_sympy import V, a, a_kv, b, d_h, f, h, l, n_ctx, s, t
from memderive.symbolic.simplify import factor_out

SIZES = {b: 1, s: 4096, h: 4096, a: 32, t: 8, l: 32, V: 32000, f: 11008}


@pytest.mark.parametrize(("expr", "expected"), [
    (a_kv * d_h, "a_{kv} d_{h}"),
    (h * n_ctx, "h n_{ctx}"),
    (sp.Integer(16207380480), "16{,}207{,}380{,}480"),
    (sp.Rational(12000, 7), r"\frac{12{,}000}{7}"),
    (2 * b * s * h / t, r"\frac{2 b h s}{t}"),
    (factor_out(34 * s * b * h / t + 5 * a * s**2 * b / t, s * b * h), r"s b h \left(\frac{5 a s}{h t} + \frac{34}{t}\right)"),
    (l * (12 * h**2 + 13 * h), r"l \left(12 h^{2} + 13 h\right)"),
])
def test_symbolic(expr, expected) -> None:
    assert latex(expr) == expected


@pytest.mark.parametrize(("expr", "expected"), [
    (2 * b * s * h / t, r"\frac{2 \cdot 1 \cdot 4{,}096 \cdot 4{,}096}{8}"),
    (4 * h**2, r"4 \cdot 4{,}096^{2}"),
    (V * h + l * (3 * f * h), r"32{,}000 \cdot 4{,}096 + 3 \cdot 11{,}008 \cdot 4{,}096 \cdot 32"),
    (factor_out(34 * s * b * h / t, s * b * h), r"4{,}096 \cdot 1 \cdot 4{,}096 \cdot \frac{34}{8}"),
])
def test_substituted(expr, expected) -> None:
    assert latex(expr, values=SIZES) == expected


def test_long_sums_break_into_aligned_lines() -> None:
    expr = sp.Add(*(k * h**k for k in range(1, 12)))
    lines = latex(expr, line_width=30).split(r" \\ &\quad ")
    assert len(lines) >= 2
    assert all(visible_width(line) <= 32 for line in lines)
    assert latex(expr, line_width=0).count(r"\\") == 0


def test_labels_put_parts_under_braces() -> None:
    part = V * h
    tex = latex(l * h**2 + part, labels={part: "embedding"})
    assert r"\underbrace{V h}_{\text{embedding}}" in tex


def test_unknown_printer_setting_is_refused() -> None:
    with pytest.raises(TypeError):
        printer_class()({"no_such_setting": 1})


@pytest.mark.parametrize(("text", "expected"), [
    ("total_bytes", r"total\_bytes"),
    ("50% & $5", r"50\% \& \$5"),
    ("§4, h >> 1", r"$\S$4, h $>$$>$ 1"),
    ("l × layer", r"l $\times$ layer"),
])
def test_tex_escape(text, expected) -> None:
    assert tex_escape(text) == expected


@pytest.mark.parametrize(("n", "expected"), [(0, "0"), (999, "999"), (4096, "4{,}096"), (-1234567, "-1{,}234{,}567")])
def test_number(n, expected) -> None:
    assert number(n) == expected


@pytest.mark.parametrize(("n", "precision", "expected"), [
    (82_837_504, 2, ("82.84 MB", "79.00 MiB")),
    (16_207_380_480, 1, ("16.2 GB", "15.1 GiB")),
    (512, 2, ("512 B", "512 B")),
])
def test_scaled_bytes(n, precision, expected) -> None:
    assert scaled_bytes(n, precision) == expected


def test_scaled_count() -> None:
    assert scaled_count(6_738_415_616) == "6.74 B"
    assert scaled_count(6_738_415_616, 0) == "7 B"
    assert scaled_count(12) == "12"
    assert scaled_count(842_534_912, words=True) == "842.53 million"


def test_render_options_merge_and_precedence() -> None:
    base = RenderOptions(precision=3)
    assert base.merge(detail="numeric").precision == 3
    assert base.merge(precision=1).merge(precision=4).precision == 4
    assert base.merge(precision=None).precision == 3
    assert RenderOptions().merge(units="IEC").bytes_text(2**30) == "1.00 GiB"
    with pytest.raises(TypeError, match="Unknown setting 'precison'"):
        base.merge(precison=2)
    with pytest.raises(ValueError, match="detail"):
        base.merge(detail="verbose")
    with pytest.raises(ValueError, match="precision"):
        RenderOptions(precision=-1)
    with pytest.raises(AttributeError):
        base.precision = 4  # frozen


def test_powers_of_min_and_max() -> None:
    # LatexPrinter passes the exponent to _print_Min/_print_Max for Min(...)**2.
    assert latex(sp.Min(s, h) ** 2).endswith("^{2}")
    assert latex(sp.Max(s, h) ** 3).endswith("^{3}")
