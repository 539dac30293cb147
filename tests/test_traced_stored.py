"""A traced model's checkpoint read as stored (issue 38: "an FP8, a GPTQ, an AWQ and a bitsandbytes config.json each give
the stored weight bytes with no flag"): the ``quantization_config`` of a config.json whose model_type no hand-written
family takes. Expected bytes come from transformers' own FP8 module replacement on the meta device, or from each
method's tensor shapes written out by hand over the meta model's ``nn.Linear`` shapes; never from memderive."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch
import transformers

from memderive.arguments import options_from_args
from memderive.commands import cli
from memderive.derivations.models.config_fields import ConfigError
from memderive.derivations.models.quantization import read_quantization
from memderive.derivations.quantities import traced
from memderive.derivations.quantities.traced_stored import stored_weights
from tests.in_process import ROOT, estimate_cli

#: MiniMax M2 (traced: no hand-written family) at toy widths: 2 layers, 4 experts of width 64, attention 4 x 32 / 2 KV.
MINIMAX = {"model_type": "minimax_m2", "hidden_size": 128, "intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "num_local_experts": 4,
           "num_experts_per_tok": 2, "vocab_size": 256, "rotary_dim": 16, "use_qk_norm": True,
           "qk_norm_type": "per_layer", "tie_word_embeddings": False}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [32, 32],
       "modules_to_not_convert": ["model.layers.*.mlp.gate", "lm_head"]}


def _meta(config: dict):
    cfg = transformers.CONFIG_MAPPING[config["model_type"]].from_dict(
        {k: v for k, v in config.items() if k not in ("model_type", "quantization_config")})
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)


def _weights(config: dict) -> int:
    """memderive's stored bytes of the traced module tree (the function the CLI calls; the CLI itself is run once, in
    ``test_cli_reads_the_checkpoint_without_a_flag_and_prints_no_noise``: each infer run traces a prefill)."""
    model = _meta(config)
    return stored_weights(model, read_quantization(config["quantization_config"]), "test")[0]


def _fp8_replaced(config: dict) -> int:
    """Bytes of transformers' own FineGrainedFP8 replacement (``FP8Linear``, ``FP8Experts``: fp8 weights and fp32
    ``weight_scale_inv`` per block) of the meta model; what it leaves (router, lm_head, embeddings, norms) in bf16."""
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    skip = FP8["modules_to_not_convert"]
    q = transformers.FineGrainedFP8Config(weight_block_size=FP8["weight_block_size"], modules_to_not_convert=skip)
    model = replace_with_fp8_linear(_meta(config), skip, q, pre_quantized=True)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_fp8_block_checkpoint_as_transformers_replaces_it():
    assert _weights({**MINIMAX, "quantization_config": FP8}) == _fp8_replaced(MINIMAX)


def test_gptq_and_bnb_nf4_checkpoints_by_hand():
    model = _meta(MINIMAX)
    linears = [(m.out_features, m.in_features) for n, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and not n.endswith("mlp.gate") and n != "lm_head"]
    # experts: gate_up_proj (E, 2f, h) stored per expert as gate_proj and up_proj (f, h); down_proj (E, h, f)
    mats = linears + [(rows // 2, cols) if n.endswith("gate_up_proj") else (rows, cols)
                      for n, p in model.named_parameters() if p.dim() == 3
                      for e, rows, cols in [p.shape] for _ in range(2 * e if n.endswith("gate_up_proj") else e)]
    quantized = sum(r * c for r, c in mats)
    rest = sum(p.numel() for p in model.parameters()) - quantized
    # GPTQ 4-bit, groups of 32: qweight int32 (in*4/32, out); qzeros int32 (in/32, out*4/32); scales fp16 (in/32, out);
    # g_idx int32 (in,)
    gptq = sum(4 * (c * 4 // 32) * r + 4 * (c // 32) * (r * 4 // 32) + 2 * (c // 32) * r + 4 * c for r, c in mats)
    cfg = {**MINIMAX, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False}}
    assert _weights(cfg) == gptq + 2 * rest
    # bitsandbytes nf4, no double quantization: 4-bit weight (n/2 B), fp32 absmax per 64 weights, a 16-entry fp32
    # quant_map per module
    nf4 = sum(r * c // 2 + 4 * math.ceil(r * c / 64) + 64 for r, c in mats)
    cfg = {**MINIMAX, "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                              "bnb_4bit_quant_type": "nf4"}}
    assert _weights(cfg) == nf4 + 2 * rest


def _stored(config: dict, *extra: str):
    """The traced estimate's reading of the checkpoint (``traced._stored``, which ``traced_estimate`` calls before it
    traces the prefill: an infer run through the CLI traces ~18 fake forwards, too slow for this file)."""
    options = options_from_args(cli.build_parser().parse_args(
        ["estimate", "--model", "x", "--mode", "infer", "--batch", "1", "--seq", "4", *extra]))
    return traced._stored(config, traced.hf_config(config), "test", options)


def test_estimate_reads_the_checkpoint_without_a_flag():
    one = {**MINIMAX, "num_hidden_layers": 1, "quantization_config": FP8}
    total, scheme, parts = _stored(one)
    assert total == _fp8_replaced({**MINIMAX, "num_hidden_layers": 1}) and scheme.startswith("fp8")
    assert dict(parts)["scales"] > 0
    assert _stored(one, "--weight-dtype", "bf16") is None  # an explicit --weight-dtype overrides the checkpoint


def test_refusals_in_one_line():
    with pytest.raises(ConfigError, match="quant_method 'hqq' is not modelled"):
        _stored({**MINIMAX, "quantization_config": {"quant_method": "hqq"}})
    with pytest.raises(ConfigError, match="--tp 2 with the checkpoint's quantization_config"):
        _stored({**MINIMAX, "quantization_config": FP8}, "--tp", "2")
    # DBRX writes its experts as its own stacked 2-D weights (DbrxExpertGLU's w1, v1, w2): no checkpoint layout known,
    # refused (never counted as 16-bit)
    dbrx = {"model_type": "dbrx", "d_model": 64, "n_heads": 2, "n_layers": 1, "vocab_size": 128, "max_seq_len": 64,
            "attn_config": {"kv_n_heads": 1, "rope_theta": 10000}, "ffn_config": {
                "ffn_hidden_size": 64, "moe_num_experts": 2, "moe_top_k": 1}, "quantization_config": FP8}
    with pytest.raises(ConfigError, match="DbrxExpertGLU's expert weights"):
        _stored(dbrx)


def test_traced_estimate_prints_no_import_noise(tmp_path):
    # a fresh interpreter: torchao (installed with the test extra) logs "Failed to load ..." per extension it cannot
    # load, and torch's pytree a deprecation per Enum torchao registers, when transformers' quantizers import it
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**MINIMAX, "num_hidden_layers": 1}))
    run = subprocess.run([sys.executable, "-m", "memderive", "estimate", "--model", str(path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stderr == "", run.stderr


def test_gpt_oss_note_says_what_its_config_declares():
    # a config.json carrying gpt-oss's mxfp4 quantization_config is weighed as stored with no flag; the note said
    # "--weight-dtype mxfp4 weighs them as stored, the default bf16" on that config too (the default was mxfp4)
    from memderive.derivations.estimate import estimate
    from memderive.derivations.models.config import from_config

    small = {"model_type": "gpt_oss", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
             "head_dim": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_local_experts": 4,
             "num_experts_per_tok": 2, "vocab_size": 128}
    mx = {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                              "model.embed_tokens", "lm_head"]}
    stored = estimate(from_config({**small, "quantization_config": mx}), mode="infer", batch=1, seq=8)
    plain = estimate(from_config(small), mode="infer", batch=1, seq=8)
    note = [n for n in stored.model.notes if n.startswith("weights:")]
    assert len(note) == 1 and "with no flag" in note[0] and "default bf16" not in note[0]
    # the figure the note promises: the experts' 4-bit blocks, one e8m0 byte per 32 along the input, the rest bf16
    experts = 3 * 4 * 64 * 64 * 2  # gate, up, down: E * f * h each, 2 layers
    total = plain.number("parameters")
    assert stored.number("weight_bytes") == experts // 2 + experts // 32 + 2 * (total - experts)
    assert any("with --weight-dtype mxfp4" in n for n in plain.model.notes if n.startswith("weights:"))


@pytest.mark.parametrize("quant", [
    {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False},
    {"quant_method": "awq", "bits": 4, "group_size": 32, "version": "gemm", "zero_point": True},
    {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
     "bnb_4bit_use_double_quant": True},
    {"quant_method": "fp8", "weight_block_size": [32, 32], "activation_scheme": "dynamic"},
], ids=["gptq", "awq", "nf4-dq", "fp8"])
def test_traced_module_tree_agrees_with_the_hand_written_family(quant):
    # the cross-check issue 38 asks of every traced figure: a LLaMA (hand-written) checkpoint weighed both ways
    from memderive.derivations.estimate import estimate
    from memderive.derivations.models.config import from_config

    llama = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "tie_word_embeddings": False}
    hand = estimate(from_config({**llama, "quantization_config": quant}), mode="infer", batch=1, seq=8)
    assert _weights({**llama, "quantization_config": quant}) == hand.number("weight_bytes")


def test_mamba2_config_trains_through_the_traced_path(tmp_path):
    # the hand-written Mamba 2 derivation refuses training ("not derived yet"); a Mamba 2 config.json now goes to the
    # traced path for --mode train (measured: mamba2-2.7b's config at b 1, s 4096 traces). Shown here by the traced
    # path's own refusal of an option it does not take, which the hand-written refusal never printed.
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 128,
                                "state_size": 16, "expand": 2, "head_dim": 16, "num_heads": 8, "n_groups": 1}))
    run = estimate_cli("--model", str(path), "--mode", "train", "--batch", "1", "--seq", "8", "--offload")
    assert run.returncode == 2 and "not yet supported for a traced model (model_type 'mamba2')" in run.stderr, \
        run.stderr
    run = estimate_cli("--model", str(path), "--mode", "infer", "--batch", "1", "--seq", "8")  # inference: hand-written
    assert run.returncode == 0 and "Parameters of one Mamba 2 layer" in run.stdout


def test_a_vision_language_checkpoint_leaves_its_tower_as_its_config_names_it():
    # Qwen2.5-VL-7B-Instruct-AWQ's config: modules_to_not_convert ["visual"] (its tower's top-level name before
    # transformers 5; now model.visual). Real config measured: 6,923,847,680 B (the repo's two shards: ~6.9 GB);
    # matching only v5 names quantized the tower too: 5,925,422,080 B. Here a 1-layer model, expected by hand: every
    # text-side Linear but lm_head in AWQ GEMM (qweight int32 (in, out*4/32), qzeros int32 (in/32, out*4/32), scales
    # fp16 (in/32, out)), everything else, the vision tower included, 16-bit.
    vl = {"model_type": "qwen2_5_vl", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 256, "tie_word_embeddings": False,
          "rope_scaling": {"type": "mrope", "mrope_section": [4, 6, 6]},
          "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                            "out_hidden_size": 64, "fullatt_block_indexes": [0]}}
    cfg = transformers.CONFIG_MAPPING["qwen2_5_vl"].from_dict({k: v for k, v in vl.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForImageTextToText.from_config(cfg)
    mats = [(m.out_features, m.in_features) for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and ".visual." not in n and n != "lm_head"]
    assert mats and all(c % 32 == 0 and r % 8 == 0 for r, c in mats)
    awq = sum(4 * c * r * 4 // 32 + 4 * (c // 32) * r * 4 // 32 + 2 * (c // 32) * r for r, c in mats)
    rest = sum(p.numel() for p in model.parameters()) - sum(r * c for r, c in mats)
    q = {"bits": 4, "group_size": 32, "modules_to_not_convert": ["visual"], "quant_method": "awq", "version": "gemm",
         "zero_point": True}
    assert stored_weights(model, read_quantization(q), "vl")[0] == awq + 2 * rest


def test_llama4_experts_stored_per_expert_from_their_transposed_layout():
    # Llama4TextExperts (no @use_experts_implementation): gate_up_proj (E, h, 2f), down_proj (E, f, h), i.e. (E, in,
    # out); a checkpoint stores gate_proj, up_proj (f x h) and down_proj (h x f) per expert. FP8 by hand per module of
    # r x c: r*c fp8 bytes + 4 * ceil(r/32) * ceil(c/32) scale bytes; the router (a Linear beside the experts) and
    # lm_head stay bf16.
    text = {"model_type": "llama4_text", "hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 96,
            "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 32,
            "num_local_experts": 3, "num_experts_per_tok": 1, "vocab_size": 128, "interleave_moe_layer_step": 1}
    model = _meta(text)
    h, f, e = 64, 32, 3
    mats = [(m.out_features, m.in_features) for n, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and not n.endswith("router") and n != "lm_head"]
    mats += [(f, h)] * (2 * e) + [(h, f)] * e
    fp8 = sum(r * c + 4 * math.ceil(r / 32) * math.ceil(c / 32) for r, c in mats)
    rest = sum(p.numel() for p in model.parameters()) - sum(r * c for r, c in mats)
    assert _weights({**text, "quantization_config": {**FP8, "modules_to_not_convert": None}}) == fp8 + 2 * rest


def test_learned_positions_bound_the_sequence(tmp_path):
    # Whisper's decoder holds max_target_positions learned positions (448 for large-v3): a real forward past them
    # fails on the lookup, fake tensors do not check indices, so --seq 4096 on whisper-large-v3's config printed a
    # cache for 4,097 decoder positions. A prefill of s then one decode step needs s + 1 positions; training needs s.
    whisper = {"model_type": "whisper", "d_model": 64, "encoder_layers": 1, "decoder_layers": 1,
               "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 96,
               "decoder_ffn_dim": 96, "vocab_size": 128, "num_mel_bins": 8, "max_source_positions": 16,
               "max_target_positions": 32, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
               "decoder_start_token_id": 1}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(whisper))
    run = estimate_cli("--model", str(path), "--mode", "infer", "--batch", "1", "--seq", "32")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "has 32 learned positions (model.decoder.embed_positions)" in run.stderr and "--seq 31 or less" in run.stderr
    run = estimate_cli("--model", str(path), "--mode", "train", "--batch", "1", "--seq", "33")
    assert run.returncode == 2 and "--seq 32 or less" in run.stderr, run.stderr
