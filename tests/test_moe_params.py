"""Mixture-of-experts and latent-attention families: total and active parameters equal, to the unit, what
transformers instantiates on the meta device; the published totals of the bundled MoE models.

Active parameters are counted from the instantiated modules: the total less, in every MoE layer, the
parameters of the E - k routed experts a token does not use (each ``*Experts`` module holds its E experts'
weights as (E, ...) tensors, so one expert is 1/E of it); for gpt-oss also less the input embedding, as its
model card counts (openai-2025-gpt-oss, Table 1).
"""

from __future__ import annotations

import pytest
import torch
import transformers

from memderive.derivations.estimate import estimate
from memderive.derivations.models.config import ConfigError, from_config

S = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96, vocab_size=300)
MLA = dict(kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)

FAMILY_CONFIGS = [
    ("mixtral", dict(S, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2)),
    ("mixtral", dict(S, num_key_value_heads=4, num_local_experts=3, num_experts_per_tok=1, head_dim=24,
                     tie_word_embeddings=True, sliding_window=16)),
    # Qwen2-MoE: shared expert with a sigmoid gate; every second layer sparse; mlp_only_layers dense
    ("qwen2_moe", dict(S, num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                       shared_expert_intermediate_size=80, decoder_sparse_step=2)),
    ("qwen2_moe", dict(S, num_key_value_heads=4, num_experts=5, num_experts_per_tok=3, moe_intermediate_size=40,
                       shared_expert_intermediate_size=48, mlp_only_layers=[2], qkv_bias=False)),
    # Qwen3-MoE: per-head q/k norms, head_dim apart from h/a
    ("qwen3_moe", dict(S, num_key_value_heads=2, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
                       mlp_only_layers=[0], head_dim=24)),
    ("qwen3_moe", dict(S, num_key_value_heads=1, num_experts=8, num_experts_per_tok=8, moe_intermediate_size=16,
                       attention_bias=True)),
    # OLMoE: q/k RMSNorm over all heads
    ("olmoe", dict(S, num_key_value_heads=2, num_experts=6, num_experts_per_tok=2)),
    ("olmoe", dict(S, num_experts=4, num_experts_per_tok=1, attention_bias=True, tie_word_embeddings=True)),
    # DeepSeek-V3: MLA with a low-rank query, first dense layers, one shared expert, group-limited routing
    ("deepseek_v3", dict(S, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                         first_k_dense_replace=1, n_group=2, topk_group=1, **MLA)),
    ("deepseek_v3", dict(S, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                         first_k_dense_replace=0, n_shared_experts=2, n_group=1, topk_group=1, attention_bias=True,
                         **MLA)),
    # DeepSeek-V2: MLA, here without the low-rank query (V2-Lite), two shared experts
    ("deepseek_v2", dict(S, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
                         **dict(MLA, q_lora_rank=None))),
    ("deepseek_v2", dict(S, n_routed_experts=6, num_experts_per_tok=3, moe_intermediate_size=24, n_shared_experts=1,
                         first_k_dense_replace=2, **MLA)),
    # gpt-oss: attention sinks, biases on attention, router and experts; alternating sliding windows
    ("gpt_oss", dict(S, num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                     sliding_window=8)),
    ("gpt_oss", dict(S, num_key_value_heads=1, head_dim=8, num_local_experts=5, num_experts_per_tok=1,
                     attention_bias=False)),
    # Phi-3.5-MoE: LayerNorm with bias, attention and LM-head biases; Granite MoE: LLaMA with routed experts
    ("phimoe", dict(S, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, attention_bias=True,
                    lm_head_bias=True)),
    ("granitemoe", dict(S, num_key_value_heads=2, num_local_experts=6, num_experts_per_tok=2, attention_bias=True)),
]
IDS = [f"{t}-{i}" for i, (t, _) in enumerate(FAMILY_CONFIGS)]


def _config(model_type: str, fields: dict) -> transformers.PretrainedConfig:
    transformers.logging.set_verbosity_error()
    return transformers.AutoConfig.for_model(model_type, **fields)


def hf_total_and_active(config: transformers.PretrainedConfig) -> tuple[int, int]:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    k = config.num_experts_per_tok
    unused = 0
    for module in model.modules():
        if type(module).__name__.endswith("Experts"):
            held = sum(p.numel() for p in module.parameters())
            assert held % module.num_experts == 0
            unused += held // module.num_experts * (module.num_experts - k)
    if config.model_type == "gpt_oss" and not config.tie_word_embeddings:  # its model card: embeddings not active
        unused += model.get_input_embeddings().weight.numel()
    return total, total - unused


@pytest.mark.parametrize(("model_type", "fields"), FAMILY_CONFIGS, ids=IDS)
def test_total_and_active_match_transformers(model_type: str, fields: dict) -> None:
    config = _config(model_type, fields)
    total, active = hf_total_and_active(config)
    assert active < total or config.num_experts_per_tok == getattr(config, "num_experts", None)  # k = E: all used
    for written in (config.to_dict(), {**config.to_diff_dict(), "model_type": model_type}):
        est = estimate(from_config(written))
        assert (est.number("parameters"), est.number("active_parameters")) == (total, active)


@pytest.mark.parametrize(("name", "total", "digits", "active"), [
    ("mixtral-8x7b", 46.7, 1, 12.9),  # jiang-2024-mixtral: 46.7B total, 12.9B active
    ("deepseek-v3", 671, 0, 37),  # deepseek-2024-v3: 671B / 37B (the 14B MTP module not included)
    ("qwen3-30b-a3b", 30.5, 1, 3.3),  # qwen-2025-qwen3: 30.5B / 3.3B
    ("deepseek-v2", 236, 0, 21),  # deepseek-2024-v2, abstract: 236B total, 21B activated
])
def test_published_totals(name: str, total: float, digits: int, active: float) -> None:
    """Totals round to the published figure. Active counts (embeddings and head included) are published
    rounded (Mixtral 12.88B -> 12.9B) or cut (DeepSeek-V3 37.55B -> 37B, Qwen3 3.35B -> 3.3B): within 2%."""
    est = estimate(name)
    assert round(est.number("parameters") / 1e9, digits) == total
    assert abs(est.number("active_parameters") / 1e9 / active - 1) < 0.02


def test_gpt_oss_20b_model_card() -> None:
    """openai-2025-gpt-oss (the model card): 20.91B total, 3.61B active counted without the input embedding
    (V h = 201,088 * 2,880); the unembedding counts. memderive's active count is the card's (issue 20)."""
    est = estimate("gpt-oss-20b")
    assert round(est.number("parameters") / 1e9, 2) == 20.91
    assert round(est.number("active_parameters") / 1e9, 2) == 3.61


def test_mixtral_by_hand() -> None:
    """Mixtral 8x7B, each of 32 layers: attention 4096 * (4096 + 2 * 1024) + 4096 * 4096 = 41,943,040; 8 experts
    of 3 * 4096 * 14336 = 176,160,768; router 8 * 4096; two norms 2 * 4096. Embeddings and head 2 * 32000 * 4096,
    final norm 4096. Active: 2 of the 8 experts."""
    layer = 41_943_040 + 8 * 176_160_768 + 8 * 4096 + 2 * 4096
    outside = 2 * 32000 * 4096 + 4096
    est = estimate("mixtral-8x7b")
    assert est.number("parameters") == 32 * layer + outside == 46_702_792_704
    assert est.number("active_parameters") == 32 * (layer - 6 * 176_160_768) + outside


def test_active_closed_form_keeps_k_of_e() -> None:
    """Total and active differ by (E - k) experts of 3 h f_e in every one of the l layers."""
    from memderive.symbolic.dims_sympy import E, f_e, h, k, l

    est = estimate("mixtral-8x7b")
    gap = est.quantity("parameters").closed_form() - est.quantity("active_parameters").closed_form()
    assert (gap - 3 * (E - k) * f_e * h * l).expand() == 0


def test_dense_layers_are_a_share_of_the_layer_block() -> None:
    """DeepSeek-V3: l_d = 3 dense MLPs (gate h f) and l - l_d = 58 MoE layers of E experts (3 h f_e each)."""
    from memderive.symbolic.dims import E, f, f_e, h, l, l_d

    est = estimate("deepseek-v3")
    terms = {t.path: t.expr for t in est.quantity("parameters").breakdown.terms}
    assert terms["layer/mlp/gate"] - l_d * f * h == 0
    assert terms["layer/moe/experts"] - (l - l_d) * 3 * E * f_e * h == 0
    assert (est.values[l], est.values[l_d]) == (61, 3)


@pytest.mark.parametrize(("config", "fragment"), [
    ({"model_type": "mixtral", **S, "num_key_value_heads": 2, "num_local_experts": 2, "num_experts_per_tok": 3}, "'num_experts_per_tok' = 3"),
    ({"model_type": "deepseek_v2", **S}, "'num_experts_per_tok' missing"),  # with 'n_routed_experts' (issue 37)
    ({"model_type": "qwen2_moe", **S, "num_key_value_heads": 2, "mlp_only_layers": "0"}, "'mlp_only_layers'"),
    ({"model_type": "qwen3_moe", **S, "num_key_value_heads": 2, "num_experts": 0}, "'num_experts' = 0"),
    ({"model_type": "deepseek_v3", **S, "kv_lora_rank": -1}, "'kv_lora_rank' = -1"),
    ({"model_type": "gpt_oss", **S, "num_key_value_heads": 2, "attention_bias": "yes"}, "'attention_bias' = 'yes'"),
    ({"model_type": "deepseek_v2", **S, "num_experts_per_tok": 2, "mlp_bias": True}, "'mlp_bias' = True"),
])
def test_bad_moe_configs_name_the_field(config: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_config(config, name="m")
    assert fragment in str(err.value) and "\n" not in str(err.value)
