"""Nemotron (transformers' ``nemotron``): the squared-ReLU MLP's saved bytes under Megatron's kernels and the refusal
of a config transformers cannot build. Parameters and transformers' saved bytes are held to transformers itself by
the family-wide tests (tests/test_params_transformers.py, tests/hf_families.TINY)."""

from __future__ import annotations

import json

from memderive.derivations.estimate import estimate
from memderive.derivations.models.config import from_config
from tests.in_process import estimate_cli

#: h 64, 4 heads, 2 KV heads, f 96 (b 2, s 24 below).
TINY = {"model_type": "nemotron", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 128}


def _layer_bytes(act: str) -> int:
    model = from_config({**TINY, "hidden_act": act})
    return estimate(model, mode="train", batch=2, seq=24).number("activation_bytes_per_layer")


def test_squared_relu_saves_one_more_ffn_tensor_than_relu() -> None:
    """ReLU saves its output, the tensor down_proj saves already; squared ReLU saves one tensor of the input's size
    besides (Megatron-Core's squared_relu, torch.pow(F.relu(x), 2), the input; transformers' ReLUSquaredActivation,
    relu's output, saved by relu and square alike: one storage, measured in tests/hf_families.TINY['nemotron']):
    b s f 16-bit = 2 x 24 x 96 x 2 = 9,216 bytes more per layer."""
    assert _layer_bytes("relu2") - _layer_bytes("relu") == 9216


def test_a_config_without_kv_heads_is_refused_in_one_line(tmp_path) -> None:
    """NemotronConfig leaves num_key_value_heads None and NemotronAttention divides by it (transformers 5.25:
    TypeError), so memderive refuses rather than guess one KV head per head."""
    path = tmp_path / "nemotron.json"
    path.write_text(json.dumps({k: v for k, v in TINY.items() if k != "num_key_value_heads"}))
    result = estimate_cli("--model", str(path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and result.stdout == "" and len(lines) == 1
    assert "'num_key_value_heads'" in lines[0] and "is required" in lines[0], lines[0]
