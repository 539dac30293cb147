"""Mamba 2 and Bamba (hand-written state space and hybrid graphs): parameters against transformers' own
models built on the meta device, and the inference state against the cache object after a prefill and one
decode step on CPU. Every expected number comes from transformers here, never from memderive."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import transformers

from memderive.derivations.models.ssm import SSM_PRESETS, ssm_model
from memderive.symbolic.dims import b, n, s

TINY_MAMBA2 = {"model_type": "mamba2", "hidden_size": 32, "num_heads": 8, "head_dim": 8, "state_size": 16,
               "n_groups": 2, "num_hidden_layers": 2, "vocab_size": 100, "chunk_size": 8}
MAMBA2_CONFIGS = {
    "tiny": TINY_MAMBA2,
    "tiny-tied-biases": {**TINY_MAMBA2, "tie_word_embeddings": True, "use_bias": True, "use_conv_bias": False,
                         "conv_kernel": 3, "n_groups": 1},
    "codestral-7b-like": SSM_PRESETS["mamba-codestral-7b"],
    "mamba2-2.7b": SSM_PRESETS["mamba2-2.7b"],
}
TINY_BAMBA = {"model_type": "bamba", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 48,
              "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "attn_layer_indices": [1],
              "mamba_n_heads": 8, "mamba_n_groups": 2, "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2,
              "mamba_chunk_size": 8}
BAMBA_CONFIGS = {
    "tiny": TINY_BAMBA,
    "tiny-two-attention-tied": {**TINY_BAMBA, "attn_layer_indices": [0, 3], "tie_word_embeddings": True,
                                "num_key_value_heads": 4, "mamba_proj_bias": True},
    # BambaConfig's defaults (9B-like: 32 layers, hidden 4096) with attention at 9, 18, 27
    "9b-like": {"model_type": "bamba", "attn_layer_indices": [9, 18, 27], "vocab_size": 128256,
                "mamba_d_state": 128, "mamba_d_head": 64},
}
CLASSES = {"mamba2": (transformers.Mamba2Config, transformers.Mamba2ForCausalLM),
           "bamba": (transformers.BambaConfig, transformers.BambaForCausalLM)}


def _hf(config: dict):
    config_class, model_class = CLASSES[config["model_type"]]
    return config_class(**{k: v for k, v in config.items() if k != "model_type"}), model_class


def _meta_parameters(config: dict) -> int:
    cfg, model_class = _hf(config)
    with torch.device("meta"):
        return sum(p.numel() for p in model_class(cfg).parameters())


@pytest.mark.parametrize("config", [*MAMBA2_CONFIGS.values(), *BAMBA_CONFIGS.values()],
                         ids=[*(f"mamba2-{k}" for k in MAMBA2_CONFIGS), *(f"bamba-{k}" for k in BAMBA_CONFIGS)])
def test_parameters_equal_transformers_meta_build(config) -> None:
    model = ssm_model(config)
    assert model.parameters().total.evaluate(model.values()) == _meta_parameters(config)


def _cache_bytes(config: dict, batch: int, prompt: int, dtype: torch.dtype) -> int:
    """Every tensor the cache object holds after a prefill of ``prompt`` tokens and one decode step."""
    cfg, model_class = _hf(config)
    torch.manual_seed(0)
    model = model_class(cfg).to(dtype).eval()
    ids = torch.randint(0, config["vocab_size"], (batch, prompt))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
        cache = model(ids[:, :1], past_key_values=cache, use_cache=True).past_key_values
    total = 0
    for layer in cache.layers:
        for value in vars(layer).values():
            tensors = value.values() if isinstance(value, dict) else [value]
            total += sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
    return total


@pytest.mark.parametrize("config", [TINY_MAMBA2, TINY_BAMBA, BAMBA_CONFIGS["tiny-two-attention-tied"]],
                         ids=["mamba2", "bamba", "bamba-two-attention"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_state_equals_the_cache_after_prefill_and_one_decode_step(config, dtype) -> None:
    model = ssm_model(config)
    name = {torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    values = {**model.values(), b: 2, s: 5, n: 1}  # batch 2, a prompt of 5 tokens, one decode step
    assert model.state(name).total.evaluate(values) == _cache_bytes(config, 2, 5, dtype)


def test_tiny_mamba2_state_by_hand() -> None:
    # conv_dim = d_in + 2 n_g d_st = 64 + 2*2*16 = 128; per layer: conv 2*128*4*2 B = 2,048, ssm 2*8*8*16*4 B = 8,192,
    # counter 8 B; two layers: 2 * 10,248 = 20,496
    model = ssm_model(TINY_MAMBA2)
    assert model.state("bf16").total.evaluate({**model.values(), b: 2, s: 5, n: 1}) == 20_496


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.cli", *args], capture_output=True, text=True, timeout=120)
