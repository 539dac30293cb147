"""LaTeX for derivations: a SymPy ``LatexPrinter`` subclass (``printer_class``) and text escaping.

Symbols print in the notation of ``symbolic.dims`` (``a_{kv}``, ``d_{h}``, ``n_{ctx}``), integers with
thousands separators that survive math mode (``4{,}096``). With ``values`` the same tree prints with the
model's sizes in place of the symbols (handcalcs' substituted line); a factored closed form such as
``factor_out(..., s*b*h)`` prints its monomial first, in the paper's letter order.

>>> from memderive.symbolic.dims import a_kv, b, d_h, h, s, t
>>> latex(2 * b * s * a_kv * d_h)
'2 a_{kv} b d_{h} s'
>>> latex(2 * b * s * h / t, values={b: 1, s: 4096, h: 4096, t: 8})
'\\\\frac{2 \\\\cdot 1 \\\\cdot 4{,}096 \\\\cdot 4{,}096}{8}'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from memderive.symbolic import dims
from memderive.symbolic.expr import Expr, to_sympy
from memderive.symbolic.formula import Citation
from memderive.symbolic.tensor import Tensor
from memderive.derivations.references import cite
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")
sympy_latex = lazy("sympy.printing.latex")

__all__ = ["printer_class", "DerivationMethods", "latex", "number", "tex_escape", "visible_width"]

#: Letters of a factored monomial in the order the literature writes them (Korthikanti et al.: ``sbh``).
MONOMIAL_ORDER = ("s", "b", "h")
BREAK = r" \\ &\quad "


def number(n: int) -> str:
    """An integer for math mode: ``16{,}207{,}380{,}480``."""
    return f"{n:,}".replace(",", "{,}")


@cache
def printer_class() -> type:
    """``DerivationPrinter``: SymPy's ``LatexPrinter`` with ``DerivationMethods``, the class built on first use
    (SymPy is imported then, not when this module is)."""
    base = sympy_latex.LatexPrinter
    return type("DerivationPrinter", (DerivationMethods, base),
                {"__doc__": DerivationMethods.__doc__, "__module__": __name__,
                 "_default_settings": {**base._default_settings, **DerivationMethods.extra_settings}})


class DerivationMethods:
    """``LatexPrinter`` with dimension notation, grouped digits, substitution and line breaking.

    Extra settings (unknown ones are refused by SymPy's ``Printer``):
        values: ``{symbol: int}``; symbols print as these numbers, products with ``\\cdot``.
        line_width: a top-level sum wider than this (visible characters) is broken into lines joined
            by ``\\\\ &\\quad`` for an ``aligned`` environment; 0 never breaks.
        labels: ``{subexpression: name}``; each such part prints once under an ``\\underbrace``.
    """

    printmethod = "_derivation_latex"
    extra_settings: dict[str, Any] = {"values": None, "line_width": 0, "labels": None}

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        settings = dict(settings or {})
        for key in ("values", "labels"):  # engine expressions (symbolic.expr) as SymPy keys
            if settings.get(key):
                settings[key] = {to_sympy(k): v for k, v in settings[key].items()}
        if settings.get("values") and settings.get("mul_symbol") is None:
            settings["mul_symbol"] = "dot"
        super().__init__(settings)
        self._labels = dict(self._settings["labels"] or {})  # each label is used once, then dropped
        self._braced: set[sp.Basic] = set()

    def _print(self, expr: Any, **kwargs: Any) -> str:
        if isinstance(expr, Expr):
            expr = to_sympy(expr)
        label = self._labels.pop(expr, None) if self._labels and isinstance(expr, sp.Basic) else None
        tex = super()._print(expr, **kwargs)
        if label is None:
            return tex
        self._braced.add(expr)
        return rf"\underbrace{{{tex}}}_{{\text{{{tex_escape(label)}}}}}"

    def _needs_add_brackets(self, expr: Any) -> bool:
        return expr not in self._braced and super()._needs_add_brackets(expr)

    def doprint(self, expr: Any) -> str:
        width = self._settings["line_width"]
        if not width or not isinstance(expr, (sp.Add, sp.Max, sp.Min)):
            return super().doprint(expr)
        return BREAK.join(_fill(self._pieces(expr), width))

    def _pieces(self, expr: sp.Expr) -> list[str]:
        """A sum (or max/min) as the pieces a line may break between; wide terms are opened up too."""
        if isinstance(expr, (sp.Max, sp.Min)):
            ordered = _ordered_args(expr)
            args = [self._print(arg) for arg in ordered]
            open_, close = _delimiters(expr, args)
            pieces = []
            for i, (arg, tex) in enumerate(zip(ordered, args)):
                wide = visible_width(tex) > self._settings["line_width"] and isinstance(arg, (sp.Add, sp.Max, sp.Min))
                inner = self._pieces(arg) if wide else [tex]  # an argument wider than a line breaks too
                inner[-1] += "," if i < len(args) - 1 else ""
                pieces += inner
            pieces[0], pieces[-1] = open_ + pieces[0], pieces[-1] + close
            return pieces
        pieces: list[str] = []
        for i, term in enumerate(self._as_ordered_terms(expr, order=None)):
            sign = "" if i == 0 else "+ "
            if i and term.could_extract_minus_sign():
                sign, term = "- ", -term
            pieces += self._term_pieces(term, sign)
        return pieces

    def _term_pieces(self, term: sp.Expr, sign: str) -> list[str]:
        """One term of a sum; wider than a line, a bracketed sum, a product with one or a max is split."""
        labelled = term in self._labels
        if labelled and isinstance(term, (sp.Max, sp.Min)) and visible_width(self._print_Max(term)) > \
                self._settings["line_width"]:
            labelled = not self._labels.pop(term)  # an underbrace cannot break: a wide max goes unlabelled
        piece = self._print(term)
        bracket = self._needs_add_brackets(term)
        if labelled or visible_width(piece) <= self._settings["line_width"]:
            return [sign + (rf"\left({piece}\right)" if bracket else piece)]
        if isinstance(term, (sp.Max, sp.Min)):
            inner = self._pieces(term)
            return [sign + inner[0], *inner[1:]]
        prefix, inner_expr = "", term if term.is_Add else None
        if term.is_Mul and sum(f.is_Add for f in term.args) == 1:
            inner_expr = next(f for f in term.args if f.is_Add)
            rest = [f for f in term.args if f is not inner_expr]
            joiner = self._settings["mul_symbol_latex"]
            prefix = joiner.join(self._print(f) for f in rest) + (joiner if joiner.strip() else " ")
        if inner_expr is None:
            return [sign + (rf"\left({piece}\right)" if bracket else piece)]
        inner = self._pieces(inner_expr)
        size = "bigg" if any(r"\frac" in x for x in inner) else "big"
        inner[0], inner[-1] = rf"{sign}{prefix}\{size}l({inner[0]}", rf"{inner[-1]}\{size}r)"
        return inner

    def _print_Max(self, expr: sp.Max, exp: str | None = None) -> str:
        args = [self._print(arg) for arg in _ordered_args(expr)]
        open_, close = _delimiters(expr, args)
        text = open_ + ", ".join(args) + close  # \bigl( ... \bigr), unlike \left( ... \right), may break inline
        return rf"\left({text}\right)^{{{exp}}}" if exp is not None else text

    _print_Min = _print_Max

    def _print_int(self, expr: int) -> str:
        return number(int(expr))

    def _print_Rational(self, expr: sp.Rational) -> str:
        if expr.q == 1:
            return self._print_int(expr.p)
        sign = "- " if expr.p < 0 else ""
        return rf"{sign}\frac{{{number(abs(expr.p))}}}{{{number(expr.q)}}}"

    def _print_Symbol(self, expr: sp.Symbol, style: str = "plain") -> str:
        values = self._settings["values"]
        if values and expr in values:
            return self._print_int(values[expr])
        try:
            return dims.by_name(expr.name).latex
        except KeyError:
            return super()._print_Symbol(expr, style)

    def _print_Mul(self, expr: sp.Mul) -> str:
        # LatexPrinter also sends negative powers (1/a) here: only a real Mul has factors to keep.
        if not isinstance(expr, sp.Mul) or sp.Mul(*expr.args).args == expr.args or expr.args[0].is_Number:
            return super()._print_Mul(expr)
        # An unevaluated product such as factor_out's ``sbh * (34/t + 5as/(ht))``: keep its factors.
        # Adjacent powers of symbols print as one product (l and 1/p as l/p), sums in brackets.
        parts: list[str] = []
        pending: list[sp.Expr] = []

        def flush() -> None:
            if pending:
                product = sp.Mul(*pending)
                parts.append(self._print_monomial(product) if _is_monomial(product) else self._print(product))
                pending.clear()

        for factor in expr.args:
            if factor.is_Symbol or (factor.is_Pow and factor.base.is_Symbol) or _is_monomial(factor):
                pending.append(factor)
                continue
            flush()
            parts.append(rf"\left({self._print(factor)}\right)" if factor.is_Add else self._print(factor))
        flush()
        joiner = self._settings["mul_symbol_latex"]
        return joiner.join(parts) if joiner.strip() else " ".join(parts)

    def _print_monomial(self, expr: sp.Expr) -> str:
        def key(symbol: sp.Symbol) -> tuple[int, str]:
            name = symbol.name
            return (MONOMIAL_ORDER.index(name) if name in MONOMIAL_ORDER else len(MONOMIAL_ORDER), name)

        powers = expr.as_powers_dict()
        parts = [self._print(sp.Pow(base, powers[base]) if powers[base] != 1 else base)
                 for base in sorted(powers, key=key)]
        return self._settings["mul_symbol_latex"].join(parts)

    def _print_Tensor(self, tensor: Tensor) -> str:
        shape = ", ".join(self._print(axis) for axis in tensor.shape)
        return rf"\texttt{{{tex_escape(tensor.name)}}}\,[{shape}]"

    def _print_Citation(self, citation: Citation) -> str:
        return rf"\text{{{tex_escape(cite(citation))}}}"


def _fill(pieces: list[str], width: int) -> list[str]:
    """Greedy lines of at most ``width`` visible characters (a piece wider than that gets a line alone)."""
    lines: list[str] = []
    for piece in pieces:
        if lines and visible_width(f"{lines[-1]} {piece}") <= width:
            lines[-1] += " " + piece
        else:
            lines.append(piece)
    return lines


def _delimiters(expr: sp.Expr, args: list[str]) -> tuple[str, str]:
    size = "bigg" if any(r"\frac" in arg for arg in args) else "big"
    name = r"\max" if isinstance(expr, sp.Max) else r"\min"
    return rf"{name}\{size}l(", rf"\{size}r)"


def _ordered_args(expr: sp.Expr) -> list[sp.Expr]:
    return sorted(expr.args, key=sp.default_sort_key)


def _is_monomial(expr: sp.Expr) -> bool:
    """A product of symbols to positive powers (``s b h``), printed in the literature's letter order."""
    return expr.is_Mul and all(f.is_Symbol or (f.is_Pow and f.base.is_Symbol and f.exp > 0) for f in expr.args)


def latex(expr: Any, **settings: Any) -> str:
    """``expr`` as LaTeX math through ``DerivationPrinter`` (``printer_class``)."""
    return printer_class()(settings).doprint(expr)


_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
            "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "§": r"$\S$", "×": r"$\times$",
            "<": r"$<$", ">": r"$>$", "|": r"$|$",
            "≈": r"$\approx$", "→": r"$\to$", "—": "---", "–": "--", "≫": r"$\gg$", "·": r"$\cdot$",
            "≤": r"$\le$", "≥": r"$\ge$", "²": r"\textsuperscript{2}", "∞": r"$\infty$", "Ψ": r"$\Psi$",
            "Φ": r"$\Phi$", "⋅": r"$\cdot$", "−": "$-$"}
_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in _ESCAPES))


def tex_escape(text: str) -> str:
    """Plain text for a LaTeX document: special characters escaped, a few symbols made math.

    >>> print(tex_escape("layer/attn_core: 5% of h >> 1, §4"))
    layer/attn\\_core: 5\\% of h $>$$>$ 1, $\\S$4
    """
    return _ESCAPE_RE.sub(lambda m: _ESCAPES[m.group(0)], text)


def visible_width(tex: str) -> int:
    """Roughly how many characters wide ``tex`` typesets (fractions count their wider part).

    >>> visible_width(r"\\frac{5 \\cdot 32}{8} + 4{,}096^{2}")
    11
    """
    width, i = 0, 0
    while i < len(tex):
        if tex.startswith(r"\frac{", i):
            num, i = _group(tex, i + 5)
            den, i = _group(tex, i)
            width += max(visible_width(num), visible_width(den))
            continue
        match = re.match(r"\\(left|right)|\\[a-zA-Z]+|\\[ ,;!]|[{}^_ ]", tex[i:])
        if match:
            word = match.group(0)
            width += 1 if word[0] == "\\" and word[1:].isalpha() and word not in (r"\left", r"\right") else 0
            i += len(word)
            continue
        width += 1
        i += 1
    return width


def _group(tex: str, start: int) -> tuple[str, int]:
    """The braced group opening at ``tex[start]`` and the index after it."""
    depth = 0
    for j in range(start, len(tex)):
        depth += {"{": 1, "}": -1}.get(tex[j], 0)
        if depth == 0:
            return tex[start + 1:j], j + 1
    return tex[start + 1:], len(tex)
