"""Config families beyond GPT-2/LLaMA/BERT: counts equal, to the unit, what transformers builds on meta.

Each config is checked twice: as ``to_dict()`` (every field) and as ``to_diff_dict()`` (what
``save_pretrained`` writes: fields equal to the config class's defaults are dropped), so the
adapters' defaults are those of transformers. Sizes are small; the mapping is size-independent.
"""

from __future__ import annotations

import pytest
import transformers

from memderive.derivations.models.config import ConfigError, from_config
from memderive.derivations.estimate import estimate
from memderive.symbolic.derive import parameters
from tests.hf_meta import count_parameters

LLAMA_SIZES = dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, intermediate_size=300,
                   vocab_size=500, pad_token_id=0)

FAMILY_CONFIGS = [
    # GPT-J / CodeGen: one shared LayerNorm, parallel block, no attention biases, lm_head bias
    ("gptj", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, rotary_dim=8)),
    ("gptj", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, rotary_dim=8, n_inner=200,
                  tie_word_embeddings=True, resid_pdrop=0.1)),
    ("codegen", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, rotary_dim=8)),
    # OPT: positions offset by 2, ReLU; post-norm (do_layer_norm_before false) has no final norm
    ("opt", dict(hidden_size=96, num_attention_heads=4, num_hidden_layers=2, ffn_dim=200, vocab_size=500,
                 max_position_embeddings=64)),
    ("opt", dict(hidden_size=96, num_attention_heads=4, num_hidden_layers=2, ffn_dim=200, vocab_size=500,
                 max_position_embeddings=64, do_layer_norm_before=False, enable_bias=False,
                 tie_word_embeddings=False)),
    ("opt", dict(hidden_size=96, num_attention_heads=4, num_hidden_layers=2, ffn_dim=200, vocab_size=500,
                 max_position_embeddings=64, _remove_final_layer_norm=True, word_embed_proj_dim=96)),
    # Phi-3: fused qkv and gate_up (same parameters as separate ones), no biases
    ("phi3", dict(LLAMA_SIZES, num_key_value_heads=2)),
    ("phi3", dict(LLAMA_SIZES, head_dim=24, tie_word_embeddings=True, sliding_window=64)),
    # Phi: parallel block, one LayerNorm, partial rotary, biases, lm_head bias
    ("phi", dict(LLAMA_SIZES, num_key_value_heads=4)),
    ("phi", dict(LLAMA_SIZES, tie_word_embeddings=True, partial_rotary_factor=0.4)),
    # Falcon: multi-query parallel (7B), grouped KV with 2 or 1 norms (40B), sequential with biases (RW)
    ("falcon", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, vocab_size=500)),
    ("falcon", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, vocab_size=500,
                    new_decoder_architecture=True, num_kv_heads=2)),
    ("falcon", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, vocab_size=500,
                    new_decoder_architecture=True, num_kv_heads=2, num_ln_in_parallel_attn=1, bias=True)),
    ("falcon", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, vocab_size=500,
                    multi_query=False, parallel_attn=False, bias=True, alibi=True, ffn_hidden_size=300,
                    tie_word_embeddings=False)),
    # StableLM: LayerNorm with bias + SwiGLU; optional qkv bias and parallel residual
    ("stablelm", dict(LLAMA_SIZES, num_key_value_heads=2)),
    ("stablelm", dict(LLAMA_SIZES, num_key_value_heads=8, use_qkv_bias=True, use_parallel_residual=True,
                      tie_word_embeddings=True)),
    # StarCoder2: LayerNorm, plain GELU MLP, biases (use_bias), GQA; default a_kv is 2
    ("starcoder2", dict(LLAMA_SIZES, num_key_value_heads=2, sliding_window=64)),
    ("starcoder2", dict(LLAMA_SIZES, num_key_value_heads=4, use_bias=False, tie_word_embeddings=False)),
    # OLMo 2: norms on sublayer outputs only, q/k RMSNorm over all heads
    ("olmo2", dict(LLAMA_SIZES, num_key_value_heads=2)),
    ("olmo2", dict(LLAMA_SIZES, attention_bias=True, tie_word_embeddings=True)),
    # Gemma 2 / 3: norms before and after both sublayers; Gemma 3 adds per-head q/k norms
    ("gemma2", dict(LLAMA_SIZES, num_attention_heads=4, num_key_value_heads=4, head_dim=48)),
    ("gemma2", dict(LLAMA_SIZES, num_attention_heads=4, num_key_value_heads=2, head_dim=256,
                    attention_bias=True, tie_word_embeddings=False)),
    ("gemma3_text", dict(LLAMA_SIZES, num_attention_heads=4, num_key_value_heads=2, head_dim=48)),
    ("gemma3_text", dict(LLAMA_SIZES, num_attention_heads=8, num_key_value_heads=4, head_dim=256)),
    # BLOOM: ALiBi, embedding LayerNorm, biases; MPT: ALiBi, no biases at all
    ("bloom", dict(hidden_size=96, n_head=4, n_layer=2, vocab_size=500)),
    ("bloom", dict(hidden_size=96, n_head=4, n_layer=2, vocab_size=500, tie_word_embeddings=False)),
    ("mpt", dict(d_model=96, n_heads=4, n_layers=2, vocab_size=500, max_seq_len=64)),
    ("mpt", dict(d_model=96, n_heads=4, n_layers=2, vocab_size=500, max_seq_len=64, tie_word_embeddings=False)),
    # GPT-Neo (no q/k/v bias) and GPT-BigCode (multi-query) are GPT-2 shaped
    ("gpt_neo", dict(hidden_size=96, num_heads=4, num_layers=2, vocab_size=500, max_position_embeddings=64,
                     attention_types=[[["global", "local"], 1]])),
    ("gpt_bigcode", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, n_positions=64)),
    ("gpt_bigcode", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, n_positions=64, multi_query=False,
                         n_inner=200)),
    # Cohere: one bias-free LayerNorm, parallel block; Granite: LLaMA with multipliers and biases
    ("cohere", dict(LLAMA_SIZES, num_key_value_heads=2)),
    ("granite", dict(LLAMA_SIZES, num_key_value_heads=2, attention_bias=True, mlp_bias=True)),
    # Bias fields a family's modeling code does not read are ignored, as transformers does
    ("mistral", dict(LLAMA_SIZES, num_key_value_heads=8, attention_bias=True, mlp_bias=True)),
    ("qwen3", dict(LLAMA_SIZES, num_key_value_heads=2, mlp_bias=True)),
    ("gemma", dict(LLAMA_SIZES, num_key_value_heads=2, mlp_bias=True)),
]


def _config(model_type: str, fields: dict) -> transformers.PretrainedConfig:
    transformers.logging.set_verbosity_error()  # small vocabularies make it warn about bos/eos ids
    return transformers.AutoConfig.for_model(model_type, **fields)


@pytest.mark.parametrize(("model_type", "fields"), FAMILY_CONFIGS,
                         ids=[f"{t}-{i}" for i, (t, _) in enumerate(FAMILY_CONFIGS)])
def test_family_matches_transformers(model_type: str, fields: dict) -> None:
    config = _config(model_type, fields)
    expected = count_parameters(config)
    for written in (config.to_dict(), {**config.to_diff_dict(), "model_type": model_type}):
        assert estimate(from_config(written)).number("parameters") == expected


def _layer_params(model_type: str, **fields: object) -> dict[str, object]:
    graph = from_config(_config(model_type, fields).to_dict()).graph()
    return {t.path: t.expr for t in parameters(graph, blocks=["layer"], per_repeat=True).terms}


def test_sandwich_and_output_norms_are_graph_nodes() -> None:
    gemma2 = _layer_params("gemma2", **LLAMA_SIZES, num_key_value_heads=2, head_dim=32)
    assert [p for p in gemma2 if "norm" in p] == ["layer/norm1", "layer/attn_out_norm", "layer/norm2",
                                                  "layer/mlp_out_norm"]
    olmo2 = _layer_params("olmo2", **LLAMA_SIZES, num_key_value_heads=2)
    assert [p for p in olmo2 if "norm" in p] == ["layer/attn/q_norm", "layer/attn/k_norm", "layer/attn_out_norm",
                                                 "layer/mlp_out_norm"]
    assert str(olmo2["layer/attn/q_norm"]) == "a*d_h" and str(olmo2["layer/attn/k_norm"]) == "a_kv*d_h"


@pytest.mark.parametrize(("model_type", "fields", "window", "sliding"), [
    ("mistral", dict(LLAMA_SIZES, num_key_value_heads=8), 4096, 2),  # MistralConfig's default window
    ("mistral", dict(LLAMA_SIZES, num_key_value_heads=8, sliding_window=None), None, 0),
    ("starcoder2", dict(LLAMA_SIZES, sliding_window=64), 64, 2),
    ("phi3", dict(LLAMA_SIZES, sliding_window=64), 64, 2),
    ("qwen2", dict(LLAMA_SIZES, num_key_value_heads=8, sliding_window=64), None, 0),  # use_sliding_window off
    ("qwen2", dict(LLAMA_SIZES, num_key_value_heads=8, use_sliding_window=True, sliding_window=64,
                   max_window_layers=0), 64, 2),
    ("qwen2", dict(LLAMA_SIZES, num_key_value_heads=8, use_sliding_window=True, sliding_window=64,
                   max_window_layers=1), 64, 1),  # layers from max_window_layers on slide
    ("qwen3", dict(LLAMA_SIZES, num_hidden_layers=5, num_key_value_heads=8, use_sliding_window=True,
                   sliding_window=64, max_window_layers=3), 64, 2),
    ("qwen2", dict(LLAMA_SIZES, num_hidden_layers=4, num_key_value_heads=8, use_sliding_window=True,
                   sliding_window=64, layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                                   "sliding_attention"]), 64, 3),  # the list, not the rule
    ("gemma2", dict(LLAMA_SIZES, head_dim=32, sliding_window=64), 64, 1),  # sliding, full, ...
    ("gemma2", dict(LLAMA_SIZES, head_dim=32, sliding_window=None), None, 0),
    ("gemma3_text", dict(LLAMA_SIZES, head_dim=32, num_hidden_layers=7), 4096, 6),  # 5 local : 1 global
    ("gemma3_text", dict(LLAMA_SIZES, head_dim=32, num_hidden_layers=7, sliding_window_pattern=3), 4096, 5),
])
def test_sliding_window_follows_transformers(model_type: str, fields: dict, window: int | None,
                                             sliding: int) -> None:
    """The window and how many layers slide are those of transformers' layer_types (a mix is also a note)."""
    config = _config(model_type, fields)
    for written in (config.to_dict(), {**config.to_diff_dict(), "model_type": model_type}):
        model = from_config(written)
        assert (model.window, model.windowed_layers) == (window, sliding)
        mixed = 0 < sliding < model.sizes["l"]
        assert model.window_layers == (sliding if mixed else None)
        assert bool(model.notes) == mixed and (not mixed or f"{sliding} of" in model.notes[0])
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and getattr(config, "sliding_window", None) is not None:
        assert layer_types.count("sliding_attention") == sliding


@pytest.mark.parametrize("layer_types", [["sliding_attention"], ["sliding_attention", "chunked_attention"],
                                         "sliding_attention"])
def test_layer_types_the_graph_cannot_follow_are_refused(layer_types: object) -> None:
    config = {"model_type": "gemma2", **LLAMA_SIZES, "head_dim": 32, "layer_types": layer_types}
    with pytest.raises(ConfigError, match="layer_types"):
        from_config(config)


def test_model_notes_are_shown() -> None:
    """What a config says beyond sizes (here: which layers slide) reaches the text report and the writeups."""
    from memderive.documents.text import estimate_text
    from memderive.documents.writeup import estimate_document

    config = _config("gemma2", dict(LLAMA_SIZES, head_dim=32, sliding_window=64))
    est = estimate(config.to_dict(), mode="infer", batch=1, seq=8)
    note = "1 of 2 layers (l_w) attend to a sliding window of 64 tokens, the others to the whole context"
    assert est.model.notes == (note,)
    lines = estimate_text(est).splitlines()
    assert "sliding window: w=64 tokens in l_w=1 of l=2 layers" in lines and f"note: {note}" in lines
    assert f"- note: {note}" in estimate_document(est, "md").splitlines()
    assert r"\item note: 1 of 2 layers (l\_w) attend" in estimate_document(est, "latex")


def test_opt_positions_have_two_extra_rows() -> None:
    opt = from_config(_config("opt", FAMILY_CONFIGS[3][1]).to_dict())
    assert (opt.sizes["n_ctx"], opt.max_positions) == (66, 64)


@pytest.mark.parametrize(("model_type", "fields", "dropout", "off"), [
    ("gptj", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500), False, ()),  # rates 0: identity
    # OPTConfig's dropout 0.1 on both residual branches, attention_dropout 0; OPT drops out no embedding
    ("opt", dict(hidden_size=96, num_attention_heads=4, num_hidden_layers=2, ffn_dim=200, vocab_size=500,
                 max_position_embeddings=64), True, ("embed", "attention")),
    ("phi", dict(LLAMA_SIZES, resid_pdrop=0.1), True, ("embed", "attention")),  # phi-2: residual dropout only
    ("stablelm", dict(LLAMA_SIZES, num_key_value_heads=8, hidden_dropout=0.1), True,
     ("embed", "attention", "attn_out")),  # StableLM's hidden_dropout: the MLP output only
    ("llama", dict(LLAMA_SIZES, attention_dropout=0.1), True, ("embed", "attn_out", "mlp_out")),
    ("gpt_bigcode", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, n_positions=64), True, ()),
])
def test_dropout_follows_the_configured_rates(model_type: str, fields: dict, dropout: bool, off: tuple) -> None:
    """Dropout layers where a rate is non-zero, at the places that rate's modeling code drops out."""
    config = _config(model_type, fields)
    for written in (config.to_dict(), {**config.to_diff_dict(), "model_type": model_type}):
        model = from_config(written)
        assert (model.arch.dropout, model.arch.no_dropout_at) == (dropout, off)


def test_mpt_dropout_is_read_from_attn_config() -> None:
    mpt = {"model_type": "mpt", "d_model": 96, "n_heads": 4, "n_layers": 2, "vocab_size": 500}
    assert not from_config(mpt).arch.dropout
    assert from_config({**mpt, "attn_config": {"attn_pdrop": 0.1}}).arch.dropout


GPTJ = {"model_type": "gptj", "n_embd": 96, "n_head": 4, "n_layer": 2, "vocab_size": 500}
FALCON = {"model_type": "falcon", "hidden_size": 128, "num_attention_heads": 8, "num_hidden_layers": 2,
          "vocab_size": 500}
LLAMA_LIKE = {"hidden_size": 128, "num_attention_heads": 8, "num_hidden_layers": 2, "intermediate_size": 300,
              "vocab_size": 500}


@pytest.mark.parametrize(("config", "fragment"), [
    ({**LLAMA_LIKE, "model_type": "olmo"}, "parameter-free LayerNorm"),
    ({"model_type": "gemma3", "text_config": LLAMA_LIKE}, "vision_config"),
    ({**LLAMA_LIKE, "model_type": "opt", "ffn_dim": 512, "max_position_embeddings": 64, "word_embed_proj_dim": 64},
     "'word_embed_proj_dim' = 64"),
    ({**LLAMA_LIKE, "model_type": "opt", "ffn_dim": 512, "max_position_embeddings": 64,
      "layer_norm_elementwise_affine": False}, "'layer_norm_elementwise_affine'"),
    ({**LLAMA_LIKE, "model_type": "phi", "qk_layernorm": True}, "'qk_layernorm'"),
    ({**LLAMA_LIKE, "model_type": "stablelm", "num_key_value_heads": 8, "qk_layernorm": True}, "'qk_layernorm'"),
    ({**LLAMA_LIKE, "model_type": "stablelm"}, "not divisible by 32 key/value heads"),
    ({**LLAMA_LIKE, "model_type": "stablelm", "num_key_value_heads": 8, "hidden_size": 100}, "'hidden_size' = 100"),
    ({**LLAMA_LIKE, "model_type": "starcoder2", "hidden_act": "silu"}, "'hidden_act' = 'silu'"),
    ({**GPTJ, "model_type": "gpt2", "n_positions": 64, "activation_function": "silu"}, "'activation_function'"),
    ({**LLAMA_LIKE, "model_type": "cohere", "use_qk_norm": True}, "'use_qk_norm'"),
    ({**LLAMA_LIKE, "model_type": "llama", "num_key_value_heads": 3}, "not divisible by 3 key/value heads"),
    ({**GPTJ, "n_embd": 100, "n_head": 8}, "'n_embd' = 100 is not divisible by n_head = 8"),
    ({**GPTJ, "n_head": "4"}, "'n_head' = '4' must be a positive integer"),
    ({**GPTJ, "resid_pdrop": 1.5}, "'resid_pdrop' = 1.5 must be a dropout rate"),
    ({**FALCON, "new_decoder_architecture": True, "parallel_attn": False}, "'parallel_attn' = False"),
    ({**FALCON, "new_decoder_architecture": True, "num_kv_heads": 3}, "not divisible by 3 key/value heads"),
    ({**FALCON, "num_kv_heads": 2}, "'num_kv_heads' = 2"),
    ({**FALCON, "hidden_dropout": 0.1}, "'hidden_dropout' = 0.1"),
    ({**FALCON, "bias": "yes"}, "'bias' = 'yes' must be true or false"),
    ({**FALCON, "num_ln_in_parallel_attn": 2}, "'num_ln_in_parallel_attn' = 2"),
    ({"model_type": "mpt", "d_model": 96, "n_heads": 4, "n_layers": 2, "vocab_size": 500, "expansion_ratio": 2},
     "'expansion_ratio' = 2"),
    ({"model_type": "mpt", "d_model": 96, "n_heads": 4, "n_layers": 2, "vocab_size": 500,
      "attn_config": {"alibi": False}}, "'alibi' = False"),
    ({"model_type": "gpt_bigcode", "n_embd": 96, "n_head": 4, "n_layer": 2, "vocab_size": 500, "n_positions": 64,
      "add_cross_attention": True}, "'add_cross_attention'"),
])
def test_unrepresentable_config_names_the_field(config: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_config(config, name="m")
    message = str(err.value)
    assert fragment in message and "\n" not in message


GPT2_CONFIG = {"model_type": "gpt2", "n_embd": 96, "n_head": 4, "n_layer": 2, "vocab_size": 500, "n_positions": 64}
NEOX_CONFIG = {**LLAMA_LIKE, "model_type": "gpt_neox"}


@pytest.mark.parametrize(("config", "key"), [
    # bool("false") is True: the string read as tied embeddings / biases / a parallel block
    ({**GPT2_CONFIG, "tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ({**NEOX_CONFIG, "tie_word_embeddings": "false"}, "tie_word_embeddings"),
    ({**NEOX_CONFIG, "attention_bias": "false"}, "attention_bias"),
    ({**NEOX_CONFIG, "use_parallel_residual": 0}, "use_parallel_residual"),
])
def test_switches_must_be_booleans(config: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=f"'{key}' = .* must be true or false"):
        from_config(config, name="m")


def test_boolean_switches_are_read() -> None:
    """GPT-2 ties by default; false unties (lm_head gets its own V x h = 500 x 96 = 48,000 parameters)."""
    tied, untied = from_config(GPT2_CONFIG), from_config({**GPT2_CONFIG, "tie_word_embeddings": False})
    assert tied.arch.tied_embeddings and not untied.arch.tied_embeddings
    neox = from_config({**NEOX_CONFIG, "attention_bias": False, "use_parallel_residual": False})
    assert not (neox.arch.qkv_bias or neox.arch.out_bias or neox.arch.parallel_block)
    count = [int(parameters(estimate(m).graph).total.subs(estimate(m).values)) for m in (tied, untied)]
    assert count[1] - count[0] == 500 * 96
