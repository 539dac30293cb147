"""A restricted reader for formulas people write in notes: Python syntax or LaTeX.

The input is untrusted. Nothing here calls ``eval`` or ``sympify`` on it: the text is cut
into tokens against a whitelist, names are looked up in a table given by the caller (the
author's letters mapped onto ours), and SymPy expressions are built from those tokens only.

Accepted: integers and decimals (exact rationals), names from the table, ``+ - * / ^ **``,
parentheses ``( ) [ ] { }``; in LaTeX ``\\frac{}{}``, ``\\cdot``, ``\\times``, ``\\left( \\right)``,
spacing commands, Greek letters (``\\Psi``), subscripts (``d_h``, ``a_{kv}``, ``n_{\\text{layers}}``),
a trailing unit (``\\text{bytes}``), and ``min``/``max`` of two or more comma-separated arguments
(``min(s + n, w)``, ``Max(a, b)``; in LaTeX ``\\min(..)``, ``\\max\\{..\\}``, ``\\operatorname{min}(..)``).
Juxtaposed letters multiply (``sbh`` is ``s*b*h``) and juxtaposition binds tighter than ``/``:
``5as/ht`` reads as ``(5as)/(ht)``. A name the table knows as a whole (``n_layers``) is read
whole before it is read letter by letter.
Anything else is a ``FormulaError`` with one line saying where.

>>> from memderive.symbolic.dims_sympy import a, b, h, s
>>> names = {"s": s, "b": b, "h": h, "a": a}
>>> parse_formula(r"M = sbh\\left(34 + \\frac{5as}{h}\\right)", names).expr
b*h*s*(5*a*s/h + 34)
>>> parse_formula(r"b \\min(s, a)", names).expr
b*Min(a, s)
>>> parse_formula("__import__('os')", names)
Traceback (most recent call last):
...
memderive.derivations.claims.parser.FormulaError: unexpected character '_' at column 1 in "__import__('os')"
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import sympy as sp

__all__ = ["FormulaError", "ParsedFormula", "parse_formula", "normalize_name", "LIMITS", "FUNCTIONS"]

#: Resource limits: a claim beyond them is refused before any algebra is done.
#: ``arguments`` and ``argument_terms`` bound the min/max calls of a formula, counted over all of
#: them: SymPy compares the arguments pairwise each time it builds (or substitutes into) a ``Min``,
#: and a dozen long ones cost seconds per check.
#: ``result_digits`` bounds every number the formula computes (``(2**64)**64`` is refused before it is
#: built); ``expanded_terms`` the terms of the expanded claim, past which the verdict would take
#: seconds per term and the checker gives up at once.
LIMITS = {"chars": 2000, "tokens": 600, "depth": 40, "power": 8, "numeric_power": 64, "digits": 30,
          "terms": 10_000, "degree": 32, "arguments": 6, "argument_terms": 24, "result_digits": 100,
          "expanded_terms": 60}
UNIT_WORDS = {"bytes": "bytes", "byte": "bytes", "B": "bytes", "elements": "elements", "params": "elements",
              "parameters": "elements", "FLOPs": "FLOPs", "flops": "FLOPs", "FLOP": "FLOPs",
              **{k: "bytes" for k in ("KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")}}
#: Byte units that scale the number before them (``28\,\mathrm{GB}`` is 28 * 10^9 bytes).
UNIT_SCALES = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "kappa", "lambda", "mu", "nu", "rho", "sigma", "tau",
         "theta", "phi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Sigma", "Phi", "Psi", "Omega")
_SKIP = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "Biggl",
         "Biggr", "quad", "qquad", "displaystyle", "textstyle", ",", ";", ":", "!", " "}
_DELIMITED = {"left", "right", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "Biggl", "Biggr"}
_TEXT = {"text", "mathrm", "textrm", "mathit", "textit", "operatorname", "mathsf", "textsf"}
_UNICODE = {"−": "-", "×": r"\times", "·": r"\cdot", "⋅": r"\cdot", "Ψ": r"\Psi", "Φ": r"\Phi",
            "≈": r"\approx", " ": " "}
_DIGITS = "0123456789"  # ASCII only: other Unicode digits (full-width, superscript) are not numbers here
#: Unicode superscripts: a run of them (``h¹²``, ``h⁻¹``) is one exponent
_SUPERSCRIPT = re.compile("[⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
_SUPERSCRIPT_DIGITS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_RELATION = re.compile(r"\\approx|\\simeq|\\sim(?![A-Za-z])|\\equiv|=")
#: ``4{,}096`` is how our LaTeX printer groups digits; it reads back as 4096
_NUMBER = re.compile(r"\d{1,3}(?:\{,\}\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+")
_RUN = re.compile(r"[A-Za-z][A-Za-z0-9]*")
#: one letter with an optional one-character or braced subscript, or a run of digits
_LETTER = re.compile(r"([A-Za-z])(_(?:\{[^{}]*\}|\\[A-Za-z]+(?:\{[^{}]*\})?|[A-Za-z0-9]))?|(\d+)")
_OPEN = {"(": ")", "[": "]", "{": "}", r"\{": r"\}"}
#: Functions a formula may call, as written in Python (SymPy's spelling too) and in LaTeX.
FUNCTIONS: dict[str, type[sp.Expr]] = {"min": sp.Min, "max": sp.Max, "Min": sp.Min, "Max": sp.Max}


class FormulaError(ValueError):
    """A formula outside the accepted grammar; the message is one line and says where."""


@dataclass(frozen=True, slots=True)
class ParsedFormula:
    """A formula as read: ``expr`` in our symbols, the author's names used, and annotations.

    ``label`` is the left-hand side (``M`` in ``M = 34sbh``), kept as text and never parsed;
    ``relation`` the sign before the formula (``=`` or ``approx``); ``unit`` a trailing
    ``\\text{bytes}`` or ``\\text{elements}``.
    """

    text: str
    expr: sp.Expr
    names: tuple[str, ...]
    label: str = ""
    relation: str = ""
    unit: str | None = None
    chain: tuple[ParsedFormula, ...] = ()  # every side of ``M = A = B`` (A and B), when there are two or more


@dataclass(frozen=True, slots=True)
class _Source:
    """The text as typed, and for each character of the cleaned text the column it came from."""

    text: str
    where: list[int]

    def column(self, i: int) -> int:
        return self.where[min(max(i, 0), len(self.where) - 1)] + 1


def _clean(text: str) -> tuple[str, _Source]:
    """Unicode signs as the LaTeX they stand for (``·`` -> ``\\cdot``, followed by a space when a
    letter follows: ``l·h`` is not the command ``\\cdoth``) and ``\\_`` as ``_``; with the column map."""
    out: list[str] = []
    where: list[int] = []
    i = 0
    while i < len(text):
        superscript = _SUPERSCRIPT.match(text, i)
        if text.startswith("\\_", i):
            rep, width = "_", 2
        elif superscript:  # a run of Unicode superscripts is one exponent: h¹² is h^(12)
            rep, width = "^(" + superscript.group().translate(_SUPERSCRIPT_DIGITS) + ")", len(superscript.group())
        else:
            rep, width = _UNICODE.get(text[i], text[i]), 1
            if rep.startswith("\\") and rep[1:].isalpha() and text[i + 1:i + 2].isascii() and text[i + 1:i + 2].isalpha():
                rep += " "
        out.append(rep)
        where += [i] * len(rep)
        i += width
    where.append(len(text))
    return "".join(out), _Source(text, where)


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # num name func comma op open close frac text unit note end
    text: str
    col: int
    value: object = None


def _excerpt(text: str) -> str:
    short = text if len(text) <= 48 else text[:45] + "..."
    return '"' + short.encode("unicode_escape").decode("ascii").replace('"', '\\"') + '"'


def normalize_name(raw: str) -> str:
    r"""The table key of a written name: braces, ``\text`` and spaces removed.

    >>> normalize_name(r"n_{\text{layers}}"), normalize_name(r"\Psi"), normalize_name("a_{kv}")
    ('n_layers', 'Psi', 'a_kv')
    """
    name = re.sub(r"\\(?:%s)\b" % "|".join(sorted(_TEXT)), "", raw)
    name = name.replace("{", "").replace("}", "").replace(" ", "").lstrip("\\")
    return name


class _Lexer:
    """Cuts the text into tokens; names are resolved against the table as they are read."""

    def __init__(self, text: str, names: Mapping[str, sp.Expr], strict: bool, source: _Source | None = None,
                 offset: int = 0) -> None:
        self.text, self.names, self.strict = text, names, strict
        self.source, self.offset = source or _Source(text, list(range(len(text) + 1))), offset
        self.tokens: list[_Tok] = []
        self.used: list[str] = []
        self.i = 0

    def fail(self, message: str, col: int | None = None) -> FormulaError:
        """One line: the message, the column (``col=-1`` for none) and an excerpt of the input,
        both in the text the user typed (``·``, not the ``\\cdot`` it is read as)."""
        where = "" if col == -1 else f" at column {self.source.column(self.offset + (self.i if col is None else col))}"
        return FormulaError(f"{message}{where} in {_excerpt(self.source.text)}")

    def run(self) -> list[_Tok]:
        text = self.text
        while self.i < len(text):
            ch = text[self.i]
            if ch.isspace() or ch == "~":
                self.i += 1
            elif ch in _DIGITS or (ch == "." and text[self.i + 1:self.i + 2] in tuple(_DIGITS)):
                self._number()
            elif ch.isascii() and ch.isalpha():
                self._name(_RUN.match(text, self.i).group(), self.i)
            elif ch == "\\":
                self._command()
            elif ch == "*" and text.startswith("**", self.i):
                self._emit("op", "**", 2)  # kept apart from ^: LaTeX's one-character rule is not Python's
            elif ch in "+-*/^":
                self._emit("op", ch, 1)
            elif ch in "([{":
                self._emit("open", ch, 1)
            elif ch in ")]}":
                self._emit("close", ch, 1)
            elif ch == ",":
                self._emit("comma", ch, 1)
            else:
                raise self.fail(f"unexpected character {ch!r}")
            if len(self.tokens) > LIMITS["tokens"]:
                raise self.fail(f"more than {LIMITS['tokens']} tokens; split the formula", -1)
        self.tokens.append(_Tok("end", "", len(text)))
        return self.tokens

    def _emit(self, kind: str, text: str, width: int, value: object = None) -> None:
        if self.strict and (kind in ("frac", "text", "unit", "note") or text in "{}[]" and kind != "op"):
            raise self.fail(f"{text!r} is not Python syntax; leave out --syntax python to read LaTeX")
        self.tokens.append(_Tok(kind, text, self.i, value))
        self.i += width

    def _number(self) -> None:
        match = _NUMBER.match(self.text, self.i)
        written = match.group()
        digits = written.replace("{,}", "")
        if len(digits.replace(".", "")) > LIMITS["digits"]:
            raise self.fail(f"number with more than {LIMITS['digits']} digits")
        self._emit("num", digits, len(written), sp.Rational(digits))

    def _subscript(self, start: int) -> int:
        """End of a subscript starting at ``start`` (just after ``_``)."""
        text = self.text
        if text.startswith("{", start):
            depth, j = 0, start
            while j < len(text):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    return j + 1
                j += 1
            raise self.fail("unbalanced '{' in a subscript", start)
        if text.startswith("\\", start):
            match = re.compile(r"\\([A-Za-z]+)\s*(\{[^{}]*\})?").match(text, start)
            return match.end() if match else start + 1
        match = re.compile(r"[A-Za-z0-9]").match(text, start)
        if not match:
            raise self.fail("empty subscript", start)
        return start + 1

    def _name(self, head: str, col: int) -> None:
        """A run of letters with subscripts: the whole name if known, else letter by letter."""
        text, j = self.text, col + len(head)
        if self.strict:
            j = re.compile(r"[A-Za-z0-9_]*").match(text, j).end()
        while not self.strict and text.startswith("_", j):
            run = _RUN.match(text, j + 1)
            j = run.end() if run else self._subscript(j + 1)
        raw = text[col:j]
        whole = normalize_name(raw)
        self.i = j
        if raw in FUNCTIONS:
            self.tokens.append(_Tok("func", raw.lower(), col, FUNCTIONS[raw]))
            return
        if whole in self.names or self.strict:
            self._known(whole, col)
            return
        for match in _LETTER.finditer(raw):
            if match.group(3):
                self.tokens.append(_Tok("num", match.group(3), col + match.start(), sp.Integer(match.group(3))))
                continue
            piece = normalize_name(match.group())
            if piece not in self.names:
                raise self.fail(f"unknown symbol {whole!r} (read letter by letter, {piece!r} is unknown); "
                                f"map it onto ours, e.g. {piece}=h", col)
            self._known(piece, col + match.start())

    def _known(self, name: str, col: int) -> None:
        if name not in self.names:
            raise self.fail(f"unknown symbol {name!r}; map it onto ours, e.g. {name}=h", col)
        self.used.append(name)
        self.tokens.append(_Tok("name", name, col, self.names[name]))

    def _command(self) -> None:
        text, col = self.text, self.i
        match = re.compile(r"\\([A-Za-z]+|.)").match(text, col)
        if not match:
            raise self.fail("a lone backslash")
        word = match.group(1)
        if self.strict:
            raise self.fail(f"\\{word} is not Python syntax; leave out --syntax python to read LaTeX")
        if word in _SKIP:
            self.i = match.end()
            if word in _DELIMITED and text.startswith(".", self.i):  # \left. \right.: no delimiter
                self.i += 1
        elif word in ("cdot", "times", "ast"):
            self._emit("op", "*", match.end() - col)
        elif word in ("min", "max"):
            self._emit("func", word, match.end() - col, FUNCTIONS[word])
        elif word in ("frac", "dfrac", "tfrac"):
            self._emit("frac", "\\frac", match.end() - col)
        elif word in ("{", "}"):
            self._emit("open" if word == "{" else "close", "\\" + word, 2)
        elif word in GREEK:
            j = match.end()
            while text.startswith("_", j):
                j = self._subscript(j + 1)
            self._known(normalize_name(text[col:j]), col)
            self.i = j
        elif word in _TEXT:
            self._text(match.end(), col)
        elif word == "tag":
            end = self._braced_end(match.end())
            self.i = end
        else:
            raise self.fail(f"unsupported LaTeX command \\{word}")

    def _braced_end(self, j: int) -> int:
        while j < len(self.text) and self.text[j].isspace():
            j += 1
        if not self.text.startswith("{", j):
            raise self.fail("expected '{'", j)
        end = self.text.find("}", j)
        if end < 0 or "{" in self.text[j + 1:end]:
            raise self.fail("unbalanced '{'", j)
        return end + 1

    def _text(self, j: int, col: int) -> None:
        end = self._braced_end(j)
        content = self.text[self.text.index("{", j) + 1:end - 1].strip()
        self.i = end
        if content in UNIT_WORDS:
            self.tokens.append(_Tok("unit", content, col, UNIT_WORDS[content]))
        elif content in ("min", "max"):  # \operatorname{min}
            self.tokens.append(_Tok("func", content, col, FUNCTIONS[content]))
        elif re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", content):
            letters = re.findall(r"[A-Za-z]", content)
            if content not in self.names and len(letters) > 1 and "_" not in content \
                    and all(x in self.names for x in letters):
                raise self.fail(f"unknown symbol {content!r}: a product of letters is written without \\text "
                                f"({content}), or mapped: {content}={'*'.join(letters)}", col)
            self._known(content, col)
        else:
            self.tokens.append(_Tok("note", content, col))


@dataclass(frozen=True, slots=True)
class _Val:
    """An expression with bounds on its expanded size (terms) and total degree."""

    expr: sp.Expr
    terms: int
    degree: int


def _leaf(expr: sp.Expr) -> _Val:
    monomials = sp.Add.make_args(sp.expand(expr))
    degree = max((sum(abs(int(e)) for base, e in m.as_powers_dict().items() if base.is_Symbol and e.is_Integer)
                  for m in monomials), default=0)
    return _Val(expr, len(monomials), degree)


def _digits(number: sp.Rational) -> float:
    """Decimal digits of a rational's numerator and denominator together (``log10``, without printing it)."""
    return sum(math.log10(abs(int(x))) for x in (number.p, number.q) if x)


def _bounded(expr: sp.Expr, lexer: _Lexer) -> None:
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

    STARTS = ("num", "name", "func", "open", "frac")

    def __init__(self, lexer: _Lexer, tokens: list[_Tok]) -> None:
        self.lexer, self.tokens, self.k, self.depth = lexer, tokens, 0, 0
        self.arguments, self.argument_terms = 0, 0  # of min/max, over the formula (LIMITS)

    @property
    def tok(self) -> _Tok:
        return self.tokens[self.k]

    def take(self) -> _Tok:
        tok = self.tokens[self.k]
        self.k += 1
        return tok

    def fail(self, message: str, tok: _Tok | None = None) -> FormulaError:
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
                val = _Val(val.expr * UNIT_SCALES[tok.text], val.terms, val.degree)
        if self.tok.kind != "end":
            tok = self.tok
            what = "unbalanced " + repr(tok.text) if tok.kind == "close" else f"unexpected {tok.text!r}"
            raise self.fail(what)
        return val, unit

    def expr(self) -> _Val:
        self.depth += 1
        if self.depth > LIMITS["depth"]:
            raise self.fail(f"nested deeper than {LIMITS['depth']} levels")
        val = self.term()
        while self.tok.kind == "op" and self.tok.text in "+-":
            sign = -1 if self.take().text == "-" else 1
            rhs = self.term()
            val = self.check(_Val(val.expr + sign * rhs.expr, val.terms + rhs.terms, max(val.degree, rhs.degree)))
        self.depth -= 1
        return val

    def term(self) -> _Val:
        val = self.implicit()
        while self.tok.kind == "op" and self.tok.text in "*/":
            div = self.take().text == "/"
            rhs = self.implicit()
            expr = val.expr / rhs.expr if div else val.expr * rhs.expr
            val = self.check(_Val(expr, val.terms * rhs.terms, val.degree + rhs.degree))
        return val

    def implicit(self) -> _Val:
        if self.tok.kind == "op" and self.tok.text in "+-":
            negative = self.take().text == "-"
            val = self.implicit()
            return _Val(-val.expr, val.terms, val.degree) if negative else val
        val = self.power()
        while self.tok.kind in self.STARTS:
            if self.lexer.strict:
                raise self.fail(f"missing operator before {self.tok.text!r} (write * in Python syntax)")
            rhs = self.power()
            val = self.check(_Val(val.expr * rhs.expr, val.terms * rhs.terms, val.degree + rhs.degree))
        return val

    def power(self) -> _Val:
        base = self.atom()
        if not (self.tok.kind == "op" and self.tok.text in ("^", "**")):
            return base
        tok = self.take()
        negative = self.tok.kind == "op" and self.tok.text == "-"
        if negative:
            self.take()
        if tok.text == "^" and not self.lexer.strict and base.expr != 10:
            # LaTeX: s^22 is s^2 times 2 (Python's s**22 is s to the 22nd); but 10^12 in notes is
            # scientific notation, ten to the twelfth, never 10 * 2
            self.split_digits()
        exponent = self.atom(exponent=True).expr * (-1 if negative else 1)
        limit = LIMITS["numeric_power"] if base.expr.is_Number else LIMITS["power"]
        if not (exponent.is_Integer and abs(int(exponent)) <= limit):
            raise self.fail(f"exponents must be integers from -{limit} to {limit}", tok)
        if base.expr.is_Rational and _digits(base.expr) * abs(int(exponent)) > LIMITS["result_digits"]:
            raise self.fail(f"gives up: the power is a number of more than {LIMITS['result_digits']} digits", tok)
        if self.tok.kind == "op" and self.tok.text in ("^", "**"):
            raise self.fail("a power of a power needs parentheses")
        n = abs(int(exponent))
        return self.check(_Val(base.expr ** exponent, base.terms ** n, base.degree * n))

    def atom(self, exponent: bool = False) -> _Val:
        tok = self.take()
        if tok.kind == "num":
            return _Val(tok.value, 1, 0)
        if tok.kind == "name" and not exponent:
            return self.check(_leaf(tok.value))
        if tok.kind == "open":
            val = self.expr()
            close = self.take()
            if close.kind == "comma":
                raise self.fail("a comma outside min(...) or max(...)", close)
            if close.kind != "close" or close.text != _OPEN[tok.text]:
                raise self.fail(f"unbalanced {tok.text!r} (closed by {close.text or 'the end'!r})", tok)
            return val
        if tok.kind == "func" and not exponent:
            return self.call(tok)
        if tok.kind == "frac" and not exponent:
            num, den = self.argument(), self.argument()
            return self.check(_Val(num.expr / den.expr, num.terms * den.terms, num.degree + den.degree))
        if tok.kind == "end":
            raise self.fail("the formula ends too early", tok)
        if exponent:
            raise self.fail("exponents must be integers", tok)
        raise self.fail(f"unexpected {tok.text!r}", tok)

    def call(self, func: _Tok) -> _Val:
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
        return self.check(_Val(expr, 1, max(x.degree for x in args)))

    def split_digits(self) -> None:
        """A LaTeX argument without braces is one character: ``\\frac12``, ``s^22``."""
        tok = self.tok
        if tok.kind == "num" and len(tok.text) > 1 and tok.text.isdigit():
            self.tokens[self.k:self.k + 1] = [_Tok("num", tok.text[0], tok.col, sp.Integer(tok.text[0])),
                                              _Tok("num", tok.text[1:], tok.col + 1, sp.Integer(tok.text[1:]))]

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
    offset in ``text`` and the relation sign before it."""
    out, start, sign = [], 0, ""
    for match in _RELATION.finditer(text):
        out.append((start, sign, text[start:match.start()]))
        start, sign = match.end(), "=" if match.group() in ("=", "\\equiv") else "approx"
    out.append((start, sign, text[start:]))
    return out


#: A name with an optional subscript: ``M``, ``M_{fp16}``, ``P_{7B}``, ``\\text{KV\\_bytes}``, ``\\Psi_{total}``.
_LABEL = re.compile(r"\s*(?:\\[A-Za-z]+\{[^{}]*\}|\\?[A-Za-z]+)(?:_(?:\{[^{}]*\}|[A-Za-z0-9]+))?\s*")


def _is_formula(side: str) -> bool:
    """A first side with digits or operators is a step of the chain; a bare name (``M``,
    ``P_{LN}``, ``M_{fp16}``, ``KV cache``) is a label."""
    return not _LABEL.fullmatch(side) and bool(re.search(r"\d|[+\-*/^]|\\(?:frac|cdot|times)", side))


def _read_side(side: str, offset: int, sign: str, names: Mapping[str, sp.Expr], syntax: str,
               source: _Source) -> ParsedFormula:
    lexer = _Lexer(side, names, strict=syntax == "python", source=source, offset=offset)
    val, unit = _Parser(lexer, lexer.run()).formula()
    _bounded(val.expr, lexer)
    shown = source.text[source.column(offset) - 1:source.column(offset + len(side)) - 1].strip()
    return ParsedFormula(shown, val.expr, tuple(dict.fromkeys(lexer.used)), "", sign, unit)


def parse_formula(text: str, names: Mapping[str, sp.Expr], syntax: str = "auto") -> ParsedFormula:
    """Read ``text`` into a SymPy expression over the values of ``names``.

    Args:
        text: the formula, Python (``4*R*N**2``) or LaTeX (``4RN^2``, ``\\frac{a}{b}``).
        names: the author's symbols (normalized: ``d_h``, ``Psi``) mapped onto our expressions.
        syntax: ``auto`` (the LaTeX grammar, a superset of Python's arithmetic) or ``python``
            (explicit ``*``, no LaTeX commands, no juxtaposition).

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
    clean, source = _clean(text)
    body = clean.strip().strip("$").strip()
    start = clean.find(body) if body else 0
    if body.startswith("\\[") and body.endswith("\\]"):
        body, start = body[2:-2], start + 2
    sides = _sides(body)
    label = ""
    if len(sides) > 1 and not (sides[0][2].strip() and _is_formula(sides[0][2])):
        label = sides[0][2].strip()
        sides = sides[1:]
    read = [_read_side(side, start + at, sign, names, syntax, source) for at, sign, side in sides]
    last = read[-1]
    used = tuple(dict.fromkeys(x for side in read for x in side.names))
    return ParsedFormula(text, last.expr, used, label[:80], last.relation, last.unit,
                         tuple(read) if len(read) > 1 else ())
