"""Our side of a claim check: the quantity derived for a model and options, split into pieces.

A ``Context`` holds one derived quantity with what a check needs around it: the sizes of the
model (for counterexamples), the parameter count per GPU (what ``Psi`` stands for), and the
quantity split finer than its breakdown, one *piece* per parameter tensor or saved tensor
(``layer/attn/qkv/bias``), so that a gap can be traced to the tensors it comes from.
``alternatives`` yields the contexts under one changed option each (FlashAttention, dropout,
recompute, profile, tied embeddings, optimizer, ZeRO stage, ...).

>>> from memderive.derivations.claims.spec import quantity_spec
>>> from memderive.derivations.options import Options
>>> ctx = build_context(quantity_spec("params.per_layer"), "gpt2", Options())
>>> [p.path for p in ctx.compare(ctx.params).pieces][:3]
['layer/norm1/weight', 'layer/norm1/bias', 'layer/attn/qkv/weight']
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from functools import cache
from typing import Any

from memderive.derivations.claims.analysis import Piece
from memderive.derivations.claims.parts import bits_quantity, narrow, with_adapters
from memderive.derivations.claims.spec import ClaimError, QuantitySpec
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.model_states import OPTIMIZERS, master_bytes, optimizer_state_bytes
from memderive.derivations.quantities.precision_aware import precision_aware
from memderive.derivations.models.model import Model
from memderive.derivations.options import PROFILES, RECOMPUTE, Options
from memderive.derivations.quantity import Quantity
from memderive.symbolic.derive import Breakdown, Term, evaluate, saved_tensors
from memderive.symbolic import dims_sympy as ds
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.errors import DerivationError
from memderive.symbolic.graph import Graph, Op
from memderive.symbolic.tensor import Tensor
from memderive.derivations.quantities.inference import cached_length, infer_quantities, inference_values, serving_dtypes
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["Context", "Comparison", "build_context", "alternatives", "unit_factor"]


@cache
def _scales() -> frozenset[sp.Symbol]:
    """Sizes a breakdown term may be scaled by on top of its tensors (repeats, micro-batches in flight)."""
    return frozenset({ds.l, ds.p, ds.m, ds.v})


_KINDS = {"layer_norm": "LayerNorm", "rms_norm": "RMSNorm", "linear": "linear", "embedding": "embedding"}


@dataclass(frozen=True, slots=True)
class Comparison:
    """Both sides in one space: expanded, family relations applied; ``display`` prints ours."""

    ours: sp.Expr
    theirs: sp.Expr
    pieces: tuple[Piece, ...]
    display: sp.Expr
    note: str = ""


@dataclass(frozen=True, slots=True)
class Context:
    spec: QuantitySpec
    model: Model
    options: Options
    graph: Graph
    quantity: Quantity
    params: sp.Expr  # parameters held by one GPU, relations applied
    params_raw: sp.Expr  # the same before relations (the model-state terms are written in it)
    values: dict[sp.Symbol, int | sp.Rational]  # Psi exact: a per-GPU average can be fractional
    notes: tuple[str, ...] = ()
    #: our symbols pinned to a value on both sides (``--new-tokens 0`` pins n = 0; ``--symbols f=8*h/3``)
    pins: Mapping[sp.Symbol, sp.Expr] = field(default_factory=dict)
    active: sp.Expr | None = None  # the parameters one token uses (Psi_a), relations applied

    def pin(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` with the pins substituted and each min/max of given degrees settled by their
        values: ``min(m, p)`` is ``p`` when the options give m = 16 and p = 8 (the winning argument,
        kept as a letter)."""
        expr = sp.sympify(expr)
        if self.pins:
            expr = expr.xreplace(dict(self.pins))
        fixed = {x: v for x, v in self.values.items() if x in _degrees()}
        if not fixed or not expr.has(sp.Min, sp.Max):
            return expr

        def settle(call: sp.Expr) -> sp.Expr:
            if not call.free_symbols <= set(fixed):
                return call
            numbers = [arg.xreplace(fixed) for arg in call.args]
            pick = min if isinstance(call, sp.Min) else max
            return call.args[numbers.index(pick(numbers))]

        return expr.replace(lambda x: isinstance(x, (sp.Min, sp.Max)), settle)

    @property
    def k_bytes(self) -> int | None:
        """ZeRO's K: optimizer-state bytes per parameter, master weights included."""
        if self.options.mode != "train":
            return None
        aware = precision_aware(self.options)
        if aware is not None:  # Megatron-Core's precision-aware optimizer: its main params and moments
            held = aware.widths(self.options.dtype, self.options.grad_buffer)
            return held.master + held.moments
        return optimizer_state_bytes(self.options.optimizer, self.options.dtype, self.options.precision)

    def compare(self, expr: sp.Expr) -> Comparison:
        """Our quantity and ``expr`` side by side; model states stay per parameter when the claim is."""
        rel = self.quantity.relations
        theirs = sp.expand(self.pin(sp.sympify(expr).xreplace(rel)))
        if self.quantity.key == "model_state_bytes" and theirs.free_symbols <= {ds.Psi, ds.d, ds.t, ds.p}:
            pieces = self._psi_pieces()
            if pieces is not None:
                ours = sp.expand(sp.Add(*(x.expr for x in pieces)))
                return Comparison(ours, theirs, pieces, ours,
                                  "compared per parameter: Psi = parameters held by one GPU")
        notes = []
        if ds.Psi in theirs.free_symbols:
            theirs = sp.expand(theirs.xreplace({ds.Psi: self.params}))
            held = "of the model" if self.spec.unit == "FLOPs" else "held by one GPU"
            notes.append(f"Psi = parameters {held} = {sp.collect(self.params, ds.l)}")
        if ds.Psi_a in theirs.free_symbols:
            active = self.params if self.active is None else self.active
            theirs = sp.expand(theirs.xreplace({ds.Psi_a: active}))
            notes.append(f"active parameters = {sp.collect(active, ds.l)}" + (
                "" if self.active is not None else f" (every parameter: {self.model.name} has no routed experts)"))
        note = "; ".join(notes)
        ours = sp.expand(self.pin(self.quantity.breakdown.total.xreplace(rel)))
        display = self.quantity.closed_form()
        return Comparison(ours, theirs, self._size_pieces(), self.pin(display) if self.pins else display, note)

    def _psi_pieces(self) -> tuple[Piece, ...] | None:
        out = []
        for term in self.quantity.breakdown.terms:
            ratio = sp.cancel(term.expr / self.params_raw)
            if ratio.free_symbols - {ds.d, ds.t, ds.p}:
                return None
            out += _split_optimizer(Piece(term.path, ratio * ds.Psi, term.path.rsplit("/", 1)[-1]), self.options)
        return tuple(out)

    def _size_pieces(self) -> tuple[Piece, ...]:
        rel = self.quantity.relations
        kind = "params" if self.quantity.unit == "elements" else (
            "saved" if self.options.mode == "train" and self.quantity.key.startswith("activation") else None)
        pieces: list[Piece] = []
        for term in self.quantity.breakdown.terms:
            split = _split(term.path, term.expr, self.graph, kind, PROFILES[self.options.profile][0])
            for x in split:
                pieces += _split_optimizer(replace(x, expr=sp.expand(self.pin(x.expr.xreplace(rel)))), self.options)
        return tuple(pieces)


@cache
def _degrees() -> frozenset[sp.Symbol]:
    """Strategy degrees whose values the options give: a min/max of them is settled by those values."""
    return frozenset({ds.t, ds.p, ds.d, ds.m, ds.v})


def _split_optimizer(piece: Piece, options: Options) -> list[Piece]:
    """The optimizer-state term as its parts: the fp32 master copy (mixed precision) and the
    optimizer's own states (Adam's momentum and variance), so a gap names the part it lacks."""
    if not piece.path.endswith("model_states/optimizer") or options.mode != "train" or \
            options.precision_aware_optimizer:
        return [piece]
    k = optimizer_state_bytes(options.optimizer, options.dtype, options.precision)
    own = OPTIMIZERS[options.optimizer]
    master = master_bytes(options.dtype, options.precision)
    parts = [("master", master, "fp32 master weights")] if master else []
    if options.optimizer in ("adam", "adamw") and own.state_bytes == 8:
        half = (k - master) // 2
        word = "fp32" if half == 4 else options.dtype
        parts += [("momentum", half, f"{word} momentum"), ("variance", half, f"{word} variance")]
    elif k - master:
        parts.append(("states", k - master, own.states))
    if len(parts) < 2:
        return [piece]
    return [Piece(f"{piece.path}/{name}", sp.expand(piece.expr * sp.Rational(share, k)), what)
            for name, share, what in parts]


def _tensors(graph: Graph, kind: str | None, ignore: tuple[str, ...]) -> dict[str, list[tuple[Op, Tensor]]]:
    out: dict[str, list[tuple[Op, Tensor]]] = {}
    for blk in graph.blocks:
        if kind == "params":
            pairs = [(op, x) for op in blk.ops for x in op.params]
        elif kind == "saved":
            pairs = saved_tensors(blk, ignore)
        else:
            pairs = []
        for op, x in pairs:
            out.setdefault(f"{blk.name}/{op.path}", []).append((op, x))
    return out


def _split(path: str, expr: sp.Expr, graph: Graph, kind: str | None, ignore: tuple[str, ...]) -> list[Piece]:
    """One piece per tensor of a breakdown term, when the term is those tensors times a repeat."""
    pairs = _tensors(graph, kind, ignore).get(path, []) if kind else []
    size = (lambda x: x.numel) if kind == "params" else (lambda x: x.nbytes)
    total = sp.Add(*(size(x) for _, x in pairs))
    if not pairs or total == 0:
        return [Piece(path, expr, "")]
    scale = sp.cancel(expr / total)
    if scale.free_symbols - _scales() or sp.fraction(scale)[1].free_symbols:
        return [Piece(path, expr, "")]
    return [Piece(f"{path}/{_short(op, x)}", scale * size(x), _what(op, x, kind)) for op, x in pairs]


def _short(op: Op, x: Tensor) -> str:
    name = x.name
    return name[len(op.path) + 1:] if name.startswith(op.path + ".") else name.replace("/", ".")


def _what(op: Op, x: Tensor, kind: str | None) -> str:
    if kind == "params":
        return f"{_KINDS.get(op.kind, op.kind)} {x.role}"
    return f"{x.role} saved by {op.kind}"


def build_context(spec: QuantitySpec, model: str | Model, options: Options) -> Context:
    """Derive ``spec``'s quantity for ``model`` under ``options`` (n, g, w kept as letters); a ratio is
    the quotient of its two parts, each derived in its own mode."""
    if spec.parts:
        return _ratio_context(spec, model, options)
    est = estimate(model, options)
    values: dict[sp.Symbol, int | sp.Rational] = _in_sympy(est.values)
    if spec.mode == "infer":
        graph, found = infer_quantities(est.model, options, keep_symbols=True)
        quantities = {**{q.key: q for q in est.quantities}, **{q.key: q for q in found}}  # FLOPs: the estimate's
        values.update(_in_sympy(inference_values(est.model, options)))
    else:
        graph, quantities = est.graph, {q.key: q for q in est.quantities}
    if spec.key not in quantities:
        raise ClaimError(f"{spec.name} is not defined for {est.model.name}" + (
            ": it has no routed experts (a mixture-of-experts model has active parameters)"
            if spec.key == "active_parameters" else
            ": nothing is fine-tuned (give --lora-rank and --lora-targets, or --train-only)"
            if spec.key == "trainable_parameters" else f" under these options ({spec.key} is not derived)"))
    q = _sympy_quantity(quantities[spec.key])
    if spec.key == "parameters" and "trainable_parameters" in quantities and options.lora_rank is not None:
        q = with_adapters(q, _sympy_quantity(quantities["trainable_parameters"]))
    q = bits_quantity(q, graph, options) if spec.derived == "bits" else narrow(spec, q, est.model.name)
    if spec.per_position:
        if est.model.window_layers is not None:
            raise ClaimError(f"{spec.name} is not defined for {est.model.name}: its layer groups cache different "
                             "lengths (l_w layers min(s + n, w), the others s + n); check kv_cache.total instead")

        q = replace(q, key="kv_cache_bytes_per_position", title="KV cache per cached position (all b sequences)",
                    breakdown=q.breakdown.scaled(1 / sp.sympify(cached_length(est.model))), form=None)
    # FLOPs are the whole model's (t = p = 1): their Psi (N, P) is every parameter, not one GPU's share
    whole = spec.unit == "FLOPs"
    held = (None if whole else quantities.get("parameters_per_gpu")) or est.quantity("parameters")
    raw = sp.sympify(held.breakdown.total)
    # NOTE: exact, not rounded (int() rounded down): Psi is substituted into both sides, and ours is
    # K * Psi; only an exact Psi gives the same bytes as the estimate (which rounds once, at the end).
    psi = evaluate(raw, values)
    if not psi.is_Rational:
        raise DerivationError(f"parameters per GPU did not evaluate to a number: {psi}")
    values[ds.Psi] = int(psi) if psi.is_Integer else psi
    params = sp.expand(raw.xreplace(q.relations))
    active = quantities.get("active_parameters")
    active_expr = None if active is None else sp.expand(sp.sympify(active.breakdown.total).xreplace(q.relations))
    return Context(spec, est.model, options, graph, q, params, raw, values, _notes(spec, q), active=active_expr)


def _part_options(options: Options, mode: str) -> Options:
    """The options of a ratio's part in its own mode (a parameter count keeps what counts parameters)."""
    if options.mode == mode:
        return options
    keep = ("dtype", "lora_rank", "lora_targets", "dora", "train_only", "freeze_embeddings", "batch", "seq")
    given = {f.name: getattr(options, f.name) for f in dataclass_fields(Options) if f.name in keep}
    try:
        return Options(**given, mode=mode)
    except (TypeError, ValueError) as exc:
        raise ClaimError(f"the parts of the ratio need options of two modes ({options.mode}, {mode}): {exc}") from None


def _ratio_context(spec: QuantitySpec, model: str | Model, options: Options) -> Context:
    num, den = (build_context(part, model, _part_options(options, part.mode)) for part in spec.parts)
    relations = {**den.quantity.relations, **num.quantity.relations}
    top, bottom = (sp.sympify(x.quantity.breakdown.total) for x in (num, den))
    if sp.expand(bottom.xreplace(relations)) == 0:
        raise ClaimError(f"{spec.name}: the denominator is 0 for {num.model.name}")
    q = Quantity("ratio", f"{num.quantity.title} / {den.quantity.title}", Breakdown((Term("ratio", top / bottom),),
                 spec.unit), relations, num.quantity.citation, num.quantity.assumptions)
    return replace(num, spec=spec, quantity=q, values={**den.values, **num.values},
                   notes=tuple(dict.fromkeys(num.notes + den.notes)))


def _in_sympy(mapping: Mapping[Any, Any]) -> dict[Any, Any]:
    """Keys (and expression values) as SymPy objects: the checker works in SymPy."""
    return {sp.sympify(k): v if isinstance(v, int) else sp.sympify(v) for k, v in mapping.items()}


def _sympy_quantity(q: Quantity) -> Quantity:
    """``q`` with SymPy terms and relations, for the checker's SymPy algebra."""
    terms = tuple(Term(t.path, sp.sympify(t.expr)) for t in q.breakdown.terms)
    return replace(q, breakdown=Breakdown(terms, q.unit), relations=_in_sympy(q.relations))


def _notes(spec: QuantitySpec, q: Quantity) -> tuple[str, ...]:
    """The quantity's assumptions; of an inference run, those about this quantity."""
    if spec.mode != "infer" or spec.name.startswith(("infer", "flops")):
        return tuple(q.assumptions)
    word = "KV cache" if spec.name.startswith("kv_cache") else "weights"
    return tuple(x for x in q.assumptions if x.startswith(word))


#: Short names of the activation profiles, for verdict lines.
_PROFILE_NOTES = {"exact": "every saved tensor counted", "korthikanti": "LayerNorm statistics and token ids neglected"}


def _option_flips(spec: QuantitySpec, o: Options) -> list[tuple[str, dict[str, Any]]]:
    """One-option changes to re-check a claim under.

    NOTE(claims): dtypes and the optimizer are not flipped: they are what a claim states
    ("fp16 MHA", "mixed-precision Adam"), and flipping them turns a missing factor 2 into
    "exact in fp8".
    """
    flips: list[tuple[str, dict[str, Any]]] = []
    if spec.mode == "train" and spec.key in ("activation_bytes_per_layer", "activation_bytes", "total_bytes"):
        efficient = o.attention_kernel != "eager"
        flips += [("without FlashAttention" if efficient else "with FlashAttention",
                   {"flash": False, "attention": "eager" if efficient else "flash"}),
                  ("without dropout" if o.dropout else "with dropout", {"dropout": not o.dropout})]
        flips += [("without recompute" if r == "none" else f"with {r} recompute", {"recompute": r})
                  for r in RECOMPUTE if r != o.recompute]
        other = "exact" if o.profile == "korthikanti" else "korthikanti"
        flips.append((f"with profile {other} ({_PROFILE_NOTES.get(other, other)})", {"profile": other}))
        if o.tp > 1:
            flips += [("without sequence parallelism" if o.sp else "with sequence parallelism", {"sp": not o.sp}),
                      ("without tensor parallelism (t = 1)", {"tp": 1, "sp": False})]
    if spec.mode == "train" and spec.key in ("hardware_flops", "hardware_flops_per_gpu"):
        flips += [("without recompute" if r == "none" else f"with {r} recompute", {"recompute": r})
                  for r in RECOMPUTE if r != o.recompute]
    if spec.mode == "train" and spec.key in ("model_state_bytes", "total_bytes"):
        if o.dp > 1:
            flips += [(f"with ZeRO stage {z}" if z else "without ZeRO", {"zero": z}) for z in range(4) if z != o.zero]
        flips.append(("without optimizer offload" if o.offload else "with optimizer offload",
                      {"offload": not o.offload}))
    return flips


def _arch_flips(spec: QuantitySpec, model: Model) -> list[tuple[str, Model]]:
    window = [("without the sliding window", replace(model, window=None))] if model.window else []
    if spec.mode == "infer" and model.sizes["a_kv"] != model.sizes["a"] and not spec.name.startswith("weights"):
        window.append((f"without GQA (a_kv = a: all {model.sizes['a']} heads cached, not {model.sizes['a_kv']})",
                       replace(model, sizes={**model.sizes, "a_kv": model.sizes["a"]})))
    if spec.mode == "infer" and not spec.name.startswith(("weights", "infer")):
        return window
    if not spec.name.startswith(("params", "model_states", "weights", "train", "infer")):
        return []
    arch = model.arch
    changes = [("with untied embeddings" if arch.tied_embeddings else "with tied embeddings",
                {"tied_embeddings": not arch.tied_embeddings})]
    if arch.qkv_bias or arch.out_bias or arch.mlp_bias:
        changes.append(("without linear biases", {"qkv_bias": False, "out_bias": False, "mlp_bias": False}))
    if arch.norm == "layernorm" and arch.norm_bias:
        changes.append(("with LayerNorm without bias", {"norm_bias": False}))
    return [(label, replace(model, arch=replace(arch, **fields))) for label, fields in changes] + window


def alternatives(spec: QuantitySpec, ctx: Context) -> Iterator[tuple[str, Context]]:
    """Contexts under one changed option or architectural switch each, labelled for a reader."""
    for label, changes in _option_flips(spec, ctx.options):
        try:
            yield label, replace(build_context(spec, ctx.model, replace(ctx.options, **changes)), pins=ctx.pins)
        except (DerivationError, ValueError):
            continue
    for label, model in _arch_flips(spec, ctx.model):
        try:
            yield label, replace(build_context(spec, model, ctx.options), pins=ctx.pins)
        except (DerivationError, ValueError):
            continue


def unit_factor(spec: QuantitySpec, unit: str, ctx: Context) -> tuple[sp.Expr, str]:
    """The factor that puts a claim in ``unit`` into the quantity's unit, and a note saying so."""

    unit = {"flops": "FLOPs", "FLOP": "FLOPs", "flop": "FLOPs"}.get(unit, unit)
    if unit not in ("bytes", "elements", "FLOPs", "bits", "ratio"):
        raise ClaimError(f"units must be bytes, elements, bits or FLOPs, not {unit!r}")
    if unit == spec.unit:
        return sp.Integer(1), ""
    if "ratio" in (unit, spec.unit):
        if unit == "ratio" and spec.parts:
            return sp.Integer(1), ""
        if unit == "ratio":
            raise ClaimError(f"the claim is a ratio or a percentage; {spec.name} is in {spec.unit}: check a ratio "
                             "of two quantities, e.g. params.trainable/params.total or kv_cache.per_token[a_kv=a]/"
                             "kv_cache.per_token")
        return sp.Integer(1), ""  # a ratio claim in the numerator's unit (bytes per parameter)
    if {unit, spec.unit} == {"bits", "bytes"}:
        return (sp.Rational(1, 8), "claim in bits, divided by 8") if unit == "bits" else (sp.Integer(8),
                                                                                       "claim in bytes, times 8 bits")
    if "FLOPs" in (unit, spec.unit) or "bits" in (unit, spec.unit):
        raise ClaimError(f"{spec.name} is in {spec.unit}; a claim in {unit} is about another quantity")
    if spec.unit == "elements":
        raise ClaimError(f"{spec.name} counts parameters (elements); a claim in bytes of weights is weights.total "
                         "or model_states.total")
    o = ctx.options
    if spec.name.startswith("activations"):
        width = dtype(o.dtype)
    elif spec.name.startswith("kv_cache"):
        width = serving_dtypes(o)[2]
    else:
        raise ClaimError(f"{spec.name} mixes element sizes; state the claim in bytes")
    return width.nbytes, f"claim in elements, multiplied by {width.nbytes} bytes per element ({width})"
