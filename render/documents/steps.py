"""Derivation steps, handcalcs' *formula = numbers substituted = result* made immutable.

``derivation(est, key)`` walks one quantity of an ``Estimate`` from the graph up:

1. ``term``: one step per op of one layer (or per term when the quantity has no layers), sourced by its
   graph node path, on one device with no parallelism;
2. ``layer``: their sum, one layer;
3. ``model``: every block on one device, ``l`` layers (times the copies in flight);
4. ``gpu``: the same on one GPU under the layout (tensor/sequence/pipeline parallelism, ZeRO),
   shown only when it differs from the whole model;
5. ``closed form``: ``Quantity.closed_form()``, the shape the literature prints, with its citation.

Steps are generic over ``Estimate.quantities``: nothing here names a particular quantity.
``breakdown_rows`` is the one grouping that feeds both the writeup's tables and the plots.

>>> from memderive.derivations.estimate import estimate
>>> steps = derivation(estimate("gpt2"), "parameters")
>>> [(s.level, s.label) for s in steps][-3:]
[('layer', 'one layer'), ('model', 'whole model'), ('closed form', 'closed form')]
>>> steps[-1].value
124439808
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from memderive.derivations.estimate import Estimate, estimate
from memderive.derivations.quantities.model_states import ZERO_CITATION
from memderive.derivations.options import Options
from memderive.derivations.quantity import Quantity, exact_int
from memderive.derivations.references import cite
from memderive.symbolic import dims
from memderive.symbolic.derive import evaluate
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph
from memderive.symbolic.simplify import closed_form
from memderive.documents.latex import latex
from memderive.documents.units import RenderOptions
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["Step", "Row", "LEVELS", "derivation", "breakdown_rows", "single_device", "layout_text", "pipeline_stage", "symbols_in",
           "headline_key", "GROUP_DEPTH"]

LEVELS = ("term", "layer", "model", "gpu", "closed form")
#: How deep ``breakdown_rows`` groups each block's paths (the rest: by block).
GROUP_DEPTH = {"model_states": 2, "layer": 2}


@dataclass(frozen=True, slots=True)
class Step:
    """One line of a derivation.

    Attributes:
        label: what the step computes (``attn/qkv``, ``one layer``, ``whole model``, ...).
        symbolic: the formula in the dimension symbols.
        source: the graph node path (``layer/attn/qkv``) or what the step rests on, in words (the strategies
            applied); empty when ``citation`` alone says it.
        substituted: LaTeX math of ``symbolic`` with the model's sizes in place of the symbols; a long
            sum is broken into lines joined by ``\\\\ &\\quad`` (for an ``aligned`` environment).
        value: the exact result.
        unit: ``bytes`` or ``elements``.
        level: one of ``LEVELS``.
        parts: named parts of ``symbolic`` (``("head", ...)``) a writeup may label; empty for one-part steps.
        citation: the published work the step follows (a closed form's paper, ZeRO's stages), if any.
    """

    label: str
    symbolic: sp.Expr
    source: str
    substituted: str
    value: int
    unit: str
    level: str
    note: str = ""
    parts: tuple[tuple[str, sp.Expr], ...] = ()
    citation: Citation | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"step level must be one of {', '.join(LEVELS)}, got {self.level!r}")

    def described(self, keyed: bool = False) -> str:
        """``source`` with the citation written out (``keyed``: as ``[key]``, for documents with References)."""
        if self.citation is None:
            return self.source
        cited = cite(self.citation, keyed)
        return f"{self.source} ({cited})" if self.source else cited


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a breakdown: a graph path (grouped), its formula and its exact value."""

    path: str
    expr: sp.Expr
    value: int


def single_device(est: Estimate) -> Estimate:
    """The same estimate with every parallel degree set to 1 (recompute, dtype, profile kept)."""
    opts = est.options
    flat = replace(opts, tp=1, pp=1, dp=1, sp=False, zero=0, micro_batches=None, virtual_stages=None,
                   first_stage_layers=None, last_stage_layers=None, pipeline_layout=None)
    return est if flat == opts else estimate(est.model, flat)


def pipeline_stage(graph: Graph) -> str:
    """The pipeline stage the graph describes (``first``, ``middle`` or ``last``: the one ``estimate`` found the
    largest), read from its ``PipelineParallel`` strategy's name; ``first`` without one."""
    found = next((m.group(1) or m.group(2) for name in graph.strategies if (m := _STAGE.search(name))), None)
    return found or "first"


_STAGE = re.compile(r"^pipeline parallel \(.*\b(?:(first|middle|last) stage|(rank \d+))\)$")


def layout_text(opts: Options, stage: str = "first") -> str:
    """The parallel layout in words: ``t = 8 tensor parallel, sequence parallel, ZeRO-1 over d = 8``; ``stage``: the
    pipeline stage the numbers are for (``pipeline_stage``)."""
    parts = []
    if opts.tp > 1:
        parts.append(f"tensor parallel t = {opts.tp}" + (" with sequence parallel" if opts.sp else ""))
    if opts.pp > 1:
        extra = f", v = {opts.virtual_stages} virtual stages" if opts.virtual_stages not in (None, 1) else ""
        parts.append(f"pipeline parallel p = {opts.pp} ({stage}{'' if stage.startswith('rank') else ' stage'}{extra})")
    if opts.dp > 1:
        parts.append(f"ZeRO-{opts.zero} over data parallel d = {opts.dp}" if opts.zero
                     else f"data parallel d = {opts.dp} (replicated)")
    return "; ".join(parts) or "one device"


def _layer_factor(terms: Iterable[sp.Expr], graph: Graph, unit: str) -> tuple[sp.Expr, ...] | None:
    """The factors (``repeat``, ``in_flight``) every layer term carries, or None for a per-layer quantity.

    Micro-batches in flight multiply activations only: a count of elements (parameters) never carries them.
    """
    if not graph.has_block("layer"):
        return None
    layer = graph.block("layer")
    terms = list(terms)
    candidates = ((layer.repeat,),) if unit == "elements" else ((layer.repeat, layer.in_flight), (layer.repeat,))
    for factors in candidates:
        factors = tuple(x for x in factors if x != 1)
        product = sp.Mul(*factors)
        if all(not (_divide(expr, product).free_symbols & product.free_symbols) for expr in terms):
            return factors
    return None


def _divide(expr: sp.Expr, divisor: sp.Expr) -> sp.Expr:
    """``expr / divisor`` simplified: term by term (cheap), or by ``cancel`` when that leaves the divisor in."""
    quotient = sp.expand(expr / divisor)
    return sp.cancel(quotient) if quotient.free_symbols & divisor.free_symbols else quotient


def _structure(q: Quantity, graph: Graph) -> tuple[list[tuple[str, sp.Expr]], tuple[sp.Expr, ...] | None,
                                                   list[tuple[str, sp.Expr]]]:
    """(per-layer op terms, the layer factor, the other terms summed per block), relations applied."""
    layer = [t for t in q.breakdown.terms if t.path.split("/")[0] == "layer"]
    factor = _layer_factor((t.expr for t in layer), graph, q.unit)
    divisor = sp.Mul(*factor) if factor else sp.Integer(1)
    ops = [(t.path, closed_form(_divide(t.expr, divisor), q.relations)) for t in layer]
    blocks: dict[str, sp.Expr] = {}  # the other terms, summed per block (embed, head, model_states, ...)
    for term in q.breakdown.terms:
        head = term.path.split("/")[0]
        if head != "layer":
            blocks[head] = blocks.get(head, sp.Integer(0)) + term.expr
    return ops, factor, [(name, closed_form(expr, q.relations)) for name, expr in blocks.items()]


def _whole(ops: list[tuple[str, sp.Expr]], factor: tuple[sp.Expr, ...] | None,
           others: list[tuple[str, sp.Expr]]) -> tuple[sp.Expr, tuple[tuple[str, sp.Expr], ...]]:
    """``factor * (one layer) + others``, unevaluated so the layer count stays visible, and its named parts."""
    parts = list(others)
    if ops:
        one_layer = sp.Add(*(expr for _, expr in ops))
        count = sp.Mul(*factor) if factor else sp.Integer(1)  # l/p layers x p in flight shows as l
        parts.insert(0, ("layer", sp.Mul(count, one_layer, evaluate=False) if count != 1 else one_layer))
    if len(parts) == 1:
        return parts[0][1], ()
    return sp.Add(*(expr for _, expr in parts), evaluate=False), tuple(parts)


class _Stepper:
    """Makes steps for one quantity with one set of values and render options."""

    def __init__(self, q: Quantity, values: Mapping[sp.Symbol, int], options: RenderOptions) -> None:
        self.q, self.values, self.options = q, values, options

    def __call__(self, label: str, expr: sp.Expr, source: str, level: str, width: int | None = None,
                 parts: tuple[tuple[str, sp.Expr], ...] = (), citation: Citation | None = None) -> Step:
        width = self.options.line_width if width is None else width
        return Step(label, expr, source, latex(expr, values=self.values, line_width=width),
                    exact_int(evaluate(expr, self.values), f"{self.q.key} ({label})"), self.q.unit, level,
                    parts=parts, citation=citation)


def _blocks_text(graph: Graph) -> str:
    parts = []
    for blk in graph.blocks:
        count = sp.Mul(blk.repeat, blk.in_flight)
        parts.append(blk.name if count == 1 else f"{sp.sstr(blk.repeat)} × {blk.name}"
                     + ("" if blk.in_flight == 1 else f" × {sp.sstr(blk.in_flight)} in flight"))
    return " + ".join(parts)


def derivation(est: Estimate, key: str, options: RenderOptions | None = None,
               base: Estimate | None = None) -> tuple[Step, ...]:
    """The steps of quantity ``key``: op terms, one layer, whole model, one GPU, closed form.

    Args:
        est: the estimate (model, options, graph, quantities, values).
        key: a quantity key of ``est`` (``total_bytes``, ``parameters``, ...).
        options: render options (line width of the substituted sums).
        base: ``single_device(est)`` if already at hand (it is derived otherwise).

    Returns:
        An ordered tuple of ``Step``; the last is the closed form, whose value is ``est.number(key)``.
    """
    options = options or RenderOptions()
    q = est.quantity(key)
    base = base or single_device(est)
    base_q = base.quantity(key) if any(x.key == key for x in base.quantities) else q
    make = _Stepper(base_q, base.values, options)
    ops, factor, others = _structure(base_q, base.graph)
    steps = [make(path.split("/", 1)[1], expr, path, "term", width=0) for path, expr in ops]
    if not ops:
        steps += [make(t.path, closed_form(t.expr, q.relations), t.path, "term", width=0)
                  for t in base_q.breakdown.terms if len(base_q.breakdown.terms) > 1]
    if ops:
        steps.append(make("one layer", sp.Add(*(e for _, e in ops)), "layer", "layer"))
    whole, parts = _whole(ops, factor, others)
    if factor or others:
        source = f"graph {base.graph.name}: {_blocks_text(base.graph)}" if ops else "the terms above, added"
        steps.append(make("whole model", whole, source, "model", parts=parts))
    gpu, gpu_parts = _whole(*_structure(q, est.graph))
    if base is not est and sp.expand(closed_form(gpu - whole)) != 0:
        added = [name for name in est.graph.strategies if name not in base.graph.strategies]
        if est.options.zero:
            added.append(f"ZeRO stage {est.options.zero}")  # last, beside its citation
        layout = layout_text(est.options, pipeline_stage(est.graph))
        source = "; ".join(added) or layout
        steps.append(_Stepper(q, est.values, options)(f"one GPU, {layout}", gpu, source, "gpu",
                                                      parts=gpu_parts,
                                                      citation=ZERO_CITATION if est.options.zero else None))
    basis = "" if q.citation else "the steps above, expanded and collected"
    steps.append(_Stepper(q, est.values, options)("closed form", q.closed_form(), basis, "closed form",
                                                  citation=q.citation))
    return tuple(steps)


def breakdown_rows(est: Estimate, key: str, values: Mapping[sp.Symbol, int] | None = None) -> tuple[Row, ...]:
    """Quantity ``key`` grouped by graph path (``GROUP_DEPTH``), evaluated at ``values`` (default: the estimate's).

    The rows add up to ``est.number(key)`` (at the estimate's values); tables and plots both use them.
    """
    q = est.quantity(key)
    bound = {**est.values, **(values or {})}
    groups: dict[str, tuple[sp.Expr, int]] = {}
    # each node in whole units, as Quantity.value counts them
    for term, (_, whole) in zip(q.breakdown.terms, q.term_ints(bound)):
        head = term.path.split("/")[0]
        path = "/".join(term.path.split("/")[:GROUP_DEPTH.get(head, 1)])
        expr, value = groups.get(path, (sp.Integer(0), 0))
        groups[path] = (expr + term.expr, value + whole)
    return tuple(Row(path, closed_form(expr, q.relations), value) for path, (expr, value) in groups.items())


def headline_key(est: Estimate) -> str:
    """The quantity a document or plot is about: ``total_bytes`` where there is one, else the first."""
    keys = [q.key for q in est.quantities]
    return "total_bytes" if "total_bytes" in keys else keys[0]


def symbols_in(exprs: Iterable[sp.Expr]) -> tuple[dims.Dim, ...]:
    """The dimensions that occur in ``exprs``, in the order of ``symbolic.dims.DIMS``."""
    free: set[sp.Symbol] = set()
    for expr in exprs:
        free |= sp.sympify(expr).free_symbols
    return tuple(dim for dim in dims.DIMS if dim.symbol in free)

