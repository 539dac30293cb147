"""How two closed forms differ: leading order, constant factors, and which terms make the gap.

*Leading order* is defined by a scaling: the model grows when ``h, a, a_kv, f`` (width, the head
dimension ``d_h`` fixed, so ``a`` grows with ``h``; the expert widths ``f_e, f_s`` too) and ``l, l_w, l_d``
(depth; the sliding-window and dense layers are a fixed share of the layers; the numbers of experts
E and k stay fixed) are all multiplied by lambda -> oo, while ``b, s, n, w, V, n_ctx,
d_h`` and the parallel degrees stay fixed. Each monomial then has a *degree* (the total power of
the growing sizes); a formula's *leading part* is the sum of its monomials of highest degree (for
a ratio, leading part over leading part). A claim is right to leading order when its leading part
equals ours: then claim/ours -> 1. The same machinery with ``s, n`` growing describes long sequences.

A ``min``/``max`` whose arguments do not grow is a fixed factor. One whose arguments do is replaced
by what it equals once lambda is large enough, where that is certain: ``min(s + n, w)`` by ``w``
as ``s, n -> oo`` (the fixed arguments of a ``min`` whose other arguments grow without bound), a
``max`` by its one growing argument. Anything else is ``Unanalysable`` ("cannot decide leading
order through min/max"), never guessed.

The gap ``ours - claim`` is split by degree, and each part is matched against the *pieces* of our
breakdown (one per parameter tensor or saved tensor, with its node path): a whole subtree
(``layer/attn``) is preferred, then the fewest pieces.

>>> from memderive.symbolic.dims_sympy import a, b, h, l, s
>>> leading(l * (12 * h**2 + 13 * h) + 50257 * h, width())
(3, 12*h**2*l)
>>> ratio_limit(12 * l * h**2, l * (12 * h**2 + 13 * h), width())
1
>>> from memderive.symbolic.dims_sympy import n, w
>>> leading(b * l * (s + n), sequence()), leading(b * l * sp.Min(s + n, w), sequence())
((1, b*l*n + b*l*s), (0, b*l*w))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import combinations

from memderive.symbolic import dims_sympy as ds
from memderive.symbolic.lazy import lazy, lazy_names

sp = lazy("sympy")

__all__ = ["WIDTH", "SEQUENCE", "Piece", "Match", "Gap", "Unanalysable", "degree_parts", "leading", "ratio_limit",  # noqa: F822 (WIDTH, SEQUENCE: __getattr__)
           "constant_factor", "match_pieces", "find_gaps", "describe_scaling", "OPTIONAL", "width", "sequence"]  # noqa: F822 (OPTIONAL: __getattr__)


@cache
def width() -> Mapping[sp.Symbol, int]:
    """``WIDTH``: sizes that grow with the model (the head dimension d_h stays fixed, so a grows with h; the
    sliding-window layers l_w are a fixed share of l)."""
    return {ds.h: 1, ds.a: 1, ds.a_kv: 1, ds.f: 1, ds.l: 1, ds.l_w: 1, ds.f_e: 1, ds.f_s: 1, ds.l_d: 1}


@cache
def sequence() -> Mapping[sp.Symbol, int]:
    """``SEQUENCE``: sizes that grow with the sequence."""
    return {ds.s: 1, ds.n: 1}


MAX_PIECES = 4


class Unanalysable(ValueError):
    """A formula outside the polynomial/rational forms this analysis handles."""


@dataclass(frozen=True, slots=True)
class Piece:
    """A part of our breakdown: node path, expression, and what it is (``linear bias``)."""

    path: str
    expr: sp.Expr
    what: str = ""


@dataclass(frozen=True, slots=True)
class Match:
    """Pieces whose parts of one degree add up to a target; ``subtree`` when they are all of one node."""

    pieces: tuple[Piece, ...]
    parts: tuple[sp.Expr, ...]
    subtree: str = ""
    groups: tuple[tuple[str, int], ...] = ()  # per unit of a sum: (subtree or "" for one piece, multiple)


@cache
def _optional() -> frozenset[sp.Symbol]:
    """``OPTIONAL``: growing sizes only some models have, named in a scaling only where a formula uses them."""
    return frozenset({ds.l_w, ds.f_e, ds.f_s, ds.l_d})


#: the tables above by their names, built on first read (importing this module builds no SymPy symbol)
__getattr__ = lazy_names(__name__, WIDTH=width, SEQUENCE=sequence, OPTIONAL=_optional)


def describe_scaling(weights: Mapping[sp.Symbol, int], used: set[sp.Basic] | None = None) -> str:
    """``a, a_kv, f, h, l → ∞ together``; ``l_w`` too when ``used`` (the formulas' symbols) has it."""
    grow = ", ".join(sorted(str(x) for x in weights if x not in _optional() or used is None or x in used))
    return f"{grow} → ∞ together"


def _monomial_degree(term: sp.Expr, weights: Mapping[sp.Symbol, int]) -> int:
    total = 0
    for base, exp in term.as_powers_dict().items():
        if base.is_Number:
            continue
        if base.is_Symbol:
            total += weights.get(base, 0) * int(exp) if exp.is_Integer else 0
            if not exp.is_Integer and base in weights:
                raise Unanalysable(f"non-integer power of {base}")
        elif base.free_symbols & set(weights):
            if base.has(sp.Min, sp.Max):
                raise Unanalysable(f"cannot decide leading order through min/max: {base}")
            raise Unanalysable(f"cannot tell how {base} grows")
    return total


def degree_parts(expr: sp.Expr, weights: Mapping[sp.Symbol, int]) -> dict[int, sp.Expr]:
    """An expanded sum split into homogeneous parts by degree.

    >>> from memderive.symbolic.dims_sympy import V, h, l
    >>> degree_parts(l * (12 * h**2 + 13 * h) + V * h, width())
    {3: 12*h**2*l, 2: 13*h*l, 1: V*h}
    """
    parts: dict[int, sp.Expr] = {}
    for term in sp.Add.make_args(sp.expand(expr)):
        if term == 0:
            continue
        deg = _monomial_degree(term, weights)
        parts[deg] = parts.get(deg, sp.Integer(0)) + term
    return dict(sorted(parts.items(), reverse=True))


def _grows(expr: sp.Expr, weights: Mapping[sp.Symbol, int]) -> bool | None:
    """False for a fixed size, True when ``expr`` -> +oo under the scaling, None when unknown.

    It grows when its leading part has positive degree and, over and under the fraction bar,
    positive coefficients only (every size is positive).
    """
    if not expr.free_symbols & set(weights):
        return False
    try:
        num, den = sp.fraction(sp.together(sp.expand(expr)))
        (dn, ln), (dd, ld) = (next(iter(degree_parts(x, weights).items())) for x in (num, den))
    except (Unanalysable, StopIteration):
        return None
    positive = all(c > 0 for part in (ln, ld) for c in sp.expand(part).as_coefficients_dict().values())
    return True if dn > dd and positive else None


def _settle(expr: sp.Expr, weights: Mapping[sp.Symbol, int]) -> sp.Expr:
    """Each ``min``/``max`` with growing arguments replaced by what it equals for large lambda,
    where that is certain (see the module docstring); the others are left as they are."""
    def settled(call: sp.Expr) -> sp.Expr:
        growth = [_grows(arg, weights) for arg in call.args]
        if None in growth or not any(growth):
            return call
        fixed = [arg for arg, grows in zip(call.args, growth) if not grows]
        growing = [arg for arg, grows in zip(call.args, growth) if grows]
        if isinstance(call, sp.Min) and fixed:
            return sp.Min(*fixed)
        if isinstance(call, sp.Max) and len(growing) == 1:
            return growing[0]
        return call

    if not expr.has(sp.Min, sp.Max):
        return expr
    return expr.replace(lambda x: isinstance(x, (sp.Min, sp.Max)), settled)  # innermost first


def leading(expr: sp.Expr, weights: Mapping[sp.Symbol, int]) -> tuple[int, sp.Expr]:
    """Degree and leading part of a polynomial, or of a ratio of polynomials (``min``/``max``
    settled first where the scaling decides them)."""
    num, den = sp.fraction(sp.together(sp.expand(_settle(sp.sympify(expr), weights))))
    num_parts, den_parts = degree_parts(num, weights), degree_parts(den, weights)
    if not num_parts:
        return 0, sp.Integer(0)
    (dn, ln), (dd, ld) = next(iter(num_parts.items())), next(iter(den_parts.items()))
    return dn - dd, ln if ld == 1 else sp.cancel(ln / ld)


def ratio_limit(claim: sp.Expr, ours: sp.Expr, weights: Mapping[sp.Symbol, int]) -> sp.Expr:
    """The limit of claim/ours under the scaling: a number, an expression of fixed sizes, 0 or oo."""
    dc, lc = leading(claim, weights)
    do, lo = leading(ours, weights)
    if lc == 0:
        return sp.Integer(0)
    if dc != do:
        return sp.oo if dc > do else sp.Integer(0)
    return sp.factor(sp.cancel(lc / lo))


def constant_factor(claim: sp.Expr, ours: sp.Expr) -> sp.Expr | None:
    """``k`` when claim = k * ours with k a number or a monomial (``1/2``, ``b``); else None."""
    if ours == 0:
        return None
    ratio = sp.factor(sp.cancel(claim / ours))
    if ratio == 1 or ratio == 0:
        return None
    if ratio.is_Number or (ratio.is_Mul or ratio.is_Symbol or ratio.is_Pow) and not ratio.has(sp.Add):
        return ratio
    return None


def _coefficients(expr: sp.Expr) -> dict[sp.Expr, sp.Expr]:
    return {m: c for m, c in sp.expand(expr).as_coefficients_dict().items() if c != 0}


def _add(acc: dict[sp.Expr, sp.Expr], more: dict[sp.Expr, sp.Expr]) -> dict[sp.Expr, sp.Expr]:
    out = dict(acc)
    for m, c in more.items():
        out[m] = out.get(m, 0) + c
        if out[m] == 0:
            del out[m]
    return out


def _subtrees(pieces: Sequence[Piece]) -> list[str]:
    """Every node path that has two or more pieces under it, deepest first."""
    prefixes: dict[str, int] = {}
    for piece in pieces:
        parts = piece.path.split("/")
        for i in range(1, len(parts)):
            key = "/".join(parts[:i])
            prefixes[key] = prefixes.get(key, 0) + 1
    return sorted((p for p, count in prefixes.items() if count > 1), key=lambda p: -p.count("/"))


def match_pieces(target: sp.Expr, pieces: Sequence[Piece], degree: int, weights: Mapping[sp.Symbol, int],
                 limit: int = 3) -> list[Match]:
    """Ways to write ``target`` (one degree of a gap) as the degree-``degree`` parts of pieces.

    A whole subtree (every piece under one node path) comes first; then the fewest *units*, a unit
    being one piece or a whole subtree, each taken once or (in sums of at most two) twice: the MLP
    subtree plus two norm inputs, twice an embedding. Up to ``limit`` alternatives of that size.
    """
    goal = _coefficients(target)
    parts = [(p, degree_parts(p.expr, weights).get(degree, sp.Integer(0))) for p in pieces]
    parts = [(p, part, _coefficients(part)) for p, part in parts if part != 0]
    # A piece whose monomials the target lacks cannot be in a sum of positive pieces.
    usable = [x for x in parts if set(x[2]) <= set(goal)]
    for prefix in _subtrees([p for p, _, _ in parts]):
        inside = [x for x in parts if x[0].path.startswith(prefix + "/")]
        if len(inside) > 1 and _sum(inside) == goal:
            return [Match(tuple(p for p, _, _ in inside), tuple(q for _, q, _ in inside), prefix)]
    found = _fewest_units(goal, usable, limit)
    if found:
        return found
    if usable and _sum(usable) == goal:
        return [Match(tuple(p for p, _, _ in usable), tuple(q for _, q, _ in usable))]
    return []


def _fewest_units(goal: dict[sp.Expr, sp.Expr], usable: Sequence[tuple[Piece, sp.Expr, dict]],
                  limit: int) -> list[Match]:
    keys = sorted(goal, key=str)
    target = tuple(goal[k] for k in keys)
    units: list[tuple[tuple[int, ...], tuple, str]] = []  # (piece indices, coefficient vector, subtree or "")
    for i, (_, _, coeffs) in enumerate(usable):
        units.append(((i,), tuple(coeffs.get(k, 0) for k in keys), ""))
    seen: set[tuple[int, ...]] = set()
    for prefix in _subtrees([p for p, _, _ in usable]):  # deepest first: head/final_norm, not head
        idx = tuple(i for i, (p, _, _) in enumerate(usable) if p.path.startswith(prefix + "/"))
        if len(idx) > 1 and idx not in seen:
            seen.add(idx)
            units.append((idx, tuple(sum(usable[i][2].get(k, 0) for i in idx) for k in keys), prefix))
    # each unit once, in sums of 1 to MAX_PIECES units; only then twice, in sums of one or two
    half = sp.Rational(1, 2)  # a causal count halves the attention core; a packed 4-bit weight is half an element
    tries = [(size, 1) for size in range(1, MAX_PIECES + 1)] + [(1, 2), (2, 2), (1, half), (2, half)]
    for size, times in tries:
        found = [_unit_match(usable, combo, times) for combo in combinations(units, size)
                 if _fits(combo, times, target)]
        if found:
            # the simplest account first: the fewest kinds of tensor among the single pieces
            found.sort(key=_kinds)
            return found[:limit]
    return []


def _kinds(match: Match) -> int:
    """How many kinds of node the single pieces of a match come from (``saved by layer_norm``,
    ``LayerNorm weight``); a whole subtree counts as none. Two norm inputs are one kind."""
    whole = [sub for sub, _ in match.groups if sub]
    return len({p.what.split(" saved by ")[-1] for p in match.pieces
                if not any(p.path.startswith(sub + "/") for sub in whole)})


def _fits(combo: Sequence[tuple[tuple[int, ...], tuple, str]], times: int, target: tuple) -> bool:
    taken = [i for unit in combo for i in unit[0]]
    if len(taken) != len(set(taken)):
        return False
    return all(times * sum(unit[1][j] for unit in combo) == target[j] for j in range(len(target)))


def _unit_match(usable: Sequence[tuple[Piece, sp.Expr, dict]], combo: Sequence[tuple[tuple[int, ...], tuple, str]],
                times: int) -> Match:
    return Match(tuple(usable[i][0] for unit in combo for i in unit[0]),
                 tuple(usable[i][1] for unit in combo for i in unit[0]),
                 groups=tuple((unit[2], times) for unit in combo))


def _sum(items: Sequence[tuple[Piece, sp.Expr, dict]]) -> dict[sp.Expr, sp.Expr]:
    acc: dict[sp.Expr, sp.Expr] = {}
    for _, _, coeffs in items:
        acc = _add(acc, coeffs)
    return acc


@dataclass(frozen=True, slots=True)
class Gap:
    """One degree of ``ours - claim``: terms the claim lacks (``missing``), counts on top of ours
    (``extra``), or that no set of our pieces accounts for (``unexplained``)."""

    kind: str
    degree: int
    expr: sp.Expr
    matches: tuple[Match, ...] = ()
    below: int = 0  # orders below our leading terms (0: the leading order itself)

    @property
    def order(self) -> str:
        """``at leading order``, ``2 orders below leading``; a claim's term that grows faster than all
        of ours is ``1 order above our leading order`` (never a negative count below)."""
        if self.below == 0:
            return "at leading order"
        k = abs(self.below)
        return f"{k} order{'s' * (k > 1)} " + ("below leading" if self.below > 0 else "above our leading order")

    def text(self) -> str:
        if self.kind == "extra":
            return f"extra in the claim ({self.order}): {self.expr}, which our graph does not hold under these options"
        if self.kind == "unexplained":
            return f"missing from the claim ({self.order}): {self.expr}, not a sum of our terms"
        origins = " or ".join(_describe(m) for m in self.matches)
        return f"missing from the claim ({self.order}): {self.expr} = {origins}"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "orders_below_leading": max(self.below, 0),
                "orders_above_leading": max(-self.below, 0), "expr": str(self.expr),
                "origin": [[{"path": p.path, "what": p.what, "expr": str(q)} for p, q in zip(m.pieces, m.parts)]
                           for m in self.matches]}


def _describe(match: Match) -> str:
    """``layer/attn (linear weight 4*h**2*l)`` for a subtree; piece paths otherwise, a whole subtree
    among them named once (``layer/mlp 19*b*h*s + layer/norm1/x [...] 2*b*h*s``)."""
    if match.subtree:
        groups: dict[str, sp.Expr] = {}
        for piece, part in zip(match.pieces, match.parts):
            key = piece.what or piece.path
            groups[key] = groups.get(key, sp.Integer(0)) + part
        return f"{match.subtree} (" + ", ".join(f"{k} {sp.factor(e)}" for k, e in groups.items()) + ")"
    out, pairs = [], list(zip(match.pieces, match.parts))
    for subtree, times in match.groups or tuple(("", 1) for _ in pairs):
        if subtree:
            inside = [(p, q) for p, q in pairs if p.path.startswith(subtree + "/")]
            pairs = [x for x in pairs if x not in inside]
            whole = sp.factor(sp.Add(*(q for _, q in inside)))
            out.append(f"half of {subtree} {whole}" if times == sp.Rational(1, 2) else
                       f"{subtree} {whole}" + (f" (x{times})" if times > 1 else ""))
        else:
            p, q = pairs.pop(0)
            named = f"{p.path}" + (f" [{p.what}]" if p.what else "") + f" {sp.factor(q)}"
            out.append(f"half of {named}" if times == sp.Rational(1, 2) else
                       named + (f" (x{times})" if times > 1 else ""))
    return " + ".join(out)


def _signed(part: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """A sum split into its terms with positive and with negative numeric coefficients."""
    pos, neg = sp.Integer(0), sp.Integer(0)
    for term in sp.Add.make_args(part):
        coeff, _ = term.as_coeff_Mul()
        if coeff < 0:
            neg -= term
        else:
            pos += term
    return pos, neg


def find_gaps(ours: sp.Expr, theirs: sp.Expr, pieces: Sequence[Piece],
              weights: Mapping[sp.Symbol, int] | None = None) -> list[Gap]:
    """The gap ``ours - theirs`` degree by degree (``weights``: ``WIDTH`` unless given), traced to our pieces
    where possible.

    >>> from memderive.symbolic.dims_sympy import h
    >>> pieces = [Piece("layer/attn/w", 4 * h**2, "linear weight"), Piece("layer/mlp/w", 8 * h**2, "linear weight"),
    ...           Piece("layer/attn/b", 4 * h, "linear bias")]
    >>> [g.text() for g in find_gaps(12 * h**2 + 4 * h, 8 * h**2, pieces)]
    ['missing from the claim (at leading order): 4*h**2 = layer/attn/w [linear weight] 4*h**2', \
'missing from the claim (1 order below leading): 4*h = layer/attn/b [linear bias] 4*h']
    """
    weights = width() if weights is None else weights
    diff = sp.expand(ours - theirs)
    if sp.fraction(sp.together(diff))[1].is_Add:
        raise Unanalysable("the difference is not a sum of monomials")
    top = max(degree_parts(ours, weights), default=0)
    gaps = []
    for degree, part in degree_parts(diff, weights).items():
        missing, extra = _signed(part)
        if missing != 0:
            matches = match_pieces(missing, pieces, degree, weights)
            gaps.append(Gap("missing" if matches else "unexplained", degree, missing, tuple(matches), top - degree))
        if extra != 0:
            gaps.append(Gap("extra", degree, extra, (), top - degree))
    return gaps
