"""Claims that are numbers: a figure against ours for the model's sizes, its rounding, and the gap in graph terms.

A printed figure stands for an interval: ``12.9B`` for 12.85-12.95 x 10^9 (half a unit of its last
digit; ``derivations.claims.figures``). The verdict is ``exact`` when the claim equals ours, ``rounded``
when ours lies in the interval (the precision is said), ``different`` otherwise, with ours printed the
way the claim is (``ours is 37.55 x 10^9, which rounds to 38B``) and the gap traced to graph terms:

* accounting units notes leave out or count differently: an embedding, the position embedding, the
  LM head, every bias, every norm weight, the adapters, half of the layers' linear weights (a packed
  4-bit weight counted as half an element); one or two of them, as a whole;
* one size of the model taken otherwise (a vocabulary of 256,128 for 256,000: the gap is 128 h).

It also settles symbolic claims by the model's sizes (``model_pins``): a claim that leaves out a size
the model fixes (Falcon-7B's ``a_kv = 1``; DeepSeek-V2's ``d_c = 4 d_h``) is exact for that model.

>>> bounds_text((sp.Integer(12850000000), sp.Integer(12950000000)), (10**9, "B"), 1)
'12.85B-12.95B'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import cache
from itertools import combinations

from memderive.derivations.claims.analysis import Piece
from memderive.derivations.claims.context import Comparison, Context
from memderive.derivations.claims.figures import BINARY, BYTE_SCALES, figure_text
from memderive.derivations.claims.parser import ParsedFormula
from memderive.symbolic.derive import evaluate
from memderive.symbolic import dims_sympy as ds
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["number_lines", "model_pins", "bounds_text", "figure_gaps"]


@cache
def _step() -> frozenset[sp.Symbol]:
    """Sizes the options or the step give (never pinned by the model, never "taken otherwise")."""
    return frozenset({ds.b, ds.s, ds.n, ds.t, ds.p, ds.d, ds.m, ds.v, ds.ep, ds.r, ds.g, ds.Psi, ds.Psi_a})


def _value(expr: sp.Expr, values: Mapping[sp.Symbol, object]) -> sp.Rational | None:
    """``expr`` for the model's sizes, exactly; None when a size is missing or it is not a rational."""
    try:
        out = evaluate(sp.sympify(expr).xreplace({k: sp.Rational(val) for k, val in values.items()}), {})
    except (ValueError, TypeError):
        return None
    return out if getattr(out, "is_Rational", False) else None


def bounds_text(bounds: tuple[sp.Rational, sp.Rational], shape: tuple[object, str] | None, decimals: int) -> str:
    """The interval as the figure was printed (``12.85B-12.95B``) or in full digits."""
    scale, suffix = shape if shape is not None else (1, "")
    places = decimals + 1
    lo, hi = (Fraction(int(x.p), int(x.q)) / Fraction(scale) for x in bounds)  # type: ignore[arg-type]
    text = [f"{float(x):,.{places}f}".rstrip("0").rstrip(".") for x in (lo, hi)] if shape else \
        [f"{int(x):,}" if x.denominator == 1 else f"{float(x):.6g}" for x in (lo, hi)]
    return f"{text[0]}{suffix}-{text[1]}{suffix}"


def _precision(side: ParsedFormula) -> str:
    """``to 0.1B`` for ``12.9B``: the unit of its last printed digit."""
    if side.figure is None or side.shape is None or side.bounds is None:
        return "as its figures are printed"
    scale, suffix = side.shape
    unit = (side.bounds[1] - side.bounds[0]) / sp.Rational(Fraction(scale))  # type: ignore[arg-type]
    step = f"{float(unit):g}"
    return f"to {step}{suffix.strip() if suffix.strip() in ('B', 'M', 'K', 'T', '%') else suffix}"


def number_lines(ctx: Context, cmp: Comparison, side: ParsedFormula, factor: sp.Expr,
                 values: Mapping[sp.Symbol, object]) -> tuple[str, list[str]]:
    """``(verdict, explanation)`` of a claim that is a number, at the model's sizes."""
    mine = _value(cmp.ours, values)
    claim = sp.Rational(cmp.theirs)
    name = ctx.model.name
    if mine is None:
        return "different", [f"the claim is a number; ours is not a number for the sizes of {name}"]
    if mine == claim:
        return "exact", [f"the claim is a number, identical to ours for the sizes of {name}"]
    bounds = None if side.bounds is None else (side.bounds[0] * factor, side.bounds[1] * factor)
    if bounds is not None and bounds[0] <= mine <= bounds[1]:
        return "rounded", [f"the claim is a rounded figure: {side.text} stands for "
                           f"{bounds_text(bounds, side.shape, side.figure.decimals if side.figure else 0)} (printed "
                           f"{_precision(side)}); ours, {_shown(mine)} for {name}, lies within it"]
    binary = _relabelled(side, bounds, BINARY)
    if binary is not None and binary[0] <= mine <= binary[1]:
        return "rounded", [f"the claim holds if its {side.shape[1].strip()} means "
                           f"{BINARY[side.shape[1].strip()]} (as many notes write it): {side.text} stands for "
                           f"{_shown(binary[0])}-{_shown(binary[1])} bytes; ours is {_shown(mine)}"]
    decimal = _relabelled(side, bounds, _SI)
    if decimal is not None and decimal[0] <= mine <= decimal[1]:
        unit = side.shape[1].strip()
        return "different", [f"a figure in {_SI[unit]} labelled {unit}: {side.text} as {_SI[unit]} stands for "
                             f"{_shown(decimal[0])}-{_shown(decimal[1])} bytes, and ours, {_shown(mine)}, lies within "
                             f"it; as {unit} it is {int(bounds[0]):,}-{int(bounds[1]):,} bytes"]
    lines = [f"the claim is a figure; ours is {_shown(mine)} for the sizes of {name}"
             + (f", which rounds to {_like(mine / factor, side)} at the printed precision"
                if side.shape is not None and side.figure is not None and side.bounds is not None else "")]
    return "different", lines + figure_gaps(ctx, cmp, mine, claim, bounds, values)


def bound_lines(ctx: Context, cmp: Comparison, side: ParsedFormula, factor: sp.Expr,
                values: Mapping[sp.Symbol, object]) -> tuple[str, list[str]]:
    """``(verdict, explanation)`` of an inequality ("less than 400 MB", "up to 1.7 GB", ``M \\ge 2lh``) at the
    model's sizes: ``bound`` when ours lies on the claimed side, ``rounded`` when it passes the figure by less
    than its printed precision, else ``different``."""
    mine, claim = _value(cmp.ours, values), _value(cmp.theirs, values)
    name = ctx.model.name
    if mine is None or claim is None:
        return "different", [f"an inequality: ours or the claim is not a number for the sizes of {name}"]
    below = side.relation == "below"
    word = "at most" if below else "at least"
    steps = ", ".join(f"{x} = {values[x]:,}" for x in sorted(cmp.ours.free_symbols & _step(), key=str) if x in values)
    name = f"{name} ({steps})" if steps else name
    sizes = "" if cmp.theirs.is_Number else f" (both at the sizes of {name}: a bound checked there, not for every size)"
    if (mine <= claim) if below else (mine >= claim):
        return "bound", [f"the claim is a bound: ours, {_shown(mine)} for {name}, is {word} {_shown(claim)}{sizes}"]
    bounds = None if side.bounds is None else (side.bounds[0] * factor, side.bounds[1] * factor)
    if bounds is not None and ((mine <= bounds[1]) if below else (mine >= bounds[0])):
        return "rounded", [f"the claim is a bound to its printed precision ({_precision(side)}): ours, {_shown(mine)}, "
                           f"passes {_shown(claim)} by less than that"]
    return "different", [f"the claim is a bound that does not hold: ours, {_shown(mine)} for {name}, is "
                         f"{'more' if below else 'less'} than {_shown(claim)}{sizes}"]


def _shown(value: sp.Rational) -> str:
    return f"{int(value):,}" if value.q == 1 else f"{float(value):,.6g}"


def _like(value: sp.Rational, side: ParsedFormula) -> str:
    scale, suffix = side.shape  # type: ignore[misc]
    return figure_text(Fraction(int(value.p), int(value.q)), side.figure, scale, suffix)  # type: ignore[arg-type]


#: Binary byte units and the SI unit a figure labelled so may have been computed in.
_SI = {"KiB": "kB", "MiB": "MB", "GiB": "GB", "TiB": "TB"}


def _relabelled(side: ParsedFormula, bounds: tuple[sp.Rational, sp.Rational] | None,
                table: Mapping[str, str]) -> tuple[sp.Rational, ...] | None:
    """The interval of a figure read in the other unit ``table`` gives for its own: KB/MB/GB/TB as
    KiB/MiB/GiB/TiB (``BINARY``), or KiB/MiB/GiB/TiB as kB/MB/GB/TB (``_SI``: a GB figure labelled GiB)."""
    if bounds is None or side.shape is None or side.shape[1].strip() not in table:
        return None
    unit = side.shape[1].strip()
    ratio = sp.Rational(BYTE_SCALES[table[unit]], BYTE_SCALES[unit])
    return bounds[0] * ratio, bounds[1] * ratio


def _units(ctx: Context, pieces: Sequence[Piece], values: Mapping[sp.Symbol, object]) -> list[tuple[str, sp.Rational]]:
    """The accounting units notes leave out or count otherwise, with their values for the model."""
    units: dict[str, sp.Expr] = {p.path: p.expr for p in pieces if p.path.startswith(("embed/", "head/"))}
    for piece in pieces:
        if ".lora_" in piece.path:
            key = "the adapters (lora_A, lora_B)"
        elif piece.what.endswith("bias") or "Norm weight" in piece.what:
            key = f"every {piece.what}"
        else:
            continue
        units[key] = units.get(key, sp.Integer(0)) + piece.expr
    linear = sum((blk.repeat * op.share * x.numel for blk, op in ctx.graph.ops() if blk.name in ("layer", "first_layer")
                  and op.kind in ("linear", "experts") and ".lora_" not in op.path
                  for x in op.params if x.role == "weight"), 0)
    if linear:
        units["1/2 x the linear weights of the layers (4-bit weights packed two per byte)"] = sp.sympify(linear) / 2
    if ctx.spec.name.startswith(("flops", "activations")):
        units.update(_node_units(pieces))
    out = [(name, _value(expr, values)) for name, expr in units.items()]
    return [(name, value) for name, value in out if value]


#: The parts of a FLOPs breakdown's leaf names that make the backward pass.
_BACKWARD = {"input-grad": "the input gradients", "weight-grad": "the weight gradients"}


def _node_units(pieces: Sequence[Piece]) -> dict[str, sp.Expr]:
    """FLOPs and activations by graph node (``the attention core (layer/attn/core)``, ``head/lm_head``) and,
    for FLOPs, the backward pass and its two halves: the units a figure for them leaves out or adds."""
    nodes: dict[str, sp.Expr] = {}
    for piece in pieces:
        parts = piece.path.split("/")
        for depth in range(2, len(parts)):
            node = "/".join(parts[:depth])
            nodes[node] = nodes.get(node, sp.Integer(0)) + piece.expr
    named = {_NODE_NAMES.get(node.split("/", 1)[-1], node) + f" ({node})" if node.split("/", 1)[-1] in _NODE_NAMES
             else node: expr for node, expr in nodes.items()}
    kinds: dict[str, sp.Expr] = {}
    for piece in pieces:
        kind = piece.path.rsplit("/", 1)[-1]
        if kind in _BACKWARD:
            kinds[_BACKWARD[kind]] = kinds.get(_BACKWARD[kind], sp.Integer(0)) + piece.expr
            kinds["the backward pass"] = kinds.get("the backward pass", sp.Integer(0)) + piece.expr
    return {**named, **kinds}


#: Readers' names of graph nodes (the path under ``layer/`` or ``head/``).
_NODE_NAMES = {"attn/core": "the attention core", "attn": "attention", "mlp": "the MLP", "lm_head": "the LM head",
               "loss": "the loss's logits", "attn/qkv": "the QKV projections", "attn/proj": "the output projection",
               "final_norm": "the final norm"}


def _one_layer(ctx: Context, cmp: Comparison, lo: sp.Rational, hi: sp.Rational,
               values: Mapping[sp.Symbol, object]) -> list[str]:
    """A total that is one layer's worth: the layers' terms over l (with or without the rest)."""
    l = ds.l
    if l not in values or values[l] in (0, 1):
        return []
    layers = sum((p.expr for p in cmp.pieces if p.path.startswith(("layer/", "first_layer/"))), sp.Integer(0))
    rest = sum((p.expr for p in cmp.pieces if not p.path.startswith(("layer/", "first_layer/"))), sp.Integer(0))
    one = _value(layers / l, values)
    other = _value(rest, values) or sp.Integer(0)
    if one is None:
        return []
    for value, word in ((one, ""), (one + other, " (with the terms outside the layers)")):
        if value and lo <= value <= hi:
            return [f"the claim is one layer's worth of ours{word}: {_shown(value)}, 1/l of the layers' "
                    f"{_shown(one * sp.Integer(values[l]))} (l = {values[l]:,}); a per-layer figure given as the total"]
    return []


def figure_gaps(ctx: Context, cmp: Comparison, mine: sp.Rational, claim: sp.Rational,
                bounds: tuple[sp.Rational, sp.Rational] | None, values: Mapping[sp.Symbol, object]) -> list[str]:
    """The gap of a figure in graph terms: units it leaves out (or adds), or one size taken otherwise."""
    lo, hi = bounds if bounds is not None else (claim, claim)
    if ctx.spec.per != "layer" and (layer := _one_layer(ctx, cmp, lo, hi, values)):
        return layer
    units = _units(ctx, cmp.pieces, values)
    for size in (1, 2):
        found = []
        for combo in combinations(units, size):
            total = sum(value for _, value in combo)
            for sign, word in ((1, "without"), (-1, "with an extra")):
                if lo <= mine - sign * total <= hi:
                    found.append(f"the claim is ours {word} {' + '.join(name for name, _ in combo)} "
                                 f"({_shown(total)})")
        if found:
            return found[:2]
    return _one_size(ctx, cmp, mine, claim, values) if bounds is None else []


def _one_size(ctx: Context, cmp: Comparison, mine: sp.Rational, claim: sp.Rational,
              values: Mapping[sp.Symbol, object]) -> list[str]:
    """``V = 256,128 instead of 256,000``: one size changed by a whole number makes ours the claim."""
    for x in sorted(cmp.ours.free_symbols - _step(), key=str):
        if x not in values:
            continue
        slope = sp.diff(cmp.ours, x)
        rest = {k: val for k, val in values.items() if k != x}
        per = _value(slope.xreplace({x: sp.Integer(values[x])}), rest) if slope.free_symbols - {x} else None
        if not per:
            continue
        delta = (claim - mine) / per
        if delta.q != 1 or abs(delta) > sp.Rational(values[x]) / 10:
            continue
        if _value(cmp.ours, {**values, x: values[x] + int(delta)}) == claim:
            return [f"the claim equals ours with {x} = {int(values[x]) + int(delta):,} instead of {int(values[x]):,}: "
                    f"the gap is {int(delta)}·{sp.factor(slope)}"]
    return []


def model_pins(ctx: Context, cmp: Comparison) -> dict[sp.Symbol, object] | None:
    """The model's sizes on one side only (the claim leaves out a_kv; ours has no d_h) that make the two
    equal when pinned to their values for this model; None when none do."""
    one_sided = (cmp.ours.free_symbols ^ cmp.theirs.free_symbols) - _step()
    if not one_sided or not one_sided <= set(ctx.values):
        return None
    pins = {x: ctx.values[x] for x in sorted(one_sided, key=str)}
    exact = {x: sp.Rational(val) for x, val in pins.items()}
    diff = sp.expand(cmp.ours.xreplace(exact) - cmp.theirs.xreplace(exact))
    return pins if diff == 0 or sp.cancel(sp.together(diff)) == 0 else None
