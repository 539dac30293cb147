"""Adapters of the mixture-of-experts and latent-attention families (one per ``model_type``).

Each reads the fields its transformers modeling code reads, with the config class's defaults
(``save_pretrained`` drops fields equal to them), and names the field when a config cannot be
represented: Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3 (MLA), gpt-oss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from memderive.derivations.models.architectures import LLAMA, Arch, Moe
from memderive.derivations.models.config_fields import Adapted, ConfigError, Fields, decoder_sizes, mlp_kind, sliding

__all__ = ["MOE_ADAPTERS"]


def _experts(c: Fields, key: str, experts: int, top_k: int | None, width: int) -> dict[str, int]:
    """``E`` (the config class's field ``key``, or the alias it maps onto it: ``FAMILY_ALIASES``), ``k`` and
    ``f_e``; ``width`` is the expert width already read."""
    sizes = {"E": c.size(key, default=experts, required=True),
             "k": c.size("num_experts_per_tok", default=top_k, required=True), "f_e": width}
    if sizes["k"] > sizes["E"]:
        c.fail("num_experts_per_tok", f"is more than the {sizes['E']} experts ({c.value(key)[0]})")
    return sizes


def _dense_count(l: int, step: int, only: set[int]) -> int:
    """Layers ``i < l`` in ``only`` or off the sparse step ((i + 1) % step != 0), in closed form."""
    return l - l // step + sum(1 for i in only if 0 <= i < l and (i + 1) % step == 0)


def _layer_list(c: Fields, key: str, l: int) -> list[int]:
    value = c.get(key, [])
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in value):
        c.fail(key, "must be a list of layer indices")
    return value


def _with_moe(arch: Arch, sizes: dict[str, int], moe: Moe, dense: int) -> tuple[Arch, dict[str, int]]:
    """The arch with ``moe`` in ``l - dense`` layers (no MoE when every layer is dense)."""
    l = sizes["l"]
    if dense >= l:
        return arch, {key: v for key, v in sizes.items() if key not in ("E", "k", "f_e", "f_s")}
    if dense:
        moe, sizes = replace(moe, dense_layers=True), {**sizes, "l_d": dense}
    return replace(arch, moe=moe), sizes


def _mixtral(c: Fields) -> Adapted:
    arch = replace(LLAMA, family="mixtral", mlp=mlp_kind(c, "hidden_act", "silu", gated=True),
                   tied_embeddings=c.flag("tie_word_embeddings", False))
    sizes = decoder_sizes(c, kv_heads=8)
    sizes.update(_experts(c, "num_local_experts", 8, 2, sizes["f"]))
    arch, sizes = _with_moe(arch, sizes, Moe(), 0)
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), **sliding()(c, sizes["l"])}


def _qwen_moe(family: str, kv_heads: int, experts: int, top_k: int, width: int, shared: bool) -> Callable[..., Adapted]:
    """Qwen2-MoE (shared expert with a sigmoid gate, qkv biases) and Qwen3-MoE (per-head q/k norms):
    layers in ``mlp_only_layers`` or off the ``decoder_sparse_step`` keep a dense MLP."""
    def adapt(c: Fields) -> Adapted:
        bias = c.flag("qkv_bias", True) if shared else c.flag("attention_bias", False)
        arch = replace(LLAMA, family=family, mlp=mlp_kind(c, "hidden_act", "silu", gated=True), qkv_bias=bias,
                       out_bias=bias and not shared, qk_norm=not shared,
                       tied_embeddings=c.flag("tie_word_embeddings", False))
        sizes = decoder_sizes(c, kv_heads=kv_heads)
        sizes.update(_experts(c, "num_experts", experts, top_k,
                              c.size("moe_intermediate_size", default=width)))
        if shared:
            sizes["f_s"] = c.size("shared_expert_intermediate_size", default=5632)
        l, step = sizes["l"], c.size("decoder_sparse_step", default=1)
        only = set(_layer_list(c, "mlp_only_layers", l))
        dense = _dense_count(l, step, only)
        moe = Moe(shared=shared, shared_gate=shared, renormalize=c.flag("norm_topk_prob", False))
        arch, sizes = _with_moe(arch, sizes, moe, dense)
        window = sliding(4096, switch="use_sliding_window",
                         slides=(lambda c, l: (min(l, c.count("max_window_layers", 28)) + 1) // 2) if shared
                         else (lambda c, l: l))  # shared: even layers below max_window_layers
        return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), **window(c, l)}

    return adapt


def _olmoe(c: Fields) -> Adapted:
    """OLMoE: RMSNorm over all of q and all of k (as OLMo 2), 64 experts of width intermediate_size."""
    bias = c.flag("attention_bias", False)
    arch = replace(LLAMA, family="olmoe", mlp=mlp_kind(c, "hidden_act", "silu", gated=True), qkv_bias=bias,
                   out_bias=bias, qk_norm=True, qk_norm_width="all", tied_embeddings=c.flag("tie_word_embeddings", False))
    sizes = decoder_sizes(c)
    if sizes.get("d_h", sizes["h"] // sizes["a"]) * sizes["a"] != sizes["h"]:  # OlmoeConfig declares no head_dim
        c.fail("head_dim", f"is not supported: transformers' OLMoE normalizes q over hidden_size = {sizes['h']} "
                           f"and k over hidden_size / num_attention_heads per head, so its attention runs only with "
                           f"head_dim = hidden_size / num_attention_heads; remove head_dim")
    sizes.update(_experts(c, "num_experts", 64, 8, sizes["f"]))
    arch, sizes = _with_moe(arch, sizes, Moe(renormalize=c.flag("norm_topk_prob", False)), 0)
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _deepseek(version: int) -> Callable[[Fields], Adapted]:
    """DeepSeek-V2/V3: multi-head latent attention; the first ``first_k_dense_replace`` layers keep a
    dense MLP, the others route to ``n_routed_experts`` experts beside ``n_shared_experts`` shared ones."""
    defaults: dict[str, Any] = ({"experts": 256, "top_k": 8, "width": 2048, "shared": 1, "dense": 3} if version == 3
                                else {"experts": 64, "top_k": None, "width": 1407, "shared": 2, "dense": 0})

    def adapt(c: Fields) -> Adapted:
        bias = c.flag("attention_bias", False)
        mlp_bias = c.flag("mlp_bias", False) if version == 2 else False
        q_lora = not ("q_lora_rank" in c.config and c.config["q_lora_rank"] is None)
        arch = replace(LLAMA, family=f"deepseek_v{version}", mlp=mlp_kind(c, "hidden_act", "silu", gated=True),
                       attention="mla", q_lora=q_lora, qkv_bias=bias, out_bias=bias, mlp_bias=mlp_bias,
                       tied_embeddings=c.flag("tie_word_embeddings", False))
        sizes = {"h": c.size("hidden_size"), "a": c.size("num_attention_heads"), "l": c.size("num_hidden_layers"),
                 "V": c.size("vocab_size"), "f": c.size("intermediate_size")}
        sizes.update(a_kv=sizes["a"], d_h=c.size("qk_nope_head_dim", default=128),
                     d_hR=c.size("qk_rope_head_dim", default=64), d_v=c.size("v_head_dim", default=128),
                     d_c=c.size("kv_lora_rank", default=512))
        if q_lora:
            sizes["d_cq"] = c.size("q_lora_rank", default=1536)
        width = c.size("moe_intermediate_size", default=defaults["width"])
        sizes.update(_experts(c, "n_routed_experts", defaults["experts"],
                              defaults["top_k"], width))
        shared = c.count("n_shared_experts", defaults["shared"])
        if shared:
            sizes["f_s"] = shared * width
        # DeepseekV2TopkRouter never renormalises its top-k weights; DeepseekV3TopkRouter does with norm_topk_prob
        renormalize = version == 3 and c.flag("norm_topk_prob", True)
        masked = version == 2 and c.get("topk_method", "greedy") == "group_limited_greedy"
        moe = Moe(shared=bool(shared), renormalize=renormalize, group_masked=masked)
        arch, sizes = _with_moe(arch, sizes, moe, c.count("first_k_dense_replace", defaults["dense"]))
        if mlp_bias and arch.moe is not None:
            raise ConfigError(f"{c.name}: config field 'mlp_bias' = True is not supported: the routed experts "
                              "have no biases while the dense and shared MLPs would")
        notes = ("multi-head latent attention: the KV cache holds the latent (d_c) and the rotary key (d_hR) per "
                 "token per layer, as transformers and serving engines keep it",)
        mtp = c.count("num_nextn_predict_layers", 0) if version == 3 else 0
        if mtp:  # transformers builds none (its modeling code skips them); Megatron-Core trains them when asked
            notes += (f"{mtp} multi-token-prediction layer{'s' if mtp > 1 else ''} (num_nextn_predict_layers) not "
                      f"counted, as transformers builds none; training as Megatron-Core runs them: --mtp-layers {mtp}",)
        return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), "notes": notes}

    return adapt


def _gpt_oss(c: Fields) -> Adapted:
    """gpt-oss: attention sinks, biases on attention, router and experts; layers alternate a sliding
    window (128) and full attention."""
    bias = c.flag("attention_bias", True)
    moe = Moe(router_bias=True, expert_bias=True, active_embedding=False, glu_clamp=True,
              note="gpt-oss experts: clamped SwiGLU (up + 1) * gate * sigmoid(1.702 gate), saved as SwiGLU "
                   "except under --implementation hf (its code's tensors)")
    scaling = c.get("rope_scaling", None)  # transformers' GptOssConfig defaults to YaRN (factor 32)
    yarn = scaling is None or (isinstance(scaling, dict) and scaling.get("rope_type", scaling.get("type")) == "yarn")
    arch = replace(LLAMA, family="gpt_oss", qkv_bias=bias, out_bias=bias, sinks=True, rope_yarn=yarn,
                   tied_embeddings=c.flag("tie_word_embeddings", False))
    sizes = decoder_sizes(c, head_dim=64, kv_heads=8)
    sizes.update(_experts(c, "num_local_experts", 128, 4, sizes["f"]))
    arch, sizes = _with_moe(arch, sizes, moe, 0)
    window = sliding(128, slides=lambda c, l: (l + 1) // 2)(c, sizes["l"])  # even layers (0, 2, ...) slide
    notes = (*window.pop("notes", ()), "activations: gpt-oss's router takes the softmax of the top-k logits only; "
             "outside --implementation hf the graph's softmax top-k router saves the scores of all E experts",
             "weights: gpt-oss ships its routed experts in MXFP4; " + (
                 "this config's quantization_config says so: inference weighs them as stored with no flag, "
                 "--weight-dtype bf16 as transformers loads them without its MXFP4 kernels (dequantized)"
                 if _quant_method(c) == "mxfp4" else
                 "inference with --weight-dtype mxfp4 weighs them as stored, the default bf16 as transformers loads "
                 "them without its MXFP4 kernels (dequantized)"))
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), **window, "notes": notes}


def _quant_method(c: Fields) -> object:
    """The ``quant_method`` of the config's ``quantization_config`` (None without one)."""
    q = c.get("quantization_config", None)
    return q.get("quant_method") if isinstance(q, dict) else None


def _phimoe(c: Fields) -> Adapted:
    """Phi-3.5-MoE: LayerNorm with bias, optional attention and LM-head biases, 16 experts, 2 per token."""
    bias = c.flag("attention_bias", False)
    arch = replace(LLAMA, family="phimoe", norm="layernorm", norm_bias=True,
                   mlp=mlp_kind(c, "hidden_act", "silu", gated=True), qkv_bias=bias, out_bias=bias,
                   lm_head_bias=c.flag("lm_head_bias", False), tied_embeddings=c.flag("tie_word_embeddings", False))
    sizes = decoder_sizes(c, kv_heads=8)
    sizes.update(_experts(c, "num_local_experts", 16, 2, sizes["f"]))
    jitter = c.get("input_jitter_noise", 0.0)
    if isinstance(jitter, bool) or not isinstance(jitter, (int, float)) or jitter < 0:
        c.fail("input_jitter_noise", "must be a number >= 0")
    moe = Moe(renormalize=False, input_jitter=jitter > 0,
              note="Phi-MoE's sparsemixer router saves other tensors than the softmax top-k router, "
                   "except under --implementation hf (its code's tensors)")
    arch, sizes = _with_moe(arch, sizes, moe, 0)
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), **sliding()(c, sizes["l"])}


def _granitemoe(c: Fields) -> Adapted:
    """Granite MoE: LLaMA's layer with routed experts; its multipliers scale activations, not parameters."""
    bias = c.flag("attention_bias", False)
    arch = replace(LLAMA, family="granitemoe", mlp=mlp_kind(c, "hidden_act", "silu", gated=True), qkv_bias=bias,
                   out_bias=bias, tied_embeddings=c.flag("tie_word_embeddings", False))
    sizes = decoder_sizes(c)
    sizes.update(_experts(c, "num_local_experts", 8, 2, sizes["f"]))
    arch, sizes = _with_moe(arch, sizes, Moe(), 0)
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


MOE_ADAPTERS: dict[str, Callable[[Fields], Adapted]] = {
    "mixtral": _mixtral,
    "qwen2_moe": _qwen_moe("qwen2_moe", 16, 60, 4, 1408, shared=True),
    "qwen3_moe": _qwen_moe("qwen3_moe", 4, 128, 8, 768, shared=False),
    "olmoe": _olmoe,
    "deepseek_v2": _deepseek(2),
    "deepseek_v3": _deepseek(3),
    "gpt_oss": _gpt_oss,
    "phimoe": _phimoe,
    "granitemoe": _granitemoe,
}
