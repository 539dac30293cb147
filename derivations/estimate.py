"""The one entry point: a model plus options in, symbolic and exact numeric results out.

>>> e = estimate("gpt2")
>>> e.number("parameters")
124439808
>>> str(e.quantity("parameters_per_layer").closed_form())
'12*h**2 + 13*h'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from memderive.derivations.models.config import from_config, load_config
from memderive.derivations.quantities.compute import infer_flops, train_flops
from memderive.derivations.quantities.finetune import (INT8_CITATION, LORA_CITATION, QLORA_CITATION, dequantized_weight,
                                             finetune_notes, finetune_states, finetune_steps, trainable_parameters)
from memderive.derivations.quantities.model_states import OFFLOAD_CITATION, OPTIMIZERS, ZERO_CITATION
from memderive.derivations.quantities.experts import check_expert_layout, expert_split_states
from memderive.derivations.quantities.timing import time_json
from memderive.derivations.models.implementations import describe as describe_implementation
from memderive.derivations.models.implementations import hf_layers
from memderive.derivations.models.model import Model
from memderive.derivations.option_table import shared_names, symbol_values
from memderive.derivations.options import PROFILES, ArgumentError, Options, OptionsError
from memderive.derivations.models.presets import PRESETS, preset
from memderive.derivations.quantity import Quantity
from memderive.symbolic.derive import Breakdown, Term, activations, parameters
from memderive.symbolic.dims import b, h, l, s
from memderive.symbolic.errors import DerivationError, InvalidLayoutError, shown
from memderive.symbolic.expr import Expr, const
from memderive.symbolic.experts import ActiveExperts, has_experts
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph
from memderive.symbolic.strategies import RequiresGrad

__all__ = ["context_notes", "Estimate", "UnknownQuantity", "estimate", "resolve_model"]

MOE_CITATION = Citation("Lepikhin et al. 2020 (GShard); Dai et al. 2024 (DeepSeekMoE)", "arXiv:2006.16668; "
                        "arXiv:2401.06066", "top-k routing over E experts; shared experts")
ACTIVE_DEFINITION = ("active parameters: the total less, in each MoE layer, the E - k routed experts a token does not "
                     "use (router, shared experts, attention, embeddings and head count)")
KORTHIKANTI = Citation("Korthikanti et al. 2022", "arXiv:2205.05198", "Eq. 1, Table 2")


def resolve_model(model: str | Path | Model | Mapping[str, Any] | Any) -> Model:
    """A bundled name, a ``config.json`` path, a config dict, a transformers config or a Model.

    A name that is both a local path and a bundled name is the path, as transformers'
    ``from_pretrained`` reads it; a folder without ``config.json`` that shadows a bundled name is an
    error naming both.
    """
    if isinstance(model, Model):
        return model
    if isinstance(model, Mapping):
        return from_config(model)
    if hasattr(model, "to_dict") and hasattr(model, "model_type"):
        return from_config(model.to_dict(), name=getattr(model, "name_or_path", None) or model.model_type)
    if not isinstance(model, (str, Path)):
        raise ArgumentError(f"model must be a bundled name, a config.json path, a config dict or a transformers "
                            f"config, got {shown(model)} ({type(model).__name__})")
    name = str(model)
    if len(name) > 4096 or "\0" in name:
        raise ArgumentError(f"model {shown(name)} is neither a bundled name nor a path")
    if Path(name).is_file() or (Path(name).is_dir() and (Path(name) / "config.json").is_file()):
        return load_config(name)  # a path wins over a bundled name, as in transformers' from_pretrained
    if name.lower() in PRESETS:
        if Path(name).exists():
            raise ArgumentError(f"{name} is a bundled model and also a folder here without config.json; give "
                                f"./{name}/config.json, or run elsewhere for the bundled model")
        return preset(name)
    if name.endswith(".json") or "/" in name or Path(name).exists():
        return load_config(name)
    return preset(name)  # raises with the list of bundled names


def check_layout(model: Model, opts: Options) -> None:
    """Divisibility a Megatron layout needs; each violation is one clear error."""
    z = model.sizes
    checks = [(z["a"] % opts.tp, f"{z['a']} attention heads are not divisible by tensor-parallel degree {opts.tp}"),
              (z["a_kv"] % opts.tp if z["a_kv"] >= opts.tp else 0,
               f"{z['a_kv']} key/value heads are not divisible by tensor-parallel degree {opts.tp}"),
              (z["f"] % opts.tp, f"FFN width {z['f']} is not divisible by tensor-parallel degree {opts.tp}"),
              (z["l"] % opts.pp, f"{z['l']} layers are not divisible by pipeline-parallel degree {opts.pp}")]
    if opts.mode == "train" and opts.tp > 1 and z["a_kv"] < opts.tp:
        checks.append((1, f"{z['a_kv']} key/value heads cannot be split over tensor-parallel degree {opts.tp}"))
    if opts.virtual_stages not in (None, 1) and z["l"] % (opts.pp * opts.virtual_stages):
        checks.append((1, f"{z['l']} layers are not divisible by p*v = {opts.pp * opts.virtual_stages}"))
    for remainder, message in checks:
        if remainder:
            raise InvalidLayoutError(f"{model.name}: {message}; choose a degree that divides it")
    check_expert_layout(model, opts)
    if opts.mode == "infer" and not model.arch.lm_head:
        raise OptionsError(f"{model.name} is an encoder without a language-model head: it generates nothing and "
                           "keeps no KV cache; use --mode train or --mode params")
    if model.arch.positions == "learned" and opts.seq is not None and model.max_positions is not None:
        if opts.seq + opts.new_tokens > model.max_positions:
            raise OptionsError(f"{model.name} has {model.max_positions:,} learned positions: --seq plus --new-tokens "
                               f"({opts.seq + opts.new_tokens:,}) must not exceed it")


class UnknownQuantity(DerivationError, KeyError):
    """A quantity name an estimate does not have (a ``KeyError`` too, as a mapping's lookup is)."""

    def __str__(self) -> str:
        return str(self.args[0])


def context_notes(model: Model, opts: Options) -> list[str]:
    """A prompt plus new tokens past the positions the model was trained for, said the same way by
    ``estimate`` and ``fit`` (learned positions refuse it outright: see ``check_layout``).

    >>> from memderive.derivations.models.presets import preset
    >>> context_notes(preset("llama-2-7b"), Options(mode="infer", batch=1, seq=4000, new_tokens=200))
    ['a context of 4,200 tokens (prompt plus new tokens) is past the 4,096 positions llama-2-7b was trained for']
    """
    if opts.mode == "params" or opts.seq is None or model.max_positions is None:
        return []
    context = opts.seq + (opts.new_tokens if opts.mode == "infer" else 0)
    if context <= model.max_positions:
        return []
    what = " (prompt plus new tokens)" if opts.mode == "infer" and opts.new_tokens else ""
    return [f"a context of {context:,} tokens{what} is past the {model.max_positions:,} positions {model.name} "
            "was trained for"]


@dataclass(frozen=True, slots=True)
class Estimate:
    """Symbolic quantities of one model under one set of options, and the values to substitute."""

    model: Model
    options: Options
    graph: Graph
    quantities: tuple[Quantity, ...]
    values: Mapping[Expr, int]

    def quantity(self, key: str) -> Quantity:
        for q in self.quantities:
            if isinstance(key, str) and q.key == key:
                return q
        raise UnknownQuantity(f"no quantity {shown(key)}; have {', '.join(q.key for q in self.quantities)}")

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
            from memderive.derivations.quantities.inference import serving_dtypes

            out["weight_dtype"], _, kv = (str(x) for x in serving_dtypes(o))
            out["kv_dtype"] = kv
        return out

    def notes(self) -> list[str]:
        """Warnings about the inputs (a context past the model's trained positions), as text and JSON show them."""
        return context_notes(self.model, self.options)

    def peak_phase(self) -> str | None:
        """``prefill`` or ``decode``: the phase whose memory is the inference total (None otherwise)."""
        keys = {q.key for q in self.quantities}
        if not {"prefill_bytes", "decode_bytes"} <= keys:
            return None
        from memderive.derivations.quantities.inference import peak_phase

        return peak_phase({key: self.number(key) for key in ("prefill_bytes", "decode_bytes")})

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model.name, "mode": self.options.mode, "inputs": self.inputs()}
        out.update({q.key: self.number(q.key) for q in self.quantities})
        if self.peak_phase() is not None:
            out["peak_phase"] = self.peak_phase()
        out["notes"] = self.notes()
        # Printed without SymPy (Quantity.formula): equal to closed_form(), expanded.
        out["formulas"] = {q.key: q.formula() for q in self.quantities}
        out["strategies"] = list(self.graph.strategies)
        if self.options.mode == "train":
            out["implementation"] = self.implementation()
        out.update(time_json(self))  # step_time_s, tokens_per_s, mfu / prefill and decode times (with --gpu)
        return out

    def implementation(self) -> str:
        """Which code the activations describe, e.g. ``hf-sdpa (transformers' modeling code)``."""
        o = self.options
        return describe_implementation(o.implementation_kind, o.hf_attention)


def _collected_in_l(expr: Any) -> Any:
    """``l(...) + ...``; with l_d dense layers among MoE ones, ``l(MoE layer) + l_d(dense - MoE MLP) + ...``."""
    import sympy

    from memderive.symbolic.dims_sympy import l_d
    from memderive.symbolic.simplify import collect_in

    if l_d in sympy.sympify(expr).free_symbols:
        return sympy.collect(sympy.expand(expr), [sympy.sympify(l), l_d])
    return collect_in(expr, l)


def _sbh_factored(expr: Any) -> Any:
    from memderive.symbolic.simplify import factor_out

    return factor_out(expr, s * b * h)


def _param_quantities(model: Model, graph: Graph) -> list[Quantity]:
    rel = graph.relations
    out = [
        Quantity("parameters", "Parameters", parameters(graph), rel, form=_collected_in_l),
        Quantity("parameters_per_layer", "Parameters per layer", parameters(graph, ["layer"], per_repeat=True), rel),
    ]
    if has_experts(graph):
        out.append(Quantity("active_parameters", "Active parameters (one token's k of E routed experts)",
                            parameters(ActiveExperts()(graph)), rel, MOE_CITATION, (ACTIVE_DEFINITION,),
                            form=_collected_in_l))
    return out


def _transformed(base: Graph, opts: Options, model: Model) -> Graph:
    """Fine-tuning transforms (adapters, frozen weights) first, then the layout, then what frozen weights
    no longer need saved (``RequiresGrad`` sees the final graph)."""
    graph = base
    steps = [*finetune_steps(model, opts), *opts.strategies()]
    for strategy in steps + ([RequiresGrad()] if opts.finetuning else []):
        graph = strategy(graph)
    return graph


def _one_layer(graph: Graph, ignore: tuple[str, ...]) -> Breakdown:
    """Activations of one layer for one micro-batch."""
    layer = replace(graph.block("layer"), in_flight=const(1))
    return activations(replace(graph, blocks=(layer,)), ignore, per_repeat=True)


def _recompute_working_set(base: Graph, opts: Options, stored: Breakdown, ignore: tuple[str, ...],
                           model: Model) -> Breakdown:
    """Backward rebuilds one layer at a time: at the peak, that layer's recomputed activations
    (what it would save without recompute, less what recompute already keeps) add to the stored ones."""
    plain = _one_layer(_transformed(base, replace(opts, recompute="none"), model), ignore).total
    return Breakdown((Term("recompute/working_layer", plain - stored.total),), "bytes")


def _states(graph: Graph, opts: Options) -> tuple[Breakdown, Breakdown | None, Breakdown | None]:
    """GPU model states, what is offloaded or paged to CPU memory (None: nothing) and, when some
    parameters are frozen or the optimizer is paged, the trainable parameters."""
    if opts.finetuning or OPTIMIZERS[opts.optimizer].paged:
        states, cpu, trainable = finetune_states(graph, opts)
        return states, cpu if cpu.terms else None, trainable
    states, cpu = expert_split_states(graph, opts)  # routed experts' states over d/ep ranks (d without experts)
    return states, cpu, None


def _train_quantities(model: Model, opts: Options, base: Graph) -> tuple[Graph, list[Quantity]]:
    graph = _transformed(base, opts, model)
    ignore, why = PROFILES[opts.profile]
    rel = graph.relations
    states, cpu, trainable = _states(graph, opts)
    acts = activations(graph, ignore)
    per_layer = _one_layer(graph, ignore)
    assumptions = graph.assumptions + (f"activation profile {opts.profile}: {why}",) + finetune_notes(opts)
    total = states + acts + dequantized_weight(graph, opts)
    if opts.recompute != "none":
        total += _recompute_working_set(base, opts, per_layer, ignore, model)
        assumptions += ("recompute: the peak adds one layer's activations rebuilt in backward",)
    if opts.overhead_bytes:
        total += Breakdown((Term("overhead", const(opts.overhead_bytes)),), "bytes")
    cite = QLORA_CITATION if opts.base_dtype == "nf4" else INT8_CITATION if opts.base_dtype == "int8" else None
    weights = states.where(lambda path: path.startswith("model_states/weights"))
    tuned = [] if trainable is None else [
        Quantity("trainable_parameters", "Trainable parameters per GPU", trainable, rel, LORA_CITATION),
        Quantity("weight_bytes", "Weights per GPU", weights, rel, cite, assumptions)]
    offloaded = [] if cpu is None else [Quantity("offloaded_bytes", "Gradients and optimizer states offloaded (or "
                                                 "paged) to CPU memory", cpu, rel, OFFLOAD_CITATION)]
    return graph, [
        Quantity("parameters_per_gpu", "Parameters held by one GPU", parameters(graph), rel),
        *tuned,
        Quantity("activation_bytes_per_layer", "Activation memory per layer", per_layer, rel, KORTHIKANTI,
                 assumptions, form=_sbh_factored),
        Quantity("activation_bytes", "Activation memory per GPU", acts, rel, KORTHIKANTI, assumptions),
        Quantity("model_state_bytes", "Model states per GPU", states, rel, ZERO_CITATION),
        Quantity("total_bytes", "Training memory per GPU", total, rel, None, assumptions),
        *offloaded,
    ]


def _options(options: Options | None, kwargs: Mapping[str, Any]) -> Options:
    """The options of a call: an ``Options``, or its fields as keywords (not both, nothing else)."""
    if options is None:
        return Options.from_keywords(kwargs)
    if not isinstance(options, Options):
        raise ArgumentError(f"options must be an Options, got {shown(options)} ({type(options).__name__}); give "
                            "fields as keywords, e.g. estimate(model, mode=\"train\", batch=1, seq=2048)")
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
    if options.mode == "infer":
        from memderive.derivations.quantities.inference import _check as check_inference

        check_inference(resolved, options)  # value checks run on every call, cached derivation or not
    graph, quantities = _derived(resolved, options)
    values = {**resolved.values(), **symbol_values(options)}
    if options.mode == "infer":
        from memderive.derivations.quantities.inference import inference_values

        values.update(inference_values(resolved, options))
    return Estimate(resolved, options, graph, quantities, values)


#: Options whose values enter the closed forms as symbols (b, s, n, t, p, d, m, v, r) or only the times (gpu,
#: efficiency): graphs differ only by the flags in ``structure_key``, so a derivation is shared by every value
#: with the same flags (``shared`` in ``derivations.option_table``).
VALUE_FIELDS = shared_names()
_DERIVED: dict[tuple, tuple[Graph, tuple[Quantity, ...]]] = {}
_CACHE_SIZE = 1024


def structure_key(model: Model, options: Options) -> tuple:
    """What a derivation depends on: the model (architecture, sizes, window) and the options, with the
    degrees and step sizes reduced to the switches they flip (t > 1, t > a_kv, p > 1, d > 1, m given, v > 1)."""
    fixed = tuple((f.name, getattr(options, f.name)) for f in fields(options) if f.name not in VALUE_FIELDS)
    flags = (options.tp > 1, options.tp > model.sizes["a_kv"], options.pp > 1, options.dp > 1,
             options.micro_batches is None, options.virtual_stages in (None, 1), options.lora_rank is None)
    return repr(model), fixed, flags


def _derived(resolved: Model, options: Options) -> tuple[Graph, tuple[Quantity, ...]]:
    """The graph and quantities, derived once per structure within a process (never read from disk)."""
    key = structure_key(resolved, options)
    hit = _DERIVED.get(key)
    if hit is None:
        if len(_DERIVED) >= _CACHE_SIZE:
            _DERIVED.pop(next(iter(_DERIVED)))
        hit = _DERIVED[key] = _derive(resolved, options)
    return hit


def _derive(resolved: Model, options: Options) -> tuple[Graph, tuple[Quantity, ...]]:
    act = options.dtype if options.mode == "train" else "bf16"
    base = resolved.graph(activation_dtype=act, dropout=options.dropout and options.mode == "train")
    if options.mode == "train" and options.implementation_kind == "hf":
        base = hf_layers(resolved.arch, options.hf_attention)(base)
    quantities = _param_quantities(resolved, base)
    graph = base
    if options.mode == "params" and options.finetuning:
        graph = _transformed(base, options, resolved)
        quantities.append(Quantity("trainable_parameters", "Trainable parameters", trainable_parameters(graph),
                                   graph.relations, LORA_CITATION))
    if options.mode == "train":
        graph, more = _train_quantities(resolved, options, base)
        quantities += more + train_flops(resolved, options, base, graph, lambda g, o: _transformed(g, o, resolved))
    if options.mode == "infer":
        from memderive.derivations.quantities.inference import infer_quantities

        graph, more = infer_quantities(resolved, options, base, keep_symbols=True)
        quantities += more + infer_flops(resolved, options, graph)
    return graph, tuple(quantities)


