"""Which model a user means, and whether the options fit it: a bundled name, a ``config.json`` path, a
config dict, a transformers config or a ``Model``; the divisibility a layout needs; a context past the
positions a model was trained for.

>>> resolve_model("llama-2-7b").sizes["h"]
4096
>>> from memderive.derivations.options import Options
>>> check_layout(resolve_model("llama-2-7b"), Options(mode="train", batch=1, seq=8, tp=7))
Traceback (most recent call last):
...
memderive.symbolic.errors.InvalidLayoutError: llama-2-7b: 32 attention heads are not divisible by tensor-parallel degree 7; choose a degree that divides it
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memderive.derivations.models.config import from_config, load_config
from memderive.derivations.models.model import Model
from memderive.derivations.models.presets import PRESETS, preset
from memderive.derivations.models.ssm import find_ssm
from memderive.derivations.options import ArgumentError, Options, OptionsError
from memderive.symbolic.errors import InvalidLayoutError, shown
from memderive.symbolic.pipeline_layout import LayoutError, check_layers

__all__ = ["resolve_model", "check_layout", "check_expert_layout", "check_hybrid_layout", "HYBRID_IMPLEMENTATION",
           "context_notes"]


def resolve_model(model: str | Path | Model | Mapping[str, Any] | Any) -> Model:
    """A bundled name, a ``config.json`` path, a config dict, a transformers config or a Model.

    A name that is both a local path and a bundled name is the path, as transformers'
    ``from_pretrained`` reads it; a folder without ``config.json`` that shadows a bundled name is an
    error naming both.
    """
    if isinstance(model, Model):
        return model
    ssm = find_ssm(model)
    if ssm is not None:
        raise ArgumentError(f"{ssm.name} is a {ssm.family} model (state space layers): memderive estimate --model "
                            f"{shown(str(model), 200) if not isinstance(model, Mapping) else '<config>'} derives its "
                            "parameters and inference state (--mode params or infer, --format md or latex for the "
                            "steps); this command does not model it yet")
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
    z, hybrid = model.sizes, model.arch.hybrid
    # a hybrid's attention heads and MLP width split only where it has such layers
    heads = hybrid is None or "attention" in hybrid.kinds
    width = hybrid is None or "mlp" in hybrid.kinds
    checks = [(z["a"] % opts.tp if heads else 0,
               f"{z['a']} attention heads are not divisible by tensor-parallel degree {opts.tp}"),
              (z["a_kv"] % opts.tp if heads and z["a_kv"] >= opts.tp else 0,
               f"{z['a_kv']} key/value heads are not divisible by tensor-parallel degree {opts.tp}"),
              (z["f"] % opts.tp if width else 0,
               f"FFN width {z['f']} is not divisible by tensor-parallel degree {opts.tp}"),
              (0 if opts.uneven_stages or opts.pipeline_layout is not None else z["l"] % opts.pp,
               f"{z['l']} layers are not divisible by pipeline-parallel degree {opts.pp} (uneven stages: "
               "--first-stage-layers, --last-stage-layers)")]
    if opts.uneven_stages:
        opts.stage_layers(z["l"])  # the rest must divide over the other stages (an OptionsError says why not)
    if opts.pipeline_layout is not None:  # every decoder layer placed once (a LayoutError says how many are)
        try:
            check_layers(opts.layout_chunks(), opts.pipeline_layout, z["l"])
        except LayoutError as exc:
            raise OptionsError(str(exc)) from None
    if opts.mode == "train" and opts.tp > 1 and z["a_kv"] < opts.tp and heads:
        checks.append((1, f"{z['a_kv']} key/value heads cannot be split over tensor-parallel degree {opts.tp}"))
    if opts.virtual_stages not in (None, 1) and opts.pp > 1 and not opts.uneven_stages and \
            opts.pipeline_layout is None and \
            z["l"] % (opts.pp * opts.virtual_stages):
        checks.append((1, f"{z['l']} layers are not divisible by p*v = {opts.pp * opts.virtual_stages}"))
    for remainder, message in checks:
        if remainder:
            raise InvalidLayoutError(f"{model.name}: {message}; choose a degree that divides it")
    check_expert_layout(model, opts)
    check_hybrid_layout(model, opts)
    if opts.mtp_layers and not model.arch.lm_head:  # MTP is GPTModel's (models/gpt/gpt_model.py)
        raise OptionsError(f"--mtp-layers: multi-token prediction is Megatron-Core's GPTModel's (a causal language "
                           f"model's output layer); {model.name} ({model.arch.family}) has none: drop --mtp-layers")
    if "moe_act" in opts.recomputed_modules and model.arch.moe is None:  # Megatron-Core: "moe_act in
        # recompute_modules is only supported with moe_grouped_gemm" (transformer_config.py), experts' only
        raise OptionsError(f"--recompute-modules moe_act recomputes the routed experts' activation; {model.name} has "
                           "no experts (use mlp for a dense MLP)")
    if "mla_up_proj" in opts.recomputed_modules and model.arch.attention != "mla":  # Megatron-Core: "mla_up_proj in
        # recompute_modules is only supported with multi_latent_attention" (transformer_config.py)
        raise OptionsError(f"--recompute-modules mla_up_proj recomputes multi-head latent attention's up projections; "
                           f"{model.name} has no MLA (DeepSeek-V2/V3 have)")
    if opts.images:  # a hand-written family is a text model: --images 0 (text only) is what it derives
        raise OptionsError(f"{model.name} is a text model (a hand-written family): --images {opts.images} needs a "
                           "vision-language model's config.json (llava, gemma3, qwen2_vl, qwen2_5_vl), traced")
    if opts.mode == "infer" and not model.arch.lm_head:
        raise OptionsError(f"{model.name} is an encoder without a language-model head: it generates nothing and "
                           "keeps no KV cache; use --mode train or --mode params")
    if model.arch.positions == "learned" and opts.seq is not None and model.max_positions is not None:
        if opts.seq + opts.new_tokens > model.max_positions:
            raise OptionsError(f"{model.name} has {model.max_positions:,} learned positions: --seq plus --new-tokens "
                               f"({opts.seq + opts.new_tokens:,}) must not exceed it")


#: The implementation a hybrid's hand-written graph describes: Megatron-Core's (``symbolic.mamba``); transformers'
#: own code for it is traced (``quantities.traced``: the CLI takes a config.json there under --implementation hf).
HYBRID_IMPLEMENTATION = "megatron"


def check_hybrid_layout(model: Model, opts: Options) -> None:
    """A hybrid (Nemotron-H) as its graph describes it: Megatron-Core's implementation (``HYBRID_IMPLEMENTATION``),
    tensor parallelism splitting whole Mamba heads and groups (Megatron-Core's MambaMixer asserts both), one pipeline
    stage and no context parallelism (a stage holds a slice of the layer pattern, which the average layer does not
    say; context parallelism of the scan is not derived)."""
    hybrid, z = model.arch.hybrid, model.sizes
    if hybrid is None or opts.mode == "params":
        return
    if opts.mode == "infer":
        raise OptionsError(f"{model.name}: the inference cache of a hybrid holds its Mamba layers' states beside the "
                           "attention layers' keys and values, which its hand-written graph does not yet; give its "
                           "config.json to memderive estimate --mode infer, which traces transformers' cache")
    if opts.implementation_kind == "hf" or opts.framework not in (None, HYBRID_IMPLEMENTATION):
        given = f"--framework {opts.framework}" if opts.framework not in (None, HYBRID_IMPLEMENTATION) else \
            f"--implementation {opts.implementation}"
        raise OptionsError(f"{model.name}: its hand-written graph is Megatron-Core's Mamba hybrid, not {given}; "
                           "transformers' NemotronH code is traced instead: give its config.json to memderive "
                           "estimate with --implementation hf, or train it under --framework megatron")
    if "mamba" in hybrid.kinds:
        for key, what in (("n_sh", "Mamba heads"), ("n_g", "Mamba groups")):
            if z[key] % opts.tp:
                raise InvalidLayoutError(f"{model.name}: {z[key]} {what} are not divisible by tensor-parallel degree "
                                         f"{opts.tp}; choose a degree that divides it")
    for flag, on, why in (("--pp", opts.pp > 1, "a pipeline stage holds a slice of the layer pattern, which the "
                                                "hybrid's average layer does not describe"),
                          ("--cp", opts.cp > 1, "context parallelism of the Mamba scan is not derived"),
                          ("--mtp-layers", opts.mtp_layers > 0, "Megatron-Core builds a hybrid's multi-token "
                                                                 "prediction layers from its own Mamba block spec")):
        if on:
            value = {"--pp": opts.pp, "--cp": opts.cp, "--mtp-layers": opts.mtp_layers}[flag]
            raise OptionsError(f"{model.name}: {flag} {value} is not modelled for a hybrid model yet ({why}); use "
                               f"{flag} {0 if flag == '--mtp-layers' else 1}")


def check_expert_layout(model: Model, opts: Options) -> None:
    """``--ep`` needs routed experts it divides; expert tensor parallelism (``--etp``, the tp unless given) splits
    each expert's width f_e."""
    z, moe = model.sizes, model.arch.moe
    if moe is None:
        # one rule for an option of a part the model lacks (as --mla-decode on a model without latent attention,
        # quantities.inference): refused in one line; a kernel other than the default names routed experts' kernel
        given = [flag for flag, on in (("--ep", opts.ep > 1), ("--etp", opts.etp is not None),
                                       ("--capacity-factor", opts.capacity_factor is not None),
                                       ("--experts-implementation", opts.experts_implementation != "grouped_mm")) if on]
        if given:
            raise OptionsError(f"{model.name} has no mixture-of-experts layers: {given[0]} applies to routed experts")
        return
    if z["E"] % opts.ep:
        raise InvalidLayoutError(f"{model.name}: {z['E']} experts are not divisible by expert-parallel degree "
                                 f"{opts.ep}; choose a degree that divides it")
    if z["f_e"] % opts.expert_tp:
        raise InvalidLayoutError(f"{model.name}: expert width {z['f_e']} is not divisible by "
                                 f"{'expert ' if opts.folded else ''}tensor-parallel degree {opts.expert_tp}; "
                                 f"choose a degree that divides it")
    if opts.folded and not opts.sp:  # Megatron-LM arguments.py: "When using MoE and tensor parallelism, sequence
        # parallelism must be used."; the folded experts' rows (b s k etp/t) are those of s/t tokens per rank
        raise OptionsError(f"--etp {opts.etp} with --tp {opts.tp} needs --sp: Megatron-Core runs MoE with tensor "
                           "parallelism under sequence parallelism; add --sp")
    if opts.folded and opts.capacity_factor is not None:
        raise OptionsError("--capacity-factor with --etp other than --tp is not modelled (the padded expert buffers "
                           "under parallel folding); drop one of them")
    if opts.mode == "infer" and opts.ep > 1:
        raise OptionsError("--ep is modelled in training; inference is modelled with --tp only")



def context_notes(model: Model, opts: Options) -> list[str]:
    """A prompt plus new tokens past the positions the model was trained for, said the same way by
    ``estimate`` and ``fit`` (learned positions refuse it outright: see ``check_layout``).

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
