"""A restricted reader for formulas people write in notes: Python syntax or LaTeX, and figures as printed.

The input is untrusted. Nothing here calls ``eval`` or ``sympify`` on it: the text is cut into tokens
against a whitelist (``derivations.claims.lexer``), names are looked up in a table given by the caller
(the author's letters mapped onto ours), and SymPy expressions are built from those tokens only.

Accepted: numbers as printed (``39,976,960``, ``8e9``, ``12.9B``, ``320 MB``, ``0.5898%``, ``70 亿``; see
``derivations.claims.figures``), names from the table, ``+ - * / // ^ **``, parentheses ``( ) [ ] { }``;
in LaTeX ``\\frac{}{}``, ``\\cdot``, ``\\times``, ``\\left( \\right)``, spacing commands, Greek letters
(``\\Psi``), subscripts (``d_h``, ``a_{kv}``, ``n_{\\text{layers}}``), a superscript that is part of a name
(``d_h^R``), a trailing unit (``\\text{bytes}``); ``min``/``max`` of two or more arguments; code's
``int(...)``, ``math.ceil(...)``, ``round``, ``\\lceil..\\rceil``, ``sizeof(FP16)``, dotted names and
``#`` comments. Juxtaposed letters multiply (``sbh`` is ``s*b*h``) and juxtaposition binds tighter than
``/``: ``5as/ht`` reads as ``(5as)/(ht)``. A name the table knows as a whole (``n_layers``) is read whole
before it is read letter by letter. A label before ``=`` or ``:`` is kept, never parsed (``trainable%:``
makes the figure a percentage). A formula never silently reads as 0.

Each side also carries the interval its printed figures stand for (``bounds``): ``12.9\\times10^9`` is
12.85-12.95 x 10^9, computed through the arithmetic; and what was read other than as typed
(``readings``), for the report to echo.

>>> from memderive.symbolic.dims_sympy import a, b, h, s
>>> names = {"s": s, "b": b, "h": h, "a": a}
>>> parse_formula(r"M = sbh\\left(34 + \\frac{5as}{h}\\right)", names).expr
b*h*s*(5*a*s/h + 34)
>>> parse_formula(r"b \\min(s, a)", names).expr
b*Min(a, s)
>>> parse_formula("46.7B", {}).bounds
(46650000000, 46750000000)
>>> parse_formula("__import__('os')", names)
Traceback (most recent call last):
...
memderive.derivations.claims.lexer.FormulaError: unexpected character '_' at column 1 in "__import__('os')"
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from memderive.derivations.claims.figures import Figure
from memderive.derivations.claims.lexer import (LIMITS, UNIT_SCALES, FormulaError, Lexer, Source, Tok, clean,
                                                normalize_name)
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["FormulaError", "ParsedFormula", "parse_formula", "normalize_name", "LIMITS"]

_RELATION = re.compile(r"\\approx|\\simeq|\\sim(?![A-Za-z])|\\equiv|<=|>=|≤|≥|\\(?:leq?|geq?|lt|gt)(?![A-Za-z])|<|>|="
                       r"|(?:(?<=\s)|^)~(?=[\s\d.])")
_BELOW = ("<=", "≤", "\\le", "\\leq", "<", "\\lt")
_ABOVE = (">=", "≥", "\\ge", "\\geq", ">", "\\gt")
#: An inequality or an approximation in words before a figure: "less than 400 MB", "up to 1.7 GB", "about 7B".
_BOUND_WORDS = re.compile(r"\s*(?:(?P<below>less than|fewer than|smaller than|lower than|under|below|up to|at most|"
                          r"no more than|not more than|within)|(?P<above>more than|greater than|larger than|over|above|"
                          r"at least|no less than|not less than|in excess of|exceeds?)|(?P<approx>about|around|roughly|"
                          r"approximately|approx\.?|nearly|almost|some))\s+(?=[\d.$\\(~])", re.IGNORECASE)
#: ``N(llama2-7b) =``: a left-hand side named with a model (or a size) in parentheses is a label.
_MODEL_LABEL = re.compile(r"\s*(?:\\[A-Za-z]+\{[^{}]*\}|\\?[A-Za-z]+)(?:_(?:\{[^{}]*\}|[A-Za-z0-9]+))?\s*"
                          r"\(\s*(?P<arg>[A-Za-z0-9][\w.\- ]*?)\s*\)\s*")
_OPEN = {"(": ")", "[": "]", "{": "}", r"\{": r"\}"}
#: ``trainable params:``, ``Number of Parameters (Non-Embedding):``, ``trainable%:``: a label before a colon
_COLON_LABEL = re.compile(r"\s*([A-Za-z\u4e00-\u9fff][^:=$\\]{0,79}?)\s*:(?![=:])\s*")
_UNIT_RANK = ("bytes", "bits", "FLOPs", "elements", "ratio")


@dataclass(frozen=True, slots=True)
class ParsedFormula:
    """A formula as read: ``expr`` in our symbols, the author's names used, and annotations.

    ``label`` is the left-hand side (``M`` in ``M = 34sbh``), kept as text and never parsed;
    ``relation`` the sign before the formula (``=`` or ``approx``); ``unit`` a trailing
    ``\\text{bytes}`` or a unit after a figure (``bytes``, ``bits``, ``elements``, ``ratio``).
    ``bounds``: the interval a claim that is a number stands for (its figures rounded as printed);
    ``shape``: how a lone figure was printed (``(10**9, "B")``) and ``figure`` the figure itself.
    """

    text: str
    expr: sp.Expr
    names: tuple[str, ...]
    label: str = ""
    relation: str = ""
    unit: str | None = None
    chain: tuple[ParsedFormula, ...] = ()  # every side of ``M = A = B`` (A and B), when there are two or more
    bounds: tuple[sp.Rational, sp.Rational] | None = None
    readings: tuple[str, ...] = ()
    shape: tuple[object, str] | None = None
    figure: Figure | None = None
    per: tuple[str, ...] = ()  # a figure for one item each: ``5.3GB / sequence`` (token, sequence, layer, GPU, ...)


@dataclass(frozen=True, slots=True)
class _Val:
    """An expression with bounds on its expanded size (terms) and total degree; for a number, the
    interval its printed figures stand for (``lo``, ``hi``), and whether it is a lone literal or a
    power of ten (scientific notation: the mantissa's last digit is its precision)."""

    expr: sp.Expr
    terms: int
    degree: int
    lo: sp.Rational | None = None
    hi: sp.Rational | None = None
    literal: Figure | None = None
    ten: int | None = None


def _leaf(expr: sp.Expr) -> _Val:
    monomials = sp.Add.make_args(sp.expand(expr))
    degree = max((sum(abs(int(e)) for base, e in m.as_powers_dict().items() if base.is_Symbol and e.is_Integer)
                  for m in monomials), default=0)
    return _Val(expr, len(monomials), degree)


def _number(value: sp.Rational, half: object = 0, figure: Figure | None = None) -> _Val:
    h = sp.Rational(half) if half else sp.Integer(0)
    return _Val(value, 1, 0, value - h, value + h, figure)


def _span(a: _Val, b: _Val, op) -> tuple[sp.Rational | None, sp.Rational | None]:
    """The interval of ``a op b`` when both are numbers (corners: the operations are monotone
    in each argument on an interval that keeps its sign)."""
    if a.lo is None or b.lo is None:
        return None, None
    corners = [op(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return min(corners), max(corners)


def _digits(number: sp.Rational) -> float:
    """Decimal digits of a rational's numerator and denominator together (``log10``, without printing it)."""
    return sum(math.log10(abs(int(x))) for x in (number.p, number.q) if x)


def _bounded(expr: sp.Expr, lexer: Lexer) -> None:
    """The checker gives up at once on a claim whose expansion would take it long to judge."""
    terms = sp.Add.make_args(sp.expand(expr))
    if len(terms) > LIMITS["expanded_terms"]:
        raise lexer.fail(f"gives up: the claim expands to {len(terms):,} terms, more than the "
                         f"{LIMITS['expanded_terms']} a verdict is computed for; that is not a memory formula", -1)
    for number in expr.atoms(sp.Rational):
        if _digits(number) > LIMITS["result_digits"]:
            raise lexer.fail(f"gives up: a number of more than {LIMITS['result_digits']} digits", -1)


class _Parser:
    """Recursive descent over tokens; juxtaposition binds tighter than ``*`` and ``/``."""

    STARTS = ("num", "name", "func", "call", "open", "frac")

    def __init__(self, lexer: Lexer, tokens: list[Tok]) -> None:
        self.lexer, self.tokens, self.k, self.depth = lexer, tokens, 0, 0
        self.arguments, self.argument_terms = 0, 0  # of min/max, over the formula (LIMITS)

    @property
    def tok(self) -> Tok:
        return self.tokens[self.k]

    def take(self) -> Tok:
        tok = self.tokens[self.k]
        self.k += 1
        return tok

    def fail(self, message: str, tok: Tok | None = None) -> FormulaError:
        return self.lexer.fail(message, (tok or self.tok).col)

    def check(self, val: _Val) -> _Val:
        if val.terms > LIMITS["terms"] or val.degree > LIMITS["degree"]:
            raise self.lexer.fail(f"the formula expands to more than {LIMITS['terms']:,} terms or degree "
                                  f"{LIMITS['degree']}; that is not a memory formula", -1)
        if val.expr.has(sp.zoo, sp.nan, sp.oo, -sp.oo):
            raise self.lexer.fail("division by zero", -1)
        return val

    def formula(self) -> tuple[_Val, str | None]:
        if self.tok.kind == "end":
            raise self.fail("empty formula")
        val = self.expr()
        unit = None
        while self.tok.kind in ("unit", "note"):
            tok = self.take()
            unit = tok.value if tok.kind == "unit" else unit
            if tok.text in UNIT_SCALES:
                val = self.scaled(val, UNIT_SCALES[tok.text], tok.text)
        if self.tok.kind != "end":
            tok = self.tok
            what = "unbalanced " + repr(tok.text) if tok.kind == "close" else f"unexpected {tok.text!r}"
            raise self.fail(what)
        return val, unit

    @staticmethod
    def scaled(val: _Val, scale: int, unit: str) -> _Val:
        """A trailing byte unit (``28\\,\\mathrm{GB}``): a lone figure is rounded to its last digit in it."""
        if val.literal is not None and val.literal.half == 0:
            figure = val.literal.scaled(scale, f"{val.literal.written} {unit}")
            return _number(val.expr * scale, figure.half, figure)
        factor = sp.Integer(scale)
        return replace(val, expr=val.expr * factor, lo=None if val.lo is None else val.lo * factor,
                       hi=None if val.hi is None else val.hi * factor, literal=None)

    def expr(self) -> _Val:
        self.depth += 1
        if self.depth > LIMITS["depth"]:
            raise self.fail(f"nested deeper than {LIMITS['depth']} levels")
        val = self.term()
        while self.tok.kind == "op" and self.tok.text in "+-":
            sign = -1 if self.take().text == "-" else 1
            rhs = self.term()
            lo, hi = _span(val, rhs, (lambda x, y: x + y) if sign > 0 else (lambda x, y: x - y))
            val = self.check(_Val(val.expr + sign * rhs.expr, val.terms + rhs.terms, max(val.degree, rhs.degree),
                                  lo, hi))
        self.depth -= 1
        return val

    def term(self) -> _Val:
        val = self.implicit()
        while self.tok.kind == "op" and self.tok.text in ("*", "/", "//"):
            op = self.take().text
            rhs = self.implicit()
            val = self.check(self.product(val, rhs, op))
        return val

    def product(self, val: _Val, rhs: _Val, op: str) -> _Val:
        """``val * rhs``, ``val / rhs`` or ``val // rhs`` with the interval of numbers; a literal times a
        power of ten is scientific notation (``12.9\\times10^9``, ``7 \\times 10^9``: 6.5-7.5 x 10^9)."""
        if op == "*":
            if val.literal is not None and rhs.ten is not None and val.literal.half == 0:
                figure = val.literal.scaled(10**rhs.ten, f"{val.literal.written}e{rhs.ten}")
                return _number(val.expr * rhs.expr, figure.half, figure)
            lo, hi = _span(val, rhs, lambda x, y: x * y)
            return _Val(val.expr * rhs.expr, val.terms * rhs.terms, val.degree + rhs.degree, lo, hi)
        if rhs.expr == 0:
            raise self.lexer.fail("division by zero", -1)
        if op == "//" and val.expr.is_Number and rhs.expr.is_Number:
            return _number(sp.floor(val.expr / rhs.expr))
        if op == "//":
            self.lexer.readings.append("read a // b as a / b (exact when b divides a, as sizes of a model do)")
        lo, hi = (None, None) if rhs.lo is not None and rhs.lo <= 0 <= rhs.hi else _span(val, rhs, lambda x, y: x / y)
        return _Val(val.expr / rhs.expr, val.terms * rhs.terms, val.degree + rhs.degree, lo, hi)

    def implicit(self) -> _Val:
        if self.tok.kind == "op" and self.tok.text in "+-":
            negative = self.take().text == "-"
            val = self.implicit()
            return replace(val, expr=-val.expr, lo=None if val.lo is None else -val.hi,
                           hi=None if val.hi is None else -val.lo, literal=None) if negative else val
        val = self.power()
        while self.tok.kind in self.STARTS:
            if self.lexer.strict:
                raise self.fail(f"missing operator before {self.tok.text!r} (write * in Python syntax)")
            rhs = self.power()
            val = self.check(self.product(val, rhs, "*"))
        return val

    def power(self) -> _Val:
        base = self.atom()
        if not (self.tok.kind == "op" and self.tok.text in ("^", "**")):
            return base
        tok = self.take()
        negative = self.tok.kind == "op" and self.tok.text == "-"
        if negative:
            self.take()
        if tok.text == "^" and not self.lexer.strict and not base.expr.is_Number:
            # LaTeX: s^22 is s^2 times 2 (Python's s**22 is s to the 22nd); a number to a power of
            # several digits (10^12, 2^20) is never read as 2^2 times 0
            self.split_digits()
        exponent = self.atom(exponent=True).expr * (-1 if negative else 1)
        limit = LIMITS["numeric_power"] if base.expr.is_Number else LIMITS["power"]
        if not (exponent.is_Integer and abs(int(exponent)) <= limit):
            raise self.fail(f"exponents must be integers from -{limit} to {limit}", tok)
        if base.expr.is_Rational and _digits(base.expr) * abs(int(exponent)) > LIMITS["result_digits"]:
            raise self.fail(f"gives up: the power is a number of more than {LIMITS['result_digits']} digits", tok)
        if self.tok.kind == "op" and self.tok.text in ("^", "**"):
            raise self.fail("a power of a power needs parentheses")
        n = int(exponent)
        if base.expr.is_Number:
            value = base.expr ** exponent
            corners = sorted([base.lo ** n, base.hi ** n]) if base.lo and base.hi else [value, value]
            ten = n if base.expr == 10 and base.lo == base.hi else None
            return self.check(_Val(value, 1, 0, corners[0], corners[1], None, ten))
        return self.check(_Val(base.expr ** exponent, base.terms ** abs(n), base.degree * abs(n)))

    def atom(self, exponent: bool = False) -> _Val:
        tok = self.take()
        if tok.kind == "num":
            return _number(tok.value, tok.half, tok.figure)
        if tok.kind == "name" and not exponent:
            return self.check(_leaf(tok.value))
        if tok.kind == "open":
            val = self.expr()
            close = self.take()
            if close.kind == "comma":
                raise self.fail("a comma outside min(...) or max(...)", close)
            if close.kind != "close" or close.text != _OPEN[tok.text]:
                raise self.fail(f"unbalanced {tok.text!r} (closed by {close.text or 'the end'!r})", tok)
            return replace(val, literal=None)
        if tok.kind == "func" and not exponent:
            return self.call(tok)
        if tok.kind == "call" and not exponent:
            return self.unary(tok)
        if tok.kind == "frac" and not exponent:
            num, den = self.argument(), self.argument()
            return self.check(self.product(num, den, "/"))
        if tok.kind == "end":
            raise self.fail("the formula ends too early", tok)
        if exponent:
            raise self.fail("exponents must be integers", tok)
        raise self.fail(f"unexpected {tok.text!r}", tok)

    def unary(self, func: Tok) -> _Val:
        """``int(x)``, ``math.ceil(x)``, ``round(x)``: exact on numbers; on a formula of sizes, the
        formula itself (a rounding to a whole number, at most one unit), said in the readings."""
        if self.tok.kind != "open":
            raise self.fail(f"{func.text} needs its argument in brackets", func)
        val = self.atom()
        if val.expr.is_Number:
            how = {"floor": sp.floor, "ceil": sp.ceiling, "round": lambda x: sp.floor(x + sp.Rational(1, 2))}
            return _number(how.get(func.value, lambda x: x)(val.expr))
        self.lexer.readings.append(f"read {func.text}(...) as its argument: a rounding to a whole number, at most "
                                   "one unit")
        return replace(val, literal=None)

    def call(self, func: Tok) -> _Val:
        """``min(x, y, ...)`` or ``max(...)``: two or more arguments in brackets, comma-separated."""
        name, usage = func.text, f"e.g. {func.text}(s + n, w)"
        open_ = self.take()
        if open_.kind != "open":
            raise self.fail(f"{name} needs its arguments in brackets, {usage}", open_)
        args: list[_Val] = []
        while True:
            if self.tok.kind == "end":
                raise self.fail("the formula ends too early")
            if self.tok.kind in ("comma", "close"):
                empty = args or self.tok.kind == "comma"
                what = f"an empty argument in {name}(...)" if empty else f"{name}() has no arguments"
                raise self.fail(f"{what}; {name} takes two or more arguments, {usage}")
            args.append(self.expr())
            sep = self.take()
            if sep.kind == "close" and sep.text == _OPEN[open_.text]:
                break
            if sep.kind != "comma":
                found = sep.text or "the end"
                raise self.fail(f"unbalanced {open_.text!r} in {name}(...) (closed by {found!r})", open_)
        if len(args) < 2:
            raise self.fail(f"{name} of one argument; {name} takes two or more, {usage}", func)
        self.arguments += len(args)
        self.argument_terms += sum(x.terms for x in args)
        if self.arguments > LIMITS["arguments"] or self.argument_terms > LIMITS["argument_terms"]:
            raise self.lexer.fail(f"min/max with more than {LIMITS['arguments']} arguments or "
                                  f"{LIMITS['argument_terms']} terms in all; that is not a memory formula", -1)
        # Expanded arguments: the SymPy functions that later expand a product leave Min/Max as built.
        expr = func.value(*(sp.expand(x.expr) for x in args))
        if all(x.lo is not None for x in args):
            pick = min if name == "min" else max
            return self.check(_Val(expr, 1, 0, pick(x.lo for x in args), pick(x.hi for x in args)))
        return self.check(_Val(expr, 1, max(x.degree for x in args)))

    def split_digits(self) -> None:
        """A LaTeX argument without braces is one character: ``\\frac12``, ``s^22``."""
        tok = self.tok
        if tok.kind == "num" and len(tok.text) > 1 and tok.text.isdigit():
            self.tokens[self.k:self.k + 1] = [Tok("num", tok.text[0], tok.col, sp.Integer(tok.text[0])),
                                              Tok("num", tok.text[1:], tok.col + 1, sp.Integer(tok.text[1:]))]

    def argument(self) -> _Val:
        """An argument of ``\\frac``: a braced group, or a single digit or name (``\\frac12``)."""
        tok = self.tok
        if tok.kind == "open" and tok.text == "{":
            return self.atom()
        self.split_digits()
        if self.tok.kind in ("num", "name"):
            return self.atom()
        raise self.fail("\\frac needs two arguments in braces")


def _sides(text: str) -> list[tuple[int, str, str]]:
    """``M = A ≈ B`` -> ``[(0, "", "M "), (k, "=", " A "), (j, "approx", " B")]``: each side with its
    offset in ``text`` and the relation sign before it; ``= ~46B`` is one relation, an approximation."""
    out, start, sign = [], 0, ""
    for match in _RELATION.finditer(text):
        out.append((start, sign, text[start:match.start()]))
        sign = match.group()
        start, sign = match.end(), ("=" if sign in ("=", "\\equiv") else "below" if sign in _BELOW
                                    else "above" if sign in _ABOVE else "approx")
    out.append((start, sign, text[start:]))
    merged: list[tuple[int, str, str]] = []
    for at, sign, side in out:
        if merged and merged[-1][2].strip() == "" and len(merged) > 1:
            prev = merged.pop()
            sign = "approx" if "approx" in (prev[1], sign) else sign
        words = _BOUND_WORDS.match(side)
        if words is not None:  # "= less than 400 MB", "up to 1.7 GB": the words are the relation
            at, side = at + words.end(), side[words.end():]
            sign = next(k for k, v in words.groupdict().items() if v)
        merged.append((at, sign, side))
    return merged


#: A name with an optional subscript: ``M``, ``M_{fp16}``, ``P_{7B}``, ``\\text{KV\\_bytes}``, ``\\Psi_{total}``.
_LABEL = re.compile(r"\s*(?:\\[A-Za-z]+\{[^{}]*\}|\\?[A-Za-z]+)(?:_(?:\{[^{}]*\}|[A-Za-z0-9]+))?\s*")


def _is_formula(side: str) -> bool:
    """A first side with digits or operators is a step of the chain; a bare name (``M``,
    ``P_{LN}``, ``M_{fp16}``, ``KV cache``) is a label."""
    return not _LABEL.fullmatch(side) and bool(re.search(r"\d|[+\-*/^]|\\(?:frac|cdot|times)", side))


def _side_unit(trailing: str | None, seen: list[str]) -> str | None:
    """The unit of a side: a trailing ``\\text{bytes}``, else the strongest unit its figures name
    (``7B params x 2 bytes`` is bytes)."""
    if trailing is not None:
        return trailing
    return next((u for u in _UNIT_RANK if u in seen), None)


def _read_side(side: str, offset: int, sign: str, names: Mapping[str, sp.Expr], syntax: str, source: Source,
               counting: bool, hints: Mapping[str, str]) -> ParsedFormula:
    lexer = Lexer(side, names, strict=syntax == "python", source=source, offset=offset, counting=counting,
                  hints=hints)
    tokens = lexer.run()
    val, unit = _Parser(lexer, tokens).formula()
    _bounded(val.expr, lexer)
    shown = source.text[source.column(offset) - 1:source.column(offset + len(side)) - 1].strip()
    nums = [t for t in tokens if t.kind not in ("end", "unit", "note")]
    lone = nums[0] if len(nums) == 1 and nums[0].kind == "num" else None
    bounds = (val.lo, val.hi) if val.lo is not None and val.lo != val.hi else None
    if val.expr == 0 and re.search(r"[1-9A-Za-z\\]", side):
        raise lexer.fail("the formula reads as 0; a claim of nothing is not what was meant (check its powers and "
                         "products)", -1)
    return ParsedFormula(shown, val.expr, tuple(dict.fromkeys(lexer.used)), "", sign, _side_unit(unit, lexer.units),
                         (), bounds, tuple(lexer.readings), lone.shape if lone else None,
                         lone.figure if lone else None, tuple(lexer.per))


def _labels(body: str) -> tuple[str, str, int]:
    """Leading ``name:`` labels (``trainable params:``, ``Output: trainable%:``): the last one, the rest
    and how far it starts."""
    label, skipped = "", 0
    while (match := _COLON_LABEL.match(body)) and body[match.end():].strip() \
            and match.group(1).count("(") == match.group(1).count(")"):
        label, body, skipped = match.group(1), body[match.end():], skipped + match.end()
    return label, body, skipped


def _percent(read: ParsedFormula) -> ParsedFormula:
    """A side under a ``...%:`` label: the figure is a percentage."""
    hundred = sp.Integer(100)
    bounds = None if read.bounds is None else (read.bounds[0] / hundred, read.bounds[1] / hundred)
    shape = (sp.Rational(1, 100), "%") if read.shape is not None else None
    return replace(read, expr=read.expr / hundred, bounds=bounds, unit="ratio", shape=shape,
                   readings=(*read.readings, f"read {read.text} as {read.expr / hundred} (the label says percent)"))


def parse_formula(text: str, names: Mapping[str, sp.Expr], syntax: str = "auto", *, counting: bool = True,
                  hints: Mapping[str, str] | None = None) -> ParsedFormula:
    """Read ``text`` into a SymPy expression over the values of ``names``.

    Args:
        text: the formula, Python (``4*R*N**2``) or LaTeX (``4RN^2``, ``\\frac{a}{b}``), or a figure.
        names: the author's symbols (normalized: ``d_h``, ``Psi``) mapped onto our expressions.
        syntax: ``auto`` (the LaTeX grammar, a superset of Python's arithmetic) or ``python``
            (explicit ``*``, no LaTeX commands, no juxtaposition).
        counting: the claim counts parameters, FLOPs or a ratio (``21B`` is 21 x 10^9); else bytes.
        hints: what to say for a name the table lacks (``D``: tokens).

    A chain ``M = A = B`` (notes write their steps so) is read side by side: ``chain`` holds A and
    B, and the result itself is the last side. A first side without digits or operators is a label.

    Raises:
        FormulaError: anything outside the grammar or the limits in ``LIMITS``.

    >>> from memderive.symbolic.dims_sympy import h, l
    >>> parse_formula("12*n_layers*d_model**2", {"n_layers": l, "d_model": h}, "python").expr
    12*h**2*l
    """
    if syntax not in ("auto", "latex", "python"):
        raise ValueError(f"syntax must be auto, latex or python, not {syntax!r}")
    if not isinstance(text, str):
        raise FormulaError(f"a formula must be text, not {type(text).__name__}")
    if len(text) > LIMITS["chars"]:
        raise FormulaError(f"formula of {len(text):,} characters; the limit is {LIMITS['chars']:,}")
    cleaned, source = clean(text)
    body = cleaned.strip().strip("$").strip()
    start = cleaned.find(body) if body else 0
    if body.startswith("\\[") and body.endswith("\\]"):
        body, start = body[2:-2], start + 2
    label, body, skipped = _labels(body)
    start += skipped
    sides = _sides(body)
    named = _MODEL_LABEL.fullmatch(sides[0][2]) if len(sides) > 1 else None
    if named is not None and not re.search(r"[-.]|\d\s*[BbMmKk]\b", named.group("arg")):
        named = None  # M(s) = ... may be a product; N(llama2-7b) and P(7B) are names
    if len(sides) > 1 and (named is not None or not (sides[0][2].strip() and _is_formula(sides[0][2]))):
        label = sides[0][2].strip()
        sides = sides[1:]
    read = [_read_side(side, start + at, sign, names, syntax, source, counting, hints or {})
            for at, sign, side in sides]
    if label.rstrip().endswith("%"):
        read = [_percent(x) for x in read]
    last = read[-1]
    used = tuple(dict.fromkeys(x for side in read for x in side.names))
    readings = tuple(dict.fromkeys(x for side in read for x in side.readings))
    if named is not None:
        readings += (f"unsure: read {label} as the left-hand side's name ({named.group('arg')} names what it is "
                     "of)",)
    if last.relation in ("below", "above") and len(read) > 1:
        raise FormulaError("an inequality ends a chain only as its one step: check the bound alone (up to 1.7 GB)")
    return replace(last, text=text, names=used, label=label[:80], chain=tuple(read) if len(read) > 1 else (),
                   readings=readings)
