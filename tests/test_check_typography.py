"""Typography of real notes (issue 13, item 5): what people type, read as they mean it.

Each case is written the way a public note writes it; errors quote the user's own text.
"""

from __future__ import annotations

import pytest
import sympy as sp

from memderive.derivations.claims.check import OURS, default_symbols, parse_symbols, quantity_spec
from memderive.derivations.claims.parser import FormulaError, parse_formula
from memderive.symbolic.dims_sympy import Psi, a_kv, b, d_h, h, l, s

NAMES = {**default_symbols(quantity_spec("kv_cache.total")),
         **parse_symbols("max_model_len=s, batch=b, hidden_size=h, num_layers=l, dtype=2, d=h")}


@pytest.mark.parametrize(("text", "expected"), [
    ("12l·h^2", 12 * l * h**2),  # unspaced middle dot between letters
    ("2·d·4d", 8 * h**2),  # learntinker.com "The 12 d² rule": 2·d·4d (d = d_model)
    ("b×s×h", b * s * h),  # unspaced multiplication sign
    ("N⋅(2+2+4+4+4)", 16 * sp.Symbol("N")),  # U+22C5 dot operator (torchedup.dev, mixed-precision Adam)
    (r"max\_model\_len \times batch \times hidden\_size \times 2 \times dtype", 4 * s * b * h),  # \_ in names
    (r"\mathrm{max\_model\_len} \cdot 2", 2 * s),  # \mathrm{} around an escaped name
    (r"\operatorname{max\_model\_len}", s),
    (r"\left. 2 s b h \right.", 2 * s * b * h),  # \left. and \right. (invisible delimiters)
    (r"2\,s\;b\!h", 2 * s * b * h),  # thin, thick and negative spaces
    ("−2h", -2 * h),  # Unicode minus
    (r"7\times10^9 \times 4", 28 * 10**9),  # scientific notation (notes.tczhong.com)
    ("1.3×10^12", 13 * 10**11),  # plain-text notes write 10^12 without braces: ten to the twelfth
    ("≈ 4blh", 4 * b * l * h),  # a leading ≈ (table cells)
    (r"28\,\mathrm{GB}", 28 * 10**9),  # a decimal-gigabyte unit scales the number
])
def test_reads_real_typography(text: str, expected: sp.Expr) -> None:
    names = {**NAMES, "N": sp.Symbol("N")}
    assert sp.expand(parse_formula(text, names).expr - expected) == 0


def test_run_together_text_product_hint_names_every_letter() -> None:
    with pytest.raises(FormulaError) as info:
        parse_formula(r"34\,\text{sbh}", OURS)
    message = str(info.value)
    assert "sbh=s*b*h" in message and "sbh=h" not in message


@pytest.mark.parametrize(("text", "rewritten"), [
    # the message quotes what was typed (·, ×, \_), never the form it is read as, and the column points into it
    ("12l·h^2 + q", r"\cdot"),
    ("b×s×h×Q", r"\times"),
    (r"max\_model\_len \times Q", "max_model_len"),
])
def test_errors_quote_the_users_text(text: str, rewritten: str) -> None:
    with pytest.raises(FormulaError) as info:
        parse_formula(text, NAMES)
    message = str(info.value)
    assert text.encode("unicode_escape").decode("ascii") in message
    assert rewritten not in message.replace(text.encode("unicode_escape").decode("ascii"), "")
    column = int(message.split("at column ")[1].split()[0])
    assert text[column - 1] in "qQ"


def test_chains_keep_every_side() -> None:
    parsed = parse_formula(r"M = 8blh(s+n) = 4blh(s+n)", NAMES)
    assert parsed.label == "M" and len(parsed.chain) == 2
    assert [side.relation for side in parsed.chain] == ["=", "="]
    first, last = parsed.chain
    assert sp.expand(first.expr - 2 * last.expr) == 0
    # a first side that is a formula (digits, operators) is checked too, not taken for a label
    parsed = parse_formula(r"2 \times 2 \times hidden\_size = 4 \cdot hidden\_size", NAMES)
    assert parsed.label == "" and len(parsed.chain) == 2
    # approximately-equal steps keep their sign
    parsed = parse_formula(r"P = 2\Psi + 14\Psi \approx 16\Psi", {**NAMES, "Psi": Psi})
    assert [side.relation for side in parsed.chain] == ["=", "approx"]
    assert parse_formula("4 a_{kv} d_h", NAMES).expr == 4 * a_kv * d_h and parse_formula("4h", NAMES).chain == ()
    # a label with digits in its subscript is still a label
    for label in ("M_{fp16}", "P_{7B}", r"\text{KV\_bytes}", "M_2"):
        parsed = parse_formula(f"{label} = 4blh", NAMES)
        assert parsed.chain == () and parsed.expr == 4 * b * l * h, label
