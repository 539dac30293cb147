"""Window formulas: ``min``/``max`` in claims, the window letters ``w`` and ``l_w``, and verdicts.

The expected verdicts come from counting by hand. Mistral 7B (Jiang et al. 2023) caches, in each of
its l = 32 layers, keys and values (2) of a_kv = 8 heads of d_h = 128 for at most w = 4096 tokens:
``2 * 2 b l a_kv d_h min(s + n, w)`` bytes in bf16 (2 bytes). Gemma 2 9B (Gemma Team 2024)
alternates sliding-window (w = 4096) and global layers: l_w = 21 of l = 42 layers hold
min(s + n, w) tokens, the other 21 hold s + n; a_kv = 8, d_h = 256 (not h/a = 224).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import sympy as sp

from memderive.derivations.claims.check import OURS, CheckResult, ClaimError, check, default_symbols, parse_symbols, quantity_spec
from memderive.derivations.claims.parser import FormulaError, parse_formula
from memderive.commands.cli import main
from memderive.symbolic.dims_sympy import a, a_kv, b, d_h, h, l, l_w, n, s, t, w

KV = {**default_symbols(quantity_spec("kv_cache.total")), **parse_symbols("h_kv=a_kv*d_h")}
CAP = sp.Min(s + n, w)


# -- reading ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "syntax", "expected"), [
    ("4*b*l*h_kv*min(s + n, w)", "python", 4 * b * l * a_kv * d_h * CAP),
    ("4*b*l*h_kv*Min(w, n + s)", "python", 4 * b * l * a_kv * d_h * CAP),  # SymPy's own spelling
    ("max(a, b, s)", "python", sp.Max(a, b, s)),
    (r"2 \cdot 2 \cdot b\, l\, a_{kv} d_h \min(s+n, w)", "auto", 4 * b * l * a_kv * d_h * CAP),
    (r"\min\{s + n, w\}", "auto", CAP),
    (r"\min\left(s + n, w\right)", "auto", CAP),
    (r"\operatorname{min}(s + n, w)", "auto", CAP),
    (r"\mathrm{max}(s, w)", "auto", sp.Max(s, w)),
    (r"b \max\biggl(\frac{h}{a}, \frac{as}{t}\biggr)", "auto", b * sp.Max(h / a, a * s / t)),
    (r"l_w \min(s+n,w) + (l-l_{w})(s+n)", "auto", l_w * CAP + (l - l_w) * (s + n)),
    ("min(min(s, w), n)", "python", sp.Min(s, w, n)),  # nested calls flatten, as in SymPy
    ("2min(s, w)^2", "auto", 2 * sp.Min(s, w) ** 2),
    ("min(s, s + n)", "python", s),  # sizes are positive: SymPy decides this one
    (sp.latex(CAP**2 / a), "auto", CAP**2 / a),  # \frac{\min\left(w, n + s\right)^{2}}{a}
])
def test_reads_min_and_max(text: str, syntax: str, expected: sp.Expr) -> None:
    assert sp.expand(parse_formula(text, KV, syntax).expr - expected) == 0


@pytest.mark.parametrize("expr", [
    4 * b * l * a_kv * d_h * CAP / t, l_w * CAP + (l - l_w) * (s + n), b * sp.Max(h / a, a * s / t),
    sp.Max(2 * a * b * CAP, 2 * b * h * s) / 2, CAP / (a * d_h),
])
def test_min_max_round_trip(expr: sp.Expr) -> None:
    """SymPy's str and LaTeX and our printer's LaTeX of a min/max read back as the same expression."""
    from memderive.documents.latex import latex

    for text, syntax in ((str(expr), "python"), (sp.latex(expr), "latex"), (latex(expr), "latex")):
        assert sp.expand(parse_formula(text, OURS, syntax).expr - expr) == 0, text


@pytest.mark.parametrize("model", ["mistral-7b", "gemma-2-9b"])
def test_our_kv_closed_form_reads_back(model: str) -> None:
    """The KV cache as our printer writes it, min(s + n, w) and l_w included, is a claim we accept."""
    from memderive.derivations.quantities.inference import infer_quantities
    from memderive.derivations.options import Options
    from memderive.derivations.models.presets import preset
    from memderive.documents.latex import latex

    _, found = infer_quantities(preset(model), Options(mode="infer", batch=1, seq=1), keep_symbols=True)
    closed = {q.key: q for q in found}["kv_cache_bytes"].closed_form()
    assert closed.has(sp.Min)
    assert sp.expand(parse_formula(latex(closed), OURS).expr - closed) == 0


@pytest.mark.parametrize(("text", "syntax", "fragment"), [
    ("min()", "auto", "min() has no arguments"), ("max()", "python", "max() has no arguments"),
    ("min(s,)", "auto", "an empty argument in min(...)"), ("min(, s)", "python", "an empty argument in min(...)"),
    ("min(s)", "auto", "min of one argument"), (r"\max\{s\}", "auto", "max of one argument"),
    ("min s", "auto", "min needs its arguments in brackets"), ("min", "python", "min needs its arguments"),
    ("min(s, w", "auto", "unbalanced '(' in min(...)"), (r"\min(s, w]", "auto", "unbalanced '(' in min(...)"),
    ("(s, w)", "auto", "a comma outside min(...) or max(...)"), ("s, w", "auto", "unexpected ','"),
    ("s^min(s, w)", "auto", "exponents must be integers"), (r"\min_{s}(s, w)", "auto", "unexpected character '_'"),
    ("min(s, w, s, w, s, w, s)", "auto", "more than 6 arguments"),
    ("min(min(s, w), min(s, n), min(w, n), b)", "auto", "more than 6 arguments"),
    ("min((s + n + b + h + a + l + t + w)^2, s)", "auto", "24 terms in all"),
    (r"\min(s, w)", "python", r"\min is not Python syntax"), ("min{s, w}", "python", "'{' is not Python syntax"),
    ("2min(s, w)", "python", "missing operator"),
    # the restricted reader's refusals hold inside a call too
    ("min(__import__('os'), s)", "auto", "unexpected character '_'"),
    ("min(s, w).__class__", "auto", "unexpected character '.'"),
    ("min(lambda: 0, s)", "auto", "unknown symbol 'lambda'"),
    ("min(open('x'), s)", "python", "unknown symbol 'open'"),
])
def test_malformed_calls_fail_in_one_line(text: str, syntax: str, fragment: str) -> None:
    with pytest.raises(FormulaError) as info:
        parse_formula(text, KV, syntax)
    message = str(info.value)
    assert fragment in message and "\n" not in message and len(message) < 300, message


def test_window_letters_by_quantity() -> None:
    # w and l_w are the window's letters in KV-cache formulas and the inference total only: a weight or
    # training formula has no window, and n (generated tokens) stays what it was everywhere.
    for name in ("kv_cache.total", "kv_cache.per_token", "kv_cache.per_position", "infer.total"):
        table = default_symbols(quantity_spec(name))
        assert (table["w"], table["l_w"], table["n"]) == (w, l_w, n)
    for name in ("params.total", "weights.total", "activations.per_layer", "model_states.total"):
        assert "w" not in default_symbols(quantity_spec(name)) and "l_w" not in default_symbols(quantity_spec(name))
    assert default_symbols(quantity_spec("params.total"))["s"] != s  # learned positions, unchanged
    with pytest.raises(FormulaError, match="unknown symbol 'w'"):
        check("params.total", "12 l h^2 w")
    with pytest.raises(ClaimError, match="is a function"):
        parse_symbols("min=h")


# -- verdicts --------------------------------------------------------------------------------------

MISTRAL = {"model": "mistral-7b", "kv_dtype": "bf16"}
GEMMA = {"model": "gemma-2-9b"}


@pytest.mark.parametrize(("claim", "options"), [
    # the docstring's count for Mistral, in every accepted spelling and argument order
    (r"2 \cdot 2 \cdot b\, l\, a_{kv} d_h \min(s+n, w)", MISTRAL),
    (r"4 b l a_{kv} d_h \min\{w, n + s\}", MISTRAL),
    (r"4 b l a_{kv} d_h \operatorname{min}(s + n, w) \text{ bytes}", {**MISTRAL, "model": "mistral"}),
    # Gemma 2: 21 sliding layers capped at w, 21 global layers holding every token
    (r"4 b a_{kv} d_h (l_w \min(s+n,w) + (l-l_w)(s+n))", GEMMA),
    (r"2 \cdot 2\, b\, a_{kv} d_h \left(l_{w} \min(s + n, w) + (l - l_{w})(s + n)\right)", GEMMA),
    # with tensor parallelism over t = 2 each GPU keeps a_kv/t = 4 of Mistral's K/V heads
    (r"\frac{4 b l a_{kv} d_h}{t} \min(s+n, w)", {**MISTRAL, "tp": 2}),
])
def test_window_claims_exact(claim: str, options: dict) -> None:
    result = check("kv_cache.total", claim, **options)
    assert result.verdict == "exact", result.explanation
    assert result.holds and result.counterexample is None


def test_python_claim_with_the_authors_letters() -> None:
    # h_kv = a_kv d_h is the K/V width of a layer; 4 = K and V times 2 bytes
    result = check("kv_cache.total", "4*b*l*h_kv*min(s + n, w)", symbols="h_kv=a_kv*d_h", syntax="python",
                   **MISTRAL)
    assert result.verdict == "exact"
    assert check("kv_cache.per_token", "4*l*h_kv", symbols="h_kv=a_kv*d_h", **MISTRAL).verdict == "exact"


def _beyond_window(result: CheckResult) -> None:
    ce = result.counterexample
    assert ce is not None and ce.values["s"] + ce.values["n"] > ce.values["w"], ce


@pytest.mark.parametrize("options", [MISTRAL, GEMMA])
def test_without_min_is_exact_without_the_window(options: dict) -> None:
    # 4 b l a_kv d_h (s + n) counts every token in every layer: right when nothing slides, too much once
    # s + n > w (Mistral: all 32 layers; Gemma 2: the 21 sliding ones)
    result = check("kv_cache.total", r"4 b l a_{kv} d_h (s+n)", **options)
    assert result.verdict == "conditional" and result.holds_under == ("without the sliding window",)
    _beyond_window(result)
    assert result.counterexample.ratio > 1
    # as s -> oo: ours tends to a constant (Mistral) or to (l - l_w)(s + n) of the global layers (Gemma)
    tail = "∞" if options is MISTRAL else "l/(l - l_w)"
    assert f"as s → ∞: claim/ours → {tail}" in result.explanation


def test_a_window_in_every_gemma_layer_is_different() -> None:
    # capping all 42 layers at w undercounts the 21 global layers once s + n > w; no option or switch
    # makes it exact (without the window ours holds s + n in every layer while the claim still caps
    # them), so the verdict is different, with numbers past the window
    result = check("kv_cache.total", r"4 b l a_{kv} d_h \min(s+n, w)", **GEMMA)
    assert result.verdict == "different" and result.holds_under == ()
    _beyond_window(result)
    assert result.counterexample.ratio < 1
    assert "as s → ∞: claim/ours → 0" in result.explanation


def test_forgotten_new_tokens_are_different_at_equal_long_sequences() -> None:
    # min(s, w) leaves out the n generated tokens: wrong while s + n <= w, equal again once s >= w,
    # which is what the long-sequence limit says. Without n anywhere the claim is the prompt's cache (issue 37:
    # n = 0, exact, and said so); with 128 generated tokens it falls short of ours.
    prompt = check("kv_cache.total", r"4 b l a_{kv} d_h \min(s, w)", **MISTRAL)
    assert prompt.verdict == "exact" and any(x.startswith("n = 0 on both sides") for x in prompt.notes)
    result = check("kv_cache.total", r"4 b l a_{kv} d_h \min(s, w)", **MISTRAL, new_tokens=128)
    assert result.verdict != "exact" and not result.holds
    ce = result.counterexample
    assert ce.ratio < 1


def test_counterexample_past_a_wide_window() -> None:
    # a window of 16384 tokens: the usual step sizes (s <= 4096, n <= 128) stay inside it, where the
    # claim without min is right; the counterexample goes to s = 2w
    from memderive.derivations.models.presets import preset

    wide = replace(preset("mistral-7b"), window=16384)
    result = check("kv_cache.total", r"4 b l a_{kv} d_h (s+n)", model=wide)
    assert result.verdict == "conditional"
    _beyond_window(result)
    assert result.counterexample.values["s"] == 2 * 16384


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_window_letters_on_models_without_them() -> None:
    # LLaMA 2 has no window: min(s + n, w) is right only for w >= s + n, a size the model lacks
    result = check("kv_cache.total", r"4 b l a_{kv} d_h \min(s+n, w)", model="llama-2-7b")
    assert result.verdict == "different"
    assert any("has no sliding window" in x for x in result.notes)
    # Mistral slides in every layer: Gemma's formula with l_w = l is Mistral's
    split = r"4 b a_{kv} d_h (l_w \min(s+n,w) + (l-l_w)(s+n))"
    result = check("kv_cache.total", split, **MISTRAL)
    assert result.verdict == "different" and any("map l_w=l" in x for x in result.notes)
    assert check("kv_cache.total", split, symbols="l_w=l", **MISTRAL).verdict == "exact"


def test_leading_order_through_a_fixed_min() -> None:
    # min(s + n, w) does not grow with the model, so it is a fixed factor; a claim with an extra
    # lower-order term (one more layer's worth of one K/V head) keeps our leading part, 4 b a_kv d_h
    # times the layer-tokens: claim/ours -> 1 as l, a_kv grow (l_w with l)
    extra = r"4 b a_{kv} d_h (l_w \min(s+n,w) + (l-l_w)(s+n)) + 4 b d_h \min(s+n, w)"
    result = check("kv_cache.total", extra, **GEMMA)
    assert result.verdict == "leading-order"
    assert any(x.startswith("claim/ours → 1 as a, a_kv, f, h, l, l_w") for x in result.explanation)


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_undecidable_max_says_so() -> None:
    # the inference total's transient buffer is a max of buffers that all grow with the model: which one
    # wins depends on the sizes, so it is decided where the sizes put it (issue 40, item 2), and said so
    result = check("infer.total", r"2 \cdot 7.24 \cdot 10^9 + 4 b l a_{kv} d_h \min(s+n,w)", **MISTRAL)
    assert result.verdict == "different" and result.counterexample is not None
    assert any("each min/max taken at the branch the sizes of mistral-7b (b = 1, n = 0, s = 2,048) put it on" in x
               for x in result.explanation)


# -- command line ----------------------------------------------------------------------------------

def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", "check", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("claim", ["4*b*l*min()", "4 b l a_{kv} d_h min(s+n,)", r"\min(s+n)",
                                   "min(s+n, w", "min(s,w,s,w,s,w,s)"])
def test_cli_malformed_min_exits_2_in_one_line(claim: str) -> None:
    result = _cli("--quantity", "kv_cache.total", "--model", "mistral-7b", "--claim", claim)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("memderive: error: ")


def test_cli_window_claim(capsys: pytest.CaptureFixture) -> None:
    assert main(["check", "--quantity", "kv_cache.total", "--model", "mistral-7b", "--kv-dtype", "bf16",
                 "--claim", "4*b*l*a_kv*d_h*min(s + n, w)", "--syntax", "python"]) == 0
    assert capsys.readouterr().out.startswith("exact (holds)")


def test_markdown_file_with_window_claims(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    notes = tmp_path / "KV.md"
    notes.write_text(
        "<!-- memderive-defaults: model=gemma-2-9b -->\n"
        "<!-- memderive: quantity=kv_cache.total -->\n"
        r"$$M_{KV} = 4 b a_{kv} d_h \left(l_w \min\{s+n, w\} + (l - l_w)(s + n)\right)$$" "\n\n"
        "<!-- memderive: quantity=kv_cache.total model=mistral-7b -->\n"
        r"$4 b l a_{kv} d_h (s + n)$" "\n")
    assert main(["check", "--file", str(notes)]) == 1
    lines = [x for x in capsys.readouterr().out.splitlines() if not x.startswith(" ")][:-1]  # the file's summary last
    assert [x.split(": ", 1)[1].split(" ")[0] for x in lines] == ["exact", "conditional"]


def test_per_position_refused_for_mixed_layer_groups(capsys: pytest.CaptureFixture) -> None:
    """Gemma 2 caches min(s + n, w) positions in its l_w sliding layers and s + n in the others, so the
    whole cache over s + n is 4 b a_kv d_h (l_w min(s+n, w)/(s+n) + l - l_w): no per-position size.
    It used to be checked as if it were one; now it is refused in one line."""
    from memderive.commands.cli import main

    with pytest.raises(ClaimError, match="not defined for gemma-2-9b: its layer groups cache different lengths"):
        check("kv_cache.per_position", r"4 b a_{kv} d_h l", **GEMMA)
    assert main(["check", "--quantity", "kv_cache.per_position", "--model", "gemma-2-9b", "--claim", "4blh"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "layer groups" in err
    # every layer sliding (Mistral) or none: one length, per position as before (4 b l a_kv d_h in fp16)
    assert check("kv_cache.per_position", r"4 b l a_{kv} d_h", model="mistral-7b", kv_dtype="fp16").verdict == "exact"
