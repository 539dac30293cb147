"""Parameter counts equal, to the unit, what transformers instantiates on the meta device."""

from __future__ import annotations

import pytest
import transformers

from memderive.derivations.models.config import from_config
from memderive.derivations.estimate import estimate
from memderive.derivations.models.presets import PRESETS
from tests.hf_meta import count_parameters

BERT_AUTO = transformers.AutoModel  # BertModel (with pooler), as bert-base-uncased is published


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_matches_transformers(name: str) -> None:
    config = transformers.AutoConfig.for_model(**PRESETS[name])
    auto = BERT_AUTO if config.model_type == "bert" else transformers.AutoModelForCausalLM
    assert estimate(name).number("parameters") == count_parameters(config, auto)


# Real configs of each family, varied along the switches families differ in (small sizes keep
# instantiation fast; the mapping is size-independent).
FAMILY_CONFIGS = [
    ("gpt2", dict(n_embd=96, n_head=4, n_layer=3, n_positions=64, vocab_size=500)),
    ("gpt2", dict(n_embd=96, n_head=4, n_layer=2, n_positions=64, vocab_size=500, n_inner=200)),
    ("gpt2", dict(n_embd=96, n_head=4, n_layer=2, n_positions=64, vocab_size=500, tie_word_embeddings=False)),
    ("llama", dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                   intermediate_size=344, vocab_size=1000)),
    ("llama", dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=8, num_hidden_layers=2,
                   intermediate_size=300, vocab_size=1000, tie_word_embeddings=True, attention_bias=True,
                   mlp_bias=True)),
    ("llama", dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=1, head_dim=48,
                   num_hidden_layers=2, intermediate_size=300, vocab_size=1000)),
    ("mistral", dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                     intermediate_size=344, vocab_size=1000, sliding_window=64)),
    ("qwen2", dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                   intermediate_size=344, vocab_size=1000, tie_word_embeddings=True)),
    ("qwen3", dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                   num_hidden_layers=2, intermediate_size=344, vocab_size=1000)),
    ("gemma", dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=1, head_dim=64,
                   num_hidden_layers=2, intermediate_size=344, vocab_size=1000)),
    ("gpt_neox", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, intermediate_size=512,
                      vocab_size=1000)),
    ("gpt_neox", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, intermediate_size=512,
                      vocab_size=1000, use_parallel_residual=False, tie_word_embeddings=True)),
    # Nemotron: LayerNorm1P (weight and bias), relu2 MLP without gate, partial rotary; biases switched on once
    ("nemotron", dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                      intermediate_size=344, vocab_size=1000)),
    ("nemotron", dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=4, head_dim=48,
                      num_hidden_layers=2, intermediate_size=300, vocab_size=1000, attention_bias=True,
                      mlp_bias=True, tie_word_embeddings=True)),
    # Nemotron-H: Mamba-2, attention, MLP and MoE layers (transformers' default four); the legacy pattern string
    # with every bias on and no MoE; a Nemotron 3 Nano-like mix with groups of heads and a wider shared expert
    ("nemotron_h", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=500,
                        intermediate_size=96, mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2,
                        n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                        moe_shared_expert_intermediate_size=48)),
    ("nemotron_h", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4, head_dim=24, vocab_size=500,
                        hybrid_override_pattern="MM*-M-", intermediate_size=80, mamba_num_heads=4, mamba_head_dim=32,
                        ssm_state_size=8, n_groups=1, conv_kernel=3, use_bias=True, use_conv_bias=False,
                        attention_bias=True, mlp_bias=True, tie_word_embeddings=True)),
    ("nemotron_h", dict(hidden_size=96, num_attention_heads=8, num_key_value_heads=2, head_dim=16, vocab_size=500,
                        layers_block_type=["mamba", "moe", "mamba", "attention", "moe"], mamba_num_heads=12,
                        mamba_head_dim=8, ssm_state_size=32, n_groups=4, n_routed_experts=8, num_experts_per_tok=3,
                        moe_intermediate_size=40, moe_shared_expert_intermediate_size=80)),
    # ... with Nemotron 3 Super's LatentMoE: the routed experts in moe_latent_size
    ("nemotron_h", dict(hidden_size=96, num_attention_heads=8, num_key_value_heads=2, head_dim=16, vocab_size=500,
                        layers_block_type=["mamba", "moe", "attention", "moe"], mamba_num_heads=12, mamba_head_dim=8,
                        ssm_state_size=32, n_groups=4, n_routed_experts=8, num_experts_per_tok=3,
                        moe_intermediate_size=40, moe_shared_expert_intermediate_size=80, moe_latent_size=48)),
    ("bert", dict(hidden_size=96, num_attention_heads=4, num_hidden_layers=2, intermediate_size=384,
                  vocab_size=700, max_position_embeddings=128, type_vocab_size=2)),
]


@pytest.mark.parametrize(("model_type", "fields"), FAMILY_CONFIGS,
                         ids=[f"{t}-{i}" for i, (t, _) in enumerate(FAMILY_CONFIGS)])
def test_family_config_matches_transformers(model_type: str, fields: dict) -> None:
    config = transformers.AutoConfig.for_model(model_type, **fields)
    auto = BERT_AUTO if model_type == "bert" else transformers.AutoModelForCausalLM
    model = from_config(config.to_dict())
    assert estimate(model).number("parameters") == count_parameters(config, auto)


def test_transformers_config_object_is_accepted() -> None:
    config = transformers.AutoConfig.for_model("gpt2", **FAMILY_CONFIGS[0][1])
    assert estimate(config).number("parameters") == count_parameters(config)
