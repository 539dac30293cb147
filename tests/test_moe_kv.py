"""KV cache of the MoE and latent-attention families: equal to the storage transformers holds after a
prefill and decode steps; MLA's per-token cache (d_c + d_h^R) l from the DeepSeek-V2 paper."""

from __future__ import annotations

import pytest
import sympy as sp
import transformers

from memderive.derivations.estimate import estimate
from memderive.symbolic.dims_sympy import d_c, d_hR, l
from tests.test_kv_cache import hf_cache_bytes
from tests.test_moe_params import FAMILY_CONFIGS, IDS

# (batch, prompt, new tokens): prefill only; prefill + decode past gpt-oss's window of 8 (configs 12)
STEPS = [(2, 5, 0), (2, 12, 3)]


@pytest.mark.parametrize("steps", STEPS, ids=[f"b{b}-s{s}-n{n}" for b, s, n in STEPS])
@pytest.mark.parametrize(("model_type", "fields"), FAMILY_CONFIGS, ids=IDS)
def test_kv_cache_matches_transformers(model_type: str, fields: dict, steps: tuple[int, int, int]) -> None:
    transformers.logging.set_verbosity_error()
    config = transformers.AutoConfig.for_model(model_type, **fields)
    est = estimate(config, mode="infer", batch=steps[0], seq=steps[1], new_tokens=steps[2])
    assert est.number("kv_cache_bytes") == hf_cache_bytes(config, *steps)


def test_mla_caches_the_latent_and_the_rotary_key() -> None:
    """transformers' DeepseekV3Attention caches kv_nope (b, 1, s, d_c) and k_rot (b, 1, s, d_h^R): with d_c = 16,
    d_h^R = 8, 3 layers, bf16, b = 2, s + n = 15: 2 * 15 * 3 * (16 + 8) * 2 = 4,320 bytes."""
    config = transformers.AutoConfig.for_model("deepseek_v3", **FAMILY_CONFIGS[8][1])
    est = estimate(config, mode="infer", batch=2, seq=12, new_tokens=3)
    assert est.number("kv_cache_bytes") == 4_320
    paths = [t.path for t in est.quantity("kv_cache_bytes").breakdown.terms]
    assert paths == ["kv_cache/kv-latent/attn/latent", "kv_cache/k-rope/attn/latent"]


def test_deepseek_v2_per_token_cache_from_the_paper() -> None:
    """DeepSeek-V2 (arXiv:2405.04434, Table 1 and §3.1.2): MLA caches (d_c + d_h^R) l = (512 + 64) * 60 = 34,560
    elements per token, 69,120 bytes in bf16; the closed form is 2 (d_c + d_h^R) l bytes."""
    est = estimate("deepseek-v2", mode="infer", batch=1, seq=1)
    assert est.number("kv_cache_bytes_per_token") == (512 + 64) * 60 * 2 == 69_120
    assert sp.expand(est.quantity("kv_cache_bytes_per_token").closed_form() - 2 * (d_c + d_hR) * l) == 0
    # the same model with multi-head attention would cache 2 a d_h l = 2 * 128 * 128 * 60 elements per token
    assert 2 * 128 * 128 * 60 // ((512 + 64) * 60) == 56


def test_deepseek_v3_per_token_cache() -> None:
    """DeepSeek-V3: (512 + 64) * 61 layers * 2 bytes = 70,272 bytes per token."""
    assert estimate("deepseek-v3", mode="infer", batch=1, seq=1).number("kv_cache_bytes_per_token") == 70_272


def test_mla_latent_is_replicated_over_tensor_parallel_ranks() -> None:
    """The latent is shared by all heads: every tensor-parallel rank keeps it whole (as vLLM does)."""
    one = estimate("deepseek-v3", mode="infer", batch=1, seq=1, new_tokens=0)
    eight = estimate("deepseek-v3", mode="infer", batch=1, seq=1, tp=8)
    assert eight.number("kv_cache_bytes_per_token") == one.number("kv_cache_bytes_per_token")


def test_gpt_oss_20b_alternating_window() -> None:
    """gpt-oss-20b: 12 of 24 layers slide over 128 tokens; 8 KV heads of 64, bf16: 2 * 8 * 64 * 2 = 2,048 bytes per
    layer per token. At s + n = 4096: 2048 * (12 * 4096 + 12 * 128) = 103,809,024 bytes."""
    est = estimate("gpt-oss-20b", mode="infer", batch=1, seq=4095, new_tokens=1)
    assert (est.model.window, est.model.window_layers) == (128, 12)
    assert est.number("kv_cache_bytes") == 103_809_024


def test_weights_follow_the_dense_and_moe_layers() -> None:
    """bf16 weights are 2 bytes per parameter, with the dense-MLP and MoE layers each counted once."""
    est = estimate("deepseek-v3", mode="infer", batch=1, seq=1)
    assert est.number("weight_bytes") == 2 * estimate("deepseek-v3").number("parameters")


def test_int4_quantizes_the_experts() -> None:
    """Mixtral int4, group 128: each expert matrix of 4096 x 14336 (or 14336 x 4096) holds 0.5 byte per weight and
    one fp16 scale per 128 weights; 32 layers * 8 experts * 3 matrices."""
    est = estimate("mixtral-8x7b", mode="infer", batch=1, seq=1, weight_dtype="int4")
    experts = sum(value for path, value in est.quantity("weight_bytes").term_ints(est.values)
                  if path.endswith("layer/moe/experts"))
    per_matrix = 4096 * 14336 // 2 + 4096 * 14336 // 128 * 2
    assert experts == 32 * 8 * 3 * per_matrix
