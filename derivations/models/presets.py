"""Bundled models, as the Hugging Face config fields of their public ``config.json``.

Presets go through the same loader as user configs (``derivations.models.config``), so there is one
mapping from config to graph. Sizes: each preset's paper or model card, ``SOURCES`` (keys of
``derivations.references``), and the ``config.json`` its fields are copied from, named beside it.
"""

from __future__ import annotations

from typing import Any

from memderive.derivations.models.config import from_config
from memderive.derivations.models.model import Model, ModelError
from memderive.symbolic.formula import Citation

__all__ = ["PRESETS", "SOURCES", "preset", "preset_names"]


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
    # Qwen2 technical report (Yang et al. 2024), Qwen/Qwen2-7B config.json
    "qwen2-7b": {**_llama(3584, 28, 4, 28, 18944, 152064, 131072), "model_type": "qwen2",
                 "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28},
    # Gemma Team 2024 (arXiv:2403.08295), google/gemma-7b config.json (head_dim 256, tied embeddings)
    "gemma-7b": {**_llama(3072, 16, 16, 28, 24576, 256000, 8192), "model_type": "gemma", "head_dim": 256,
                 "hidden_act": "gelu", "tie_word_embeddings": True},
    # Gemma Team 2024 (arXiv:2408.00118), google/gemma-2-9b config.json
    "gemma-2-9b": {**_llama(3584, 16, 8, 42, 14336, 256000, 8192), "model_type": "gemma2", "head_dim": 256,
                   "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
                   "sliding_window": 4096, "tie_word_embeddings": True},
    # Abdin et al. 2024 (arXiv:2404.14219), microsoft/Phi-3-mini-4k-instruct config.json
    "phi-3-mini": {**_llama(3072, 32, 32, 32, 8192, 32064, 4096), "model_type": "phi3", "sliding_window": 2047},
    # microsoft/phi-2 config.json (parallel block, partial rotary 0.4, lm_head bias)
    "phi-2": {"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 32,
              "num_hidden_layers": 32, "intermediate_size": 10240, "vocab_size": 51200,
              "max_position_embeddings": 2048, "hidden_act": "gelu_new", "partial_rotary_factor": 0.4,
              "resid_pdrop": 0.1, "tie_word_embeddings": False},
    # Almazrouei et al. 2023 (arXiv:2311.16867), tiiuae/falcon-7b config.json (multi-query, parallel block)
    "falcon-7b": {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
                  "vocab_size": 65024, "multi_query": True, "parallel_attn": True, "new_decoder_architecture": False,
                  "alibi": False, "bias": False},
    # Zhang et al. 2022 (arXiv:2205.01068), facebook/opt-1.3b config.json
    "opt-1.3b": {"model_type": "opt", "hidden_size": 2048, "num_attention_heads": 32, "num_hidden_layers": 24,
                 "ffn_dim": 8192, "vocab_size": 50272, "max_position_embeddings": 2048, "word_embed_proj_dim": 2048,
                 "do_layer_norm_before": True, "activation_function": "relu", "dropout": 0.1},
    # BigScience 2022 (arXiv:2211.05100), bigscience/bloom-560m config.json
    "bloom-560m": {"model_type": "bloom", "n_embed": 1024, "n_head": 16, "n_layer": 24, "vocab_size": 250880},
    # Mixture of experts (published totals and active counts: each paper below, tests/test_moe_params.py).
    # Jiang et al. 2024 (Mixtral of Experts, arXiv:2401.04088, Table 1); mistralai/Mixtral-8x7B-v0.1 config.json
    # (= transformers' MixtralConfig defaults): 8 experts of width 14336, 2 per token
    "mixtral-8x7b": {**_llama(4096, 32, 8, 32, 14336, 32000, 32768), "model_type": "mixtral", "num_local_experts": 8,
                     "num_experts_per_tok": 2, "sliding_window": None},
    # DeepSeek-AI 2024 (DeepSeek-V2, arXiv:2405.04434 §3.1.2); deepseek-ai/DeepSeek-V2 config.json: MLA (d_c 512,
    # d_c' 1536, d_h^R 64), first layer dense, 160 routed + 2 shared experts of width 1536, 6 per token
    "deepseek-v2": {"model_type": "deepseek_v2", "hidden_size": 5120, "num_attention_heads": 128,
                    "num_hidden_layers": 60, "intermediate_size": 12288, "moe_intermediate_size": 1536,
                    "vocab_size": 102400, "max_position_embeddings": 163840, "n_routed_experts": 160,
                    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
                    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                    "v_head_dim": 128, "topk_method": "group_limited_greedy", "n_group": 8, "topk_group": 3,
                    "tie_word_embeddings": False},
    # DeepSeek-AI 2024 (DeepSeek-V3, arXiv:2412.19437 §4.2); deepseek-ai/DeepSeek-V3 config.json (= transformers'
    # DeepseekV3Config defaults): MLA, 3 dense layers, 256 routed + 1 shared expert of width 2048, 8 per token;
    # the multi-token-prediction module (num_nextn_predict_layers) is not part of the model transformers builds
    # (--mtp-layers 1 adds it to a training step as Megatron-Core runs it; models.mtp)
    "deepseek-v3": {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
                    "num_key_value_heads": 128, "num_hidden_layers": 61, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "vocab_size": 129280, "max_position_embeddings": 163840,
                    "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
                    "first_k_dense_replace": 3, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64,
                    "qk_nope_head_dim": 128, "v_head_dim": 128, "n_group": 8, "topk_group": 4,
                    "tie_word_embeddings": False, "num_nextn_predict_layers": 1},
    # Qwen Team 2025 (Qwen3 technical report, arXiv:2505.09388, Table 2); Qwen/Qwen3-30B-A3B config.json
    "qwen3-30b-a3b": {**_llama(2048, 32, 4, 48, 6144, 151936, 40960), "model_type": "qwen3_moe", "head_dim": 128,
                      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
                      "decoder_sparse_step": 1, "mlp_only_layers": [], "use_sliding_window": False,
                      "norm_topk_prob": True},
    # OpenAI 2025 (gpt-oss model card, arXiv:2508.10925); openai/gpt-oss-20b config.json (NVIDIA Megatron Bridge
    # docs list the same sizes): 24 layers, 32 experts, 4 per token, sliding window 128 on alternate layers
    "gpt-oss-20b": {**_llama(2880, 64, 8, 24, 2880, 201088, 131072), "model_type": "gpt_oss", "head_dim": 64,
                    "num_local_experts": 32, "num_experts_per_tok": 4, "sliding_window": 128,
                    "attention_bias": True},
    # NVIDIA Nemotron 3 Nano 30B-A3B, the Mamba-2 hybrid: Megatron-Bridge's Nemotron3NanoProvider in transformers'
    # NemotronHConfig names (23 Mamba-2, 23 MoE and 6 attention layers; vocabulary 131,072, the tokenizer's)
    "nemotron-3-nano-30b-a3b": {"model_type": "nemotron_h", "vocab_size": 131072, "hidden_size": 2688,
                                "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
                                "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
                                "mamba_num_heads": 64, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
                                "conv_kernel": 4, "chunk_size": 128, "n_routed_experts": 128, "num_experts_per_tok": 6,
                                "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712,
                                "intermediate_size": 1856, "max_position_embeddings": 262144},
    # Devlin et al. 2019, bert-base-uncased (BertModel with pooler)
    "bert-base": {"model_type": "bert", "hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12,
                  "intermediate_size": 3072, "vocab_size": 30522, "max_position_embeddings": 512,
                  "type_vocab_size": 2},
}

#: Where each preset's sizes are published: the paper (or model card) and, as locus, the table and the Hugging Face
#: ``config.json`` the fields are copied from.
SOURCES: dict[str, Citation] = {
    **{name: Citation("radford-2019", f"Table 2; HF {name} config.json")
       for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl")},
    "gpt3-175b": Citation("brown-2020", "Table 2.1"),
    **{name: Citation("touvron-2023-llama2", f"meta-llama/Llama-2-{name[8:]}-hf config.json")
       for name in ("llama-2-7b", "llama-2-13b", "llama-2-70b")},
    "llama-3-8b": Citation("dubey-2024", "meta-llama/Meta-Llama-3-8B config.json"),
    "llama-3-70b": Citation("dubey-2024", "meta-llama/Meta-Llama-3-70B config.json"),
    "mistral-7b": Citation("jiang-2023-mistral", "mistralai/Mistral-7B-v0.1 config.json"),
    "qwen2-7b": Citation("yang-2024-qwen2", "Qwen/Qwen2-7B config.json"),
    "gemma-7b": Citation("gemma-2024", "google/gemma-7b config.json"),
    "gemma-2-9b": Citation("gemma-2024-gemma2", "google/gemma-2-9b config.json"),
    "phi-3-mini": Citation("abdin-2024", "microsoft/Phi-3-mini-4k-instruct config.json"),
    "phi-2": Citation("microsoft-phi-2", "config.json"),
    "falcon-7b": Citation("almazrouei-2023", "tiiuae/falcon-7b config.json"),
    "opt-1.3b": Citation("zhang-2022-opt", "facebook/opt-1.3b config.json"),
    "bloom-560m": Citation("bigscience-2022", "bigscience/bloom-560m config.json"),
    "mixtral-8x7b": Citation("jiang-2024-mixtral", "Table 1; mistralai/Mixtral-8x7B-v0.1 config.json"),
    "deepseek-v2": Citation("deepseek-2024-v2", "§3.1.2; deepseek-ai/DeepSeek-V2 config.json"),
    "deepseek-v3": Citation("deepseek-2024-v3", "§4.2; deepseek-ai/DeepSeek-V3 config.json"),
    "qwen3-30b-a3b": Citation("qwen-2025-qwen3", "Table 2; Qwen/Qwen3-30B-A3B config.json"),
    "gpt-oss-20b": Citation("openai-2025-gpt-oss", "openai/gpt-oss-20b config.json"),
    "bert-base": Citation("devlin-2019", "bert-base-uncased config.json"),
    "nemotron-3-nano-30b-a3b": Citation("megatron-bridge-nemotron-h", "Nemotron3NanoProvider L153-172"),
}


def preset_names() -> tuple[str, ...]:
    return tuple(PRESETS)


def preset(name: str) -> Model:
    """A bundled model by name, e.g. ``preset("llama-2-7b")``."""
    key = name.lower()
    if key not in PRESETS:
        raise ModelError(f"unknown model {name!r}; bundled models: {', '.join(PRESETS)} (or give a config.json path; "
                         "any transformers model_type, e.g. t5, with pip install 'memderive[traced]')")
    return from_config(PRESETS[key], name=key, source="bundled preset")
