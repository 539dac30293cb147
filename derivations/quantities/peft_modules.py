"""The graph's modules and parameters as PEFT names them, and PEFT's rules for choosing what to adapt.

Every op of a model's graph that holds parameters is a module of transformers' model, named as
transformers names it (``model.layers.{i}.self_attn.q_proj``, ``transformer.h.{i}.attn.c_attn``,
``model.layers.{i}.mlp.experts``): ``HF_MODULES`` holds, per family, the module path of each graph op
(``tests/test_peft_modules.py`` checks every path, its module type and its parameters' sizes against
the transformers model built on the meta device). PEFT 0.21.2 then chooses as it does in
``peft/tuners/tuners_utils.py`` (``check_target_module_exists``, ``_maybe_include_all_linear_layers``,
``_inject_parameters``) and ``peft/utils/transformers_weight_conversion.py`` (``_convert_peft_config_moe``):

* a ``target_modules`` name matches a module whose full name is the name or ends with ``.name``
  (``q_proj``, ``self_attn.q_proj``, ``lm_head``, ``embed_tokens``); ``nn.Linear`` (and GPT-2's
  ``Conv1D``) get ``lora.Linear``, ``nn.Embedding`` gets ``lora.Embedding`` (``lora_embedding_A``
  (r, V), ``lora_embedding_B`` (h, r)); any other module type (an experts module, a ``*TopKRouter``)
  is refused by PEFT;
* ``all-linear`` alone is every ``nn.Linear``/``Conv1D`` but the output embeddings (``lm_head``);
* a ``target_parameters`` name matches a parameter whose full name is the name or ends with ``.name``;
  PEFT's ``ParamWrapper`` adapts a 2-D weight (out, in) with A (r, in), B (out, r) and a 3-D expert
  stack (E, ., .) with A (r E, in), B (out, r E);
* for the model types transformers converts from their v4 layout (``_MODEL_TO_CONVERSION_PATTERN``
  mapped to ``mixtral`` or ``qwen2_moe``), PEFT rewrites v4 names of the router and the expert
  projections into ``target_parameters`` (``PEFT_MOE_CONVERSION``): ``gate`` -> ``gate.weight``,
  ``w1``/``w3`` or ``gate_proj``/``up_proj`` -> ``gate_up_proj`` at twice the rank (both halves
  required), ``w2``/``down_proj`` -> ``down_proj``; ``all-linear`` there is the leaf names of the
  linear modules plus those v4 names, so it adapts the router and the experts. Names so rewritten
  leave ``target_modules``: a Qwen-2-style model's dense and shared-expert ``gate_proj`` are then not
  adapted (what PEFT builds; ``tests/test_lora_moe.py`` measures it).

>>> from memderive.derivations.models.presets import preset
>>> sorted(m.name for m in peft_modules(preset("mixtral-8x7b")) if m.kind != "linear")[:3]
['model.embed_tokens', 'model.layers.{i}.mlp.experts', 'model.layers.{i}.mlp.gate']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memderive.derivations.models.model import Model
from memderive.derivations.options import OptionsError

__all__ = ["HF_MODULES", "PEFT_MOE_CONVERSION", "PEFT_DEFAULT_TARGETS", "LINEAR_ROUTERS", "PeftModule", "PeftChoice", "peft_modules", "peft_choose",
           "ALL_LINEAR"]

ALL_LINEAR = "all-linear"

_ATTN = {"layer/attn/q": "q_proj", "layer/attn/k": "k_proj", "layer/attn/v": "v_proj", "layer/attn/proj": "o_proj"}
_MLP = {"layer/mlp/gate": "gate_proj", "layer/mlp/up": "up_proj", "layer/mlp/fc2": "down_proj"}


def _layout(embed: dict[str, str], layer: str, ops: dict[str, str], head: dict[str, str] | None = None) -> dict:
    """Full module names: ``embed`` and ``head`` ops by name, layer ops under ``layer`` (with ``{i}``)."""
    return {**embed, **{op: f"{layer}.{name}" for op, name in ops.items()},
            **(head if head is not None else {"head/lm_head": "lm_head"})}


def _prefixed(prefix: str, names: dict[str, str]) -> dict[str, str]:
    return {op: f"{prefix}.{name}" for op, name in names.items()}


_TOKENS = {"embed/tokens": "model.embed_tokens"}
_LLAMA_LAYER = {**_prefixed("self_attn", _ATTN), **_prefixed("mlp", _MLP)}
_MOE_LAYER = {**_prefixed("self_attn", _ATTN), "layer/moe/router": "mlp.gate", "layer/moe/experts": "mlp.experts"}
_MLA = {"layer/attn/q": "self_attn.q_proj", "layer/attn/q_a": "self_attn.q_a_proj",
        "layer/attn/q_b": "self_attn.q_b_proj", "layer/attn/kv_a": "self_attn.kv_a_proj_with_mqa",
        "layer/attn/kv_b": "self_attn.kv_b_proj", "layer/attn/proj": "self_attn.o_proj"}
_DEEPSEEK = _layout(_TOKENS, "model.layers.{i}", {
    **_MLA, **_prefixed("mlp", _MLP), "layer/moe/router": "mlp.gate", "layer/moe/experts": "mlp.experts",
    **{f"layer/moe/shared/{op.rsplit('/', 1)[1]}": f"mlp.shared_experts.{n}" for op, n in _MLP.items()}})
_GPT2 = _layout({"embed/tokens": "transformer.wte", "embed/positions": "transformer.wpe"}, "transformer.h.{i}",
                {"layer/attn/qkv": "attn.c_attn", "layer/attn/proj": "attn.c_proj", "layer/mlp/fc1": "mlp.c_fc",
                 "layer/mlp/fc2": "mlp.c_proj"})
_BLOOM = _layout({"embed/tokens": "transformer.word_embeddings"}, "transformer.h.{i}",
                 {"layer/attn/qkv": "self_attention.query_key_value", "layer/attn/proj": "self_attention.dense",
                  "layer/mlp/fc1": "mlp.dense_h_to_4h", "layer/mlp/fc2": "mlp.dense_4h_to_h"})

#: Per family: graph op (``block/op``) -> transformers module name (``{i}``: the layer index), as the
#: family's modeling code in transformers 5.24 names its modules.
HF_MODULES: dict[str, dict[str, str]] = {
    **{fam: _layout(_TOKENS, "model.layers.{i}", _LLAMA_LAYER)
       for fam in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2", "granite",
                   "cohere", "stablelm")},
    "phi3": _layout(_TOKENS, "model.layers.{i}", {"layer/attn/qkv": "self_attn.qkv_proj",
                                                  "layer/attn/proj": "self_attn.o_proj",
                                                  "layer/mlp/gate+layer/mlp/up": "mlp.gate_up_proj",
                                                  "layer/mlp/fc2": "mlp.down_proj"}),
    "nemotron": _layout(_TOKENS, "model.layers.{i}", {**_prefixed("self_attn", _ATTN),
                                                      "layer/mlp/fc1": "mlp.up_proj", "layer/mlp/fc2": "mlp.down_proj"}),
    "starcoder2": _layout(_TOKENS, "model.layers.{i}", {**_prefixed("self_attn", _ATTN),
                                                        "layer/mlp/fc1": "mlp.c_fc", "layer/mlp/fc2": "mlp.c_proj"}),
    "phi": _layout(_TOKENS, "model.layers.{i}", {**_prefixed("self_attn", {**_ATTN, "layer/attn/proj": "dense"}),
                                                 "layer/mlp/fc1": "mlp.fc1", "layer/mlp/fc2": "mlp.fc2"}),
    "gptj": _layout({"embed/tokens": "transformer.wte"}, "transformer.h.{i}",
                    {**_prefixed("attn", {**_ATTN, "layer/attn/proj": "out_proj"}),
                     "layer/mlp/fc1": "mlp.fc_in", "layer/mlp/fc2": "mlp.fc_out"}),
    "codegen": _layout({"embed/tokens": "transformer.wte"}, "transformer.h.{i}",
                       {"layer/attn/qkv": "attn.qkv_proj", "layer/attn/proj": "attn.out_proj",
                        "layer/mlp/fc1": "mlp.fc_in", "layer/mlp/fc2": "mlp.fc_out"}),
    "opt": _layout({"embed/tokens": "model.decoder.embed_tokens", "embed/positions": "model.decoder.embed_positions"},
                   "model.decoder.layers.{i}", {**_prefixed("self_attn", {**_ATTN, "layer/attn/proj": "out_proj"}),
                                                "layer/mlp/fc1": "fc1", "layer/mlp/fc2": "fc2"}),
    "falcon": _BLOOM, "bloom": _BLOOM,
    "mpt": _layout({"embed/tokens": "transformer.wte"}, "transformer.blocks.{i}",
                   {"layer/attn/qkv": "attn.Wqkv", "layer/attn/proj": "attn.out_proj", "layer/mlp/fc1": "ffn.up_proj",
                    "layer/mlp/fc2": "ffn.down_proj"}),
    "gpt_neo": _layout({"embed/tokens": "transformer.wte", "embed/positions": "transformer.wpe"}, "transformer.h.{i}",
                       {**_prefixed("attn.attention", {**_ATTN, "layer/attn/proj": "out_proj"}),
                        "layer/mlp/fc1": "mlp.c_fc", "layer/mlp/fc2": "mlp.c_proj"}),
    "gpt": _GPT2, "gpt_bigcode": _GPT2,
    "gpt_neox": _layout({"embed/tokens": "gpt_neox.embed_in"}, "gpt_neox.layers.{i}",
                        {"layer/attn/qkv": "attention.query_key_value", "layer/attn/proj": "attention.dense",
                         "layer/mlp/fc1": "mlp.dense_h_to_4h", "layer/mlp/fc2": "mlp.dense_4h_to_h"}),
    "bert": _layout({"embed/tokens": "embeddings.word_embeddings", "embed/positions": "embeddings.position_embeddings",
                     "embed/token_types": "embeddings.token_type_embeddings"}, "encoder.layer.{i}",
                    {"layer/attn/q": "attention.self.query", "layer/attn/k": "attention.self.key",
                     "layer/attn/v": "attention.self.value", "layer/attn/proj": "attention.output.dense",
                     "layer/mlp/fc1": "intermediate.dense", "layer/mlp/fc2": "output.dense"},
                    {"head/pooler": "pooler.dense"}),
    **{fam: _layout(_TOKENS, "model.layers.{i}", _MOE_LAYER) for fam in ("mixtral", "qwen3_moe", "olmoe")},
    "qwen2_moe": _layout(_TOKENS, "model.layers.{i}", {
        **_LLAMA_LAYER, "layer/moe/router": "mlp.gate", "layer/moe/experts": "mlp.experts",
        **{f"layer/moe/shared/{op.rsplit('/', 1)[1]}": f"mlp.shared_expert.{n}" for op, n in _MLP.items()},
        "layer/moe/shared_gate": "mlp.shared_expert_gate"}),
    "deepseek_v2": _DEEPSEEK, "deepseek_v3": _DEEPSEEK,
    "gpt_oss": _layout(_TOKENS, "model.layers.{i}", {**_prefixed("self_attn", _ATTN), "layer/moe/router": "mlp.router",
                                                     "layer/moe/experts": "mlp.experts"}),
    "phimoe": _layout(_TOKENS, "model.layers.{i}", {**_prefixed("self_attn", _ATTN), "layer/moe/router": "mlp.router",
                                                    "layer/moe/experts": "mlp.experts"}),
    "granitemoe": _layout(_TOKENS, "model.layers.{i}", {**_prefixed("self_attn", _ATTN),
                                                        "layer/moe/router": "block_sparse_moe.router",
                                                        "layer/moe/experts": "block_sparse_moe.experts"}),
}
#: Routers that are ``nn.Linear`` in transformers 5.24 (``PhimoeTopKRouter(nn.Linear)``); the others are
#: ``*TopKRouter`` modules of their own, which PEFT's ``target_modules`` cannot wrap.
LINEAR_ROUTERS = frozenset({"phimoe"})
#: transformers' parameter name of each graph parameter that is not ``weight``/``bias`` of its module.
_PARAM_NAMES = {"gate_up": "gate_up_proj", "down": "down_proj", "gate_up_bias": "gate_up_proj_bias",
                "down_bias": "down_proj_bias"}

#: PEFT 0.21.2's v4-to-v5 conversion of MoE targets, per memderive family whose model type transformers
#: 5.24 converts (``transformers.conversion_mapping._MODEL_TO_CONVERSION_PATTERN``, plus ``mixtral`` which
#: PEFT adds; ``qwen2_moe`` itself is not in that table, so PEFT leaves its targets alone):
#: (v4 name -> v5 target parameter, fused parameter -> the v4 names it needs together).
_Conversion = tuple[dict[str, str], dict[str, tuple[str, ...]]]
_MIXTRAL: _Conversion = ({"gate": "gate.weight", "w1": "gate_up_proj", "w3": "gate_up_proj", "w2": "down_proj"},
            {"gate_up_proj": ("w1", "w3")})
_QWEN2_MOE: _Conversion = ({"gate": "gate.weight", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
               "down_proj": "down_proj"}, {"gate_up_proj": ("gate_proj", "up_proj")})
PEFT_MOE_CONVERSION: dict[str, _Conversion] = {
    "mixtral": _MIXTRAL, "qwen3_moe": _QWEN2_MOE, "olmoe": _QWEN2_MOE, "deepseek_v2": _QWEN2_MOE,
    "deepseek_v3": _QWEN2_MOE,
}


#: PEFT 0.21.2's default ``target_modules`` per family, which it adds when a config gives none (also beside
#: ``target_parameters``): ``peft.utils.constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``.
PEFT_DEFAULT_TARGETS: dict[str, tuple[str, ...]] = {
    **{fam: ("q_proj", "v_proj") for fam in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text",
                                             "stablelm", "gptj", "opt", "gpt_neo", "mixtral")},
    "phi": ("q_proj", "v_proj", "fc1", "fc2"), "codegen": ("qkv_proj",), "falcon": ("query_key_value",),
    "bloom": ("query_key_value",), "mpt": ("Wqkv",), "gpt_bigcode": ("c_attn",), "gpt_neox": ("query_key_value",),
    "bert": ("query", "value"), "gpt": ("c_attn",),
}


@dataclass(frozen=True, slots=True)
class PeftModule:
    """One module of the transformers model: ``name`` (``{i}`` for the layer index), ``kind`` (``linear``,
    ``embedding`` or ``other``: a module type PEFT's ``target_modules`` cannot wrap), the graph ops it
    computes (``block/op``; several for a fused module) and its parameters as ``(transformers name, graph
    name)``; ``output``: the output embeddings, which ``all-linear`` leaves out."""

    name: str
    kind: str
    ops: tuple[str, ...]
    params: tuple[tuple[str, str], ...]
    ndims: tuple[int, ...] = ()
    output: bool = False

    def key(self) -> str:
        """The name PEFT matches, for any layer (a target naming one layer is refused before)."""
        return self.name.replace("{i}", "0")


@dataclass(frozen=True, slots=True)
class PeftChoice:
    """What PEFT adapts: modules wrapped by ``lora.Linear``/``lora.Embedding``, and parameters wrapped by
    ``ParamWrapper`` as ``(module, graph parameter name, rank multiple)``."""

    modules: tuple[PeftModule, ...]
    params: tuple[tuple[PeftModule, str, int], ...]


def _graph_ops(model: Model) -> dict[str, tuple]:
    graph = model.graph(dropout=False)
    return {f"{blk.name}/{op.path}": (blk, op) for blk, op in graph.ops()}


def peft_modules(model: Model) -> list[PeftModule]:
    """The model's transformers modules that hold parameters (norms aside), each tied to its graph ops.

    Raises:
        OptionsError: a family whose module names are not known.
    """
    family = model.arch.family
    if family not in HF_MODULES:
        raise OptionsError(f"{model.name}: module names of family {family!r} are not known; "
                           f"fine-tuning options support {', '.join(sorted(HF_MODULES))}")
    ops = _graph_ops(model)
    out = []
    for key, name in HF_MODULES[family].items():
        paths = tuple(key.split("+"))
        split = all(p in ops for p in paths)
        # q, k, v as separate modules where the graph computes them fused (SplitFused splits it first)
        fused = not split and all(p.rsplit("/", 1)[0] + "/qkv" in ops and p.endswith(("/q", "/k", "/v"))
                                  for p in paths)
        if not split and not fused:
            continue
        if fused:
            out.append(PeftModule(name, "linear", paths, (("weight", f"{paths[0]}.weight"),), (2,)))
            continue
        kinds = {ops[p][1].kind for p in paths}
        kind = ("embedding" if kinds == {"embedding"} else "linear" if kinds == {"linear"} else
                "linear" if kinds == {"router"} and family in LINEAR_ROUTERS else "other")
        params, ndims = [], []
        for p in paths:
            blk, op = ops[p]
            for x in op.params:
                local = x.name.rsplit(".", 1)[-1]
                params.append((_PARAM_NAMES.get(local, local), f"{blk.name}/{x.name}"))
                ndims.append(len(x.shape))
        out.append(PeftModule(name, kind, paths, tuple(params), tuple(ndims), output=key == "head/lm_head"))
    return out


def _matches(key: str, target: str) -> bool:
    """PEFT's list rule: the full name is the target, or ends with ``.target``."""
    return key == target or key.endswith(f".{target}")


def _one_layer(target: str) -> bool:
    return any(part.isdigit() for part in target.split("."))


def peft_choose(model: Model, targets: Sequence[str], parameters: Sequence[str] = ()) -> PeftChoice:
    """What PEFT 0.21.2 adapts for ``target_modules=targets`` (``["all-linear"]``: the string shorthand)
    and ``target_parameters=parameters``.

    Raises:
        OptionsError: what PEFT refuses (a module type it cannot wrap, half of a fused expert pair, a
            parameter also wrapped as a module), and names that match nothing or one layer only.
    """
    modules = peft_modules(model)
    for name in (*targets, *parameters):
        if _one_layer(name):
            raise OptionsError(f"--lora-targets: {name!r} names one layer; memderive models every layer alike: "
                               "name the module without the layer index")
    family = model.arch.family
    if parameters and not targets and family in PEFT_DEFAULT_TARGETS and family not in PEFT_MOE_CONVERSION:
        raise OptionsError(f"--lora-target-parameters without --lora-targets: PEFT 0.21.2 then adapts its default "
                           f"target modules of {family} too ({', '.join(PEFT_DEFAULT_TARGETS[family])}); name them "
                           "with --lora-targets to count what PEFT builds")
    targets, params = list(targets), list(parameters)
    rank_of: dict[str, int] = {}
    if family in PEFT_MOE_CONVERSION:
        targets, converted, rank_of = _convert(model, modules, targets)
        params = list(dict.fromkeys([*params, *converted]))
    elif targets == [ALL_LINEAR]:
        targets = [m.key() for m in modules if m.kind == "linear" and not m.output]
    chosen: list[PeftModule] = []
    for target in targets:
        hits = [m for m in modules if _matches(m.key(), target)]
        if not hits:
            raise OptionsError(f"{model.name} has no module named {target!r} (PEFT would adapt the other names only"
                               f", or refuse a list that matches nothing); its modules PEFT can adapt are "
                               f"{', '.join(_leaves(modules))} (or {ALL_LINEAR}, or a suffix such as "
                               f"{_suffix_example(modules)})")
        for m in hits:
            if m.kind == "other":
                raise OptionsError(f"--lora-targets {target}: {m.name} is not a linear or embedding module in "
                                   "transformers (PEFT refuses to wrap it); adapt its weights with "
                                   f"--lora-target-parameters {','.join(p for p, _ in m.params)}")
            if m not in chosen:
                chosen.append(m)
    wrapped: list[tuple[PeftModule, str, int]] = []
    for target in params:
        found = [(m, hf, graph, n) for m in modules for (hf, graph), n in zip(m.params, m.ndims, strict=True)
                 if _matches(f"{m.key()}.{hf}", target)]
        if not found:
            raise OptionsError(f"{model.name} has no parameter named {target!r}; its parameters PEFT can adapt "
                               f"end with {', '.join(_param_leaves(modules))}")
        for m, hf, graph, ndim in found:
            if ndim not in (2, 3):
                raise OptionsError(f"--lora-target-parameters {target}: {m.name}.{hf} is {ndim}-D; PEFT's "
                                   "ParamWrapper adapts 2-D and 3-D parameters only")
            if m in chosen:
                raise OptionsError(f"--lora-target-parameters {target}: {m.name} is already adapted as a module "
                                   "(--lora-targets); PEFT refuses to wrap a parameter of a LoRA layer")
            rank = next((n for suffix, n in rank_of.items() if f"{m.key()}.{hf}".endswith(suffix)), 1)
            if (m, graph, rank) not in wrapped:
                wrapped.append((m, graph, rank))
    return PeftChoice(tuple(chosen), tuple(wrapped))


def _convert(model: Model, modules: list[PeftModule],
             targets: list[str]) -> tuple[list[str], list[str], dict[str, int]]:
    """``_convert_peft_config_moe``: v4 router and expert names become target parameters."""
    mapping, fused = PEFT_MOE_CONVERSION[model.arch.family]
    if targets == [ALL_LINEAR]:
        targets = list(dict.fromkeys([*(m.key().rsplit(".", 1)[-1] for m in modules
                                        if m.kind == "linear" and not m.output), *mapping]))
    remaining: list[str] = []
    converted: list[str] = []
    present: dict[str, set[str]] = {new: set() for new in fused}
    for target in targets:
        old = next((o for o in mapping if target == o or target.endswith(f".{o}")), None)
        if old is None:
            remaining.append(target)
            continue
        converted.append(mapping[old])
        if mapping[old] in fused:
            present[mapping[old]].add(old)
    rank_of: dict[str, int] = {}
    for new, needed in fused.items():
        if 0 < len(present[new]) < len(needed):
            missing = ", ".join(sorted(set(needed) - present[new]))
            raise OptionsError(f"--lora-targets: PEFT cannot adapt {', '.join(sorted(present[new]))} of "
                               f"{model.name} without {missing}: transformers fuses them into {new}")
        if len(present[new]) == len(needed):
            rank_of[f".{new}"] = len(needed)  # PEFT's rank_pattern .*\.gate_up_proj: r x 2 (alpha x 2)
    return remaining, list(dict.fromkeys(converted)), rank_of


def _leaves(modules: list[PeftModule]) -> list[str]:
    return list(dict.fromkeys(m.name.rsplit(".", 1)[-1] for m in modules if m.kind != "other"))


def _param_leaves(modules: list[PeftModule]) -> list[str]:
    return list(dict.fromkeys(f"{m.name.rsplit('.', 1)[-1]}.{hf}" for m in modules for hf, _ in m.params
                              if hf not in ("bias",) and not hf.endswith("_bias")))


def _suffix_example(modules: list[PeftModule]) -> str:
    layer = next((m.name for m in modules if "{i}." in m.name), modules[0].name)
    return layer.split("{i}.", 1)[-1]
