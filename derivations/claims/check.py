"""Check a formula from teaching material against the derivation: is it right?

A ``Claim`` names one of our quantities, the formula as the author wrote it (Python or LaTeX),
how the author's letters map onto ours, the options it is claimed under and its unit. ``check``
reads it with the restricted parser (never ``eval``), derives our closed form for the same
model and options, and returns a ``CheckResult`` whose verdict is one of:

* ``exact``: claim - ours expands to 0 for all sizes, once the family's relations
  (``d_h = h/a``, ``a_kv = a``, ``f = 4h`` for GPT) are applied;
* ``conditional``: not exact as given, but exact under one alternative option (FlashAttention
  off, dropout on, another recompute level or profile, tied embeddings, ...), which is named;
* ``leading-order``: claim/ours -> 1 as the model grows (``derivations.claims.analysis``: h, a,
  a_kv, f and l -> oo together, d_h, b, s, V fixed); the missing lower-order terms are named
  with the breakdown nodes they come from;
* ``bound``: an inequality ("less than 400 MB", "up to 1.7 GB") that ours satisfies at the model's sizes;
* ``different``: anything else, with a constant factor where there is one, the terms that make
  the gap and a counterexample with the numbers of a bundled model.

>>> r = check("activations.per_layer", "sbh(34 + 5as/h)", attention="eager")  # Korthikanti et al.: scores saved
>>> r.verdict
'exact'
>>> check("params.total", "12lh^2").verdict
'leading-order'
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from memderive.derivations.claims.analysis import (Gap, Unanalysable, constant_factor, describe_scaling,
                                                   find_gaps, leading, ratio_limit, sequence, width)
from memderive.derivations.claims.spec import QUANTITIES, ClaimError, QuantitySpec, quantity_spec
from memderive.derivations.claims.context import Comparison, Context, alternatives, build_context, unit_factor
from memderive.derivations.claims.conditions import conditions
from memderive.derivations.claims.numbers import bound_lines, model_pins, number_lines
from memderive.derivations.claims.parser import ParsedFormula, parse_formula
from memderive.derivations.claims.symbols import HINTS, context_notes, default_symbols, our_symbols, parse_symbols
from memderive.derivations.models.model import Model
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import Options
from memderive.derivations.references import cite
from memderive.symbolic.derive import evaluate
from memderive.symbolic import dims_sympy as ds
from memderive.symbolic.errors import DerivationError
from memderive.symbolic.lazy import lazy, lazy_names

sp = lazy("sympy")

__all__ = ["Claim", "CheckResult", "Counterexample", "QuantitySpec", "QUANTITIES", "VERDICTS", "ClaimError",
           "check", "check_claim", "quantity_spec", "default_symbols", "parse_symbols"]

#: ``OURS`` (``symbols.OURS``) read from here too, built on first read
__getattr__ = lazy_names(__name__, OURS=our_symbols)

VERDICTS = ("exact", "rounded", "bound", "conditional", "leading-order", "different")
DEFAULT_MODEL = "gpt3-175b"
#: family names accepted for --model, with the bundled model that stands for them
FAMILIES = {"gpt": "gpt3-175b", "gpt2": "gpt2", "llama": "llama-2-7b", "mistral": "mistral-7b", "bert": "bert-base"}


@dataclass(frozen=True, slots=True)
class Claim:
    """A formula claimed for one of our quantities, under some options.

    ``options`` holds ``Options`` fields (``tp``, ``flash``, ``recompute``, ...); ``units`` is
    ``bytes`` or ``elements`` (None: the quantity's own unit, or a trailing ``\\text{bytes}``);
    ``expect`` a verdict the author claims (``leading-order`` for an approximation).
    """

    quantity: str
    formula: str
    symbols: str | Mapping[str, Any] = ""
    model: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    units: str | None = None
    syntax: str = "auto"
    expect: str | None = None


@dataclass(frozen=True, slots=True)
class Counterexample:
    """Both formulas evaluated for a bundled model: the sizes used, the two numbers and their ratio."""

    model: str
    values: Mapping[str, int | float]
    ours: int | sp.Rational  # whole bytes, elements or FLOPs; bits and ratios exactly
    claim: sp.Rational
    exact: sp.Rational | None = None  # ours before rounding up to whole bytes: the ratio uses it

    @property
    def ratio(self) -> float:
        """claim / ours, exactly as computed (a fractional Psi rounds ``ours`` for display only)."""
        mine = self.ours if self.exact is None else self.exact
        return float(self.claim / mine) if mine else float("nan")

    def to_json(self) -> dict[str, Any]:
        claim = int(self.claim) if self.claim.q == 1 else str(self.claim)
        ours = self.ours if isinstance(self.ours, int) else (int(self.ours) if self.ours.q == 1 else str(self.ours))
        return {"model": self.model, "values": dict(self.values), "ours": ours, "claim": claim,
                "ratio": round(self.ratio, 6)}


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The verdict on a claim, with the evidence: both closed forms, the gap and its origin."""

    claim: Claim
    spec: QuantitySpec
    title: str
    verdict: str
    parsed: ParsedFormula
    theirs: sp.Expr  # the claim in our symbols and in the quantity's unit
    ours: sp.Expr  # our closed form
    difference: sp.Expr  # ours - theirs, expanded
    explanation: tuple[str, ...]
    gaps: tuple[Gap, ...] = ()
    factor: sp.Expr | None = None
    holds_under: tuple[str, ...] = ()
    counterexample: Counterexample | None = None
    notes: tuple[str, ...] = ()
    model: str = ""
    citation: str = ""
    pins: Mapping[sp.Symbol, sp.Expr] = field(default_factory=dict)  # our symbols pinned on both sides

    @property
    def holds(self) -> bool:
        """Exact; or leading-order when the author wrote an approximation (``\\approx``) or expected it."""
        if self.claim.expect is not None:
            return self.verdict == self.claim.expect
        return self.verdict in ("exact", "rounded", "bound") or (self.verdict == "leading-order"
                                                         and self.parsed.relation == "approx")

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "holds": self.holds, "quantity": self.spec.name, "unit": self.spec.unit,
                "model": self.model, "claim": str(self.theirs), "ours": str(self.ours),
                "difference": str(sp.factor_terms(self.difference)),
                "factor": None if self.factor is None else str(self.factor),
                "holds_under": list(self.holds_under), "explanation": list(self.explanation),
                "gaps": [g.to_json() for g in self.gaps],
                "counterexample": None if self.counterexample is None else self.counterexample.to_json(),
                "notes": list(self.notes)}


def check(quantity: str, formula: str, *, symbols: str | Mapping[str, Any] = "", model: str | None = None,
          units: str | None = None, syntax: str = "auto", expect: str | None = None, **options: Any) -> CheckResult:
    """Check ``formula`` for ``quantity`` (see the module docstring); ``options`` are ``Options`` fields.

    >>> check("model_states.total", "20*Phi").factor  # Zhihu: 20 bytes per parameter
    5/4
    """
    return check_claim(Claim(quantity, formula, symbols, model, dict(options), units, syntax, expect))


#: Options a parameter count depends on: the dtype, and which parameters train (adapters, frozen modules).
PARAM_FIELDS = ("mode", "dtype", "lora_rank", "lora_targets", "dora", "train_only", "freeze_embeddings")


def _options(spec: QuantitySpec, given: Mapping[str, Any], seq: int) -> Options:
    Options.check_names(given)  # also where the quantity ignores them (a parameter count and --zero)
    fields = {"batch": 1, "seq": seq, **dict(given), "mode": spec.mode}
    if spec.mode == "params":
        fields = {k: v for k, v in fields.items() if k in PARAM_FIELDS}
    try:
        return Options.from_keywords(fields)  # a framework= key fills in its preset, as on the command line
    except TypeError as exc:
        raise ClaimError(f"unknown option: {exc}") from None


def _with_degrees(spec: QuantitySpec, expr: sp.Expr, given: Mapping[str, Any], seq: int,
                  model: str) -> tuple[Context, list[str]]:
    """The context; a claim that uses t, p or d while the options leave them at 1 turns them on."""
    notes: list[str] = []
    fields = dict(given)
    for symbol, option, what in ((ds.t, "tp", "tensor parallelism"), (ds.p, "pp", "pipeline parallelism"),
                                 (ds.d, "dp", "data parallelism")):
        if symbol in expr.free_symbols and fields.get(option, 1) == 1 and spec.mode != "params":
            for degree in (8, 4, 2):
                try:
                    build_context(spec, model, _options(spec, {**fields, option: degree}, seq))
                except (DerivationError, ValueError):
                    continue
                fields[option] = degree
                notes.append(f"the claim uses {symbol}: checked with {what} ({symbol} symbolic; {symbol}={degree} "
                             f"in numbers); map {symbol}=1 to check it without")
                break
    return build_context(spec, model, _options(spec, fields, seq)), notes


def _resolve_model(name: str | None) -> str:
    name = name or DEFAULT_MODEL
    return FAMILIES.get(name.lower(), name) if isinstance(name, str) else name


def check_claim(claim: Claim) -> CheckResult:
    """Check one claim; ``ClaimError``/``FormulaError``/``DerivationError`` for one it cannot read.

    A chain ``M = A = B`` is checked step by step: the result is the first step that does not
    hold (never a pass because the last step holds), or the last step when every step holds.
    """
    if isinstance(claim.formula, str) and "||" in claim.formula:  # parse_formula refuses a formula that is no text
        return _printout(claim)
    spec = quantity_spec(claim.quantity)
    model = _resolve_model(claim.model)
    if claim.expect is not None and claim.expect not in VERDICTS:
        raise ClaimError(f"expect must be one of {', '.join(VERDICTS)}, not {claim.expect!r}")
    seq = int(claim.options.get("seq") or _default_seq(model, claim.options))
    model, past = _past_positions(model, claim.options, seq)
    probe = build_context(spec, model, _options(spec, claim.options, seq))
    mapping = parse_symbols(claim.symbols)
    # a model with a sliding window defines W: notes write W, w or sliding_window for it
    window = {k: ds.w for k in _WINDOW_NAMES} if ds.w in probe.values else {}
    parsed = parse_formula(claim.formula, {**default_symbols(spec, probe.k_bytes), **window, **mapping}, claim.syntax,
                           counting=spec.counting, hints=HINTS)
    spec, shared = _share_of_total(spec, parsed, claim)
    sides = parsed.chain or (parsed,)
    # a cache claim with no n anywhere (no side of a chain, no mapping of the letter) describes a prompt's cache
    prompt = not any(ds.n in side.expr.free_symbols for side in sides) and "n" not in mapping
    results = [_check_side(claim, spec, model, seq, side, mapping, prompt) for side in sides]
    bad = next((i for i, r in enumerate(results) if not r.holds), None)
    pick = results[-1 if bad is None else bad]
    lines = list(pick.explanation)
    if len(results) > 1:
        steps = ", ".join(f"{r.verdict}" for r in results)
        head = (f"every step of the chain holds ({steps})" if bad is None else
                f"the chain does not hold at step {bad + 1} of {len(results)}, {sides[bad].text} (steps: {steps})")
        lines.insert(0, head)
    notes = (_mapping_notes(mapping, parsed, pick.pins) + context_notes(spec, parsed.names, mapping)
             + list(parsed.readings) + shared + past + _label_model(parsed.label, pick.model) + list(pick.notes))
    return replace(pick, explanation=tuple(lines), notes=tuple(notes))


#: PEFT's print_trainable_parameters() line, "trainable params: X || all params: Y || trainable%: Z": the
#: quantity each label names (the percentage is the trainable share: ``_share_of_total``).
_PRINTOUT = (("trainable", "params.trainable"), ("all param", "params.total"), ("total param", "params.total"))


def _printout(claim: Claim) -> CheckResult:
    """A line of figures joined by ``||`` (PEFT's printout), each checked as the quantity its label names;
    the result is the first figure that does not hold, or the last, with every figure's verdict said."""
    parts = [x.strip() for x in claim.formula.split("||") if x.strip()]
    if not parts:
        raise ClaimError("a printout joined by '||' with no figure in it")
    results = []
    for part in parts:
        label = part.split(":", 1)[0].lower() if ":" in part else ""
        quantity = next((q for key, q in _PRINTOUT if key in label), claim.quantity)
        results.append(check_claim(replace(claim, quantity=quantity, formula=part)))
    bad = next((r for r in results if not r.holds), None)
    pick = bad or results[-1]
    said = "; ".join(f"{r.parsed.text.strip()}: {r.verdict}" for r in results)
    return replace(pick, explanation=(f"a printout of {len(results)} figures, each checked as its label names "
                                      f"({said})", *pick.explanation))


#: The names notes give a model's sliding window (Mistral's config field is sliding_window).
_WINDOW_NAMES = ("W", "w", "sliding_window", "window", "window_size", "W_{window}")


def _label_model(label: str, model: str) -> list[str]:
    """``N(llama2-7b) =`` checked with another model: said (the label names what the figure is of)."""
    named = re.search(r"\(\s*([A-Za-z][\w.\- ]*?)\s*\)\s*$", label)
    if named is None or not re.search(r"\d", named.group(1)):
        return []
    said, ours = (re.sub(r"[^a-z0-9]", "", x.lower()) for x in (named.group(1), model))
    if said in ours or ours in said:
        return []
    return [f"unsure: the left-hand side names {named.group(1)}; checked with {model} (--model checks another)"]


def _share_of_total(spec: QuantitySpec, parsed: ParsedFormula, claim: Claim) -> tuple[QuantitySpec, list[str]]:
    """A percentage claimed for a part of the parameter count (PEFT's ``trainable%: 0.59`` for
    params.trainable) is that part's share of the total: the quantity becomes ``part/params.total``."""
    if parsed.unit != "ratio" or spec.parts or spec.unit != "elements" or claim.units is not None \
            or not spec.name.startswith("params.") or spec.name == "params.total":
        return spec, []
    share = quantity_spec(f"{spec.name}/params.total")
    return share, [f"a percentage of a count: read as {share.name} (the share of all parameters, as PEFT prints "
                   "trainable%)"]


def _check_side(claim: Claim, spec: QuantitySpec, model: str, seq: int, side: ParsedFormula,
                mapping: Mapping[str, sp.Expr], prompt: bool = False) -> CheckResult:
    expr, notes = _per_parameter(spec, side.expr)
    ctx, more = _with_degrees(spec, expr, claim.options, seq, model)
    renamed = {k for k, v in mapping.items() if k in side.names and isinstance(v, sp.Symbol)}
    ctx = replace(ctx, pins=_pins(spec, ctx, claim.options, {k: v for k, v in mapping.items() if k not in renamed}))
    by = {symbol: "--" + option.replace("_", "-") for option, symbol in _pinned_by().items()}
    notes += more + [f"{x} = {v} on both sides (pinned{' by ' + by[x] if x in by and x not in _mapped(mapping) else ''})"
                     for x, v in ctx.pins.items()] + _window_notes(ctx, expr)
    if prompt and _prompt_cache(spec, ctx, expr):  # a cache formula without n describes the cache of its s tokens
        ctx = replace(ctx, pins={**ctx.pins, ds.n: sp.Integer(0)})
        notes.append("n = 0 on both sides: the claim has no n, so its s counts every cached token (the cache of a "
                     "prompt; --new-tokens N counts N generated tokens apart)")
    factor, unit_note = unit_factor(spec, claim.units or side.unit or spec.unit, ctx)
    cmp = ctx.compare(expr * factor)
    notes += [x for x in (unit_note, cmp.note) if x]
    for item in side.per:
        cmp, per_note = _per_item(spec, ctx, cmp, item)
        notes.append(per_note)
    if side.relation in ("below", "above"):
        verdict, lines = bound_lines(ctx, cmp, side, factor, ctx.values)
        return _result(claim, ctx, side, verdict, cmp, notes, lines)
    if _is_zero(cmp.ours - cmp.theirs):
        return _result(claim, ctx, side, "exact", cmp, notes, ["identical for all sizes"])
    settled, named = _model_settles(ctx, cmp, mapping)
    if named and _is_zero(settled.ours - settled.theirs):
        return _result(claim, ctx, side, "exact", cmp, notes,
                       [f"exact once {named}: the model defines it (--symbols pins another value), not for every "
                        "value"])
    if not cmp.theirs.is_Number and (fixed := model_pins(ctx, cmp)) is not None:
        sizes = ", ".join(f"{x} = {v:,}" for x, v in fixed.items())
        return _result(claim, ctx, side, "exact", cmp, notes,
                       [f"exact for the sizes of {ctx.model.name} ({sizes}), not for every size"])
    return _judge(claim, spec, ctx, side, cmp, notes, expr * factor, factor)


#: How many of an item a quantity counts, by the item a figure is given for (``5.3GB / sequence``).
_PER_LAYER = ("per_layer", "attention_per_layer", "per_dense_layer")


def _per_item(spec: QuantitySpec, ctx: Context, cmp: Comparison, item: str) -> tuple[Comparison, str]:
    """Ours for one item (token, sequence, layer) when the claim is a figure per item: ours divided by the
    items it counts (b sequences; b(s + n) cached tokens or bs tokens of a step; l layers), said in a note."""
    held = cmp.ours.free_symbols
    if item == "GPU":
        return cmp, f"the figure is for one GPU; {spec.name} is per GPU already"
    if item == "layer":
        count = sp.Integer(1) if spec.name.endswith(_PER_LAYER) else ds.l
        what = "l layers"
    elif item == "token":
        count = sp.Integer(1) if spec.name.endswith("per_token") or spec.name.endswith("per_position") else (
            ds.b * (ds.s + ds.n) if spec.mode == "infer" and ds.n in held else ds.b * ds.s)
        what = "b(s + n) tokens" if count == ds.b * (ds.s + ds.n) else "bs tokens"
    else:
        count, what = ds.b, "b sequences"
    count = ctx.pin(count)  # --batch 8 pins b on both sides
    if count == 1 or not (count.is_Number or count.free_symbols & held):
        return cmp, f"the figure is for one {item}; {spec.name} already counts one"
    scaled = tuple(replace(p, expr=p.expr / count) for p in cmp.pieces)
    ours = sp.expand(sp.cancel(cmp.ours / count))
    return (replace(cmp, ours=ours, pieces=scaled, display=sp.cancel(cmp.display / count)),
            f"the figure is for one {item}: compared with ours over {what} ({sp.factor(ours)})")


def _model_settles(ctx: Context, cmp: Comparison, mapping: Mapping[str, sp.Expr]) -> tuple[Comparison, str]:
    """Both sides with the sizes the model defines (its window w, l_w, heads, layers, experts, the LoRA rank)
    that sit inside a min/max given the model's values, where the user pinned none of them: a note's "replace
    the sequence length by the window W" is W = 4,096 for Mistral-7B. Returns the comparison and the sizes said
    (``w = 4,096``), or the comparison unchanged and "" when nothing is settled."""
    calls = [x for side in (cmp.ours, cmp.theirs) for x in sp.preorder_traversal(side)
             if isinstance(x, (sp.Min, sp.Max))]
    inside = set().union(*(c.free_symbols for c in calls)) if calls else set()
    steps = {ds.b, ds.s, ds.n, ds.t, ds.p, ds.d, ds.Psi}
    fixed = {x: ctx.values[x] for x in sorted(inside, key=str)
             if x in ctx.values and x not in steps and x not in ctx.pins and x not in _mapped(mapping)}
    if not fixed:
        return cmp, ""
    exact = {x: sp.Rational(v) for x, v in fixed.items()}
    settled = replace(cmp, ours=sp.expand(ctx.pin(cmp.ours.xreplace(exact))),
                      theirs=sp.expand(ctx.pin(cmp.theirs.xreplace(exact))))
    return settled, ", ".join(f"{x} = {v:,}" for x, v in fixed.items()) + f", {ctx.model.name}'s own"


def _at_sizes(ctx: Context, cmp: Comparison) -> tuple[Comparison, str]:
    """Each min/max on either side replaced by the argument that wins at the model's and the step's sizes
    (innermost first): where leading order cannot be decided through a min/max, the note's sizes decide
    which branch it is on. Returns the comparison and a line naming the sizes, or "" when there is none."""
    values = {x: sp.Rational(v) for x, v in ctx.values.items()}

    def settle(call: sp.Expr) -> sp.Expr:
        try:
            numbers = [evaluate(arg.xreplace(values), {}) for arg in call.args]
        except ValueError:  # a size the model lacks: the min/max stays
            return call
        if not all(getattr(x, "is_Rational", False) for x in numbers):
            return call
        pick = min if isinstance(call, sp.Min) else max
        return call.args[numbers.index(pick(numbers))]

    def settled(expr: sp.Expr) -> sp.Expr:
        return expr.replace(lambda x: isinstance(x, (sp.Min, sp.Max)), settle) if expr.has(sp.Min, sp.Max) else expr

    ours, theirs = settled(cmp.ours), settled(cmp.theirs)
    if ours.has(sp.Min, sp.Max) or theirs.has(sp.Min, sp.Max) or (ours, theirs) == (cmp.ours, cmp.theirs):
        return cmp, ""
    pieces = tuple(replace(x, expr=settled(x.expr)) for x in cmp.pieces)
    steps = ", ".join(f"{x} = {ctx.values[x]:,}" for x in sorted((cmp.ours.free_symbols | cmp.theirs.free_symbols)
                                                                    & {ds.b, ds.s, ds.n}, key=str) if x in ctx.values)
    return (replace(cmp, ours=sp.expand(ours), theirs=sp.expand(theirs), pieces=pieces),
            f"each min/max taken at the branch the sizes of {ctx.model.name}{' (' + steps + ')' if steps else ''} "
            "put it on: the analysis below holds there, not for every size")


def _branches(expr: sp.Expr, limit: int = 64) -> list[sp.Expr]:
    """``expr`` with each min/max replaced by one of its arguments, in every combination (at most ``limit``):
    at any sizes, the expression equals one of these."""
    call = next((x for x in sp.preorder_traversal(expr) if isinstance(x, (sp.Min, sp.Max))), None)
    if call is None:
        return [expr]
    out: list[sp.Expr] = []
    for arg in call.args:
        out += _branches(expr.xreplace({call: arg}), limit)
        if len(out) > limit:
            raise Unanalysable(f"more than {limit} branches of min/max")
    return out


def _branches_agree(cmp: Comparison) -> bool:
    """Whether every branch of the min/max on each side has the same leading part (bounding each branch decides
    the leading order for every size: ours equals one branch at any sizes, and each grows alike)."""
    try:
        return all(len({leading(x, width()) for x in _branches(side)}) == 1 for side in (cmp.ours, cmp.theirs))
    except Unanalysable:
        return False


def _prompt_cache(spec: QuantitySpec, ctx: Any, expr: sp.Expr) -> bool:
    """A KV-cache claim without ``n`` and nothing pinning n (``--new-tokens``, a mapping): read as the cache of s
    tokens, n = 0, rather than held short by the n tokens our cache of s + n counts."""
    return (spec.name.startswith("kv_cache") and ds.n in ctx.quantity.breakdown.total.free_symbols
            and ds.n not in getattr(expr, "free_symbols", set()) and ds.n not in ctx.pins)


def _mapped(mapping: Mapping[str, sp.Expr]) -> set[sp.Expr]:
    table = our_symbols()
    return {table[k] for k in mapping if k in table}


def _pins(spec: QuantitySpec, ctx: Context, options: Mapping[str, Any],
          mapping: Mapping[str, sp.Expr]) -> dict[sp.Symbol, sp.Expr]:
    """Our symbols pinned on both sides: one of ours mapped to something else (``n=0``,
    ``f=8*h/3``) when our derivation uses it (a letter the claim uses, mapped to one letter of ours,
    is the author's own: ``n=l`` for a note whose n counts layers), and n by an explicit
    ``--new-tokens`` (0 included)."""
    ours, table = ctx.quantity.breakdown.total.free_symbols, our_symbols()
    pins = {table[k]: v for k, v in mapping.items() if k in table and v != table[k] and table[k] in ours}
    for option, symbol in _pinned_by().items():
        if options.get(option) is not None and symbol in ours:
            pins.setdefault(symbol, sp.Integer(int(options[option])))
    return pins


@cache
def _pinned_by() -> dict[str, sp.Symbol]:
    """Options that, when given, pin their symbol on both sides (0 new tokens included: a prompt-only cache)."""
    return {"new_tokens": ds.n, "lora_rank": ds.r, "batch": ds.b, "seq": ds.s}


#: Bytes per parameter a bare number may stand for (16 for mixed-precision Adam, 20 for the widest accountings).
_PER_PARAMETER = 64


def _per_parameter(spec: QuantitySpec, expr: sp.Expr) -> tuple[sp.Expr, list[str]]:
    """A bare number of model-state bytes (``(2+4)+(2+4)+(4+4)``, "16 bytes per parameter") is a
    multiple of the parameter count."""
    if spec.name == "model_states.total" and expr.is_Number and 0 < expr <= _PER_PARAMETER:
        return expr * ds.Psi, [f"a number of bytes per parameter: read as {expr}*Psi"]
    return expr, []


def _mapping_notes(mapping: Mapping[str, sp.Expr], parsed: ParsedFormula,
                   pins: Mapping[sp.Symbol, sp.Expr]) -> list[str]:
    """``--symbols`` entries that change nothing, said rather than dropped."""
    notes, table = [], our_symbols()
    for key, value in mapping.items():
        if key in parsed.names or (key in table and table[key] in pins):
            continue
        why = (f"the claim does not use {key} and ours has no {key} under these options" if key in table
               else f"{key} is not in the claim")
        notes.append(f"--symbols {key}={value} changes nothing: {why}")
    return notes


def _default_seq(model: str, given: Mapping[str, Any]) -> int:
    """2048, or as many positions as a model with learned positions has left after the new tokens."""
    loaded = resolve_model(model)
    if loaded.arch.positions != "learned" or not loaded.max_positions:
        return 2048
    return max(1, min(2048, loaded.max_positions - int(given.get("new_tokens") or 0)))


def _past_positions(model: str, given: Mapping[str, Any], seq: int) -> tuple[str | Model, list[str]]:
    """A length past a model's learned positions ("at a hypothetical 16,000 tokens") is checked as the formula
    reads it, on the model with as many positions as the length needs (its parameter count unchanged), and said."""
    loaded = resolve_model(model)
    tokens = seq + int(given.get("new_tokens") or 0)
    if not loaded.max_positions or tokens <= loaded.max_positions:
        return model, []
    if loaded.arch.positions != "learned":
        return model, [f"{tokens:,} tokens is past the {loaded.max_positions:,} positions {loaded.name} was trained "
                       f"with ({loaded.arch.positions} positions: the formula applies, the model was not trained "
                       "that long)"]
    longer = replace(loaded, max_positions=tokens, sizes={**loaded.sizes, "n_ctx": loaded.sizes.get(
        "n_ctx", loaded.max_positions)})
    return longer, [f"{tokens:,} tokens is past the {loaded.max_positions:,} learned positions {loaded.name} was "
                    f"trained with: checked as the formula reads it (the model itself cannot run that length; its "
                    f"position table keeps {loaded.max_positions:,} rows)"]


def _window_notes(ctx: Context, expr: sp.Expr) -> list[str]:
    """A claim with a window size the model lacks: no sliding window at all, or one in every layer."""
    used = expr.free_symbols & {ds.w, ds.l_w}
    if not used or used <= set(ctx.values):
        return []
    name = ctx.model.name
    if ds.w not in ctx.values:
        names = " and ".join(sorted(map(str, used)))
        return [f"{name} has no sliding window: {names} in the claim {'is' if len(used) == 1 else 'are'} not "
                "among its sizes"]
    return [f"every layer of {name} has the sliding window: l_w is not among its sizes (map l_w=l to say so)"]


def _is_zero(expr: sp.Expr) -> bool:
    expanded = sp.expand(expr)
    return expanded == 0 or sp.cancel(sp.together(expanded)) == 0


def _exact_under(spec: QuantitySpec, ctx: Context, expr: sp.Expr, cmp: Comparison) -> list[str]:
    """Options, architectural switches and other accountings' conventions under which the claim is exact."""
    labels = [label for label, ours in conditions(ctx, cmp) if _is_zero(ours - cmp.theirs)]
    for label, alt in alternatives(spec, ctx):
        other = alt.compare(expr)
        if _is_zero(other.ours - other.theirs):
            labels.append(label)
    return labels


#: Quantities a claim is often about by mistake (per layer vs all layers, per token vs per position, model
#: FLOPs vs hardware FLOPs).
SIBLINGS = {"kv_cache.per_token": ("kv_cache.per_position", "kv_cache.total"),
            "kv_cache.per_position": ("kv_cache.per_token", "kv_cache.total"),
            "kv_cache.total": ("kv_cache.per_position", "kv_cache.per_token"),
            "activations.per_layer": ("activations.total",), "activations.total": ("activations.per_layer",),
            "params.per_layer": ("params.total",),
            "params.total": ("params.per_layer", "params.active", "params.non_embedding"),
            "params.non_embedding": ("params.total",), "params.active": ("params.total",),
            "flops.step": ("flops.hardware", "flops.forward"), "flops.hardware": ("flops.step",),
            "flops.forward": ("flops.step", "flops.attention"), "flops.attention": ("flops.forward",),
            "flops.per_token": ("flops.decode_per_token",), "flops.decode_per_token": ("flops.per_token",)}


def _siblings(spec: QuantitySpec, ctx: Context, expr: sp.Expr) -> list[str]:
    """``exact for kv_cache.per_position instead`` when the claim fits a neighbouring quantity; for FLOPs
    also under one changed option (Narayanan's Eq. 3 is the hardware FLOPs of a full-recompute step)."""
    found = []
    for name in SIBLINGS.get(spec.name, ()):
        try:
            sibling = replace(build_context(QUANTITIES[name], ctx.model, ctx.options), pins=ctx.pins)
            cmp = sibling.compare(expr)
        except (DerivationError, ValueError):
            continue
        if _is_zero(cmp.ours - cmp.theirs):
            found.append(f"exact for {name} instead: the claim counts another quantity")
        elif _limits(cmp, None)[0]:
            found.append(f"leading-order for {name} instead: the claim counts another quantity")
        elif name.startswith("flops"):
            found += [f"exact for {name} {label} instead: the claim counts another quantity"
                      for label, alt in alternatives(QUANTITIES[name], sibling)
                      if _is_zero((other := alt.compare(expr)).ours - other.theirs)][:1]
    return found


def _limits(cmp: Comparison, k: sp.Expr | None) -> tuple[bool, list[str]]:
    """Whether claim/ours -> 1 as the model grows, and lines describing both limits (the long-sequence
    line is left out, with the reason, when a min/max keeps it from being decided)."""
    scaling = describe_scaling(width(), cmp.ours.free_symbols | cmp.theirs.free_symbols)
    try:
        limit = ratio_limit(cmp.theirs, cmp.ours, width())
        lines = [f"claim/ours → 1 as {scaling}"] if limit == 1 else []
        if limit != 1 and not (k is not None and k.is_Number):
            lc, lo = leading(cmp.theirs, width())[1], leading(cmp.ours, width())[1]
            lines.append(f"leading order ({scaling}): claim {sp.factor(lc)}, ours {sp.factor(lo)}"
                         + (f"; claim/ours → {_said(limit)}" if k is None else ""))
    except Unanalysable as exc:
        return False, [f"no leading-order analysis: {exc}"]
    if cmp.ours.free_symbols & set(sequence()):
        try:
            lines.append(f"as s → ∞: claim/ours → {_said(ratio_limit(cmp.theirs, cmp.ours, sequence()))}")
        except Unanalysable as exc:
            lines.append(f"as s → ∞: {exc}")
    return limit == 1, lines


def _number_claim(claim: Claim, ctx: Context, parsed: ParsedFormula, cmp: Comparison,
                  notes: list[str], factor: sp.Expr) -> CheckResult:
    """A claim that is a number (``12.9B``, ``4,194,304``): compared with ours for the model's sizes, to the
    precision it is printed with (``derivations.claims.numbers``)."""
    verdict, lines = number_lines(ctx, cmp, parsed, factor, ctx.values)
    if verdict == "different" and cmp.ours.free_symbols & set(width()):
        lead, more = _limits(cmp, None)  # a constant can be ours as the model grows (HFU/MFU -> 4/3)
        if lead:
            verdict, lines = "leading-order", lines + more
    if verdict == "different":
        lines += _nearby(ctx, cmp, parsed, factor)
    return _result(claim, ctx, parsed, verdict, cmp, notes, lines)


def _layer_worth(cmp: Comparison, k: sp.Expr | None) -> list[str]:
    """A per-layer formula given as the total (the claim is 1/l of ours, exactly or at leading order), or the
    total given for one layer (l times ours): named, since the fix is the quantity, not the formula."""
    ratio = k
    if ratio is None:
        try:
            ratio = sp.cancel(leading(cmp.theirs, width())[1] / leading(cmp.ours, width())[1])
        except (Unanalysable, ZeroDivisionError):
            return []
    how = "" if k is not None else " at leading order"
    if ratio == 1 / ds.l:
        return [f"the claim is 1/l of ours{how}: one layer's worth, where ours counts all l layers (a per-layer "
                "formula given as the total)"]
    if ratio == ds.l:
        return [f"the claim is l times ours{how}: all l layers' worth, where ours counts one layer"]
    return []


#: LoRA target sets a printout is often made with (PEFT's names); "all-linear" is PEFT's shorthand.
_LORA_TARGETS = ("q_proj,v_proj", "q_proj,k_proj,v_proj,o_proj", "all-linear")
#: Element types a figure in bytes may have been computed in.
_DTYPES = {"kv_dtype": ("fp16", "fp32", "fp8"), "weight_dtype": ("fp16", "fp32", "int8", "int4"),
           "dtype": ("fp32", "bf16")}


def _nearby_settings(spec: QuantitySpec, ctx: Context) -> Iterator[tuple[str, Context]]:
    """Contexts one setting away: the alternatives of ``alternatives`` (recompute, profile, FlashAttention,
    window, GQA, tied embeddings, ...), other LoRA target sets and ranks, other element types, and the
    neighbouring quantities (per layer vs total, per token vs total)."""
    yield from alternatives(spec, ctx)
    o = ctx.options
    changes: list[tuple[str, dict[str, Any]]] = []
    if o.lora_rank:
        given = ",".join(o.lora_targets) if isinstance(o.lora_targets, (tuple, list)) else str(o.lora_targets)
        changes += [(f"with --lora-targets {x}", {"lora_targets": x}) for x in _LORA_TARGETS if x != given]
        changes += [(f"with --lora-rank {r}", {"lora_rank": r}) for r in (o.lora_rank // 2, o.lora_rank * 2) if r]
    for option, dtypes in _DTYPES.items():
        if spec.mode in ("infer", "train") and getattr(o, option, None) is not None or (
                option != "dtype" and spec.mode == "infer"):
            changes += [(f"with --{option.replace('_', '-')} {x}", {option: x}) for x in dtypes
                        if x != getattr(o, option, None)]
    for label, change in changes:
        try:
            yield label, replace(build_context(spec, ctx.model, replace(o, **change)), pins=_unpinned(ctx, change))
        except (DerivationError, ValueError, TypeError):
            continue
    for name in SIBLINGS.get(spec.name, ()):
        try:
            yield f"as {name}", replace(build_context(QUANTITIES[name], ctx.model, ctx.options), pins=ctx.pins)
        except (DerivationError, ValueError):
            continue


def _unpinned(ctx: Context, change: Mapping[str, Any]) -> dict[sp.Symbol, sp.Expr]:
    """The context's pins less the one a changed option sets (another rank is not r = 8)."""
    return {x: v for x, v in ctx.pins.items() if not any(_pinned_by().get(k) == x for k in change)}


def _nearby(ctx: Context, cmp: Comparison, parsed: ParsedFormula, factor: sp.Expr) -> list[str]:
    """The nearby settings under which a figure that does not hold as given would hold, named (at most two)."""
    found = []
    for label, alt in _nearby_settings(ctx.spec, ctx):
        try:
            other = alt.compare(cmp.theirs)
            verdict, _ = number_lines(alt, other, parsed, factor, alt.values)
        except (DerivationError, ValueError, TypeError, ZeroDivisionError):
            continue
        if verdict in ("exact", "rounded"):
            found.append(f"the figure holds {label} ({'exactly' if verdict == 'exact' else 'to its printed precision'}"
                         f"): the claim was made under another setting than the one given")
        if len(found) == 2:
            break
    return found


def _said(value: sp.Expr) -> str:
    """A limit in words: ``∞``, not SymPy's ``oo``."""
    return "∞" if value == sp.oo else str(value)


def _judge(claim: Claim, spec: QuantitySpec, ctx: Context, parsed: ParsedFormula, cmp: Comparison,
           notes: list[str], expr: sp.Expr, factor: sp.Expr) -> CheckResult:
    if cmp.theirs.is_Number:
        return _number_claim(claim, ctx, parsed, cmp, notes, factor)
    k = constant_factor(cmp.theirs, cmp.ours)
    lines = [f"the claim is {k} times ours"] if k is not None else []
    lines += _layer_worth(cmp, k)
    lead, more = _limits(cmp, k)
    if any("through min/max" in x for x in more) and (at := _at_sizes(ctx, cmp))[1]:
        agree = _branches_agree(cmp)
        cmp, k = at[0], constant_factor(at[0].theirs, at[0].ours)
        lead, more = _limits(cmp, k)
        head = (f"every branch of each min/max has the same leading part, so the leading order holds for every size; "
                f"the lower orders are taken at the branch the sizes of {ctx.model.name} put it on") if agree else at[1]
        more = [head] + ([f"the claim is {k} times ours there"] if k is not None and not lines else []) + more
        if not agree:
            notes = [*notes, f"unsure: leading order decided at the sizes of {ctx.model.name}, not for every size "
                             "(a min/max of growing terms whose branches differ at leading order)"]
    lines += more
    gaps: list[Gap] = []
    if k is None or k.is_Number:
        try:
            gaps = find_gaps(cmp.ours, cmp.theirs, cmp.pieces)
        except Unanalysable as exc:
            lines.append(f"the gap is not traced to our terms: {exc}")
    lines += [g.text() for g in gaps]
    # a sibling that is only leading-order says nothing new when the claim is leading-order for this one
    lines = [x for x in _siblings(spec, ctx, expr) if not (lead and x.startswith("leading-order"))] + lines
    holds_under = _exact_under(spec, ctx, expr, cmp)
    if holds_under:
        verdict = "conditional"
        lines.insert(0, "exact " + " or ".join(holds_under) + (" (leading-order as given)" if lead else ""))
    else:
        verdict = "leading-order" if lead else "different"
    return _result(claim, ctx, parsed, verdict, cmp, notes, lines, tuple(gaps), k, tuple(holds_under))


@cache
def _step_variations() -> tuple[dict[sp.Symbol, int], ...]:
    """Step sizes tried in turn when the model's own values happen to make both sides equal (``_variations``)."""
    return ({}, {ds.b: 8}, {ds.s: 4096}, {ds.n: 128}, {ds.b: 8, ds.s: 4096, ds.n: 128})


def _variations(values: Mapping[sp.Symbol, int | sp.Rational], ours: sp.Expr,
                theirs: sp.Expr) -> list[dict[sp.Symbol, int]]:
    """``_step_variations()``, then past the sliding window (s + n > w) where the model has one; those
    that give a size the claim drops (b, n) a value that shows it (not b = 1, n = 0) come first."""
    b, s, n, w = ds.b, ds.s, ds.n, ds.w
    beyond = [{s: 2 * values[w], n: 128}, {b: 8, s: 2 * values[w], n: 128}] if w in values else []
    found = [*_step_variations(), *beyond]
    dropped = (ours.free_symbols - theirs.free_symbols) & {ds.b, ds.n}

    def shows(change: dict[sp.Symbol, int]) -> bool:
        return all({**values, **change}.get(x, 0) not in (0, 1) for x in dropped)

    return sorted(found, key=lambda change: not shows(change))  # stable: the given sizes first among equals


def _counterexample(ctx: Context, ours: sp.Expr, theirs: sp.Expr) -> Counterexample | None:
    """Both sides for the context's model; other step sizes (b, s, n) when the given ones agree;
    None when no size is left free or the two agree at every size tried."""
    for change in _variations(ctx.values, ours, theirs):
        values = {**ctx.values, **change}
        try:
            # Rational, not evaluate()'s Integer: a fractional Psi is kept exact on both sides
            exact = {k: sp.Rational(v) for k, v in values.items()}
            mine, claimed = evaluate(ours.xreplace(exact), {}), evaluate(theirs.xreplace(exact), {})
        except ValueError:
            return None
        if not (mine.is_Rational and claimed.is_Rational):
            return None
        if mine != claimed:
            break
    else:
        return None
    used = sorted(ours.free_symbols | theirs.free_symbols, key=str)
    # a fractional Psi (parameters per GPU, averaged) is shown as it was used, not rounded
    exact = {str(x): sp.Rational(values[x]) for x in used if x in values}
    shown = {k: int(v) if v.q == 1 else float(v) for k, v in exact.items()}
    whole = ctx.spec.unit in ("bytes", "elements", "FLOPs")  # counts are whole units; bits and ratios are not
    return Counterexample(ctx.model.name, shown, int(sp.ceiling(mine)) if whole else sp.Rational(mine),
                          sp.Rational(claimed), sp.Rational(mine))


def _result(claim: Claim, ctx: Context, parsed: ParsedFormula, verdict: str, cmp: Comparison, notes: list[str],
            lines: list[str], gaps: tuple[Gap, ...] = (), factor: sp.Expr | None = None,
            holds_under: tuple[str, ...] = ()) -> CheckResult:
    # a bound's line holds its numbers at the model's sizes (other sizes would not be the claim's)
    bounded = parsed.relation in ("below", "above")
    example = None if verdict == "exact" or bounded else _counterexample(ctx, cmp.ours, cmp.theirs)
    q = ctx.quantity
    return CheckResult(claim, ctx.spec, q.title, verdict, parsed, cmp.theirs, cmp.display,
                       sp.expand(cmp.ours - cmp.theirs), tuple(lines), gaps, factor, holds_under, example,
                       tuple(notes) + ctx.notes, ctx.model.name, cite(q.citation) if q.citation else "", dict(ctx.pins))
