"""Each family's defaults, as its transformers config class declares them (transformers 5.24).

``save_pretrained`` drops fields equal to these, so a field missing from a ``config.json`` means
this value, never one guessed from another family (OPT's ``ffn_dim`` is 3072, not 4 * hidden).
``None``: the class derives the value from other fields (``head_dim`` = hidden / heads), which the
adapter does. Only fields the adapters read are listed; ``tests/test_config_defaults.py`` holds
the table to the config classes and the counts to transformers'.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FAMILY_ALIASES", "FAMILY_DEFAULTS"]

FAMILY_DEFAULTS: dict[str, dict[str, Any]] = {
    "gpt2": {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
        "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
        "add_cross_attention": False, "tie_word_embeddings": True},
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings":
        2048, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "head_dim": None},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None, "hidden_act": "silu",
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "sliding_window": 4096,
        "attention_dropout": 0.0},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu", "max_position_embeddings":
        32768, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096,
        "max_window_layers": 28, "layer_types": None, "attention_dropout": 0.0},
    "qwen3": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "hidden_act": "silu",
        "max_position_embeddings": 32768, "tie_word_embeddings": False, "attention_bias": False,
        "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 28, "layer_types": None,
        "attention_dropout": 0.0},
    "gemma": {"vocab_size": 256000, "hidden_size": 3072, "intermediate_size": 24576, "num_hidden_layers": 28,
        "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
        "max_position_embeddings": 8192, "tie_word_embeddings": True, "attention_bias": False, "attention_dropout":
        0.0},
    "gemma2": {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation":
        "gelu_pytorch_tanh", "max_position_embeddings": 8192, "tie_word_embeddings": True, "attention_bias": False,
        "attention_dropout": 0.0, "sliding_window": 4096, "layer_types": None, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0},
    "gemma3_text": {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "hidden_activation":
        "gelu_pytorch_tanh", "max_position_embeddings": 131072, "tie_word_embeddings": True, "attention_bias":
        False, "attention_dropout": 0.0, "sliding_window": 4096, "layer_types": None},
    "phi3": {"vocab_size": 32064, "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "attention_dropout": 0.0, "hidden_act": "silu", "max_position_embeddings": 4096, "tie_word_embeddings":
        False, "sliding_window": None},
    "olmo2": {"vocab_size": 50304, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings":
        2048, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0},
    "granite": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings":
        2048, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False},
    "nemotron": {"vocab_size": 256000, "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 32,
        "num_attention_heads": 48, "head_dim": None, "num_key_value_heads": None, "hidden_act": "relu2",
        "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False},
    "cohere": {"vocab_size": 256000, "hidden_size": 8192, "intermediate_size": 22528, "num_hidden_layers": 40,
        "num_attention_heads": 64, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings":
        8192, "tie_word_embeddings": True, "attention_bias": False, "attention_dropout": 0.0, "use_qk_norm": False},
    "stablelm": {"vocab_size": 50304, "intermediate_size": 6912, "hidden_size": 2560, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 32, "hidden_act": "silu", "max_position_embeddings": 4096,
        "tie_word_embeddings": False, "use_qkv_bias": False, "qk_layernorm": False, "use_parallel_residual": False,
        "hidden_dropout": 0.0, "attention_dropout": 0.0},
    "starcoder2": {"vocab_size": 49152, "hidden_size": 3072, "intermediate_size": 12288, "num_hidden_layers": 30,
        "num_attention_heads": 24, "num_key_value_heads": 2, "hidden_act": "gelu_pytorch_tanh",
        "max_position_embeddings": 4096, "sliding_window": None, "attention_dropout": 0.0, "residual_dropout": 0.0,
        "embedding_dropout": 0.0, "use_bias": True, "tie_word_embeddings": True},
    "phi": {"vocab_size": 51200, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": None, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
        "attention_dropout": 0.0, "hidden_act": "gelu_new", "max_position_embeddings": 2048, "tie_word_embeddings":
        False, "qk_layernorm": False},
    "gptj": {"vocab_size": 50400, "n_positions": 2048, "n_embd": 4096, "n_layer": 28, "n_head": 16, "n_inner": None,
        "activation_function": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "tie_word_embeddings": False},
    "codegen": {"vocab_size": 50400, "n_positions": 2048, "n_ctx": 2048, "n_embd": 4096, "n_layer": 28, "n_head":
        16, "n_inner": None, "activation_function": "gelu_new", "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop":
        0.0, "tie_word_embeddings": False},
    "opt": {"vocab_size": 50272, "hidden_size": 768, "num_hidden_layers": 12, "ffn_dim": 3072,
        "max_position_embeddings": 2048, "do_layer_norm_before": True, "_remove_final_layer_norm": False,
        "word_embed_proj_dim": None, "dropout": 0.1, "attention_dropout": 0.0, "num_attention_heads": 12,
        "activation_function": "relu", "enable_bias": True, "layer_norm_elementwise_affine": True,
        "tie_word_embeddings": True},
    "falcon": {"vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71,
        "num_ln_in_parallel_attn": None, "hidden_dropout": 0.0, "attention_dropout": 0.0, "num_kv_heads": None,
        "alibi": False, "new_decoder_architecture": False, "multi_query": True, "parallel_attn": True, "bias":
        False, "max_position_embeddings": 2048, "ffn_hidden_size": None, "activation": "gelu",
        "tie_word_embeddings": True},
    "bloom": {"vocab_size": 250880, "hidden_size": 64, "n_layer": 2, "n_head": 8, "hidden_dropout": 0.0,
        "attention_dropout": 0.0, "tie_word_embeddings": True},
    "mpt": {"d_model": 2048, "n_heads": 16, "n_layers": 24, "expansion_ratio": 4, "max_seq_len": 2048, "vocab_size":
        50368, "resid_pdrop": 0.0, "attn_config": None, "no_bias": True, "norm_type": "low_precision_layernorm",
        "tie_word_embeddings": True},
    "gpt_neo": {"vocab_size": 50257, "max_position_embeddings": 2048, "hidden_size": 2048, "num_layers": 24,
        "num_heads": 16, "intermediate_size": None, "activation_function": "gelu_new", "resid_dropout": 0.0,
        "embed_dropout": 0.0, "attention_dropout": 0.0, "tie_word_embeddings": True},
    "gpt_bigcode": {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner":
        None, "activation_function": "gelu_pytorch_tanh", "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
        "multi_query": True, "add_cross_attention": False, "tie_word_embeddings": True},
    "gpt_neox": {"vocab_size": 50432, "hidden_size": 6144, "num_hidden_layers": 44, "num_attention_heads": 64,
        "intermediate_size": 24576, "hidden_act": "gelu", "attention_dropout": 0.0, "hidden_dropout": 0.0,
        "max_position_embeddings": 2048, "tie_word_embeddings": False, "use_parallel_residual": True,
        "attention_bias": True},
    "bert": {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
        "intermediate_size": 3072, "hidden_act": "gelu", "max_position_embeddings": 512, "type_vocab_size": 2,
        "add_cross_attention": False, "tie_word_embeddings": True},
    "mixtral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": None, "hidden_act": "silu",
        "max_position_embeddings": 131072, "tie_word_embeddings": False, "sliding_window": None,
        "attention_dropout": 0.0, "num_experts_per_tok": 2, "num_local_experts": 8},
    "qwen2_moe": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
        "num_attention_heads": 16, "num_key_value_heads": 16, "hidden_act": "silu", "max_position_embeddings":
        32768, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": 4096,
        "max_window_layers": 28, "attention_dropout": 0.0, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60, "mlp_only_layers":
        None, "qkv_bias": True, "layer_types": None},
    "qwen3_moe": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
        "num_attention_heads": 32, "num_key_value_heads": 4, "hidden_act": "silu", "max_position_embeddings": 32768,
        "tie_word_embeddings": False, "attention_bias": False, "use_sliding_window": False, "sliding_window": 4096,
        "attention_dropout": 0.0, "decoder_sparse_step": 1, "moe_intermediate_size": 768, "num_experts_per_tok": 8,
        "num_experts": 128, "mlp_only_layers": None},
    "olmoe": {"vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
        "num_attention_heads": 16, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings":
        4096, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0,
        "num_experts_per_tok": 8, "num_experts": 64},
    "deepseek_v2": {"vocab_size": 102400, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings":
        2048, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False,
        "head_dim": None, "first_k_dense_replace": 0, "kv_lora_rank": 512, "q_lora_rank": 1536, "n_routed_experts":
        64, "n_shared_experts": 2, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "num_experts_per_tok": None, "moe_intermediate_size": 1407},
    "deepseek_v3": {"vocab_size": 129280, "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size":
        2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts":
        1, "n_routed_experts": 256, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim":
        128, "qk_nope_head_dim": 128, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "hidden_act": "silu",
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "attention_bias": False, "attention_dropout":
        0.0},
    "gpt_oss": {"num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088, "hidden_size": 2880,
        "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
        "sliding_window": 128, "tie_word_embeddings": False, "hidden_act": "silu", "max_position_embeddings":
        131072, "attention_dropout": 0.0, "num_experts_per_tok": 4, "layer_types": None, "attention_bias": True},
    "phimoe": {"vocab_size": 32064, "hidden_size": 4096, "intermediate_size": 6400, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_act": "silu", "max_position_embeddings": 131072,
        "tie_word_embeddings": False, "sliding_window": None, "attention_dropout": 0.0, "num_experts_per_tok": 2,
        "num_local_experts": 16, "attention_bias": False, "lm_head_bias": False},
    "granitemoe": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": None, "hidden_act": "silu", "max_position_embeddings": 2048,
        "tie_word_embeddings": False, "attention_bias": False, "attention_dropout": 0.0, "num_local_experts": 8,
        "num_experts_per_tok": 2},
    "nemotron_h": {"vocab_size": 131072, "hidden_size": 4096, "layers_block_type": None, "tie_word_embeddings": False,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 4096,
        "attention_bias": False, "attention_dropout": 0.0, "intermediate_size": 21504, "mlp_hidden_act": "relu2",
        "mlp_bias": False, "ssm_state_size": 128, "mamba_num_heads": 128, "mamba_head_dim": 64,
        "mamba_hidden_act": "silu", "n_groups": 8, "conv_kernel": 4, "use_conv_bias": True, "chunk_size": 128,
        "n_routed_experts": 8, "moe_intermediate_size": 7688, "moe_shared_expert_intermediate_size": 7688,
        "moe_latent_size": None, "num_experts_per_tok": 2, "n_group": 1, "norm_topk_prob": True,
        "num_nextn_predict_layers": 0, "use_bias": False, "hidden_dropout": 0.0},
}


_GPT_NAMES = {"hidden_size": "n_embd", "max_position_embeddings": "n_positions", "num_attention_heads": "n_head",
              "num_hidden_layers": "n_layer"}
#: Second names of a field, as each family's config class reads them (transformers 5.24): ``{alias: field}``.
#: They are the class's ``attribute_map`` (and Falcon's and BLOOM's ``n_embed`` keyword, popped in
#: ``__post_init__``); given beside the field, the alias is applied after it, so its value is the one the
#: model is built with (``tests/test_config_aliases.py`` measures that for every entry). A name absent here is
#: not read at all: Qwen2-MoE's ``num_local_experts``, Falcon's ``n_head``.
FAMILY_ALIASES: dict[str, dict[str, str]] = {
    **dict.fromkeys(("gpt2", "gptj", "codegen", "gpt_bigcode"), _GPT_NAMES),
    "falcon": {"n_embed": "hidden_size"},
    "bloom": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "n_embed": "hidden_size"},
    "mpt": {"num_attention_heads": "n_heads", "hidden_size": "d_model", "num_hidden_layers": "n_layers"},
    "gpt_neo": {"num_attention_heads": "num_heads", "num_hidden_layers": "num_layers"},
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_local_experts": "num_experts"},  # Qwen3MoeConfig declares num_experts, maps it to the other
    "olmoe": {"num_local_experts": "num_experts"},
    "deepseek_v2": {"num_experts": "n_routed_experts"},
    "deepseek_v3": {"num_local_experts": "n_routed_experts", "num_nextn_predict_layers": "num_mtp_layers"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    # NemotronHConfig: attribute_map, and the legacy names __post_init__ pops over the field
    "nemotron_h": {"layer_types": "layers_block_type", "num_local_experts": "n_routed_experts",
                   "mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel", "mamba_chunk_size": "chunk_size",
                   "mamba_conv_bias": "use_conv_bias"},
}
