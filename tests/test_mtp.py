"""Megatron-Core's multi-token-prediction layers (``--mtp-layers``, ``derivations.models.mtp``).

megatron-core is not importable in this venv (``python -c "import megatron.core"``: ModuleNotFoundError), so the
MTP layer's parameters are checked against a hand count of Megatron-LM's MultiTokenPredictionLayer
(multi_token_prediction.py L1157-1247) over transformers' own DeepSeek-V3 layer sizes.
"""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate, stage_derivations
from memderive.derivations.models.config import from_config
from memderive.derivations.option_table import symbol_values
from memderive.derivations.options import Options, OptionsError

# A small DeepSeek-V3 (tests/test_truthful_output.py's): h 64, 4 heads, 3 layers (the first dense), V 300.
S = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96, vocab_size=300,
         num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
         first_k_dense_replace=1, n_group=2, topk_group=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
         qk_nope_head_dim=12, v_head_dim=10)
MODEL = from_config({"model_type": "deepseek_v3", **S}, name="tiny-dsv3")
# One MoE layer, by hand (transformers' DeepseekV3DecoderLayer; no biases, the correction bias a buffer):
#   input_layernorm 64; q_a 64*24 = 1,536; q_a_layernorm 24; q_b 24*4*(12+8) = 1,920; kv_a 64*(16+8) = 1,536;
#   kv_a_layernorm 16; kv_b 16*4*(12+10) = 1,408; o_proj 4*10*64 = 2,560; post_attention_layernorm 64;
#   router 8*64 = 512; experts 8*3*64*32 = 49,152; one shared expert 3*64*32 = 6,144  -> 64,936.
MOE_LAYER = 64 + 1536 + 24 + 1920 + 1536 + 16 + 1408 + 2560 + 64 + 512 + 49152 + 6144
# One MTP layer: enorm 64 + hnorm 64 + eh_proj 2*64*64 = 8,192 (no bias) + final_layernorm 64, and its
# transformer layer, a MoE layer (the model's last layer's kind)  -> 73,320.
MTP_LAYER = 64 + 64 + 2 * 64 * 64 + 64 + MOE_LAYER
TRAIN = dict(mode="train", batch=1, seq=16)


def test_one_mtp_layer_adds_its_hand_counted_parameters() -> None:
    assert MOE_LAYER == 64_936 and MTP_LAYER == 73_320  # the arithmetic above
    assert estimate(MODEL, Options(**TRAIN)).number("parameters_per_layer") == MOE_LAYER
    plain, mtp = (estimate(MODEL, Options(**TRAIN, mtp_layers=n)).number("parameters") for n in (0, 1))
    assert mtp - plain == MTP_LAYER
    two = estimate(MODEL, Options(**TRAIN, mtp_layers=2)).number("parameters")
    assert two - plain == 2 * MTP_LAYER
    # transformers builds no MTP weights: the parameter count of --mode params does not move
    assert estimate(MODEL).number("parameters") == plain


def test_mtp_saves_activations_and_runs_flops() -> None:
    """Model FLOPs of one MTP layer, b 1 s 16, by hand: the matmul weights a token multiplies, q_a 1,536 + q_b 1,920
    + kv_a 1,536 + kv_b 1,408 + o 2,560 + router 512 + 2 of 8 experts 2*6,144 + shared 6,144 + eh_proj 8,192 + the
    output layer 300*64 = 19,200 -> 55,296, times 2 (multiply-add) x 3 (forward, two backward) x 16 tokens =
    5,308,416; attention over the full 16 x 16 (memderive's count, ``ops.attention``): q k^T 2*4*16*16*(12+8) =
    40,960 and P v 2*4*16*16*10 = 20,480, times 3 -> 184,320; 5,492,736 in all."""
    plain, mtp = (estimate(MODEL, Options(**TRAIN, mtp_layers=n)) for n in (0, 1))
    assert mtp.number("model_flops") - plain.number("model_flops") == 6 * 16 * 55_296 + 3 * (40_960 + 20_480)
    assert mtp.number("activation_bytes") > plain.number("activation_bytes")
    # the MTP loss's logits: b s V fp32 log-softmax, as the head's (4 * 16 * 300 bytes)
    terms = dict((p, v) for p, _, v in mtp.quantity("activation_bytes").term_values(mtp.values))
    assert terms["mtp/loss"] - terms["head/loss"] == 0 and terms["mtp/loss"] >= 4 * 16 * 300


def test_the_notes_cite_megatrons_mtp_layer_where_there_is_one() -> None:
    """The graph's assumptions (each printed as an ``assumes:`` line) name the MTP layers and the code they follow,
    Megatron-LM d98e8a64's multi_token_prediction.py; a model trained without them says nothing of MTP."""
    plain, two = (estimate(MODEL, Options(**TRAIN, mtp_layers=n)) for n in (0, 2))
    said = [x for x in two.graph.assumptions if "multi-token prediction" in x]
    assert len(said) == 1 and said[0].startswith("2 multi-token prediction layers (--mtp-layers)")
    assert "Megatron-LM d98e8a64 megatron/core/transformer/multi_token_prediction.py" in said[0]
    assert not any("multi-token" in x for x in plain.graph.assumptions)


MTP_OWN = ("enorm", "hnorm", "concat", "eh_proj", "final_layernorm", "lm_head", "loss")


@pytest.mark.parametrize("more", [{}, {"recompute": "selective", "recompute_modules": ("mla_up_proj", "moe_act")}])
def test_the_mtp_layer_saves_what_a_decoder_layer_saves_and_its_own(more: dict) -> None:
    """All three layers MoE (first_k_dense_replace 0): the MTP layer's transformer layer saves what each decoder
    layer saves, under the same recompute modules; its own tensors, b 2 s 16 h 64 V 300, bf16, by hand (Korthikanti
    profile: no norm statistics, no labels): the shifted embedding and the hidden states that enorm and hnorm read,
    2*16*64*2 = 4,096 each; eh_proj's input, the (b, s, 2h) concatenation, 8,192; final_layernorm's input 4,096;
    the output layer's input 4,096; the loss's fp32 log-softmax 2*16*300*4 = 38,400  -> 62,976."""
    model = from_config({"model_type": "deepseek_v3", **dict(S, first_k_dense_replace=0)}, name="all-moe")
    est = estimate(model, Options(mode="train", batch=2, seq=16, mtp_layers=1, **more))
    terms = dict((p, v) for p, _, v in est.quantity("activation_bytes").term_values(est.values))
    layers = sum(v for p, v in terms.items() if p.startswith("layer/"))
    own = sum(v for p, v in terms.items() if p.startswith("mtp/") and p.split("/")[1] in MTP_OWN)
    assert sum(v for p, v in terms.items() if p.startswith("mtp/")) - own == layers // 3
    assert own == 4 * 4096 + 8192 + 38_400


def test_full_recompute_checkpoints_the_mtp_layer_as_megatron_does() -> None:
    """Megatron-Core checkpoints _proj_and_transformer_layer (norms, eh_proj, the layer) under full recompute and
    runs the final norm, output layer and loss after it. b 1, s 16, h 64, V 300, bf16, --profile exact:
    checkpoint: the hidden states and the shifted embedding, 2 * 16*64*2 = 4,096; final_layernorm: its input
    16*64*2 = 2,048 + fp32 rstd 16*4 = 64; the output layer's input 2,048; the loss: fp32 log-softmax 16*300*4 =
    19,200, int64 labels 16*8 = 128, total_weight 4  -> 27,588."""
    est = estimate(MODEL, Options(**TRAIN, recompute="full", profile="exact", mtp_layers=1))
    terms = dict((p, v) for p, _, v in est.quantity("activation_bytes").term_values(est.values))
    assert sum(v for p, v in terms.items() if p.startswith("mtp/")) == 4096 + 2048 + 64 + 2048 + 19200 + 128 + 4


def test_the_last_stage_holds_the_mtp_layer_and_a_copy_of_the_embedding() -> None:
    # --pp 2, layout Et|ttmL: rank 1 holds layers 1 and 2 (MoE), the MTP layer, the final norm (64), the output
    # layer (300*64 = 19,200) and the embedding Megatron-Core builds on the MTP rank (gpt_model.py L173: 19,200):
    # 2*64,936 + 73,320 + 64 + 19,200 + 19,200 = 241,656
    opts = Options(**TRAIN, pp=2, pipeline_layout="Et|ttmL", mtp_layers=1, micro_batches=2)
    ranks = stage_derivations(MODEL, opts)
    held = [next(q for q in qs if q.key == "parameters_per_gpu").value(MODEL.values()) for _, qs in ranks]
    assert held[-1] == 2 * MOE_LAYER + MTP_LAYER + 64 + 2 * 19_200
    # without a layout, --pp 3: the last stage holds the MTP layer and the embedding's copy (19,200) besides its own
    last = []
    for n in (0, 1):
        opts = Options(**TRAIN, pp=3, mtp_layers=n, micro_batches=3)
        values = {**MODEL.values(), **symbol_values(opts)}
        last.append(next(q for q in stage_derivations(MODEL, opts)[-1][1] if q.key == "parameters_per_gpu")
                    .value(values))
    assert last[1] - last[0] == MTP_LAYER + 19_200


def test_deepseek_v3_mtp_module_by_hand() -> None:
    """deepseek-ai/DeepSeek-V3's config (h 7,168, 128 heads, q_lora 1,536, kv_lora 512, qk 128 + rope 64, v 128,
    256 experts of 2,048, one shared; tests/test_pipeline_layout.py's count): a MoE layer's attention and norms
    187,121,664 + router 256*7,168 = 1,835,008 + shared 3*7,168*2,048 = 44,040,192 + experts 256 x 44,040,192 =
    11,274,289,152 -> 11,507,286,016; MTP's own enorm, hnorm, final_layernorm 3*7,168 + eh_proj 2*7,168^2 =
    102,781,952 -> 11,610,067,968 (the checkpoint's layer 61 less its copies of the embedding and the head)."""
    plain, mtp = (estimate("deepseek-v3", Options(**TRAIN, mtp_layers=n)).number("parameters") for n in (0, 1))
    assert mtp - plain == 11_507_286_016 + 102_781_952 == 11_610_067_968


@pytest.mark.parametrize("words, fragment", [
    (["--mtp-layers", "-1"], "--mtp-layers must be a whole number that is not negative"),
    (["--mode", "infer", "--mtp-layers", "1"], "--mtp-layers"),
    (["--implementation", "hf", "--mtp-layers", "1"], "transformers builds no MTP layers"),
    (["--pp", "2", "--pipeline-layout", "Et|ttmL", "--micro-batches", "2"], "give --mtp-layers 1"),
])
def test_refusals_are_one_line(words: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    mode = [] if "--mode" in words else ["--mode", "train"]
    assert main(["estimate", "--model", "deepseek-v3", *mode, "--batch", "1", "--seq", "16", *words]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and "\n" not in err and "Traceback" not in err


def test_a_config_with_mtp_layers_says_how_to_train_them() -> None:
    """DeepSeek-V3's config.json declares num_nextn_predict_layers 1; transformers builds none, so the count leaves
    them out and the model's notes name the option (the default stays 0: Megatron-Core's mtp_num_layers None)."""
    model = from_config({"model_type": "deepseek_v3", **S, "num_nextn_predict_layers": 2}, name="m")
    assert any("--mtp-layers 2" in note for note in model.notes)
    assert estimate(model).number("parameters") == estimate(MODEL).number("parameters")


def test_an_encoder_has_no_mtp() -> None:
    with pytest.raises(OptionsError, match="has none: drop --mtp-layers"):
        estimate("bert-base", Options(**TRAIN, mtp_layers=1))


@pytest.mark.parametrize("layers", [1, 2])
def test_megatron_fsdp_gathers_each_mtp_layer_as_its_own_unit(layers: int) -> None:
    # Megatron-FSDP's unit module is the TransformerLayer (mcore_fsdp_adapter.py: fsdp_unit_modules defaults to
    # [TransformerLayer] under optim_grads_params), the MTP layer's own among them: it is gathered while it runs and
    # resharded after, however many MTP layers (one was gathered with the root for the whole step before). The root:
    # embedding 300 x 64 + output layer 300 x 64 (untied) + final norm 64 = 38,464 parameters, 76,928 B in bf16; the
    # largest unit the MTP layer, MTP_LAYER = 73,320 parameters (above, by hand), 146,640 B
    e = estimate(MODEL, **TRAIN, framework="megatron", dp=2, zero=3, mtp_layers=layers)
    terms = {t.path: int(t.expr.subs(e.values)) for t in e.quantity("total_bytes").breakdown.terms}
    assert MTP_LAYER == 73_320
    assert terms["zero3/gathered_weights/root"] == 76_928
    assert terms["zero3/gathered_weights/layer"] == 146_640
    notes = e.quantity("total_bytes").assumptions
    assert any("multi-token prediction layer its own unit" in n and "megatron-core-fsdp-adapter" in n for n in notes)


def test_zero3_gathers_the_largest_layer_kind_not_their_average() -> None:
    # the tiny DeepSeek-V3's layers are one block mixing 1 dense layer and 2 MoE layers (l_d = 1 of l = 3): the unit
    # gathered while a layer runs is the largest kind, the MoE layer, MOE_LAYER = 64,936 parameters (by hand above),
    # 129,872 B in bf16, not the block's average per layer ((27,560 + 2 x 64,936) / 3, the dense layer 27,560: its
    # attention 9,128 as the MoE layer's, 3 x 64 x 96 = 18,432 of MLP, its two norms inside the 9,128)
    e = estimate(MODEL, **TRAIN, framework="megatron", dp=2, zero=3)
    terms = {t.path: int(t.expr.subs(e.values)) for t in e.quantity("total_bytes").breakdown.terms}
    assert terms["zero3/gathered_weights/layer"] == 2 * MOE_LAYER == 129_872
