"""Output a new user misreads (issue 20, items 9-10): each number says what it counts, and counts it exactly.

* gpt-oss's active parameters follow its model card (embeddings not counted, the unembedding counted), and its
  MXFP4 expert weights (``--weight-dtype mxfp4``) weigh what the checkpoint stores;
* DeepSeek-V3's parameters per layer are exact per layer kind (dense and MoE), not an average;
* under ZeRO-3 the per-GPU parameter line says that each GPU stores 1/d of them;
* ``dropout on`` is not echoed for a model without dropout layers;
* breakdown bars keep a linear axis (stacked segments on a log axis are distorted).
"""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.models.config import from_config

# --- 9. gpt-oss ----------------------------------------------------------------------------------------------------

# openai-2025-gpt-oss, Table 1: gpt-oss-20b 20.91B total, 3.61B active; gpt-oss-120b 116.83B, 5.13B; checkpoint
# 12.8 GiB and 60.8 GiB ("MoE weights quantized to MXFP4"; the rest in bf16)
GPT_OSS_120B = {"model_type": "gpt_oss", "hidden_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8,
                "head_dim": 64, "num_hidden_layers": 36, "intermediate_size": 2880, "vocab_size": 201088,
                "num_local_experts": 128, "num_experts_per_tok": 4}


def test_gpt_oss_active_parameters_are_the_model_cards() -> None:
    est = estimate("gpt-oss-20b")
    # by hand: total 20,914,757,184 (Keras Hub's gpt_oss_20b_en preset lists the same "params"); one expert of a
    # layer is gate_up (2f x h + 2f) and down (h x f + h) = 3*2880*2880 + 3*2880 = 24,891,840; a token skips 28 of
    # 32 in each of 24 layers, and the model card leaves out the 201,088 x 2,880 input embedding
    assert est.number("parameters") == 20_914_757_184
    assert est.number("active_parameters") == 20_914_757_184 - 28 * 24 * 24_891_840 - 201_088 * 2_880
    assert round(est.number("active_parameters") / 1e9, 2) == 3.61
    assert "embedding" in est.quantity("active_parameters").title
    big = estimate(from_config(GPT_OSS_120B))
    assert (round(big.number("parameters") / 1e9, 2), round(big.number("active_parameters") / 1e9, 2)) == (116.83, 5.13)


def test_other_model_cards_count_the_embedding() -> None:
    # mistral-2024-mixtral: 12.9B active, embedding included (12.75B without it)
    assert round(estimate("mixtral-8x7b").number("active_parameters") / 1e8) == 129


def test_mxfp4_expert_weights_weigh_what_the_checkpoint_stores() -> None:
    est = estimate("gpt-oss-20b", mode="infer", batch=1, seq=8, weight_dtype="mxfp4")
    # by hand: the experts' weight matrices, 3 * E * f * h * l = 19,110,297,600 values, at 4 bits = 9,555,148,800 B,
    # plus one 8-bit scale per 32 of them along the input = 597,196,800 B; every other parameter (the experts'
    # biases, attention, router, norms, embeddings) in bf16: 2 * (20,914,757,184 - 19,110,297,600)
    experts = 3 * 32 * 2880 * 2880 * 24
    assert est.number("weight_bytes") == experts // 2 + experts // 32 + 2 * (20_914_757_184 - experts)
    assert round(est.number("weight_bytes") / 2**30, 1) == 12.8  # the card's 12.8 GiB checkpoint
    big = estimate(from_config(GPT_OSS_120B), mode="infer", batch=1, seq=8, weight_dtype="mxfp4")
    assert round(big.number("weight_bytes") / 2**30, 1) == 60.8
    assert any("MXFP4" in note for note in est.quantity("weight_bytes").assumptions)


def test_mxfp4_on_a_model_without_experts_is_refused() -> None:
    from memderive.derivations.options import OptionsError

    with pytest.raises(OptionsError, match=r"^--weight-dtype mxfp4 .*routed experts.*llama-2-7b has none"):
        estimate("llama-2-7b", mode="infer", batch=1, seq=8, weight_dtype="mxfp4").number("weight_bytes")


# --- 10. per layer, per GPU, dropout, plots ----------------------------------------------------------------------

S = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96, vocab_size=300,
         num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
         first_k_dense_replace=1, n_group=2, topk_group=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
         qk_nope_head_dim=12, v_head_dim=10)


@pytest.mark.reference
def test_deepseek_parameters_per_layer_are_exact_per_kind() -> None:
    import torch
    import transformers

    config = transformers.DeepseekV3Config(**S)
    with torch.device("meta"):
        layers = transformers.AutoModelForCausalLM.from_config(config).model.layers
    dense, moe = (sum(p.numel() for p in layers[i].parameters()) for i in (0, 1))
    est = estimate(from_config({"model_type": "deepseek_v3", **S}))
    assert (est.number("parameters_per_dense_layer"), est.number("parameters_per_layer")) == (dense, moe)
    assert "MoE layer" in est.quantity("parameters_per_layer").title
    assert estimate("llama-2-7b").quantity("parameters_per_layer").title == "Parameters per layer"


def test_zero_3_says_each_gpu_stores_a_shard() -> None:
    est = estimate("llama-2-7b", mode="train", batch=1, seq=128, dp=8, zero=3)
    assert "1/d" in est.quantity("parameters_per_gpu").title
    # the weights in the model states: 2 bytes for each of 6,738,415,616 / 8 = 842,301,952 parameters
    weights = dict((path, v) for path, _, v in est.quantity("model_state_bytes").term_values(est.values))
    assert weights["model_states/weights"] == 2 * 842_301_952
    plain = estimate("llama-2-7b", mode="train", batch=1, seq=128, dp=8, zero=1)
    assert plain.quantity("parameters_per_gpu").title == "Parameters held by one GPU"


def test_dropout_is_echoed_only_where_the_model_has_it() -> None:
    from memderive.documents.text import inputs_text

    llama = inputs_text(estimate("llama-2-7b", mode="train", batch=1, seq=128))
    assert "dropout on" not in llama and "dropout none (llama has no dropout layers)" in llama
    assert "dropout on" in inputs_text(estimate("gpt2", mode="train", batch=1, seq=128))


def test_breakdown_bars_keep_a_linear_axis() -> None:
    from memderive.figures.plots import breakdown_data, draw

    # GPT-3 175B unsharded needs ~2.9 TiB per GPU, with TP 8 and ZeRO-3 about 50 GiB: more than 10x apart
    data = breakdown_data(estimate("gpt3-175b", mode="train", batch=1, seq=2048))
    assert data.totals[0] > 50 * data.totals[-1]
    fig = draw(data)
    stacked, shares = fig.axes[0], fig.axes[1]
    assert stacked.get_yscale() == shares.get_yscale() == "linear"
    heights = sorted(round(p.get_height() * 2**30) for p in stacked.patches)
    assert heights == sorted(round(v) for row in data.values for v in row)  # each segment its bytes, in GiB
    for i in range(len(data.totals)):  # the second panel: each bar's parts as shares of its total
        bar = [p.get_height() for p in shares.patches if abs(p.get_x() + p.get_width() / 2 - i) < 1e-9]
        assert sum(bar) == pytest.approx(100)
