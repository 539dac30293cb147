"""Two names for one field (issue 20, items 1-2): a config that gives a family's field and the alias its
transformers config class also accepts (``num_local_experts`` and ``num_experts``, ``n_embd`` and
``hidden_size``) counts what transformers builds from it, on the meta device; a look-alike name the class does
not read is not read here either, and said in a note; OLMoE's ``head_dim`` apart from hidden / heads, which
transformers' own layer cannot run, is refused naming it.

The precedence is measured, not typed in: ``test_alias_table_is_transformers_precedence`` builds every config
class with the field and its alias at different values and reads which one the class keeps.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import transformers

from memderive.derivations.estimate import estimate
from memderive.commands.cli import main
from memderive.derivations.models.config import SUPPORTED_MODEL_TYPES, ConfigError, by_architecture, from_config, load_config
from memderive.derivations.models.config_fields import MissingSizes
from memderive.derivations.models.defaults import FAMILY_ALIASES
from tests.hf_meta import count_parameters, model_class, small_config

#: Options the config classes take as keyword arguments beyond their attribute_map (``__post_init__`` pops).
POPPED = {"falcon": {"n_embed": "hidden_size"}, "bloom": {"n_embed": "hidden_size"},
          "nemotron_h": {"mamba_n_groups": "n_groups", "mamba_d_conv": "conv_kernel",
                         "mamba_chunk_size": "chunk_size", "mamba_conv_bias": "use_conv_bias"}}
#: Two values a field that is not a count takes apart (the alias given the first, the field the second).
VALUES = {"layers_block_type": (["mlp"] * 3, ["mlp"] * 5), "use_conv_bias": (False, True)}


def _winner(model_type: str, alias: str, field: str) -> str:
    """Which of the two names a config class keeps when both are given at different values."""
    transformers.logging.set_verbosity_error()
    config = small_config(model_type).to_dict()
    first, second = VALUES.get(field, (3, 5))
    config.update({alias: first, field: second})
    for layers in (3, 5):  # GPT-Neo checks its attention_types list against the layer count it keeps
        if model_type == "gpt_neo" and field == "num_layers":
            config["attention_types"] = [[["global"], layers]]
            config.pop("attention_layers", None)  # derived from attention_types
        try:
            built = transformers.CONFIG_MAPPING[model_type].from_dict(dict(config))
        except Exception:  # noqa: BLE001 -- that list's length is not the count kept
            continue
        value = getattr(built, field, None)
        assert value in (first, second), (model_type, alias, field, value)
        return alias if value == first else field
    raise AssertionError(f"{model_type}: neither {alias} nor {field} builds")


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_alias_table_is_transformers_precedence(model_type: str) -> None:
    cls = transformers.CONFIG_MAPPING[model_type]
    fields = {f.name for f in dataclasses.fields(cls)}
    measured = {}
    for key, target in {**cls.attribute_map, **POPPED.get(model_type, {})}.items():
        # attribute_map maps a name onto an attribute; the one of the two that is not a declared field is a
        # keyword set after the fields, so it wins (Qwen3-MoE declares num_experts and maps it onto num_local_experts)
        field, alias = (key, target) if key in fields else (target, key)
        winner = _winner(model_type, alias, field)
        measured[winner] = field if winner == alias else alias
    assert FAMILY_ALIASES.get(model_type, {}) == measured


def _ours(config: dict) -> int:
    return estimate(from_config(config)).number("parameters")


def _theirs(config: dict) -> int:
    built = transformers.CONFIG_MAPPING[config["model_type"]].from_dict(dict(config))
    return count_parameters(built, model_class(config["model_type"]))


def _small(model_type: str, **changes) -> dict:
    config = small_config(model_type).to_dict()
    if model_type == "deepseek_v2":
        config["num_experts_per_tok"] = 2  # DeepseekV2Config's default is None
    if model_type == "deepseek_v3":
        config["first_k_dense_replace"] = 1  # of the 2 layers (the default, 3, leaves no MoE layer)
    config.update(changes)
    return {k: v for k, v in config.items() if v is not None}  # None: the field left out


# The pairs, each field and alias at different values (k <= both), alone, and the look-alike names a
# family's config class does not read at all, with its own field left out (Qwen2-MoE's num_local_experts,
# PhiMoE's and Granite's num_experts, DeepSeek-V2's num_local_experts, DeepSeek-V3's num_experts)
EXPERT_CASES = [
    ("mixtral", {"num_local_experts": 6, "num_experts": 2}),
    ("mixtral", {"num_local_experts": None, "num_experts": 3}),
    ("qwen2_moe", {"num_experts": 6, "num_local_experts": 3, "num_experts_per_tok": 2}),
    ("qwen2_moe", {"num_experts": None, "num_local_experts": 3, "num_experts_per_tok": 2}),
    ("qwen3_moe", {"num_experts": 3, "num_local_experts": 6, "num_experts_per_tok": 2}),
    ("qwen3_moe", {"num_experts": None, "num_local_experts": 6, "num_experts_per_tok": 2}),
    ("olmoe", {"num_experts": 3, "num_local_experts": 6, "num_experts_per_tok": 2}),
    ("olmoe", {"num_experts": None, "num_local_experts": 6, "num_experts_per_tok": 2}),
    ("deepseek_v2", {"n_routed_experts": 6, "num_experts": 3}),
    ("deepseek_v2", {"n_routed_experts": None, "num_local_experts": 3}),
    ("deepseek_v3", {"n_routed_experts": 6, "num_local_experts": 3, "num_experts_per_tok": 2}),
    ("deepseek_v3", {"n_routed_experts": None, "num_experts": 3, "num_experts_per_tok": 2}),
    ("gpt_oss", {"num_local_experts": 6, "num_experts": 5}),
    ("phimoe", {"num_local_experts": 6, "num_experts": 3}),
    ("phimoe", {"num_local_experts": None, "num_experts": 3}),
    ("granitemoe", {"num_local_experts": None, "num_experts": 3}),
]


@pytest.mark.parametrize(("model_type", "changes"), EXPERT_CASES)
def test_two_expert_counts_count_what_transformers_builds(model_type: str, changes: dict) -> None:
    config = _small(model_type, **changes)
    aliases = transformers.CONFIG_MAPPING[model_type].attribute_map  # alias -> the field it sets
    same = lambda x, y: aliases.get(x) == y or aliases.get(y) == x  # noqa: E731 (one attribute, two names)
    left_out = [k for k, v in changes.items()
                if v is None and not any(same(k, a) for a, given in changes.items() if given is not None)]
    if left_out:  # the family's own field left out, no alias of it given: transformers would build its default
        # count; refused, naming it (issue 37 item 9)
        with pytest.raises(MissingSizes, match=f"'{left_out[0]}'"):
            _ours(config)
        return
    assert _ours(config) == _theirs(config)


# Sizes under two names in the GPT-style families (the field and its attribute_map alias, or BLOOM's and Falcon's
# n_embed keyword), and Falcon's n_head, which FalconConfig does not read
SIZE_CASES = [
    ("gpt2", {"hidden_size": 128}), ("gpt2", {"num_hidden_layers": 3}), ("gptj", {"hidden_size": 128}),
    ("codegen", {"num_hidden_layers": 3}), ("gpt_bigcode", {"num_attention_heads": 8}),
    ("bloom", {"n_embed": 128}), ("bloom", {"num_hidden_layers": 3}), ("falcon", {"n_embed": 128}),
    ("mpt", {"hidden_size": 128}), ("gpt_neo", {"num_attention_heads": 8}),
]


@pytest.mark.parametrize(("model_type", "changes"), SIZE_CASES)
def test_a_size_under_two_names_counts_what_transformers_builds(model_type: str, changes: dict) -> None:
    config = _small(model_type, **changes)
    assert _ours(config) == _theirs(config)


def test_falcon_reads_no_n_head() -> None:
    # FalconConfig has no n_head: without num_attention_heads, transformers builds its default 71 heads (here 2 wide
    # each); a config that gives n_head only means other heads: refused, naming the field FalconConfig reads
    config = _small("falcon", hidden_size=142, n_head=2, num_attention_heads=None, num_kv_heads=None)
    assert _theirs(config) > 0
    with pytest.raises(MissingSizes, match="'num_attention_heads' \\(71\\)"):
        from_config(config)
    given = _small("falcon", hidden_size=142, n_head=2, num_attention_heads=71, num_kv_heads=None)
    assert _ours(given) == _theirs(given)
    assert any("'n_head' = 2 is not read" in note for note in from_config(given).notes)


def test_disagreeing_names_are_said() -> None:
    notes = from_config(_small("mixtral", num_local_experts=6, num_experts=2)).notes
    assert [n for n in notes if "'num_local_experts' = 6" in n and "'num_experts' = 2" in n], notes
    ignored = from_config(_small("phimoe", num_local_experts=6, num_experts=3)).notes
    assert any("'num_experts' = 3 is not read" in note for note in ignored), ignored


def test_olmoe_head_dim_apart_from_hidden_over_heads_is_refused() -> None:
    # OlmoeAttention builds q_norm over hidden_size: with heads x head_dim != hidden_size its forward fails
    with pytest.raises(ConfigError, match=r"^olmoe: config field 'head_dim' = 24 is not supported: .*hidden_size"):
        from_config(_small("olmoe", head_dim=24))
    same = _small("olmoe", head_dim=16)  # 64 / 4: what transformers derives
    assert _ours(same) == _theirs(same)


def test_an_unknown_model_type_is_read_by_its_architectures_class(tmp_path) -> None:
    """A checkpoint whose custom code reuses an architecture (Kimi K2's config.json: model_type "kimi_k2",
    architectures ["DeepseekV3ForCausalLM"], unknown to transformers 5.25) is read as the model transformers builds
    for that class: the same parameters as the config under deepseek_v3, measured on the meta device, and the
    output says so; an unknown model_type whose class transformers does not have either stays a one-line error."""
    config = small_config("deepseek_v3")
    base = {k: v for k, v in config.to_dict().items() if k not in ("transformers_version", "architectures")}
    (tmp_path / "k2").mkdir()
    (tmp_path / "k2" / "config.json").write_text(json.dumps(
        {**base, "model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]}))
    model = load_config(tmp_path / "k2")
    assert model.arch.family == "deepseek_v3" and "'kimi_k2' read as deepseek_v3" in model.source
    assert estimate(model).number("parameters") == count_parameters(config)
    # the class's own config class decides, not the first model_type listing it: LlamaForCausalLM is listed under
    # exaone, internlm3 and llama in transformers 5.25 (exaone first), Qwen3_5ForCausalLM under qwen3_5 (the
    # multimodal wrapper) and qwen3_5_text; their config_class is LlamaConfig and Qwen3_5TextConfig
    llama = small_config("llama")
    (tmp_path / "l").mkdir()
    (tmp_path / "l" / "config.json").write_text(json.dumps(
        {**{k: v for k, v in llama.to_dict().items() if k not in ("transformers_version", "architectures")},
         "model_type": "my_llama", "architectures": ["LlamaForCausalLM"]}))
    mine = load_config(tmp_path / "l")
    assert mine.arch.family == "llama" and estimate(mine).number("parameters") == count_parameters(llama)
    assert by_architecture({"model_type": "my_q35", "architectures": ["Qwen3_5ForCausalLM"]})[0]["model_type"] == (
        "qwen3_5_text")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "config.json").write_text(json.dumps(
        {**base, "model_type": "no_such_model", "architectures": ["NoSuchForCausalLM"]}))
    assert main(["estimate", "--model", str(tmp_path / "x")]) == 2
