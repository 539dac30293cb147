"""The tokenizer of claims: untrusted text cut into tokens against a whitelist (never ``eval``).

Names are resolved as they are read, against the table the caller gives (the author's letters mapped
onto ours). Numbers are read as printed (``derivations.claims.figures``): ``39,976,960``, ``8e9``,
``21B``, ``320 MB``, ``0.5898%``, ``70 亿``; each token carries the half unit of its last digit, and
every reading that is not a plain number is echoed (``readings``). Code is read as code prints it:
``#`` comments, dotted names (``args.seq_length`` is ``seq_length``), ``int(...)``, ``math.ceil``,
``sizeof(FP16)``, ``//``.

>>> lex = Lexer("21B", {}, strict=False, counting=True)
>>> [(t.kind, t.value) for t in lex.run()], lex.readings
([('num', 21000000000), ('end', None)], ['read 21B as 21 × 10^9 (B after a number in a count is a billion)'])
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cache

from memderive.derivations.claims.figures import (BYTE_SCALES, MAGNITUDES, UNITS, WORDS, Figure, decimal_text, magnitude,
                                                 read_number)
from memderive.symbolic.lazy import lazy, lazy_names

sp = lazy("sympy")

__all__ = ["FormulaError", "Lexer", "Tok", "Source", "clean", "excerpt", "normalize_name", "FUNCTIONS", "functions",  # noqa: F822 (FUNCTIONS: __getattr__)
           "CALLS", "UNIT_WORDS", "UNIT_SCALES", "GREEK", "LIMIT_DIGITS"]

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

LIMIT_DIGITS = 30
UNIT_WORDS = {"bytes": "bytes", "byte": "bytes", "B": "bytes", "elements": "elements", "params": "elements",
              "parameters": "elements", "FLOPs": "FLOPs", "flops": "FLOPs", "FLOP": "FLOPs", "bits": "bits",
              "字节": "bytes", **{k: "bytes" for k in ("KB", "kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")}}
#: Byte units that scale the number before them (``28\\,\\mathrm{GB}`` is 28 * 10^9 bytes).
UNIT_SCALES = {k: v for k, v in BYTE_SCALES.items() if k != "B"}
GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "kappa", "lambda", "mu", "nu", "rho", "sigma", "tau",
         "theta", "phi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Sigma", "Phi", "Psi", "Omega")
_SKIP = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "Biggl",
         "Biggr", "quad", "qquad", "displaystyle", "textstyle", ",", ";", ":", "!", " "}
_DELIMITED = {"left", "right", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "Biggl", "Biggr"}
_TEXT = {"text", "mathrm", "textrm", "mathit", "textit", "operatorname", "mathsf", "textsf"}
_UNICODE = {"−": "-", "×": r"\times", "·": r"\cdot", "⋅": r"\cdot", "Ψ": r"\Psi", "Φ": r"\Phi",
            "≈": r"\approx", " ": " ", "（": "(", "）": ")"}
_DIGITS = "0123456789"  # ASCII only: other Unicode digits (full-width, superscript) are not numbers here
#: Unicode superscripts: a run of them (``h¹²``, ``h⁻¹``) is one exponent
_SUPERSCRIPT = re.compile("[⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")
_SUPERSCRIPT_DIGITS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_RUN = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: one letter with an optional one-character or braced subscript, or a run of digits
_LETTER = re.compile(r"([A-Za-z])(_(?:\{[^{}]*\}|\\[A-Za-z]+(?:\{[^{}]*\})?|[A-Za-z0-9]))?|(\d+)")
#: a superscript of letters that belongs to a name (``d_h^R``, ``d_{h}^{R}``)
_SUPER_LETTERS = re.compile(r"\^(?:\{([A-Za-z]+)\}|([A-Za-z]))")
#: what may follow a unit: ``per param``, ``/param``, a dtype in brackets ``(FP16)``
_UNIT_TAIL = re.compile(r"\s*(?:(?:/|\s+per\s+)(?:param(?:eter)?s?|weights?|参数|elements?)(?![A-Za-z])"
                        r"|\((?:FP|fp|BF|bf|INT|int|NF|nf)\d+\))")
#: A unit per item (``5.3GB / sequence``, ``0.5 MB per token``): the figure counts one item.
_PER_ITEM = re.compile(r"\s*(?:/|\bper\b|\\text\{\s*/\s*)\s*(?:\\text\{)?\s*(?P<item>tokens?|sequences?|seqs?|samples?|"
                       r"requests?|prompts?|users?|layers?|GPUs?|gpus?|devices?|cards?)(?![A-Za-z])\s*\}?\s*\}?")
#: Words in parentheses that label the factor before them (``(K,V)``, ``(T)``, ``(n_layers)``).
_FACTOR_LABEL = re.compile(r"\(\s*([A-Za-z][A-Za-z0-9_]*(?:\s*[, ]\s*[A-Za-z][A-Za-z0-9_]*)*)\s*\)")
#: Byte units as notes also spell them (``kiB``, ``gb``, ``Mb``, ``GIB``): any case, read as the unit.
_CASED_UNITS = {k.lower(): k for k in ("kB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB")}


@cache
def functions() -> dict[str, type[sp.Expr]]:
    """``FUNCTIONS``: functions a formula may call, as written in Python (SymPy's spelling too) and in LaTeX."""
    return {"min": sp.Min, "max": sp.Max, "Min": sp.Min, "Max": sp.Max}


#: ``FUNCTIONS`` by its name, built on first read (importing this module imports no SymPy)
__getattr__ = lazy_names(__name__, FUNCTIONS=functions)


#: One-argument calls of code: a whole number of the argument (``int``, ``math.ceil``) or the argument.
CALLS = {"int": "floor", "floor": "floor", "math.floor": "floor", "ceil": "ceil", "math.ceil": "ceil",
         "round": "round", "float": "value", "math.prod": None}
#: ``sizeof(FP16)``: bytes of an element type
_SIZEOF = re.compile(r"sizeof\s*\(\s*([A-Za-z0-9_.]+)\s*\)")
_DTYPE_BYTES = {"fp32": 4, "float32": 4, "float": 4, "fp16": 2, "float16": 2, "half": 2, "bf16": 2, "bfloat16": 2,
                "fp8": 1, "int8": 1, "uint8": 1, "int32": 4, "int64": 8, "torch.float16": 2, "torch.bfloat16": 2,
                "torch.float32": 4}


#: Words of code a formula never means as a product of letters.
_CODE_WORDS = frozenset({"lambda", "import", "exec", "eval", "open", "def", "class", "print", "global", "while",
                         "del", "yield", "assert", "raise", "with", "async", "await", "nonlocal", "system"})


class FormulaError(ValueError):
    """A formula outside the accepted grammar; the message is one line and says where."""


@dataclass(frozen=True, slots=True)
class Source:
    """The text as typed, and for each character of the cleaned text the column it came from."""

    text: str
    where: list[int]

    def column(self, i: int) -> int:
        return self.where[min(max(i, 0), len(self.where) - 1)] + 1


def clean(text: str) -> tuple[str, Source]:
    """Unicode signs as the LaTeX they stand for (``·`` -> ``\\cdot``, followed by a space when a
    letter follows: ``l·h`` is not the command ``\\cdoth``), ``\\_`` as ``_``, ``#`` comments blanked
    out; with the column map."""
    out: list[str] = []
    where: list[int] = []
    i = 0
    while i < len(text):
        superscript = _SUPERSCRIPT.match(text, i)
        if text.startswith("\\_", i):
            rep, width = "_", 2
        elif text[i] == "#":  # a comment of code runs to the end of its line
            end = text.find("\n", i)
            width = (len(text) if end < 0 else end) - i
            rep = " " * width
        elif superscript:  # a run of Unicode superscripts is one exponent: h¹² is h^(12)
            rep, width = "^(" + superscript.group().translate(_SUPERSCRIPT_DIGITS) + ")", len(superscript.group())
        else:
            rep, width = _UNICODE.get(text[i], text[i]), 1
            if rep.startswith("\\") and rep[1:].isalpha() and text[i + 1:i + 2].isascii() and text[i + 1:i + 2].isalpha():
                rep += " "
        out.append(rep)
        where += list(range(i, i + width)) if text[i] == "#" else [i] * len(rep)
        i += width
    where.append(len(text))
    return "".join(out), Source(text, where)


@dataclass(frozen=True, slots=True)
class Tok:
    kind: str  # num name func call comma op open close frac unit note end
    text: str
    col: int
    value: object = None
    half: object = 0  # num: half a unit of the last printed digit (0: exact)
    figure: Figure | None = None  # num: the figure as printed, for printing ours alike
    shape: tuple[object, str] = (1, "")  # num: the scale and suffix it was printed with (10^9, "B")


def excerpt(text: str) -> str:
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


@dataclass
class Lexer:
    """Cuts the text into tokens; names are resolved against the table as they are read.

    ``counting``: the claim counts things (parameters, FLOPs, a ratio), so a ``B`` after a number is a
    billion; in a byte count it is the byte unit. ``hints``: what to say for a name the table lacks.
    """

    text: str
    names: Mapping[str, sp.Expr]
    strict: bool
    source: Source | None = None
    offset: int = 0
    counting: bool = True
    hints: Mapping[str, str] = field(default_factory=dict)
    tokens: list[Tok] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    readings: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)
    per: list[str] = field(default_factory=list)  # a figure for one item (token, sequence, layer): ``5.3GB / sequence``
    i: int = 0

    def __post_init__(self) -> None:
        if self.source is None:
            self.source = Source(self.text, list(range(len(self.text) + 1)))

    def fail(self, message: str, col: int | None = None) -> FormulaError:
        """One line: the message, the column (``col=-1`` for none) and an excerpt of the input,
        both in the text the user typed (``·``, not the ``\\cdot`` it is read as)."""
        where = "" if col == -1 else f" at column {self.source.column(self.offset + (self.i if col is None else col))}"
        return FormulaError(f"{message}{where} in {excerpt(self.source.text)}")

    def run(self) -> list[Tok]:
        text = self.text
        while self.i < len(text):
            ch = text[self.i]
            if ch.isspace() or ch == "~":
                self.i += 1
            elif ch in _DIGITS or (ch == "." and text[self.i + 1:self.i + 2] in tuple(_DIGITS)):
                self._number()
            elif text.startswith("sizeof", self.i) and _SIZEOF.match(text, self.i):
                self._sizeof()
            elif ch.isascii() and ch.isalpha():
                self._name(_RUN.match(text, self.i).group(), self.i)
            elif ch == "\\":
                self._command()
            elif text.startswith(("**", "//"), self.i):
                self._emit("op", text[self.i:self.i + 2], 2)  # ** kept apart from ^: LaTeX's one-character rule
            elif ch in "+-*/^":
                self._emit("op", ch, 1)
            elif ch == "(" and (label := self._factor_label()):
                self.readings.append(f"unsure: read ({label}) after {self.tokens[-1].text} as the factor's label, "
                                     "not a product")
            elif ch in "([{":
                self._emit("open", ch, 1)
            elif ch in ")]}":
                self._emit("close", ch, 1)
            elif ch == ",":
                self._emit("comma", ch, 1)
            elif ch == "%":
                raise self.fail("'%' after an expression is a modulo (a percentage follows a number: 0.59%)")
            else:
                raise self.fail(f"unexpected character {ch!r}")
            if len(self.tokens) > LIMITS["tokens"]:
                raise self.fail(f"more than {LIMITS['tokens']} tokens; split the formula", -1)
        self._ratio_marker()
        self.tokens.append(Tok("end", "", len(text)))
        return self.tokens

    def _factor_label(self) -> str:
        """``8192\\ (T)``, ``2 (K,V)``, ``32 (layers)``: words in parentheses after a number and a space name
        the factor; they are skipped (returned) when they are words only and either follow LaTeX's ``\\ ``,
        hold a comma, or name something the table lacks. ``2 (s + n)`` and ``2(sbh)`` stay products."""
        if not self.tokens or self.tokens[-1].kind != "num":
            return ""
        before = self.text[:self.i]
        if not before[-1:].isspace():
            return ""
        match = _FACTOR_LABEL.match(self.text, self.i)
        if match is None:
            return ""
        words = re.findall(r"[A-Za-z]+", match.group(1))
        explicit = before.rstrip().endswith("\\")
        known = [w in self.names or all(ch in self.names for ch in w) for w in words]  # sbh: letters we know
        if explicit or "," in match.group(1) or not all(known):
            self.i = match.end()
            return match.group(1).strip()
        return ""

    def _ratio_marker(self) -> None:
        """``8×`` or ``8x`` at the end: the figure is a ratio ("an 8x smaller cache")."""
        if len(self.tokens) >= 2 and self.tokens[-1].text == "*" and self.tokens[-2].kind == "num":
            self.tokens.pop()
            self.units.append("ratio")
            self.readings.append(f"read {self.tokens[-1].text}× as a ratio of {self.tokens[-1].text}")

    def _emit(self, kind: str, text: str, width: int, value: object = None) -> None:
        if self.strict and (kind in ("frac", "text", "unit", "note") or text in "{}[]" and kind != "op"):
            raise self.fail(f"{text!r} is not Python syntax; leave out --syntax python to read LaTeX")
        self.tokens.append(Tok(kind, text, self.i, value))
        self.i += width

    # --- numbers ---------------------------------------------------------------------------------------------------

    def _number(self) -> None:
        """A figure with its suffix, unit and percent: ``21B``, ``320 MB``, ``0.5898%``, ``70 亿``."""
        col = self.i
        figure, j = read_number(self.text, col)
        if len(re.sub(r"\D", "", figure.written)) > LIMIT_DIGITS:
            raise self.fail(f"number with more than {LIMIT_DIGITS} digits")
        if "_" in figure.written:
            self.readings.append(f"read {figure.written} as {figure.written.replace('_', '')} (Python's digit "
                                 "separators)")
        shape: tuple[object, str] = (1, "")
        exponent = re.search(r"[eE]([+-]?\d+)$", figure.written)
        if exponent:
            shape = (Fraction(10) ** int(exponent.group(1)), "e" + exponent.group(1))
        times = re.compile(r"\s*[xX](?=\s*\d)").match(self.text, j)  # 8x7B, 8 x 7B: a product of figures
        if times:
            self._num(figure, col, shape)
            self.tokens.append(Tok("op", "*", j))
            self.i = times.end()
            return
        scaled = self._suffix(figure, j)
        if scaled is not None:
            figure, j, shape = scaled
        percent = re.compile(r"\s*(?:\\%|%)").match(self.text, j)
        if percent:
            figure = Figure(Fraction(figure.value) / 100, Fraction(figure.half) / 100, figure.written + "%",
                            figure.decimals)
            shape, j = (Fraction(1, 100), "%"), percent.end()
            self.units.append("ratio")
            self.readings.append(f"read {figure.written} as {decimal_text(figure.value)} (a percentage)")
        ratio = re.compile(r"[xX](?![A-Za-z0-9_])").match(self.text, j)
        if ratio:
            j = ratio.end()
            self.units.append("ratio")
            self.readings.append(f"read {figure.written}x as a ratio of {figure.written}")
        self.i = j
        self._num(figure, col, shape)

    def _num(self, figure: Figure, col: int, shape: tuple[object, str]) -> None:
        value = sp.Rational(figure.value.numerator, figure.value.denominator) if isinstance(figure.value, Fraction) \
            else sp.Integer(figure.value)
        self.tokens.append(Tok("num", figure.written, col, value, figure.half, figure, shape))

    def _suffix(self, figure: Figure, j: int) -> tuple[Figure, int, tuple[object, str]] | None:
        """A magnitude or unit after the number at ``j`` (attached or after spaces), or None."""
        text = self.text
        k = j
        while k < len(text) and text[k] in " \t":
            k += 1
        spaced = k > j
        if text[k:k + 1] in ("万", "亿"):
            scale = WORDS[text[k]]
            self.readings.append(f"read {figure.written} {text[k]} as {figure.written} × 10^{len(str(scale)) - 1}")
            return figure.scaled(scale, figure.written + text[k]), k + 1, (scale, text[k])
        if text.startswith("字节", k):
            return self._unit(figure, "字节", k + 2, spaced)
        word = re.compile(r"[A-Za-z]+(?![A-Za-z0-9_])").match(text, k)
        if word is None:
            return None
        w = word.group()
        if w.lower() in WORDS:
            scale = WORDS[w.lower()]
            self.readings.append(f"read {figure.written} {w} as {figure.written} × 10^{len(str(scale)) - 1}")
            return figure.scaled(scale, f"{figure.written} {w}"), word.end(), (scale, f" {w}")
        after = re.compile(r"\s*(?=[A-Za-z0-9(\\])").match(text, word.end())
        starts_product = spaced and after is not None and not _UNIT_TAIL.match(text, word.end())
        if len(w) == 1 and w in MAGNITUDES and not starts_product:
            scale = magnitude(w, self.counting, w in self.names)
            if scale is not None:
                self.readings.append(f"read {figure.written}{w} as {figure.written} × 10^{len(str(scale)) - 1}"
                                     + (" (B after a number in a count is a billion)" if w == "B" else ""))
                return figure.scaled(scale, figure.written + w), word.end(), (scale, w)
        if w in UNITS and not (starts_product and len(w) == 1):
            return self._unit(figure, w, word.end(), spaced)
        cased = _CASED_UNITS.get(w.lower())
        if cased is not None and not starts_product:
            self.readings.append(f"unsure: read {w} as {cased}" + (" (bytes; a gigabit would be Gb written as a rate)"
                                                          if w.lower().endswith("b") and w[-1] == "b" else ""))
            return self._unit(figure, cased, word.end(), spaced)
        return None

    def _unit(self, figure: Figure, unit: str, end: int, spaced: bool) -> tuple[Figure, int, tuple[object, str]]:
        kind, scale = UNITS[unit]
        self.units.append(kind)
        sep = " " if spaced else ""
        if scale != 1:
            self.readings.append(f"read {figure.written}{sep}{unit} as {figure.written} × "
                                 f"{'10^' + str(len(str(scale)) - 1) if scale % 1000 == 0 else scale} bytes")
            figure = figure.scaled(scale, f"{figure.written}{sep}{unit}")
        elif unit == "B":
            self.readings.append(f"read {figure.written}{sep}B as {figure.written} bytes")
        tail = _UNIT_TAIL.match(self.text, end)
        j = tail.end() if tail else end
        while not tail and (item := _PER_ITEM.match(self.text, j)):  # per token per layer: each item in turn
            word = item.group("item").lower().rstrip("s")
            word = {"seq": "sequence", "gpu": "GPU", "card": "GPU", "device": "GPU"}.get(word, word)
            self.per.append(word)
            self.readings.append(f"read {figure.written} {item.group().strip()} as the figure for one {word}")
            j = item.end()
        return figure, j, (scale, sep + unit)

    def _sizeof(self) -> None:
        match = _SIZEOF.match(self.text, self.i)
        name = match.group(1).lower()
        if name not in _DTYPE_BYTES:
            raise self.fail(f"sizeof({match.group(1)}) of an unknown element type; one of {', '.join(_DTYPE_BYTES)}")
        self.readings.append(f"read {match.group()} as {_DTYPE_BYTES[name]} bytes")
        self.tokens.append(Tok("num", match.group(), self.i, sp.Integer(_DTYPE_BYTES[name])))
        self.i = match.end()

    # --- names -----------------------------------------------------------------------------------------------------

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
        return start + 1 if match else start

    def _extent(self, head: str, col: int) -> int:
        """Where a name starting at ``col`` ends: its subscripts, dots (``args.seq_length``) and a
        superscript of letters (``d_h^R``) or a prime (``d_c'``) when the table knows the result."""
        text, j = self.text, col + len(head)
        if self.strict:
            j = _IDENT.match(text, col).end()
        while not self.strict and text.startswith("_", j):
            run = _RUN.match(text, j + 1)
            if run:
                j = run.end()
                continue
            end = self._subscript(j + 1)
            if end == j + 1:  # a trailing underscore (hidden_dim_) is part of the name
                j += 1
                break
            j = end
        while text.startswith(".", j) and _RUN.match(text, j + 1):  # args.seq_length (never a dunder)
            j = _IDENT.match(text, j + 1).end()
        sup = _SUPER_LETTERS.match(text, j)
        if sup and normalize_name(text[col:j]) + "^" + (sup.group(1) or sup.group(2)) in self.names:
            j = sup.end()
        if text.startswith("'", j) and normalize_name(text[col:j]) + "'" in self.names:
            j += 1
        return j

    def _name(self, head: str, col: int) -> None:
        """A run of letters with subscripts: the whole name if known, else letter by letter."""
        j = self._extent(head, col)
        raw = self.text[col:j]
        whole = normalize_name(raw)
        self.i = j
        if not self.tokens and whole == "return":
            return  # ``return expr`` as code prints it
        if whole in ("if", "else", "for"):
            raise self.fail(f"{whole!r}: a Python conditional or loop is not a formula; check one branch", col)
        if whole in _CODE_WORDS:  # never read letter by letter: l*a*m*b*d*a is not what was written
            raise self.fail(f"unknown symbol {whole!r} (code, not a size)", col)
        if raw in functions():
            self.tokens.append(Tok("func", raw.lower(), col, functions()[raw]))
            return
        if whole in CALLS and self.text[j:].lstrip().startswith("("):
            self.tokens.append(Tok("call", whole, col, CALLS[whole]))
            return
        if "." in whole:
            self._dotted(whole, col)
            return
        if whole in self.names or self.strict:
            self._known(whole, col)
            return
        for match in _LETTER.finditer(raw):
            if match.group(3):
                self.tokens.append(Tok("num", match.group(3), col + match.start(), sp.Integer(match.group(3))))
                continue
            piece = normalize_name(match.group())
            if piece not in self.names:
                raise self.fail(f"unknown symbol {whole!r} (read letter by letter, {piece!r} is unknown); "
                                + self._hint(piece), col)
            self._known(piece, col + match.start())

    def _dotted(self, name: str, col: int) -> None:
        """``args.seq_length``, ``self.config.n_embd``: the whole name if mapped, else its last part."""
        if name in self.names:
            self._known(name, col)
            return
        tail = name.rsplit(".", 1)[1]
        if tail not in self.names:
            raise self.fail(f"unknown symbol {name!r} ({tail!r} is not a size we know); " + self._hint(name), col)
        self.readings.append(f"read {name} as {tail}")
        self._known(tail, col)

    def _hint(self, name: str) -> str:
        return self.hints.get(name) or f"map it onto ours, e.g. {name}=h"

    def _known(self, name: str, col: int) -> None:
        if name not in self.names:
            raise self.fail(f"unknown symbol {name!r}; " + self._hint(name), col)
        self.used.append(name)
        self.tokens.append(Tok("name", name, col, self.names[name]))

    # --- LaTeX commands --------------------------------------------------------------------------------------------

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
            self._emit("func", word, match.end() - col, functions()[word])
        elif word in ("lceil", "lfloor"):
            self.tokens.append(Tok("call", word[1:], col, word[1:]))
            self.tokens.append(Tok("open", "(", col))
            self.i = match.end()
        elif word in ("rceil", "rfloor"):
            self._emit("close", ")", match.end() - col)
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
            self.i = self._braced_end(match.end())
        elif word == "%":
            raise self.fail("a percentage follows a number (0.5898\\%)")
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
        if self.text.startswith("_", end) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", content):
            sub_end = self._subscript(end + 1)  # \text{ffw}_\text{multiplier}: one name with its subscript
            if sub_end > end + 1:
                self.i = sub_end
                self._known(normalize_name(content + "_" + self.text[end + 1:sub_end]), col)
                return
        if content in UNIT_WORDS:
            self.tokens.append(Tok("unit", content, col, UNIT_WORDS[content]))
        elif content in ("min", "max"):  # \operatorname{min}
            self.tokens.append(Tok("func", content, col, functions()[content]))
        elif re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", content):
            letters = re.findall(r"[A-Za-z]", content)
            if content not in self.names and len(letters) > 1 and "_" not in content \
                    and all(x in self.names for x in letters):
                raise self.fail(f"unknown symbol {content!r}: a product of letters is written without \\text "
                                f"({content}), or mapped: {content}={'*'.join(letters)}", col)
            self._known(content, col)
        else:
            self.tokens.append(Tok("note", content, col))
