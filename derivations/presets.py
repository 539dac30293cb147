"""Bundled models, as the Hugging Face config fields of their public ``config.json``.

Presets go through the same loader as user configs (``derivations.config``), so there is one
mapping from config to graph. Sizes: REFERENCES.md §7 (papers and model cards).
"""

from __future__ import annotations

from typing import Any

from derivations.config import from_config
from derivations.models import Model, ModelError

__all__ = ["PRESETS", "preset", "preset_names"]


def _gpt2(n_embd: int, n_head: int, n_layer: int, n_positions: int = 1024) -> dict[str, Any]:
    return {"model_type": "gpt2", "n_embd": n_embd, "n_head": n_head, "n_layer": n_layer,
            "n_positions": n_positions, "vocab_size": 50257, "activation_function": "gelu_new"}


def _llama(h: int, a: int, a_kv: int, l: int, f: int, vocab: int, ctx: int, **extra: Any) -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": h, "num_attention_heads": a, "num_key_value_heads": a_kv,
            "num_hidden_layers": l, "intermediate_size": f, "vocab_size": vocab, "max_position_embeddings": ctx,
            "tie_word_embeddings": False, "hidden_act": "silu", **extra}


PRESETS: dict[str, dict[str, Any]] = {
    # Radford et al. 2019; HF gpt2 configs
    "gpt2": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 16, 24),
    "gpt2-large": _gpt2(1280, 20, 36),
    "gpt2-xl": _gpt2(1600, 25, 48),
    # Brown et al. 2020, Table 2.1 (GPT-2 architecture and BPE vocabulary, n_ctx 2048)
    "gpt3-175b": _gpt2(12288, 96, 96, n_positions=2048),
    # Touvron et al. 2023 (LLaMA-2), Meta model cards
    "llama-2-7b": _llama(4096, 32, 32, 32, 11008, 32000, 4096),
    "llama-2-13b": _llama(5120, 40, 40, 40, 13824, 32000, 4096),
    "llama-2-70b": _llama(8192, 64, 8, 80, 28672, 32000, 4096),
    # Llama 3 model card (rope_theta 5e5)
    "llama-3-8b": _llama(4096, 32, 8, 32, 14336, 128256, 8192),
    "llama-3-70b": _llama(8192, 64, 8, 80, 28672, 128256, 8192),
    # Jiang et al. 2023 (Mistral 7B v0.1): sliding window 4096
    "mistral-7b": {**_llama(4096, 32, 8, 32, 14336, 32000, 32768), "model_type": "mistral",
                   "sliding_window": 4096},
    # Devlin et al. 2019, bert-base-uncased (BertModel with pooler)
    "bert-base": {"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
                  "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
                  "type_vocab_size": 2},
}


def preset_names() -> tuple[str, ...]:
    return tuple(PRESETS)


def preset(name: str) -> Model:
    """A bundled model by name, e.g. ``preset("llama-2-7b")``."""
    key = name.lower()
    if key not in PRESETS:
        raise ModelError(f"unknown model {name!r}; bundled models: {', '.join(PRESETS)} (or give a config.json path)")
    return from_config(PRESETS[key], name=key, source="bundled preset")
