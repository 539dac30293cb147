"""Map a Hugging Face ``config.json`` onto a ``Model``, offline.

One adapter per ``model_type`` reads the fields that family uses and says which structural
switches apply; a field the graph cannot represent exactly is an error naming that field.

>>> m = from_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
...                  "num_hidden_layers": 2, "intermediate_size": 172, "vocab_size": 100})
>>> m.sizes["f"], m.arch.tied_embeddings
(172, False)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from derivations.architectures import BERT, GPT, LLAMA, Arch
from derivations.models import Model, ModelError

__all__ = ["ConfigError", "from_config", "load_config", "SUPPORTED_MODEL_TYPES"]


class ConfigError(ModelError):
    """A config that cannot be mapped exactly onto a graph."""


class Fields:
    """Read config fields; a missing required one is a ``ConfigError`` that names it."""

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

    def refuse(self, key: str, unless: Callable[[Any], bool], why: str) -> None:
        if key in self.config and self.config[key] is not None and not unless(self.config[key]):
            raise ConfigError(f"{self.name}: config field {key!r} = {self.config[key]!r} is not supported: {why}")


def _decoder_sizes(c: Fields) -> dict[str, int]:
    sizes = {"h": c.need("hidden_size"), "a": c.need("num_attention_heads"), "l": c.need("num_hidden_layers"),
             "V": c.need("vocab_size"), "f": c.need("intermediate_size")}
    sizes["a_kv"] = c.get("num_key_value_heads", sizes["a"])
    if c.get("head_dim", None) is not None:
        sizes["d_h"] = c.config["head_dim"]
    return sizes


def _window(c: Fields) -> int | None:
    if c.get("use_sliding_window", True) is False:
        return None
    return c.get("sliding_window", None)


def _llama_like(arch: Arch) -> Callable[[Fields], tuple[Arch, dict[str, int], dict[str, Any]]]:
    def adapt(c: Fields) -> tuple[Arch, dict[str, int], dict[str, Any]]:
        c.refuse("num_local_experts", lambda v: v in (0, 1), "mixture-of-experts layers are not modelled")
        c.refuse("hidden_act", lambda v: v in ("silu", "swish", "gelu_pytorch_tanh", "gelu"),
                 "the gated MLP is modelled with silu or gelu")
        attn_bias = bool(c.get("attention_bias", False))
        chosen = replace(arch, tied_embeddings=bool(c.get("tie_word_embeddings", arch.tied_embeddings)),
                         qkv_bias=arch.qkv_bias or attn_bias, out_bias=arch.out_bias or attn_bias,
                         mlp_bias=bool(c.get("mlp_bias", arch.mlp_bias)))
        return chosen, _decoder_sizes(c), {"window": _window(c), "max_positions": c.get("max_position_embeddings", None)}

    return adapt


def _gpt2(c: Fields) -> tuple[Arch, dict[str, int], dict[str, Any]]:
    h = c.need("n_embd", "hidden_size")
    sizes = {"h": h, "a": c.need("n_head", "num_attention_heads"), "l": c.need("n_layer", "num_hidden_layers"),
             "V": c.need("vocab_size"), "n_ctx": c.need("n_positions", "max_position_embeddings"),
             "f": c.get("n_inner", 4 * h)}
    act = c.get("activation_function", "gelu_new")
    mlp = "relu" if act == "relu" else "gelu"
    arch = replace(GPT, mlp=mlp, tied_embeddings=bool(c.get("tie_word_embeddings", True)))
    return arch, sizes, {"max_positions": sizes["n_ctx"]}


def _gpt_neox(c: Fields) -> tuple[Arch, dict[str, int], dict[str, Any]]:
    bias = bool(c.get("attention_bias", True))
    parallel = bool(c.get("use_parallel_residual", True))
    arch = replace(GPT, positions="rotary", tied_embeddings=bool(c.get("tie_word_embeddings", False)),
                   qkv_bias=bias, out_bias=bias, parallel_block=parallel)
    sizes = {"h": c.need("hidden_size"), "a": c.need("num_attention_heads"), "l": c.need("num_hidden_layers"),
             "V": c.need("vocab_size"), "f": c.need("intermediate_size")}
    return arch, sizes, {"max_positions": c.get("max_position_embeddings", None)}


def _bert(c: Fields) -> tuple[Arch, dict[str, int], dict[str, Any]]:
    c.refuse("position_embedding_type", lambda v: v == "absolute", "only absolute positions are modelled")
    sizes = {"h": c.need("hidden_size"), "a": c.need("num_attention_heads"), "l": c.need("num_hidden_layers"),
             "V": c.need("vocab_size"), "f": c.need("intermediate_size"),
             "n_ctx": c.need("max_position_embeddings"), "n_type": c.need("type_vocab_size")}
    return BERT, sizes, {"max_positions": sizes["n_ctx"]}


_QWEN2 = replace(LLAMA, family="qwen2", qkv_bias=True)
_QWEN3 = replace(LLAMA, family="qwen3", qk_norm=True)
_GEMMA = replace(LLAMA, family="gemma", mlp="geglu", tied_embeddings=True)

ADAPTERS: dict[str, Callable[[Fields], tuple[Arch, dict[str, int], dict[str, Any]]]] = {
    "gpt2": _gpt2,
    "llama": _llama_like(LLAMA),
    "mistral": _llama_like(replace(LLAMA, family="mistral")),
    "qwen2": _llama_like(_QWEN2),
    "qwen3": _llama_like(_QWEN3),
    "gemma": _llama_like(_GEMMA),
    "gpt_neox": _gpt_neox,
    "bert": _bert,
}
SUPPORTED_MODEL_TYPES = tuple(ADAPTERS)


def from_config(config: Mapping[str, Any], name: str | None = None, source: str = "") -> Model:
    """Build a ``Model`` from a config dict (the parsed ``config.json``)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{name or 'config'}: expected a JSON object, got {type(config).__name__}")
    label = name or str(config.get("_name_or_path") or config.get("model_type") or "config")
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"{label}: config field 'model_type' is missing; add it to config.json")
    if model_type not in ADAPTERS:
        raise ConfigError(f"{label}: model_type {model_type!r} is not supported; supported: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    fields = Fields(config, label)
    arch, sizes, extra = ADAPTERS[model_type](fields)
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
