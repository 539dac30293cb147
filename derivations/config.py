"""Map a Hugging Face ``config.json`` onto a ``Model``, offline.

One adapter per ``model_type`` reads the fields that family's transformers modeling code reads
(with that config class's defaults, since ``save_pretrained`` drops fields equal to them) and
says which structural switches apply; a field the graph cannot represent exactly is an error
naming that field.

>>> m = from_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
...                  "num_hidden_layers": 2, "intermediate_size": 172, "vocab_size": 100})
>>> m.sizes["f"], m.arch.tied_embeddings
(172, False)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from derivations.architectures import BERT, GPT, LLAMA, Arch
from derivations.models import Model, ModelError

__all__ = ["ConfigError", "from_config", "load_config", "SUPPORTED_MODEL_TYPES"]


class ConfigError(ModelError):
    """A config that cannot be mapped exactly onto a graph."""


class Fields:
    """Read config fields; a missing or ill-typed one is a ``ConfigError`` that names it."""

    def __init__(self, config: Mapping[str, Any], name: str) -> None:
        self.config, self.name = config, name

    def need(self, *keys: str) -> Any:
        for key in keys:
            if self.config.get(key) is not None:
                return self.config[key]
        raise ConfigError(f"{self.name}: config field {keys[0]!r} is missing; add it to config.json")

    def get(self, key: str, default: Any) -> Any:
        value = self.config.get(key)
        return default if value is None else value

    def size(self, *keys: str, default: int | None = None) -> int:
        """A positive integer from the first key present (``default`` when none is; else an error)."""
        for key in keys:
            value = self.config.get(key)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    self.fail(key, "must be a positive integer")
                return value
        if default is None:
            self.need(*keys)
        return default

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, "must be true or false")
        return value

    def fail(self, key: str, why: str) -> NoReturn:
        raise ConfigError(f"{self.name}: config field {key!r} = {self.config.get(key)!r} {why}")

    def refuse(self, key: str, unless: Callable[[Any], bool], why: str) -> None:
        if key in self.config and self.config[key] is not None and not unless(self.config[key]):
            self.fail(key, f"is not supported: {why}")


Adapted = tuple[Arch, dict[str, int], dict[str, Any]]

_GELUS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate")


def _mlp(c: Fields, key: str, default: str, gated: bool = False) -> str:
    """The MLP kind for an activation name; a name the graph has no op for is refused."""
    act = c.get(key, default)
    if gated:
        kinds = {"silu": "swiglu", "swish": "swiglu", **dict.fromkeys(_GELUS, "geglu")}
    else:
        kinds = {"relu": "relu", **dict.fromkeys(_GELUS, "gelu")}
    if act not in kinds:
        c.fail(key, f"is not supported: the {'gated ' if gated else ''}MLP is modelled with {', '.join(kinds)}")
    return kinds[act]


def _whole_heads(c: Fields, h: int, a: int, keys: tuple[str, str]) -> None:
    """Families whose head size is hidden/heads (no ``head_dim`` field) need an exact split."""
    if h % a:
        c.fail(keys[0], f"is not divisible by {keys[1]} = {a}; this family's head size is {keys[0]} / {keys[1]}")


def _kv_heads(c: Fields, a: int, key: str = "num_key_value_heads", default: int | None = None) -> int:
    """Key/value heads; a missing field takes the config class's default (None: one per query head)."""
    a_kv = c.size(key, default=default or a)
    if a % a_kv:
        given = "" if c.get(key, None) is not None else f", absent: the {c.config['model_type']} default"
        raise ConfigError(f"{c.name}: {a} attention heads are not divisible by {a_kv} key/value heads "
                          f"(config field {key!r}{given})")
    return a_kv


#: Dropout rates each family's modeling code reads (dotted: nested), with its config class's defaults.
DROPOUT_RATES: dict[str, dict[str, float]] = {
    **dict.fromkeys(("gptj", "codegen"), {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}),
    "opt": {"dropout": 0.1, "attention_dropout": 0.0},
    "phi": {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attention_dropout": 0.0},
    "falcon": {"hidden_dropout": 0.0, "attention_dropout": 0.0},
    "starcoder2": {"residual_dropout": 0.0, "embedding_dropout": 0.0, "attention_dropout": 0.0},
    "bloom": {"hidden_dropout": 0.0, "attention_dropout": 0.0},
    "mpt": {"attn_config.attn_pdrop": 0.0},  # transformers' MPT uses it for every dropout
    "gpt_neo": {"resid_dropout": 0.0, "embed_dropout": 0.0, "attention_dropout": 0.0},
    "gpt_bigcode": {"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1},
}


def _with_dropout(c: Fields, arch: Arch, extra: dict[str, Any]) -> tuple[Arch, dict[str, Any]]:
    """Dropout is in the graph when a rate is non-zero (p = 0 is the identity and saves nothing).

    The graph drops out at GPT-2's places (embeddings, attention probabilities, both residual
    branches); rates that differ by place are said in a note.
    """
    defaults = DROPOUT_RATES.get(c.config["model_type"])
    if defaults is None:
        return arch, extra
    rates = {}
    for key, default in defaults.items():
        outer, _, inner = key.rpartition(".")
        rate = Fields(c.get(outer, {}), c.name).get(inner, default) if outer else c.get(key, default)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            c.fail(key, "must be a dropout rate in [0, 1)")
        rates[key] = rate
    notes = tuple(extra.get("notes", ()))
    if 0 < sum(rate > 0 for rate in rates.values()) < len(rates):
        notes += ("dropout rates differ by place (" + ", ".join(f"{k} = {v}" for k, v in rates.items())
                  + "); the graph drops out at every place",)
    return replace(arch, dropout=any(rate > 0 for rate in rates.values())), {**extra, "notes": notes}


def _decoder_sizes(c: Fields, head_dim: int | None = None, kv_heads: int | None = None) -> dict[str, int]:
    """LLaMA-style field names; ``head_dim``, ``kv_heads``: the config class's defaults (None: derived)."""
    sizes = {"h": c.size("hidden_size"), "a": c.size("num_attention_heads"), "l": c.size("num_hidden_layers"),
             "V": c.size("vocab_size"), "f": c.size("intermediate_size")}
    sizes["a_kv"] = _kv_heads(c, sizes["a"], default=kv_heads)
    if c.get("head_dim", None) is not None:
        sizes["d_h"] = c.size("head_dim")
    elif head_dim is not None:
        sizes["d_h"] = head_dim
    return sizes


WindowRule = Callable[[Fields, int], dict[str, Any]]


#: ``layer_types`` entries by whether the layer slides ("attention": transformers' legacy name, remapped).
_LAYER_TYPES = {"sliding_attention": True, "full_attention": False, "attention": False}


def _sliding(default: int | None = None, switch: str | None = None,
             slides: Callable[[Fields, int], bool] = lambda c, i: True) -> WindowRule:
    """Sliding-window attention as transformers applies it, as ``Model`` fields.

    ``switch`` (when named) turns it on; an explicit null ``sliding_window`` turns it off. Layer
    ``i`` slides per ``layer_types`` when the config lists them (transformers' cache follows that
    list in every family), else per ``slides`` (the rule the config class builds the list with).
    The model's ``window`` is the window; ``window_layers`` how many layers slide, the others
    caching their whole context.
    """
    def rule(c: Fields, l: int) -> dict[str, Any]:
        if (switch is not None and not c.flag(switch, False)) or c.config.get("sliding_window", default) is None:
            return {}
        window = c.size("sliding_window", default=default)
        sliding = _layer_types(c, l) or [slides(c, i) for i in range(l)]
        count = sum(sliding)
        if count in (0, l):
            return {"window": window} if count else {}
        return {"window": window, "window_layers": count,
                "notes": (f"{count} of {l} layers (l_w) attend to a sliding window of {window} tokens, "
                          "the others to the whole context",)}

    return rule


def _layer_types(c: Fields, l: int) -> list[bool] | None:
    """Which layers slide, from the config's ``layer_types`` list (None when it has none)."""
    types = c.config.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != l or any(x not in _LAYER_TYPES for x in types):
        c.fail("layer_types", f"is not supported: expected one of {', '.join(_LAYER_TYPES)} for each of the {l} "
                              "layers")
    return [_LAYER_TYPES[x] for x in types]


def _no_window(c: Fields, l: int) -> dict[str, Any]:
    return {}


@dataclass(frozen=True, slots=True)
class _LlamaLike:
    """Families with LLaMA's field names.

    ``reads``: the bias fields their modeling code reads; ``head_dim``, ``kv_heads``: the config
    class's defaults (None: derived); ``act``: the activation field; ``window``: which layers slide.
    """

    arch: Arch
    reads: tuple[str, ...] = ("attention_bias", "mlp_bias")
    head_dim: int | None = None
    kv_heads: int | None = None
    act: str = "hidden_act"
    window: WindowRule = _no_window

    def __call__(self, c: Fields) -> Adapted:
        arch = self.arch
        c.refuse("num_local_experts", lambda v: v in (0, 1), "mixture-of-experts layers are not modelled")
        mlp = _mlp(c, self.act, "silu" if arch.mlp == "swiglu" else "gelu_pytorch_tanh", gated=True)
        attn_bias = "attention_bias" in self.reads and c.flag("attention_bias", False)
        mlp_bias = c.flag("mlp_bias", arch.mlp_bias) if "mlp_bias" in self.reads else arch.mlp_bias
        chosen = replace(arch, mlp=mlp, tied_embeddings=c.flag("tie_word_embeddings", arch.tied_embeddings),
                         qkv_bias=arch.qkv_bias or attn_bias, out_bias=arch.out_bias or attn_bias, mlp_bias=mlp_bias)
        sizes = _decoder_sizes(c, self.head_dim, self.kv_heads)
        return chosen, sizes, {"max_positions": c.get("max_position_embeddings", None), **self.window(c, sizes["l"])}


def _gpt2(c: Fields) -> Adapted:
    h = c.need("n_embd", "hidden_size")
    sizes = {"h": h, "a": c.need("n_head", "num_attention_heads"), "l": c.need("n_layer", "num_hidden_layers"),
             "V": c.need("vocab_size"), "n_ctx": c.need("n_positions", "max_position_embeddings"),
             "f": c.get("n_inner", 4 * h)}
    arch = replace(GPT, mlp=_mlp(c, "activation_function", "gelu_new"),
                   tied_embeddings=bool(c.get("tie_word_embeddings", True)))
    return arch, sizes, {"max_positions": sizes["n_ctx"]}


def _gpt_neox(c: Fields) -> Adapted:
    bias = bool(c.get("attention_bias", True))
    parallel = bool(c.get("use_parallel_residual", True))
    arch = replace(GPT, mlp=_mlp(c, "hidden_act", "gelu"), positions="rotary",
                   tied_embeddings=bool(c.get("tie_word_embeddings", False)), qkv_bias=bias, out_bias=bias,
                   parallel_block=parallel)
    sizes = {"h": c.need("hidden_size"), "a": c.need("num_attention_heads"), "l": c.need("num_hidden_layers"),
             "V": c.need("vocab_size"), "f": c.need("intermediate_size")}
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _bert(c: Fields) -> Adapted:
    c.refuse("position_embedding_type", lambda v: v == "absolute", "only absolute positions are modelled")
    sizes = {"h": c.need("hidden_size"), "a": c.need("num_attention_heads"), "l": c.need("num_hidden_layers"),
             "V": c.need("vocab_size"), "f": c.need("intermediate_size"),
             "n_ctx": c.need("max_position_embeddings"), "n_type": c.need("type_vocab_size")}
    return BERT, sizes, {"max_positions": sizes["n_ctx"]}


# --- GPT-style families: LayerNorm with bias, plain MLP ---------------------------------------------

def _gpt_sizes(c: Fields, h_keys: tuple[str, ...], a_keys: tuple[str, ...], l_keys: tuple[str, ...],
               f_keys: tuple[str, ...] = ("n_inner",)) -> dict[str, int]:
    """Sizes of families whose head size is hidden/heads and whose FFN defaults to 4 * hidden."""
    h, a = c.size(*h_keys), c.size(*a_keys)
    _whole_heads(c, h, a, (h_keys[0], a_keys[0]))
    return {"h": h, "a": a, "l": c.size(*l_keys), "V": c.size("vocab_size"), "f": c.size(*f_keys, default=4 * h)}


def _gptj(c: Fields) -> Adapted:
    """GPT-J and CodeGen: one LayerNorm feeds attention and MLP in parallel; q/k/v/out have no bias."""
    sizes = _gpt_sizes(c, ("n_embd", "hidden_size"), ("n_head", "num_attention_heads"),
                       ("n_layer", "num_hidden_layers"))
    arch = replace(GPT, family=c.config["model_type"], mlp=_mlp(c, "activation_function", "gelu_new"),
                   positions="rotary", qkv_bias=False, out_bias=False, parallel_block=True, shared_norm=True,
                   lm_head_bias=True, tied_embeddings=c.flag("tie_word_embeddings", False))
    return arch, sizes, {"max_positions": c.get("n_positions", None)}


def _opt(c: Fields) -> Adapted:
    """OPT: learned positions offset by 2 rows; ``do_layer_norm_before`` false is post-norm (OPT-350m)."""
    sizes = _gpt_sizes(c, ("hidden_size",), ("num_attention_heads",), ("num_hidden_layers",), ("ffn_dim",))
    c.refuse("word_embed_proj_dim", lambda v: v == sizes["h"],
             f"embeddings narrower than hidden_size = {sizes['h']} need project_in/out layers (OPT-350m), "
             "which are not modelled")
    c.refuse("layer_norm_elementwise_affine", lambda v: v is True, "LayerNorm without weight and bias is not modelled")
    before, bias = c.flag("do_layer_norm_before", True), c.flag("enable_bias", True)
    final = before and not c.flag("_remove_final_layer_norm", False)
    arch = replace(GPT, family="opt", mlp=_mlp(c, "activation_function", "relu"), qkv_bias=bias, out_bias=bias,
                   mlp_bias=bias, post_norm=not before, final_norm=final,
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    positions = c.size("max_position_embeddings")
    # NOTE: OPTLearnedPositionalEmbedding has max_position_embeddings + 2 rows (ids are offset by 2).
    return arch, {**sizes, "n_ctx": positions + 2}, {"max_positions": positions}


def _phi(c: Fields) -> Adapted:
    """Phi-1/1.5/2: one LayerNorm, parallel attention and MLP, partial rotary, biases, lm_head bias."""
    c.refuse("qk_layernorm", lambda v: v is False, "per-head LayerNorm on q and k (with bias) is not modelled")
    sizes = _decoder_sizes(c)
    arch = replace(GPT, family="phi", mlp=_mlp(c, "hidden_act", "gelu_new"), positions="rotary",
                   parallel_block=True, shared_norm=True, lm_head_bias=True,
                   tied_embeddings=c.flag("tie_word_embeddings", False))
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _falcon(c: Fields) -> Adapted:
    """Falcon: fused qkv; multi-query (7B), grouped KV with ``new_decoder_architecture`` (40B/180B)."""
    h, a = c.size("hidden_size", "n_embed"), c.size("num_attention_heads", "n_head")
    _whole_heads(c, h, a, ("hidden_size", "num_attention_heads"))
    new, parallel = c.flag("new_decoder_architecture", False), c.flag("parallel_attn", True)
    norms = c.get("num_ln_in_parallel_attn", 2 if new else 1)
    if new and not parallel:
        c.fail("parallel_attn", "is not supported with new_decoder_architecture (transformers' layer needs it)")
    if parallel and norms not in ((1, 2) if new else (1,)):
        c.fail("num_ln_in_parallel_attn", "is not supported: transformers builds 1, or 2 with new_decoder_architecture")
    if new:
        a_kv = _kv_heads(c, a, "num_kv_heads")
    else:
        a_kv = 1 if c.flag("multi_query", True) else a
        c.refuse("num_kv_heads", lambda v: v in (a, a_kv), "only new_decoder_architecture reads it; set it to "
                 "num_attention_heads or drop it")
    if parallel and c.get("hidden_dropout", 0.0) not in (0, 0.0):
        c.fail("hidden_dropout", "is not supported: parallel Falcon drops out attention+MLP as one sum")
    bias = c.flag("bias", False)
    arch = replace(GPT, family="falcon", mlp=_mlp(c, "activation", "gelu"),
                   positions="alibi" if c.flag("alibi", False) else "rotary", qkv_bias=bias, out_bias=bias,
                   mlp_bias=bias, parallel_block=parallel, shared_norm=parallel and norms == 1,
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    sizes = {"h": h, "a": a, "a_kv": a_kv, "l": c.size("num_hidden_layers", "n_layer"), "V": c.size("vocab_size"),
             "f": c.size("ffn_hidden_size", default=4 * h)}
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _starcoder2(c: Fields) -> Adapted:
    bias = c.flag("use_bias", True)
    arch = replace(GPT, family="starcoder2", mlp=_mlp(c, "hidden_act", "gelu_pytorch_tanh"), positions="rotary",
                   qkv_bias=bias, out_bias=bias, mlp_bias=bias, tied_embeddings=c.flag("tie_word_embeddings", True))
    sizes = _decoder_sizes(c, kv_heads=2)
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None), **_sliding()(c, sizes["l"])}


def _bloom(c: Fields) -> Adapted:
    """BLOOM: ALiBi, LayerNorm on the embeddings, biases everywhere, FFN fixed at 4h."""
    # NOTE: apply_residual_connection_post_layernorm moves where the residual branches off; an add
    # saves nothing, so parameters and saved tensors are the same either way.
    sizes = _gpt_sizes(c, ("hidden_size", "n_embed"), ("n_head", "num_attention_heads"),
                       ("n_layer", "num_hidden_layers"), f_keys=())
    arch = replace(GPT, family="bloom", positions="alibi", embed_norm=True,
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    return arch, sizes, {}


def _mpt(c: Fields) -> Adapted:
    """MPT as transformers builds it: ALiBi, no biases (LayerNorm included), FFN fixed at 4h."""
    attn = Fields(c.get("attn_config", {}), f"{c.name} attn_config")
    c.refuse("expansion_ratio", lambda v: v == 4, "transformers' MptMLP is fixed at 4 * d_model")
    c.refuse("no_bias", lambda v: v is True, "transformers' MPT has no biases whatever no_bias says")
    c.refuse("norm_type", lambda v: v in ("low_precision_layernorm", "layernorm"), "MPT is modelled with LayerNorm")
    attn.refuse("alibi", lambda v: v is True, "transformers' MPT always uses ALiBi (no learned positions)")
    attn.refuse("qk_ln", lambda v: v is False, "transformers' MPT has no q/k LayerNorm")
    attn.refuse("attn_type", lambda v: v == "multihead_attention", "transformers' MPT is multi-head attention")
    sizes = _gpt_sizes(c, ("d_model", "hidden_size"), ("n_heads", "num_attention_heads"),
                       ("n_layers", "num_hidden_layers"), f_keys=())
    arch = replace(GPT, family="mpt", positions="alibi", norm_bias=False, qkv_bias=False, out_bias=False,
                   mlp_bias=False, tied_embeddings=c.flag("tie_word_embeddings", True))
    return arch, sizes, {"max_positions": c.get("max_seq_len", None)}


def _gpt_neo(c: Fields) -> Adapted:
    sizes = _gpt_sizes(c, ("hidden_size",), ("num_heads", "num_attention_heads"),
                       ("num_layers", "num_hidden_layers"), ("intermediate_size",))
    arch = replace(GPT, family="gpt_neo", mlp=_mlp(c, "activation_function", "gelu_new"), qkv_bias=False,
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    n_ctx = c.size("max_position_embeddings")
    notes = ("local-attention layers see a window of window_size tokens; the graph treats every layer as global",)
    return arch, {**sizes, "n_ctx": n_ctx}, {"max_positions": n_ctx, "notes": notes}


def _gpt_bigcode(c: Fields) -> Adapted:
    """StarCoder/SantaCoder: GPT-2 with one shared key/value head (``multi_query``)."""
    c.refuse("add_cross_attention", lambda v: v is False, "cross-attention layers are not modelled")
    sizes = _gpt_sizes(c, ("n_embd", "hidden_size"), ("n_head", "num_attention_heads"),
                       ("n_layer", "num_hidden_layers"))
    arch = replace(GPT, family="gpt_bigcode", mlp=_mlp(c, "activation_function", "gelu_pytorch_tanh"),
                   tied_embeddings=c.flag("tie_word_embeddings", True))
    n_ctx = c.size("n_positions", "max_position_embeddings")
    a_kv = 1 if c.flag("multi_query", True) else sizes["a"]
    return arch, {**sizes, "a_kv": a_kv, "n_ctx": n_ctx}, {"max_positions": n_ctx}


# --- LLaMA-style families ---------------------------------------------------------------------

def _stablelm(c: Fields) -> Adapted:
    """StableLM: LayerNorm with bias, SwiGLU; ``use_parallel_residual`` shares one norm (StableLM-2 12B)."""
    c.refuse("qk_layernorm", lambda v: v is False, "per-head LayerNorm on q and k is not modelled")
    sizes = _decoder_sizes(c, kv_heads=32)
    sizes.pop("d_h", None)  # StableLM's head size is hidden/heads; its o_proj is hidden x hidden
    _whole_heads(c, sizes["h"], sizes["a"], ("hidden_size", "num_attention_heads"))
    parallel = c.flag("use_parallel_residual", False)
    arch = replace(LLAMA, family="stablelm", norm="layernorm", norm_bias=True, mlp=_mlp(c, "hidden_act", "silu", True),
                   qkv_bias=c.flag("use_qkv_bias", False), parallel_block=parallel, shared_norm=parallel,
                   tied_embeddings=c.flag("tie_word_embeddings", False))
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _gemma2(family: str, qk_norm: bool, every: int | None) -> _LlamaLike:
    """Gemma 2 / Gemma 3 text: RMSNorm before and after both sublayers (Gemma 3 adds per-head q/k norms);
    every ``every``-th layer attends to all tokens, the others to a sliding window."""
    def slides(c: Fields, i: int) -> bool:
        return (i + 1) % (every or c.get("sliding_window_pattern", c.get("_sliding_window_pattern", 6))) != 0

    arch = replace(LLAMA, family=family, mlp="geglu", tied_embeddings=True, sublayer_norm="both", qk_norm=qk_norm)
    return _LlamaLike(arch, reads=("attention_bias",), head_dim=256, kv_heads=4, act="hidden_activation",
                      window=_sliding(4096, slides=slides))


def _cohere(c: Fields) -> Adapted:
    c.refuse("use_qk_norm", lambda v: v is False, "q/k LayerNorms with a weight per head are not modelled")
    return _LlamaLike(_COHERE, reads=("attention_bias",))(c)


def _refuse_moe(key: str) -> Callable[[Fields], NoReturn]:
    def adapt(c: Fields) -> NoReturn:
        c.fail(key, "is not supported: mixture-of-experts layers are not modelled")

    return adapt


def _refuse(why: str) -> Callable[[Fields], NoReturn]:
    def adapt(c: Fields) -> NoReturn:
        raise ConfigError(f"{c.name}: model_type {c.config['model_type']!r} is not supported: {why}")

    return adapt


_QWEN2 = replace(LLAMA, family="qwen2", qkv_bias=True)
_QWEN3 = replace(LLAMA, family="qwen3", qk_norm=True)
_GEMMA = replace(LLAMA, family="gemma", mlp="geglu", tied_embeddings=True)
# Qwen2/3: off unless use_sliding_window; then layers from max_window_layers on slide.
_QWEN_WINDOW = _sliding(4096, switch="use_sliding_window", slides=lambda c, i: i >= c.get("max_window_layers", 28))
# OLMo 2: RMSNorm on each sublayer's output only, and on all of q and all of k (not per head).
_OLMO2 = replace(LLAMA, family="olmo2", sublayer_norm="output", qk_norm=True, qk_norm_width="all")
# Cohere (Command R): one mean-centred LayerNorm without bias, parallel attention and MLP.
_COHERE = replace(LLAMA, family="cohere", norm="layernorm", parallel_block=True, shared_norm=True,
                  tied_embeddings=True)

ADAPTERS: dict[str, Callable[[Fields], Adapted]] = {
    "gpt2": _gpt2,
    "llama": _LlamaLike(LLAMA),
    "mistral": _LlamaLike(replace(LLAMA, family="mistral"), reads=(), kv_heads=8, window=_sliding(4096)),
    "qwen2": _LlamaLike(_QWEN2, reads=(), kv_heads=32, window=_QWEN_WINDOW),
    "qwen3": _LlamaLike(_QWEN3, reads=("attention_bias",), head_dim=128, kv_heads=32, window=_QWEN_WINDOW),
    "gemma": _LlamaLike(_GEMMA, reads=("attention_bias",), head_dim=256, kv_heads=16),
    "gemma2": _gemma2("gemma2", qk_norm=False, every=2),
    "gemma3_text": _gemma2("gemma3_text", qk_norm=True, every=None),
    "phi3": _LlamaLike(replace(LLAMA, family="phi3"), reads=(), window=_sliding()),
    "olmo2": _LlamaLike(_OLMO2, reads=("attention_bias",)),
    "granite": _LlamaLike(replace(LLAMA, family="granite")),
    "cohere": _cohere,
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
}
SUPPORTED_MODEL_TYPES = tuple(ADAPTERS)

#: Families refused with the reason (mixture-of-experts: the field that makes them so).
REFUSED: dict[str, Callable[[Fields], NoReturn]] = {
    "mixtral": _refuse_moe("num_local_experts"),
    "phimoe": _refuse_moe("num_local_experts"),
    "granitemoe": _refuse_moe("num_local_experts"),
    "qwen2_moe": _refuse_moe("num_experts"),
    "qwen3_moe": _refuse_moe("num_experts"),
    "olmoe": _refuse_moe("num_experts"),
    "olmo": _refuse("OLMo's LayerNorm has no weight and no bias, and a parameter-free LayerNorm is not "
                    "modelled yet"),
    "gemma3": _refuse("it includes a vision tower (vision_config); give its text_config (model_type "
                      "gemma3_text)"),
}


def from_config(config: Mapping[str, Any], name: str | None = None, source: str = "") -> Model:
    """Build a ``Model`` from a config dict (the parsed ``config.json``)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{name or 'config'}: expected a JSON object, got {type(config).__name__}")
    label = name or str(config.get("_name_or_path") or config.get("model_type") or "config")
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"{label}: config field 'model_type' is missing; add it to config.json")
    fields = Fields(config, label)
    if model_type in REFUSED:
        REFUSED[model_type](fields)
    if model_type not in ADAPTERS:
        raise ConfigError(f"{label}: model_type {model_type!r} is not supported; supported: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    arch, sizes, extra = ADAPTERS[model_type](fields)
    arch, extra = _with_dropout(fields, arch, extra)
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{label}: size {key} must be an integer, got {value!r}")
    return Model(label, arch, sizes, source=source, **extra)


def load_config(path: str | Path, name: str | None = None) -> Model:
    """Read a local ``config.json`` (or a folder holding one); no hub access."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"{path}: no such file; give a local config.json path or a bundled model name")
    try:
        config = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{p}: not valid JSON ({exc}); check the file") from None
    return from_config(config, name or p.parent.name or p.stem, source=str(p))
