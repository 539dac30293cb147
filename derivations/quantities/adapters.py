"""PEFT's adapters on the graph: module names as PEFT names them (``target_modules`` matched by the last component
of a module's name, per family as transformers' modeling code names them), the LoRA/DoRA adapters
(``symbolic.lora``) and the modules ``--train-only`` keeps trainable. ``quantities.finetune`` imports this module
for ``--lora-rank`` and ``--train-only`` only. Where the graph computes q, k and v as one fused op but the family has
separate modules, the op is split first (``SplitFused``).

>>> from memderive.derivations.models.presets import preset
>>> [a.name for a in resolve_adapters(preset("gpt2"), ("all-linear",))[1]]
['c_attn', 'c_proj', 'c_fc', 'c_proj']
"""

from __future__ import annotations

from collections.abc import Sequence

from memderive.derivations.models.model import Model
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.peft_modules import PeftChoice, peft_choose
from memderive.derivations.quantities.peft_names import PEFT_NAMES
from memderive.symbolic.dims import a, a_kv, d_h, r
from memderive.symbolic.lora import Adapter, LoRA, ParamLoRA, SplitFused
from memderive.symbolic.strategies import Freeze, Strategy

__all__ = ["PEFT_NAMES", "MEGATRON_NAMES", "resolve_adapters", "module_paths", "lora_steps", "train_only", "ALL_LINEAR"]

ALL_LINEAR = "all-linear"
_QKV = "layer/attn/qkv"
#: Names ``--train-only`` accepts besides module names.
EXTRA_MODULES = {"embeddings": ("embed/",), "lm_head": ("head/lm_head.",), "norms": ()}


def _names(model: Model) -> dict[str, tuple[str, ...]]:
    if model.arch.family not in PEFT_NAMES:
        raise OptionsError(f"{model.name}: module names of family {model.arch.family!r} are not known; "
                           f"fine-tuning options support {', '.join(sorted(PEFT_NAMES))}")
    return PEFT_NAMES[model.arch.family]


def _ops_of(model: Model) -> set[str]:
    graph = model.graph(dropout=False)
    return {f"{blk.name}/{op.path}" for blk, op in graph.ops() if op.kind == "linear" and op.params}


def module_paths(model: Model, names: Sequence[str]) -> tuple[list[Strategy], list[tuple[str, tuple[str, ...]]]]:
    """The splits the graph needs and, per requested module, its op groups (``block/op`` paths).

    Raises:
        OptionsError: a name the family does not have, or whose op this model lacks.
    """
    table = _names(model)
    if ALL_LINEAR in names:
        names = list(dict.fromkeys([*(n for n in names if n != ALL_LINEAR), *table]))
    present = _ops_of(model)
    splits: list[Strategy] = []
    if _QKV in present and any(p in ("layer/attn/q", "layer/attn/k", "layer/attn/v")
                               for n in names for p in table.get(n, ())):
        parts = (("attn/q", a * d_h), ("attn/k", a_kv * d_h), ("attn/v", a_kv * d_h))
        splits.append(SplitFused("attn/qkv", parts))
        present |= {"layer/attn/q", "layer/attn/k", "layer/attn/v"}
    groups: list[tuple[str, tuple[str, ...]]] = []
    for name in names:
        if name not in table:
            raise OptionsError(f"{model.name} has no module named {name!r}; its linear modules are "
                               f"{', '.join(table)} (or {ALL_LINEAR})")
        for group in table[name]:
            paths = tuple(group.split("+"))
            if all(p in present for p in paths):
                groups.append((name, paths))
            elif ALL_LINEAR not in names and not any(p in present for p in paths):
                raise OptionsError(f"{model.name} has no {name} module in this architecture; its linear modules "
                                   f"are {', '.join(n for n, gs in table.items() if _has(gs, present))}")
    return splits, groups


def _has(groups: tuple[str, ...], present: set[str]) -> bool:
    return any(all(p in present for p in g.split("+")) for g in groups)


def resolve_adapters(model: Model, targets: Sequence[str]) -> tuple[list[Strategy], list[Adapter]]:
    """``SplitFused`` steps and one ``Adapter`` per wrapped module, for PEFT ``target_modules``."""
    return _module_steps(model, peft_choose(model, targets))


def _module_steps(model: Model, choice: PeftChoice) -> tuple[list[Strategy], list[Adapter]]:

    ops = {f"{blk.name}/{op.path}" for blk, op in model.graph(dropout=False).ops()}
    splits: list[Strategy] = []
    used = [p for m in (*choice.modules, *(m for m, _, _ in choice.params)) for p in m.ops]
    if _QKV in ops and any(p in ("layer/attn/q", "layer/attn/k", "layer/attn/v") for p in used):
        splits.append(SplitFused("attn/qkv", (("attn/q", a * d_h), ("attn/k", a_kv * d_h), ("attn/v", a_kv * d_h))))
    adapters = [Adapter(m.name.rsplit(".", 1)[-1], tuple(p.split("/", 1)[1] for p in m.ops), m.ops[0].split("/")[0],
                        m.kind) for m in choice.modules]
    return splits, adapters


#: Megatron-Core's linear modules as Megatron-Bridge's LoRA names them (``target_modules``, matched by a module's last
#: name: src/megatron/bridge/peft/lora.py L97-98 at v0.5.0, ``["linear_qkv", "linear_proj", "linear_fc1",
#: "linear_fc2"]``), each wrapped whole by one ``ParallelLinearAdapter`` (lora.py L206-212: in_features and
#: out_features of the module, the fused ones' too): ``linear_qkv`` the fused q, k and v (one A of (r, h), one B of
#: ((a + 2 a_kv) d_h, r)), ``linear_fc1`` the fused gate and up of a gated MLP. Under --framework megatron only.
MEGATRON_NAMES = {"linear_qkv": (_QKV,), "linear_proj": ("layer/attn/proj",),
                  "linear_fc1": ("layer/mlp/gate+layer/mlp/up", "layer/mlp/fc1"), "linear_fc2": ("layer/mlp/fc2",)}


def _megatron_adapters(model: Model, opts: Options) -> list[Adapter] | None:
    """Megatron-Bridge's adapters for ``--lora-targets`` of Megatron-Core's names (``MEGATRON_NAMES``), or None
    where the targets are PEFT's names."""
    names = [n for n in opts.lora_targets if n in MEGATRON_NAMES]
    if not names:
        return None
    if opts.framework != "megatron":
        raise OptionsError(f"--lora-targets {names[0]} is Megatron-Core's module name (Megatron-Bridge's LoRA); give "
                           "--framework megatron, or PEFT's names (q_proj, ...) for transformers' modules")
    if len(names) != len(opts.lora_targets) or opts.lora_target_parameters:
        raise OptionsError("--lora-targets: give Megatron-Core's module names (" + ", ".join(MEGATRON_NAMES)
                           + ") or PEFT's, not both, and no --lora-target-parameters with them")
    present = _ops_of(model)
    adapters = []
    for name in names:
        group = next((tuple(g.split("+")) for g in MEGATRON_NAMES[name] if set(g.split("+")) <= present), None)
        if group is None:
            raise OptionsError(f"{model.name} has no {name} module (its graph lacks {MEGATRON_NAMES[name][0]})")
        adapters.append(Adapter(name, tuple(p.split("/", 1)[1] for p in group)))
    return adapters


def lora_steps(model: Model, opts: Options) -> list[Strategy]:
    """PEFT's adapters for ``--lora-targets`` and ``--lora-target-parameters``: ``lora.Linear`` and
    ``lora.Embedding`` modules (``LoRA``), ``ParamWrapper`` parameters (``ParamLoRA``); under --framework megatron,
    Megatron-Bridge's on Megatron-Core's modules (``MEGATRON_NAMES``)."""

    megatron = _megatron_adapters(model, opts)
    if megatron is not None:
        if opts.dora:
            raise OptionsError("--dora with Megatron-Core's module names is not modelled; adapt with LoRA")
        return [LoRA(r, tuple(megatron), dropout=opts.lora_dropout > 0)]
    choice = peft_choose(model, opts.lora_targets, opts.lora_target_parameters)
    if choice.params and (opts.lora_dropout or opts.dora):
        raise OptionsError("PEFT's ParamWrapper (target parameters, MoE experts and routers) works with neither "
                           "--lora-dropout nor --dora (lora.ParamWrapper raises)")
    if opts.dora and any(m.kind == "embedding" for m in choice.modules):
        raise OptionsError("--dora on an embedding (lora.Embedding with DoRA) is not modelled; adapt linear modules")
    splits, adapters = _module_steps(model, choice)
    steps: list[Strategy] = [*splits]
    if adapters:
        steps.append(LoRA(r, tuple(adapters), dropout=opts.lora_dropout > 0, dora=opts.dora))
    if choice.params:
        targets = []
        for module, param, multiple in choice.params:
            block, name = param.split("/", 1)
            op = next(p for p in module.ops if name.startswith(p.split("/", 1)[1] + "."))
            targets.append((block, op.split("/", 1)[1], name, multiple))
        steps.append(ParamLoRA(r, tuple(targets)))
    return steps


def train_only(model: Model, names: Sequence[str]) -> list[Strategy]:
    """Freeze everything but the named modules (module names, ``embeddings``, ``lm_head``, ``norms``)."""
    modules = [n for n in names if n not in EXTRA_MODULES]
    splits, groups = module_paths(model, modules) if modules else ([], [])
    keep = [p + "." for _, paths in groups for p in paths]
    for name in names:
        keep += EXTRA_MODULES.get(name, ())
    norms = ("layer_norm", "rms_norm") if "norms" in names else ()
    return [*splits, Freeze(("",), tuple(keep), norms)]
