"""The Mamba-2 hybrids (Nemotron-H, transformers' ``nemotron_h``) in the hand-written graph: Megatron-Core's Mamba
layer as its code and mamba_ssm's kernels save and compute (``symbolic.mamba``), the layer kinds' shares of an
average layer (``architectures.Hybrid``), what is refused, and the routes to transformers' own code (traced).

Parameters against transformers on the meta device: ``tests/test_params_transformers.py``; the published runs:
``tests/test_published_moe_runs.test_the_nemotron_3_nano_rows``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.models.config import ConfigError, from_config
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.traced import traced_config, unsupported_options
from memderive.symbolic.dims import sym
from memderive.symbolic.errors import InvalidLayoutError

#: Nemotron 3 Nano's Mamba sizes (h 2,688; 64 heads of 64, d_in 4,096; 8 groups; state 128; published_runs.NANO),
#: four Mamba layers and nothing else, so a layer's figures are the Mamba layer's.
MAMBA = {"model_type": "nemotron_h", "hidden_size": 2688, "hybrid_override_pattern": "MMMM", "mamba_num_heads": 64,
         "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8, "vocab_size": 1024, "num_attention_heads": 32,
         "num_key_value_heads": 2}


def test_a_mamba_layer_saves_what_megatron_and_mamba_ssm_save() -> None:
    """Per token, 16-bit activations, exact profile (megatron/core/ssm/mamba_mixer.py _ssm_training; mamba_ssm
    MambaSplitConv1dScanCombinedFn.save_for_backward and LayerNormFn's): the layer's RMSNorm its input 2 x 2,688 =
    5,376 and an fp32 rstd 4; in_proj its input, the norm's output, 5,376; the scan zxbcdt, 2 x (2 x 4,096 + 2 x 8 x
    128 + 64) = 2 x 10,304 = 20,608, and out_x 2 x 4,096 = 8,192; the group norm its input 8,192 and an fp32 rstd per
    group, 4 x 8 = 32; out_proj its input 8,192. Sum 55,972 B a token; per layer, not per token, the fp32 A and dt_bias,
    2 x 64 x 4 = 512. b 2, s 1,024: 55,972 x 2,048 + 512 = 114,631,168."""
    est = estimate(MAMBA, mode="train", batch=2, seq=1024, profile="exact")
    assert est.number("activation_bytes_per_layer") == 55_972 * 2_048 + 512 == 114_631_168
    # Korthikanti's profile leaves out the two fp32 statistics: 4 + 32 B a token
    est = estimate(MAMBA, mode="train", batch=2, seq=1024)
    assert est.number("activation_bytes_per_layer") == (55_972 - 36) * 2_048 + 512


def test_a_mamba_layer_computes_what_its_kernels_multiply() -> None:
    """Forward matmul FLOPs per token of a Mamba layer: in_proj 2 x 2,688 x 10,304 = 55,394,304, out_proj 2 x 4,096 x
    2,688 = 22,020,096, the chunked scan (chunk s_ch 128) per head chunk_state 2 x 128 x 64 = 16,384, chunk_scan over
    its chunk 2 x 128 x 64 = 16,384 and from the passed state 16,384, per group bmm_chunk 2 x 128 x 128 = 32,768:
    64 x 49,152 + 8 x 32,768 = 3,407,872. Layer: 80,822,272; four layers and the LM head (2 x 2,688 x 1,024 =
    5,505,024) over b s = 2,048 tokens: (323,289,088 + 5,505,024) x 2,048 = 673,370,341,376."""
    est = estimate(MAMBA, mode="train", batch=2, seq=1024)
    assert est.number("forward_flops") == (4 * 80_822_272 + 5_505_024) * 2_048 == 673_370_341_376


def test_the_layer_kinds_hold_their_shares_of_the_layers() -> None:
    """A hybrid's parameters are its kinds' layers' sums: Nemotron 3 Nano (23 Mamba, 23 MoE, 6 attention) has
    31,577,937,344, transformers' NemotronHForCausalLM's (tests/test_params_transformers.py measures smaller ones):
    per layer kind by hand, Mamba 2,688 (norm) + 2,688 x 10,304 + 6,144 x 4 + 6,144 (conv) + 3 x 64 + 4,096 (group
    norm) + 4,096 x 2,688 = 38,744,896; attention 2,688 + 2,688 x 128 x (32 + 2 + 2) + 4,096 x 2,688 = 23,399,040;
    MoE 2,688 + 128 x 2,688 (router) + 128 x 2 x 1,856 x 2,688 + 2 x 3,712 x 2,688 = 1,297,468,032; with the
    embedding and LM head, 2 x 131,072 x 2,688, and the final norm 2,688: 23 x 38,744,896 + 6 x 23,399,040 + 23 x
    1,297,468,032 + 704,643,072 + 2,688 = 31,577,937,344."""
    assert estimate("nemotron-3-nano-30b-a3b").number("parameters") == (
        23 * 38_744_896 + 6 * 23_399_040 + 23 * 1_297_468_032 + 704_643_072 + 2_688) == 31_577_937_344


def test_tensor_parallelism_splits_whole_heads_and_groups() -> None:
    """Megatron-Core's MambaMixer asserts that t divides the Mamba heads and groups: 2 splits the 64 heads and 8 groups,
    and halves the Mamba layer's per-rank activations but for the layer's norm input and output, which every rank
    holds whole without sequence parallelism: (55,936 - 2 x 5,376) / 2 + 2 x 5,376 a token (Korthikanti's profile)."""
    one = estimate(MAMBA, mode="train", batch=1, seq=1024).number("activation_bytes_per_layer")
    two = estimate(MAMBA, mode="train", batch=1, seq=1024, tp=2).number("activation_bytes_per_layer")
    assert one == 55_936 * 1024 + 512
    assert two == ((55_936 - 2 * 5_376) // 2 + 2 * 5_376) * 1024 + 256
    with pytest.raises(InvalidLayoutError, match="64 Mamba heads are not divisible by tensor-parallel degree 3"):
        estimate({**MAMBA, "num_attention_heads": 48, "num_key_value_heads": 6}, mode="train", batch=1, seq=64, tp=3)


@pytest.mark.parametrize(("options", "words"), [
    ({"pp": 2}, "--pp 2 is not modelled for a hybrid model yet"),
    ({"cp": 2}, "--cp 2 is not modelled for a hybrid model yet"),
    ({"implementation": "hf"}, "not --implementation hf; transformers. NemotronH code is traced instead"),
    ({"framework": "torchtitan"}, "not --framework torchtitan"),
    ({"mode": "infer"}, "holds its Mamba layers' states"),
    ({"mtp_layers": 1}, "--mtp-layers 1 is not modelled for a hybrid model yet"),
])
def test_what_the_graph_does_not_describe_is_refused(options: dict, words: str) -> None:
    with pytest.raises(OptionsError, match=words):
        estimate(MAMBA, **{"mode": "train", "batch": 1, "seq": 64, **options})


@pytest.mark.parametrize(("fields", "words"), [
    ({"n_group": 2}, "'n_group' = 2 is not supported: grouped expert routing"),
    ({"mamba_hidden_act": "gelu"}, "'mamba_hidden_act' = 'gelu' is not supported"),
    ({"hybrid_override_pattern": "MX"}, "'hybrid_override_pattern' = 'MX' must be a string of M, \\*, -, E"),
    ({"n_groups": 3}, "'n_groups' = 3 must divide mamba_num_heads = 64"),
])
def test_a_config_the_graph_cannot_hold_names_its_field(fields: dict, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        from_config({**MAMBA, **fields})


def test_fields_transformers_does_not_read_are_noted_not_counted() -> None:
    """transformers 5.25's NemotronHAttention has no biases and NemotronHForCausalLM ties nothing, whatever
    attention_bias and tie_word_embeddings say (tests/test_params_transformers.py measures it)."""
    model = from_config({**MAMBA, "hybrid_override_pattern": "M*", "attention_bias": True, "tie_word_embeddings": True})
    assert not (model.arch.qkv_bias or model.arch.tied_embeddings)
    assert sum("is not read by transformers' NemotronH" in n for n in model.notes) == 2


def test_transformers_code_is_traced_where_the_graph_is_megatrons(tmp_path: Path) -> None:
    """Under --implementation hf, and for the inference cache, a nemotron_h config.json takes the traced path
    (transformers' own modeling code and cache: ``estimate`` routes by ``traced_config``); training under
    Megatron-Core takes the hand-written graph."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(MAMBA))
    assert traced_config(str(path), "hf", "train") is not None
    assert traced_config(str(path), "hf-eager", "train") is not None
    assert traced_config(str(path), "megatron", "infer") is not None
    assert traced_config(str(path), "megatron", "train") is None
    # a hand-written family that describes transformers' code stays hand-written under hf
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 128}))
    assert traced_config(str(path), "hf", "train") is None


def test_the_traced_path_takes_implementation_hf() -> None:
    """The traced path runs transformers' code: --implementation hf (and the exact profile it implies) says so and is
    taken there; with Korthikanti's profile (Megatron's default, not what the trace counts) it is not."""
    from memderive.derivations.options import Options

    base = {"mode": "train", "batch": 1, "seq": 32}
    assert unsupported_options(Options(**base, implementation="hf")) == []
    assert unsupported_options(Options(**base, implementation="hf-eager")) == []
    assert unsupported_options(Options(**base, implementation="hf", profile="korthikanti")) == ["implementation"]
    assert unsupported_options(Options(**base)) == []


def test_latent_moe_routes_its_experts_in_the_latent_width() -> None:
    """Nemotron 3 Super's LatentMoE (moe_latent_size; Megatron-Core moe_layer.py fc1_latent_proj before the dispatch,
    fc2_latent_proj after, both duplicated on every tensor-parallel rank): the routed experts' weights are d_lat wide
    and the all-to-all moves d_lat-wide tokens. One MoE layer (h 96, d_lat 48, 8 experts of 40, 3 per token, a shared
    expert of 80): norm 96, router 8 x 96, projections 2 x 96 x 48, experts 8 x 2 x 40 x 48, shared 2 x 80 x 96 =
    96 + 768 + 9,216 + 30,720 + 15,360 = 56,160; the tokens dispatched b s k d_lat x 2 B = 1 x 16 x 3 x 48 x 2 = 4,608
    B, half of the h-wide 9,216."""
    from memderive.derivations.quantities.timing import dispatched_bytes

    config = {"model_type": "nemotron_h", "hidden_size": 96, "layers_block_type": ["moe"], "n_routed_experts": 8,
              "num_experts_per_tok": 3, "moe_intermediate_size": 40, "moe_shared_expert_intermediate_size": 80,
              "vocab_size": 100, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16}
    latent = from_config({**config, "moe_latent_size": 48})
    assert estimate(latent).number("parameters") == 56_160 + 2 * 100 * 96 + 96  # embedding, LM head, final norm
    for model, want in ((latent, 4_608), (from_config(config), 9_216)):
        graph = estimate(model, mode="train", batch=1, seq=16).graph
        assert dispatched_bytes(graph, {**model.values(), sym("b"): 1, sym("s"): 16}) == want


def test_the_largest_fsdp_unit_of_a_hybrid_is_its_largest_layer_kind() -> None:
    """FSDP gathers one layer at a time, the largest whole: Nemotron 3 Nano's MoE layer, 1,297,468,032 parameters
    (test_the_layer_kinds_hold_their_shares_of_the_layers), 2,594,936,064 B in 16 bits, not the average layer's
    30,873,291,584 / 52 = 593,717,145.8 parameters (1,187,434,292 B); the root (embedding, LM head, final norm) 2 x (2 x 131,072 x 2,688 + 2,688) = 1,409,291,520 B."""
    from memderive.derivations.models.presets import preset
    from memderive.derivations.quantities.param_offload import gathered_weights

    model = preset("nemotron-3-nano-30b-a3b")
    terms = {t.path: int(t.expr.evaluate(model.values())) for t in gathered_weights(model.graph(), 2).terms}
    assert terms == {"model_states/gathered_weights/root": 1_409_291_520,
                     "model_states/gathered_weights/layer": 2_594_936_064}


def test_attention_heads_a_hybrid_lacks_do_not_limit_its_tensor_parallelism() -> None:
    """The pure-Mamba config has no attention layer: its 2 key/value heads (config defaults) bound nothing, and t = 4
    splits its 64 heads and 8 groups (a quarter of the per-token split tensors, 45,184 / 4 = 11,296, beside the
    whole norm input and output, 10,752, at Korthikanti's profile; the fp32 A and dt_bias 512 / 4)."""
    est = estimate(MAMBA, mode="train", batch=1, seq=1024, tp=4)
    assert est.number("activation_bytes_per_layer") == (11_296 + 10_752) * 1024 + 128


def test_full_recompute_rebuilds_the_largest_layer_kind() -> None:
    """Backward under full recompute rebuilds one whole layer: a hybrid's working set is its largest kind's, here
    Nemotron 3 Nano's MoE layer, as large as in a model of its MoE layers alone (the same sizes, pattern "E"), not
    the average layer's (637,415,335 B before this rule)."""
    from memderive.derivations.models.presets import PRESETS

    options = {"mode": "train", "batch": 1, "seq": 8192, "ep": 8, "dp": 8, "recompute": "full"}
    key = "recompute/working_layer"
    nano, moe = (dict((e := estimate(model, **options)).quantity("total_bytes").term_ints(e.values))[key]
                 for model in ("nemotron-3-nano-30b-a3b",
                               {**PRESETS["nemotron-3-nano-30b-a3b"], "hybrid_override_pattern": "E"}))
    assert nano == moe > 0
