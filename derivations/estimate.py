"""The one entry point: a model plus options in, symbolic and exact numeric results out.

The pipeline: resolve the model (``models.resolve``), check the layout, derive the graph and its
quantities (parameters, then training's or inference's: ``quantities.training``,
``quantities.inference``), memoized per structure (``derivation``), and bind the values.

>>> e = estimate("gpt2")
>>> e.number("parameters")
124439808
>>> str(e.quantity("parameters_per_layer").closed_form())
'12*h**2 + 13*h'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from memderive.derivations.choices import describe
from memderive.derivations.memo import Keyed, per_graph
from memderive.derivations.models.model import Model
from memderive.derivations.models.resolve import check_layout, context_notes, resolve_model
from memderive.derivations.option_table import symbol_values
from memderive.derivations.options import TE_FP8, ArgumentError, Options, OptionsError, given_options
from memderive.derivations.quantities.compute import infer_flops, train_flops
from memderive.derivations.quantities.parameters import parameter_quantities
from memderive.derivations.quantities.step import not_covered, peak_quantity, runs_calls, timeline_of
from memderive.derivations.quantities.training import train_quantities, transformed
from memderive.derivations.quantity import Quantity
from memderive.derivations.quantity_table import SPELLINGS, public_name
from memderive.derivations.structure import FIXED_FIELDS, SWITCHES, VALUE_FIELDS, structure_key
from memderive.symbolic.errors import DerivationError, shown
from memderive.symbolic.expr import Expr
from memderive.symbolic.graph import Graph
from memderive.symbolic.mcore_experts import megatron_moe
from memderive.symbolic.strategies import fused_swiglu
from memderive.symbolic.te_float8 import te_float8
from memderive.symbolic.dtensor_tp import GatheredInputs
from memderive.symbolic.timeline import Timeline
from memderive.symbolic.dtypes import dtype
from memderive.derivations.quantities.inference import (check_inference, infer_quantities, inference_values, peak_phase,
                                                        serving_dtypes)
from memderive.derivations.quantities.finetune import LORA_CITATION, trainable_parameters

__all__ = ["Estimate", "UnknownQuantity", "estimate", "derivation", "structure_key", "stage_derivations", "VALUE_FIELDS",
           "FIXED_FIELDS", "SWITCHES", "PEAK"]

#: The key of the step's high-water mark, derived on demand from the step timeline.
PEAK = "peak_bytes"


class UnknownQuantity(DerivationError, KeyError):
    """A quantity name an estimate does not have (a ``KeyError`` too, as a mapping's lookup is)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class Estimate:
    """Symbolic quantities of one model under one set of options, and the values to substitute."""

    model: Model
    options: Options
    graph: Graph
    quantities: tuple[Quantity, ...]
    values: Mapping[Expr, int]

    def quantity(self, key: str) -> Quantity:
        """The quantity of estimate key ``key`` (``total_bytes``) or of a name ``derivations.quantity_table``
        gives it in this estimate's mode (``train.total``, or an alias such as ``train-total``)."""
        row = SPELLINGS.get(key) if isinstance(key, str) else None
        if row is not None and not row.claim_only and public_name(self.options.mode, row.key) == row.name:
            key = row.key
        for q in self.reported_quantities() if key == PEAK else self.quantities:
            if isinstance(key, str) and q.key == key:
                return q
        have = ", ".join(q.key for q in self.reported_quantities())
        raise UnknownQuantity(f"no quantity {shown(key)}; have {have}")

    def timeline(self) -> Timeline | None:
        """The training step over time (``symbolic.timeline``), or None: not training, or options the
        timeline does not model (``quantities.step.not_covered`` says which)."""
        if self.options.mode != "train" or not_covered(self.options) or self._fused_recompute():
            return None
        return timeline_of(self)

    def decides(self) -> str:
        """The key of the figure that decides (``deciding``'s, without its reason): ``peak_bytes`` where the step
        timeline runs transformers' code call by call, else ``total_bytes``. Cheap where the sum decides: no step
        timeline is walked to say so (``plan`` asks it of every structure)."""
        if self.options.mode == "train" and runs_calls(self.graph) and self.timeline() is not None:
            return PEAK
        return "total_bytes"

    def deciding(self) -> tuple[str, str]:
        """The one figure that decides whether the estimate fits (``fit``, ``plan`` and ``fits_gpu`` hold it,
        plus the runtime's terms with a GPU named, against the memory), and why that one.

        In training the sum (``total_bytes``) counts every model state and saved activation at once; the step's
        high-water mark (``peak_bytes``) is a moment of the step. The peak decides where the step timeline runs
        the step call by call (transformers' code, ``quantities.step.runs_calls``), checked to the byte against
        real steps on CPU (``tests/test_step_timeline.py``); elsewhere the sum stands in for it."""
        o = self.options
        if o.mode != "train":
            return "total_bytes", ("the larger of the prefill and decode phases" if self.peak_phase() else
                                   "the tensors held")
        if self.decides() == PEAK:
            return PEAK, ("the step timeline runs transformers' code call by call (checked to the byte against "
                          "real steps on CPU); total_bytes, the sum of everything saved at once, is reported beside it")
        if o.implementation_kind != "hf":
            why = "Megatron's layers run as fused calls whose backward temporaries the step timeline does not model"
            if self.timeline() is not None:
                why += ("; the step peak shown beside it replays PyTorch's eager step (its foreach AdamW "
                        "temporaries), not Megatron's fused kernels")
        elif self.peak_note() is not None:
            why = self.peak_note().removesuffix(": no peak_bytes")
        else:
            why = (f"the step timeline runs transformers' code call by call where it reads each ATen call "
                   f"(symbolic.hf_programs); {self.model.arch.family}'s layers here are whole calls")
        return "total_bytes", ("the sum of model states and saved activations stands in for the step's high-water "
                               f"mark: {why}")

    def _fused_recompute(self) -> bool:
        """Full recompute of layers whose ops run as single fused calls: the timeline recomputes a layer
        from its calls' saves, which fused calls do not spell out."""
        return self.options.recompute == "full" and not runs_calls(self.graph)

    def reported_quantities(self) -> tuple[Quantity, ...]:
        """The derived quantities, then ``peak_bytes`` (the step's high-water mark, derived on demand)."""
        tl = self.timeline()
        return self.quantities if tl is None else (*self.quantities, peak_quantity(self, tl))

    def number(self, key: str) -> int:
        return self.quantity(key).value(self.values)

    def inputs(self) -> dict[str, Any]:
        """Every option this estimate was computed under, defaults resolved (the attention kernel,
        the serving dtypes), so that a saved result can be read without its command."""
        o = self.options
        out: dict[str, Any] = {"model": self.model.name, "mode": o.mode}
        out.update({f.name: getattr(o, f.name) for f in fields(o) if f.name not in ("mode", "flash")})
        out["attention"] = o.attention_kernel
        if o.mode == "infer":
            out["weight_dtype"], _, kv = (str(x) for x in serving_dtypes(o))
            out["kv_dtype"] = kv
            if self.model.quantization is not None and o.weight_dtype is None:  # the checkpoint's, as stored
                out["weight_dtype"] = f"as stored ({self.model.quantization.method})"
        return out

    def notes(self) -> list[str]:
        """Warnings about the inputs (a context past the model's trained positions), as text and JSON show them."""
        stored = self.model.checkpoint
        return context_notes(self.model, self.options) + ([stored.line()] if stored is not None else [])

    def peak_note(self) -> str | None:
        """Why a training estimate has no ``peak_bytes`` (options the step timeline does not model), or None."""
        missing = not_covered(self.options) if self.options.mode == "train" else None
        if missing is None and self.options.mode == "train" and self._fused_recompute():
            missing = "the step timeline does not model full recompute of layers run as fused calls"
        return f"{missing}: no peak_bytes" if missing else None

    def peak_phase(self) -> str | None:
        """``prefill`` or ``decode``: the phase whose memory is the inference total (None otherwise)."""
        keys = {q.key for q in self.quantities}
        if not {"prefill_bytes", "decode_bytes"} <= keys:
            return None

        return peak_phase({key: self.number(key) for key in ("prefill_bytes", "decode_bytes")})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model.name, "mode": self.options.mode, "inputs": self.inputs()}
        reported = self.reported_quantities()
        out.update({q.key: q.value(self.values) for q in reported})
        if self.peak_phase() is not None:
            out["peak_phase"] = self.peak_phase()
        tl = self.timeline()
        if tl is not None:
            out["peak_at"] = tl.peak_at
            if self.options.timeline:  # op by op only on request: 1.5 MB for a 256-layer model
                out["timeline"] = tl.summary()  # every moment walked (step_timeline's every_moment)
        out["notes"] = self.notes()
        if self.options.mode == "train":  # the one figure that decides whether the step fits, and why
            out["fits_decided_by"], out["fits_decided_why"] = self.deciding()
        # Printed without SymPy (Quantity.formula): equal to closed_form(), expanded.
        out["formulas"] = {q.key: q.formula() for q in reported}
        # Each key's public name (derive NAME, check --quantity NAME): derivations.quantity_table.
        out["names"] = {q.key: public_name(self.options.mode, q.key) for q in reported}
        out["strategies"] = list(self.graph.strategies)
        if self.options.mode == "train":
            out["implementation"] = self.implementation()
        if self.options.gpu is not None:
            # lazy: the time model, the runtime and vLLM's start-up, {} without a --gpu, cost a plain estimate ~15%
            from memderive.derivations.quantities.device import gpu_json

            out.update(gpu_json(self))
        return out

    def variant(self, **changes: Any) -> Estimate:
        """The estimate of this model under these options with ``changes`` (``Options`` fields): how a quantity
        that needs another whole estimate (vLLM's profiling run, ``quantities.serving``) gets one without
        importing this module."""
        return estimate(self.model, replace(self.options, **changes))

    def implementation(self) -> str:
        """Which code the activations describe, e.g. ``hf-sdpa (transformers' modeling code)``."""
        o = self.options
        return describe(o.implementation_kind, o.hf_attention)


def _options(options: Options | None, kwargs: Mapping[str, Any]) -> Options:
    """The options of a call: an ``Options``, or its fields as keywords (not both, nothing else)."""
    if options is None:
        return Options.from_keywords(kwargs)
    given_options(options)
    if kwargs:
        raise ArgumentError(f"give options=Options(...) or keyword options ({', '.join(kwargs)}), not both")
    return options


def estimate(model: str | Path | Model | Mapping[str, Any] | Any, options: Options | None = None,
             **kwargs: Any) -> Estimate:
    """Estimate parameters (and, with ``mode="train"``/``"infer"``, memory) of a model.

    Args:
        model: bundled name (``"llama-2-7b"``), ``config.json`` path, config dict or transformers config.
        options: an ``Options``; or give its fields as keyword arguments.
    """
    options = _options(options, kwargs)
    resolved = resolve_model(model)
    check_layout(resolved, options)
    options = _hf_kernel(resolved, _checkpoint_base(resolved, options))
    if options.mode == "infer":
        check_inference(resolved, options)  # value checks run on every call, cached derivation or not
    values = {**resolved.values(), **symbol_values(options)}
    stages = stage_derivations(resolved, options)  # the largest stage bounds each GPU's memory
    graph, quantities = stages[0] if len(stages) == 1 else max(stages, key=lambda gq: _total(gq[1], values))
    if options.mode == "infer":
        values.update(inference_values(resolved, options))
    return Estimate(resolved, options, graph, quantities, values)


def _checkpoint_base(model: Model, options: Options) -> Options:
    """Fine-tuning a bitsandbytes checkpoint: its frozen base as the checkpoint stores it, NF4 (fp4 stores the
    same bytes) with or without double quantization, or LLM.int8(), unless ``--base-dtype`` says otherwise."""
    q = model.quantization
    if (q is None or q.reason or q.scheme not in ("nf4", "fp4", "int8") or options.mode == "infer"
            or not options.finetuning or options.base_dtype is not None):
        return options
    if q.scheme == "int8":
        return replace(options, base_dtype="int8")
    return replace(options, base_dtype="nf4", no_double_quant=not q.double_quant)


def _hf_kernel(model: Model, options: Options) -> Options:
    """Under ``--implementation hf``, the attention kernel the family's transformers class runs (eager where
    sdpa was only the default and the class lacks it); a kernel asked for that it refuses is one line."""
    if options.mode != "train" or options.implementation_kind != "hf":
        return options
    # lazy: transformers' code (symbolic.huggingface, hf_code, float8), imported under --implementation hf only
    from memderive.derivations.models.implementations import hf_kernel

    try:
        kernel = hf_kernel(model, options.hf_attention, options.hf_attention_given)
    except ValueError as exc:
        raise OptionsError(str(exc)) from None
    return options if kernel == options.hf_attention else replace(options, attention=kernel)


def stage_derivations(model: Model, options: Options) -> list[tuple[Graph, tuple[Quantity, ...]]]:
    """The (graph, quantities) of each pipeline stage whose memory can differ (``pipeline_stages``), first stage
    first: ``estimate`` reports the one with the most ``total_bytes`` (the first of equal ones)."""
    if options.mode != "train" or options.pp == 1:
        return [_derived(model, options)]
    return [_derived(model, options, stage) for stage in pipeline_stages(model, options)]


def pipeline_stages(model: Model, options: Options) -> tuple[str, ...]:
    """The pipeline stages whose memory can differ: first, the second (``middle``: one micro-batch less in flight)
    when the first holds layers of its own, and the last (its output layer, whether or not its layers are given);
    with even stages the first and the last. The first holds the most micro-batches (Korthikanti et al. 2022 §4.2.3), the last
    the output layer: its logits (s b V, fp32 for the loss) can outweigh the first's extra micro-batches, e.g. under
    full recompute, where a layer keeps only its input."""
    if options.pp == 1:
        return ("first",)
    if options.pipeline_layout is not None:  # every rank that can hold the most (``Options.layout_ranks``)
        return options.layout_ranks(model.sizes.get("l_d", 0))
    if not options.uneven_stages:
        return ("first", "last")
    _, middle, _ = options.stage_layers(model.sizes["l"])
    more = ("middle",) if middle is not None and options.first_stage_layers is not None else ()
    return ("first", *more, "last")  # the last holds the output layer, its own layers given or not


def _total(quantities: tuple[Quantity, ...], values: Mapping[Expr, int]) -> int:
    return next(q for q in quantities if q.key == "total_bytes").value(values)


def _derived(resolved: Model, options: Options, stage: str = "first") -> tuple[Graph, tuple[Quantity, ...]]:
    key = structure_key(resolved, options) + ((stage,) if stage != "first" else ())
    return derivation(Keyed(key, (resolved, options, stage)))


def _autocast(model: Model, options: Options, hf: Any, dropout: bool) -> Graph | None:
    """Under ``--precision autocast``, transformers' layers built in fp32 and run under ``torch.autocast``
    (``symbolic.autocast``: the 16-bit casts saved beside the fp32 tensors), where the graph's op kinds
    are written out there; None otherwise (the activations in ``--dtype`` stand in)."""
    if options.precision != "autocast" or options.dtype == "fp32":
        return None
    # lazy: torch.autocast's casts, for --precision autocast only (~2% of a cold estimate)
    from memderive.symbolic.autocast import Autocast

    strategy = Autocast("cuda", dtype(options.dtype), separate_qkv=model.arch.family != "gpt",
                        attention=options.hf_attention)
    graph = hf(model.graph(activation_dtype="fp32", dropout=dropout))
    return strategy(graph) if strategy.covers(graph) else None


def _cast_in_part(options: Options, graph: Graph) -> Graph:
    """The graph as built in ``--dtype``, saying under ``--precision autocast`` that autocast's casts are not
    written out for its op kinds."""
    if options.precision != "autocast" or options.dtype == "fp32":
        return graph
    note = (f"torch.autocast: the {options.dtype} casts autograd saves beside fp32 tensors are not written out "
            "for this model's layers (symbolic.autocast covers embeddings, layer norms, linears, eager attention, "
            f"GELU, tanh, dropout): activations in {options.dtype} stand in")
    return replace(graph, assumptions=graph.assumptions + (note,))


#: ``parameter_quantities`` once per graph: every structure of a model derives from the same base graph.
_parameters = per_graph(parameter_quantities)
#: Megatron-LM's fused SwiGLU once per base graph: one graph object for every structure, so that the per-graph
#: memos below it (FLOPs, transforms, the time model's forms) hit (a fresh graph per structure made plan 4x slower).
_fused_swiglu = per_graph(fused_swiglu)
#: Transformer Engine's fp8 linears once per base graph and recipe (as ``_fused_swiglu``, for the memos below it).
_te_float8 = per_graph(te_float8)
#: Megatron-Core's MoE layer (TopKRouter, alltoall dispatcher, TEGroupedMLP) once per base graph (as ``_fused_swiglu``).
_megatron_moe = per_graph(megatron_moe)
#: torchtitan's tensor parallelism (DTensor): column-parallel linears save their gathered input (``dtensor_tp``).
_titan_gathered = per_graph(GatheredInputs())


@per_graph
def _titan_float8(graph: Graph, recipe: str, sizes: tuple, tp_plan: bool, keep_output: bool = False) -> Graph:
    """torchao's ``convert_to_float8_training`` of torchtitan's Llama (every ``nn.Linear`` whose dims divide by 16,
    the output layer too: ``filter_fqns`` is empty by default), with its Float8 tensor parallelism where
    ``tp_plan`` (``Options.float8_tp_plan``), once per base graph and recipe; ``keep_output``: the output layer
    left 16-bit (``--fp8-keep-output``: torchtitan 9dec370 float8.py L99, ``module_filter_fn=lambda mod, fqn: fqn !=
    "output"``)."""
    # lazy: torchao's Float8 model, for --fp8 only (test_cold_path: a plain estimate does not load it)
    from memderive.symbolic.float8 import Float8Training

    convert = Float8Training(recipe, dict(sizes), tp_plan=tp_plan, keep_output=keep_output)
    unplanned = convert.unplanned(graph) if tp_plan else ()
    if unplanned:
        raise OptionsError(f"--fp8 {recipe} with --tp: torchtitan's Float8 tensor parallelism takes every layer "
                           f"linear as a Float8Linear of a dense layer; {', '.join(unplanned)} is not one (a dim not "
                           "divisible by 16, or experts): use --fp8 rowwise (regular tensor parallelism)")
    return convert(graph)


@lru_cache(maxsize=1024)
def derivation(structure: Keyed) -> tuple[Graph, tuple[Quantity, ...]]:
    """The graph and quantities of ``structure.value`` (a model and options), derived once per
    ``structure_key`` within a process (never read from disk); ``derivation.__wrapped__`` derives anew."""
    resolved, options, stage = structure.value
    act = options.dtype if options.mode == "train" else "bf16"
    dropout = options.dropout and options.mode == "train"
    base = resolved.graph(activation_dtype=act, dropout=dropout,
                          mtp_layers=options.mtp_layers if options.mode == "train" else 0)
    if options.mode == "train" and options.implementation_kind == "hf":  # transformers' code (imported for it)
        # lazy: as in _hf_kernel (transformers' code: ~15% of a cold estimate's time when imported)
        from memderive.derivations.models.implementations import float8_layers, hf_layers

        hf = hf_layers(resolved, options.hf_attention, options.device, experts=options.experts_implementation,
                       loss_chunks=options.loss_chunks)
        base = _autocast(resolved, options, hf, dropout) or _cast_in_part(options, hf(base))
        if options.fp8 != "none":
            base = float8_layers(resolved, options.fp8, keep_output=options.fp8_keep_output)(base)
            if not base.float8:
                raise OptionsError(f"--fp8 {options.fp8}: no linear of {resolved.name} has both dims divisible by "
                                   "16 (torch._scaled_mm needs them; torchtitan skips such linears), so nothing "
                                   "would run in 8 bits")
    elif options.mode == "train":  # Megatron-LM's layers: its SwiGLU is one fused function (bias_swiglu_fusion)
        # and its MoE layer's own saved tensors (symbolic.mcore_experts; gpt-oss's clamped copy: Megatron-Core's code)
        base = _megatron_moe(_fused_swiglu(base), clamp_copy=options.framework == "megatron")
        if options.fp8 in TE_FP8:  # Transformer Engine's linears save their inputs' 8-bit casts
            base = _te_float8(base, recipe=options.fp8)
        elif options.fp8 != "none":  # torchtitan's Float8Linear (torchao) over its own nn.Linear modules
            base = _titan_float8(base, recipe=options.fp8, sizes=tuple(resolved.values().items()),
                                 tp_plan=options.float8_tp_plan, keep_output=options.fp8_keep_output)
        if options.framework == "torchtitan" and options.tp > 1:  # DTensor saves the gathered linear inputs
            base = _titan_gathered(base)
    moe = resolved.arch.moe
    quantities = list(_parameters(base, active_embedding=moe is None or moe.active_embedding))
    graph = base
    if options.mode == "params" and options.finetuning:
        graph = transformed(base, options, resolved)
        quantities.append(Quantity("trainable_parameters", "Trainable parameters", trainable_parameters(graph),
                                   graph.relations, LORA_CITATION))
    if options.mode == "train":
        graph, more = train_quantities(resolved, options, base, stage)
        quantities += more + train_flops(resolved, options, base, graph, lambda g, o: transformed(g, o, resolved))
    if options.mode == "infer":
        graph, more = infer_quantities(resolved, options, base, keep_symbols=True)
        quantities += more + infer_flops(resolved, options, graph)
    return graph, tuple(quantities)
