"""One adapter per ``model_type``: which fields a family's transformers modeling code reads
(with its config class's defaults, since ``save_pretrained`` drops fields equal to them) and
which structural switches of ``Arch`` apply. Families the graph cannot represent exactly are
refused, naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import NoReturn

from memderive.derivations.models.architectures import BERT, GPT, LLAMA
from memderive.derivations.models.families_moe import MOE_ADAPTERS
from memderive.derivations.models.families_hybrid import HYBRID_ADAPTERS
from memderive.derivations.models.config_fields import (Adapted, ConfigError, Fields, LlamaLike, activation,
                                                        decoder_sizes, kv_head_count, rotary_dims, sliding,
                                                        whole_heads)

__all__ = ["ADAPTERS", "REFUSED", "SUPPORTED_MODEL_TYPES"]


def _gpt2(c: Fields) -> Adapted:
    h = c.size("n_embd")  # hidden_size, num_attention_heads, ...: GPT2Config's aliases (FAMILY_ALIASES)
    sizes = {"h": h, "a": c.size("n_head"), "l": c.size("n_layer"), "V": c.size("vocab_size"),
             "n_ctx": c.size("n_positions"),
             "f": c.size("n_inner", default=4 * h)}
    arch = replace(GPT, **activation(c, "activation_function", "gelu_new"),
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    return arch, sizes, {"max_positions": sizes["n_ctx"]}


def _gpt_neox(c: Fields) -> Adapted:
    bias = c.flag("attention_bias", True)
    parallel = c.flag("use_parallel_residual", True)
    sizes = {"h": c.size("hidden_size"), "a": c.size("num_attention_heads"), "l": c.size("num_hidden_layers"),
             "V": c.size("vocab_size"), "f": c.size("intermediate_size")}
    whole_heads(c, sizes["h"], sizes["a"], ("hidden_size", "num_attention_heads"))
    part = rotary_dims(c, sizes["h"] // sizes["a"], "rotary_pct", 0.25)
    arch = replace(GPT, family="gpt_neox", **activation(c, "hidden_act", "gelu"), positions="rotary",
                   tied_embeddings=c.flag("tie_word_embeddings", False), qkv_bias=bias, out_bias=bias,
                   parallel_block=parallel, partial_rotary=bool(part))
    sizes.update({k: v for k, v in part.items() if k == "d_r"})
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _bert(c: Fields) -> Adapted:
    c.refuse("position_embedding_type", lambda v: v == "absolute", "only absolute positions are modelled")
    sizes = {"h": c.size("hidden_size"), "a": c.size("num_attention_heads"), "l": c.size("num_hidden_layers"),
             "V": c.size("vocab_size"), "f": c.size("intermediate_size"),
             "n_ctx": c.size("max_position_embeddings"), "n_type": c.size("type_vocab_size")}
    return BERT, sizes, {"max_positions": sizes["n_ctx"]}


# --- GPT-style families: LayerNorm with bias, plain MLP ---------------------------------------------

def _gpt_sizes(c: Fields, h_key: str, a_key: str, l_key: str, f_keys: tuple[str, ...] = ("n_inner",)) -> dict[str, int]:
    """Sizes of families whose head size is hidden/heads and whose FFN defaults to 4 * hidden (each key
    the config class's field; its aliases are read through ``Fields``)."""
    h, a = c.size(h_key), c.size(a_key)
    whole_heads(c, h, a, (h_key, a_key))
    return {"h": h, "a": a, "l": c.size(l_key), "V": c.size("vocab_size"), "f": c.size(*f_keys, default=4 * h)}


def _gptj(c: Fields) -> Adapted:
    """GPT-J and CodeGen: one LayerNorm feeds attention and MLP in parallel; q/k/v/out have no bias."""
    sizes = _gpt_sizes(c, "n_embd", "n_head", "n_layer")
    part = rotary_dims(c, sizes["h"] // sizes["a"], "rotary_dim", 64)
    arch = replace(GPT, family=c.config["model_type"], **activation(c, "activation_function", "gelu_new"),
                   positions="rotary", qkv_bias=False, out_bias=False, parallel_block=True, shared_norm=True,
                   lm_head_bias=True, tied_embeddings=c.flag("tie_word_embeddings", False), partial_rotary=bool(part))
    sizes.update({k: v for k, v in part.items() if k == "d_r"})
    return arch, sizes, {"max_positions": c.get("n_positions", None)}


def _opt(c: Fields) -> Adapted:
    """OPT: learned positions offset by 2 rows; ``do_layer_norm_before`` false is post-norm (OPT-350m)."""
    sizes = _gpt_sizes(c, "hidden_size", "num_attention_heads", "num_hidden_layers", ("ffn_dim",))
    c.refuse("word_embed_proj_dim", lambda v: v == sizes["h"],
             f"embeddings narrower than hidden_size = {sizes['h']} need project_in/out layers (OPT-350m), "
             "which are not modelled")
    c.refuse("layer_norm_elementwise_affine", lambda v: v is True, "LayerNorm without weight and bias is not modelled")
    before, bias = c.flag("do_layer_norm_before", True), c.flag("enable_bias", True)
    final = before and not c.flag("_remove_final_layer_norm", False)
    arch = replace(GPT, family="opt", **activation(c, "activation_function", "relu"), qkv_bias=bias, out_bias=bias,
                   mlp_bias=bias, post_norm=not before, final_norm=final, position_ids="per-sequence",
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    positions = c.size("max_position_embeddings")
    # NOTE: OPTLearnedPositionalEmbedding has max_position_embeddings + 2 rows (ids are offset by 2).
    return arch, {**sizes, "n_ctx": positions + 2}, {"max_positions": positions}


def _phi(c: Fields) -> Adapted:
    """Phi-1/1.5/2: one LayerNorm, parallel attention and MLP, partial rotary, biases, lm_head bias."""
    c.refuse("qk_layernorm", lambda v: v is False, "per-head LayerNorm on q and k (with bias) is not modelled")
    sizes = decoder_sizes(c)
    part = rotary_dims(c, sizes.get("d_h") or sizes["h"] // sizes["a"], "partial_rotary_factor", 0.5)
    arch = replace(GPT, family="phi", **activation(c, "hidden_act", "gelu_new"), positions="rotary",
                   parallel_block=True, shared_norm=True, lm_head_bias=True,
                   tied_embeddings=c.flag("tie_word_embeddings", False), partial_rotary=bool(part))
    sizes.update({k: v for k, v in part.items() if k == "d_r"})
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _falcon(c: Fields) -> Adapted:
    """Falcon: fused qkv; multi-query (7B), grouped KV with ``new_decoder_architecture`` (40B/180B)."""
    h, a = c.size("hidden_size"), c.size("num_attention_heads")  # n_embed: FalconConfig's keyword for hidden_size
    whole_heads(c, h, a, ("hidden_size", "num_attention_heads"))
    new, parallel = c.flag("new_decoder_architecture", False), c.flag("parallel_attn", True)
    norms = c.get("num_ln_in_parallel_attn", 2 if new else 1)
    if new and not parallel:
        c.fail("parallel_attn", "is not supported with new_decoder_architecture (transformers' layer needs it)")
    if parallel and norms not in ((1, 2) if new else (1,)):
        c.fail("num_ln_in_parallel_attn", "is not supported: transformers builds 1, or 2 with new_decoder_architecture")
    if new:
        a_kv = kv_head_count(c, a, "num_kv_heads")
    else:
        a_kv = 1 if c.flag("multi_query", True) else a
        c.refuse("num_kv_heads", lambda v: v in (a, a_kv), "only new_decoder_architecture reads it; set it to "
                 "num_attention_heads or drop it")
    if parallel and c.get("hidden_dropout", 0.0) not in (0, 0.0):
        c.fail("hidden_dropout", "is not supported: parallel Falcon drops out attention+MLP as one sum")
    bias = c.flag("bias", False)
    arch = replace(GPT, family="falcon", **activation(c, "activation", "gelu"),
                   positions="alibi" if c.flag("alibi", False) else "rotary", qkv_bias=bias, out_bias=bias,
                   mlp_bias=bias, parallel_block=parallel, shared_norm=parallel and norms == 1,
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    sizes = {"h": h, "a": a, "a_kv": a_kv, "l": c.size("num_hidden_layers"), "V": c.size("vocab_size"),
             "f": c.size("ffn_hidden_size", default=4 * h)}
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _starcoder2(c: Fields) -> Adapted:
    bias = c.flag("use_bias", True)
    arch = replace(GPT, family="starcoder2", **activation(c, "hidden_act", "gelu_pytorch_tanh"), positions="rotary",
                   qkv_bias=bias, out_bias=bias, mlp_bias=bias, tied_embeddings=c.flag("tie_word_embeddings", True))
    sizes = decoder_sizes(c, kv_heads=2)
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), **sliding()(c, sizes["l"])}


def _bloom(c: Fields) -> Adapted:
    """BLOOM: ALiBi, LayerNorm on the embeddings, biases everywhere, FFN fixed at 4h."""
    # NOTE: apply_residual_connection_post_layernorm moves where the residual branches off; an add
    # saves nothing, so parameters and saved tensors are the same either way.
    sizes = _gpt_sizes(c, "hidden_size", "n_head", "n_layer", f_keys=())
    arch = replace(GPT, family="bloom", positions="alibi", embed_norm=True,
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    return arch, sizes, {}


def _mpt(c: Fields) -> Adapted:
    """MPT as transformers builds it: ALiBi, no biases (LayerNorm included), FFN fixed at 4h."""
    if not isinstance(c.get("attn_config", {}), Mapping):
        c.fail("attn_config", "must be a JSON object")
    attn = Fields(c.get("attn_config", {}), f"{c.name} attn_config")
    c.refuse("expansion_ratio", lambda v: v == 4, "transformers' MptMLP is fixed at 4 * d_model")
    c.refuse("no_bias", lambda v: v is True, "transformers' MPT has no biases whatever no_bias says")
    c.refuse("norm_type", lambda v: v in ("low_precision_layernorm", "layernorm"), "MPT is modelled with LayerNorm")
    attn.refuse("alibi", lambda v: v is True, "transformers' MPT always uses ALiBi (no learned positions)")
    attn.refuse("qk_ln", lambda v: v is False, "transformers' MPT has no q/k LayerNorm")
    attn.refuse("attn_type", lambda v: v == "multihead_attention", "transformers' MPT is multi-head attention")
    sizes = _gpt_sizes(c, "d_model", "n_heads", "n_layers", f_keys=())
    arch = replace(GPT, family="mpt", positions="alibi", norm_bias=False, qkv_bias=False, out_bias=False,
                   mlp_bias=False, tied_embeddings=c.flag("tie_word_embeddings", True))
    return arch, sizes, {"max_positions": c.get("max_seq_len", None)}


def _neo_layers(c: Fields) -> int:
    """How many layers GPT-Neo's ``attention_types`` lists (``[[["global", "local"], 12]]``: 24)."""
    types = c.get("attention_types", [[["global", "local"], 12]])
    try:
        return sum(len(kinds) * count for kinds, count in types
                   if all(k in ("global", "local") for k in kinds) and not isinstance(count, bool) and count >= 0)
    except (TypeError, ValueError):
        c.fail("attention_types", 'must be a list of [["global", "local"], repeats] pairs')


def _gpt_neo(c: Fields) -> Adapted:
    sizes = _gpt_sizes(c, "hidden_size", "num_heads", "num_layers", ("intermediate_size",))
    if _neo_layers(c) != sizes["l"]:
        c.fail("attention_types", f"lists {_neo_layers(c)} layers, not num_layers = {sizes['l']}; transformers "
                                  "refuses this too")
    arch = replace(GPT, family="gpt_neo", **activation(c, "activation_function", "gelu_new"), qkv_bias=False,
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    n_ctx = c.size("max_position_embeddings")
    notes = ("local-attention layers see a window of window_size tokens; the graph treats every layer as global",)
    return arch, {**sizes, "n_ctx": n_ctx}, {"max_positions": n_ctx, "notes": notes}


def _gpt_bigcode(c: Fields) -> Adapted:
    """StarCoder/SantaCoder: GPT-2 with one shared key/value head (``multi_query``)."""
    c.refuse("add_cross_attention", lambda v: v is False, "cross-attention layers are not modelled")
    sizes = _gpt_sizes(c, "n_embd", "n_head", "n_layer")
    arch = replace(GPT, family="gpt_bigcode", **activation(c, "activation_function", "gelu_pytorch_tanh"),
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    n_ctx = c.size("n_positions")
    a_kv = 1 if c.flag("multi_query", True) else sizes["a"]
    return arch, {**sizes, "a_kv": a_kv, "n_ctx": n_ctx}, {"max_positions": n_ctx}


# --- LLaMA-style families ---------------------------------------------------------------------

def _stablelm(c: Fields) -> Adapted:
    """StableLM: LayerNorm with bias, SwiGLU; ``use_parallel_residual`` shares one norm (StableLM-2 12B)."""
    c.refuse("qk_layernorm", lambda v: v is False, "per-head LayerNorm on q and k is not modelled")
    sizes = decoder_sizes(c, kv_heads=32)
    sizes.pop("d_h", None)  # StableLM's head size is hidden/heads; its o_proj is hidden x hidden
    whole_heads(c, sizes["h"], sizes["a"], ("hidden_size", "num_attention_heads"))
    parallel = c.flag("use_parallel_residual", False)
    part = rotary_dims(c, sizes["h"] // sizes["a"], "partial_rotary_factor", 0.25)
    arch = replace(LLAMA, family="stablelm", norm="layernorm", norm_bias=True,
                   **activation(c, "hidden_act", "silu", True), qkv_bias=c.flag("use_qkv_bias", False),
                   parallel_block=parallel, shared_norm=parallel, tied_embeddings=c.flag("tie_word_embeddings", False),
                   partial_rotary=bool(part))
    sizes.update({k: v for k, v in part.items() if k == "d_r"})
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _gemma2(family: str, qk_norm: bool, every: int | None) -> LlamaLike:
    """Gemma 2 / Gemma 3 text: RMSNorm before and after both sublayers (Gemma 3 adds per-head q/k norms);
    every ``every``-th layer attends to all tokens, the others to a sliding window."""
    def slides(c: Fields, l: int) -> int:  # every ``every``-th layer (1-based) is full
        return l - l // (every or c.size("sliding_window_pattern", "_sliding_window_pattern", default=6))

    arch = replace(LLAMA, family=family, mlp="geglu", tied_embeddings=True, sublayer_norm="both", qk_norm=qk_norm)
    return LlamaLike(arch, reads=("attention_bias",), head_dim=256, kv_heads=4, act="hidden_activation",
                      window=sliding(4096, slides=slides), softcap=True)


def _cohere(c: Fields) -> Adapted:
    c.refuse("use_qk_norm", lambda v: v is False, "q/k LayerNorms with a weight per head are not modelled")
    return LlamaLike(_COHERE, reads=("attention_bias",))(c)


def _nemotron(c: Fields) -> Adapted:
    """Nemotron-4 (transformers' ``nemotron``): LayerNorm1P (a LayerNorm with weight and bias, applied as
    ``weight + 1``), a plain MLP up_proj -> relu2 (squared ReLU) -> down_proj, partial rotary (factor 0.5),
    grouped KV, untied embeddings; ``attention_bias`` on q/k/v/o, ``mlp_bias`` on up/down (both off by default)."""
    if c.given("num_key_value_heads") is None:  # NemotronConfig leaves it None: heads // None in NemotronAttention
        c.fail("num_key_value_heads", "is required: transformers 5.25's NemotronAttention cannot build the model "
                                      "without it (num_heads // None); give the number of key/value heads")
    sizes = decoder_sizes(c)
    part = rotary_dims(c, sizes.get("d_h") or sizes["h"] // sizes["a"], "partial_rotary_factor", 0.5)
    attn_bias, mlp_bias = c.flag("attention_bias", False), c.flag("mlp_bias", False)
    arch = replace(LLAMA, family="nemotron", norm="layernorm", norm_bias=True,
                   **activation(c, "hidden_act", "relu2"), qkv_bias=attn_bias, out_bias=attn_bias,
                   mlp_bias=mlp_bias, tied_embeddings=c.flag("tie_word_embeddings", False),
                   partial_rotary=bool(part))
    sizes.update({k: v for k, v in part.items() if k == "d_r"})
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _refuse(why: str) -> Callable[[Fields], NoReturn]:
    def adapt(c: Fields) -> NoReturn:
        raise ConfigError(f"{c.name}: model_type {c.config['model_type']!r} is not supported: {why}")

    return adapt


_QWEN2 = replace(LLAMA, family="qwen2", qkv_bias=True)
_QWEN3 = replace(LLAMA, family="qwen3", qk_norm=True)
_GEMMA = replace(LLAMA, family="gemma", mlp="geglu", tied_embeddings=True)
# Qwen2/3: off unless use_sliding_window; then layers from max_window_layers on slide (l - that of them).
_QWEN_WINDOW = sliding(4096, switch="use_sliding_window", slides=lambda c, l: max(0, l - c.count("max_window_layers", 28)))
# OLMo 2: RMSNorm on each sublayer's output only, and on all of q and all of k (not per head).
_OLMO2 = replace(LLAMA, family="olmo2", sublayer_norm="output", qk_norm=True, qk_norm_width="all")
# Cohere (Command R): one mean-centred LayerNorm without bias, parallel attention and MLP.
_COHERE = replace(LLAMA, family="cohere", norm="layernorm", parallel_block=True, shared_norm=True,
                  tied_embeddings=True)

ADAPTERS: dict[str, Callable[[Fields], Adapted]] = {
    "gpt2": _gpt2,
    "llama": LlamaLike(LLAMA),
    "mistral": LlamaLike(replace(LLAMA, family="mistral"), reads=(), kv_heads=8, window=sliding(4096)),
    "qwen2": LlamaLike(_QWEN2, reads=(), kv_heads=32, window=_QWEN_WINDOW),
    "qwen3": LlamaLike(_QWEN3, reads=("attention_bias",), head_dim=128, kv_heads=32, window=_QWEN_WINDOW),
    "gemma": LlamaLike(_GEMMA, reads=("attention_bias",), head_dim=256, kv_heads=16),
    "gemma2": _gemma2("gemma2", qk_norm=False, every=2),
    "gemma3_text": _gemma2("gemma3_text", qk_norm=True, every=None),
    "phi3": LlamaLike(replace(LLAMA, family="phi3"), reads=(), window=sliding(), rotary=("partial_rotary_factor", 1.0)),
    "olmo2": LlamaLike(_OLMO2, reads=("attention_bias",)),
    "granite": LlamaLike(replace(LLAMA, family="granite")),
    "cohere": _cohere,
    "nemotron": _nemotron,
    "stablelm": _stablelm,
    "starcoder2": _starcoder2,
    "phi": _phi,
    "gptj": _gptj,
    "codegen": _gptj,
    "opt": _opt,
    "falcon": _falcon,
    "bloom": _bloom,
    "mpt": _mpt,
    "gpt_neo": _gpt_neo,
    "gpt_bigcode": _gpt_bigcode,
    "gpt_neox": _gpt_neox,
    "bert": _bert,
    **MOE_ADAPTERS,
    **HYBRID_ADAPTERS,
}
SUPPORTED_MODEL_TYPES = tuple(ADAPTERS)

#: Families refused with the reason (mixture-of-experts: the field that makes them so).
REFUSED: dict[str, Callable[[Fields], NoReturn]] = {
    "olmo": _refuse("OLMo's LayerNorm has no weight and no bias, and a parameter-free LayerNorm is not "
                    "modelled yet"),
    "gemma3": _refuse("it includes a vision tower (vision_config); give its text_config (model_type "
                      "gemma3_text)"),
}
