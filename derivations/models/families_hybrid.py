"""The adapter of the hybrid state space family: Nemotron-H (``nemotron_h``: Nemotron-H 8B-56B and Nemotron 3 Nano).

Each layer holds one mixer after an RMSNorm, then the residual add (transformers' ``NemotronHBlock``): Mamba-2,
attention (grouped query, no positional embedding: the Mamba layers carry order), a plain MLP (``mlp_hidden_act``,
squared ReLU by default), or a mixture of experts (``n_routed_experts`` plain experts of ``moe_intermediate_size``,
``num_experts_per_tok`` per token from a sigmoid router with a score-correction bias buffer, and one shared MLP of
``moe_shared_expert_intermediate_size`` beside them; with ``moe_latent_size``, Nemotron 3 Super's LatentMoE, the
routed experts work in that width between a down and an up projection). Which layer is which: ``layers_block_type`` (or its alias
``layer_types``, or the legacy ``hybrid_override_pattern`` string, M Mamba, * attention, - MLP, E MoE, as
NemotronHConfig reads them); the graph holds their counts (``architectures.Hybrid``).

Refused, naming the field: a Mamba activation other than SiLU, grouped routing (``n_group`` > 1), ``n_groups`` not
dividing the Mamba heads, ``mlp_bias`` with MoE layers, more experts per token than experts.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memderive.derivations.models.architectures import HYBRID_KINDS, LLAMA, Hybrid, Moe
from memderive.derivations.models.config_fields import Adapted, Fields, kv_head_count, mlp_kind

__all__ = ["HYBRID_ADAPTERS", "LAYER_KINDS", "PATTERN_KINDS"]

#: NemotronHConfig's layer type names (and the legacy ones transformers remaps: ``_LEGACY_LAYER_TYPE_REMAP``),
#: as the kinds of ``architectures.HYBRID_KINDS``.
LAYER_KINDS = {"linear_attention": "mamba", "mamba": "mamba", "full_attention": "attention",
               "attention": "attention", "mlp": "mlp", "moe": "moe"}
#: ``hybrid_override_pattern``'s letters (NemotronHConfig._pattern_to_list).
PATTERN_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
#: NemotronHConfig's default layers when the config names none.
_DEFAULT_LAYERS = ["linear_attention", "moe", "full_attention", "mlp"]


def _layers(c: Fields) -> list[str]:
    """The kind of each layer, read as NemotronHConfig reads them: the list (``layers_block_type`` or its alias
    ``layer_types``) over the legacy pattern string; NemotronHConfig's own four layers when neither is given."""
    key, given = c.value("layers_block_type")  # or its alias layer_types (FAMILY_ALIASES), which wins
    if given is not None:
        if not isinstance(given, list) or not given or any(x not in LAYER_KINDS for x in given):
            c.fail(key, f"must be a non-empty list of layer types ({', '.join(sorted(LAYER_KINDS))})")
        return [LAYER_KINDS[x] for x in given]
    pattern = c.config.get("hybrid_override_pattern")
    if pattern is None:
        return [LAYER_KINDS[x] for x in _DEFAULT_LAYERS]
    if not isinstance(pattern, str) or not pattern or any(x not in PATTERN_KINDS for x in pattern):
        c.fail("hybrid_override_pattern", f"must be a string of {', '.join(PATTERN_KINDS)} (one letter a layer)")
    return [PATTERN_KINDS[x] for x in pattern]


def _nemotron_h(c: Fields) -> Adapted:
    layers = _layers(c)
    kinds = tuple(k for k in HYBRID_KINDS if k in layers)
    if c.get("mamba_hidden_act", "silu") not in ("silu", "swish"):
        c.fail("mamba_hidden_act", "is not supported: the Mamba mixers' convolution is modelled with SiLU")
    if c.count("n_group", 1) > 1:
        c.fail("n_group", "is not supported: grouped expert routing is not modelled for nemotron_h")
    heads = c.size("num_attention_heads", default=32)
    sizes: dict[str, Any] = {"h": c.size("hidden_size", required=True), "a": heads,
                             "a_kv": kv_head_count(c, heads, default=8), "d_h": c.size("head_dim", default=128),
                             "l": len(layers), "V": c.size("vocab_size", required=True),
                             "f": c.size("intermediate_size", default=21504),
                             "n_sh": c.size("mamba_num_heads", default=128), "d_sh": c.size("mamba_head_dim", default=64),
                             "d_st": c.size("ssm_state_size", default=128),
                             "n_g": c.size("n_groups", default=8), "d_cv": c.size("conv_kernel", default=4),
                             "s_ch": c.size("chunk_size", default=128)}
    sizes["d_in"] = sizes["n_sh"] * sizes["d_sh"]
    if sizes["n_sh"] % sizes["n_g"]:
        c.fail("n_groups", f"must divide mamba_num_heads = {sizes['n_sh']} (each group's B and C serve whole heads)")
    sizes.update({str(HYBRID_KINDS[k]): layers.count(k) for k in kinds})
    mlp = mlp_kind(c, "mlp_hidden_act", "relu2")
    bias = c.flag("use_bias", False)
    moe = None
    if "moe" in kinds:
        sizes.update(E=c.size("n_routed_experts", default=8),
                     k=c.size("num_experts_per_tok", default=2), f_e=c.size("moe_intermediate_size", default=7688),
                     f_s=c.size("moe_shared_expert_intermediate_size", default=7688))
        if sizes["k"] > sizes["E"]:
            c.fail("num_experts_per_tok", f"is more than the {sizes['E']} experts")
        latent = c.get("moe_latent_size", None)
        if latent is not None:  # LatentMoE (Nemotron 3 Super, Ultra): the routed experts in moe_latent_size
            sizes["d_lat"] = c.size("moe_latent_size")
        moe = Moe(shared=True, renormalize=c.flag("norm_topk_prob", True), latent=latent is not None)
    arch = replace(LLAMA, family="nemotron_h", mlp=mlp, act_fn=c.get("mlp_hidden_act", "relu2"), qkv_bias=False,
                   out_bias=False, mlp_bias=c.flag("mlp_bias", False), positions="none", tied_embeddings=False,
                   moe=moe, hybrid=Hybrid(kinds, proj_bias=bias, conv_bias=c.flag("use_conv_bias", True)))
    if moe is not None and arch.mlp_bias:
        c.fail("mlp_bias", "is not supported with MoE layers: the routed experts have no biases while the MLPs would")
    notes = [f"hybrid layers ({', '.join(f'{layers.count(k)} {k}' for k in kinds)} of {len(layers)}): each mixer "
             "kind's share of the layers is exact in sums over them; which layer is which is not in the graph"]
    # transformers 5.25's NemotronHAttention builds q, k, v and o with bias=False, and NemotronHForCausalLM ties
    # nothing (_tied_weights_keys = {}): both fields are read by no module (tests/test_params_transformers.py)
    notes += [f"config field {key!r} = true is not read by transformers' NemotronH ({why}); counted as false"
              for key, why in (("attention_bias", "its attention's projections have no bias"),
                               ("tie_word_embeddings", "its LM head is its own weight"))
              if c.flag(key, False)]
    mtp = c.count("num_nextn_predict_layers", 0)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer{'s' if mtp > 1 else ''} (num_nextn_predict_layers) not "
                     "counted, as transformers builds none")
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), "notes": tuple(notes)}


HYBRID_ADAPTERS = {"nemotron_h": _nemotron_h}
