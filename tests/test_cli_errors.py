"""Bad input: one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", *args], capture_output=True, text=True, timeout=120)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


GOOD = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
        "intermediate_size": 100, "vocab_size": 50}


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda tmp: str(tmp / "missing.json"), "no such file"),
    (lambda tmp: write(tmp, "{not json"), "not valid JSON"),
    # a model_type no family takes is traced from transformers' code (issue 38); one transformers lacks is refused
    (lambda tmp: write(tmp, json.dumps({**GOOD, "model_type": "no_such_model"})),
     "model_type 'no_such_model' is unknown to transformers"),
    (lambda tmp: write(tmp, json.dumps({k: v for k, v in GOOD.items() if k != "model_type"})), "'model_type'"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "hidden_size": 0})), "positive integer"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "num_hidden_layers": -3})), "positive integer"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "hidden_size": 66})), "not divisible by 4 heads"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "num_key_value_heads": 3})), "not divisible by 3 key/value"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "vocab_size": None})), "'vocab_size'"),  # null is not absent
    (lambda tmp: "not-a-model", "unknown model"),
])
def test_bad_model_input(tmp_path, make, fragment) -> None:
    result = run("estimate", "--model", make(tmp_path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert fragment in lines[0]


def test_json_output_has_exact_parameters() -> None:
    result = run("estimate", "--model", "gpt2", "--json")
    assert result.returncode == 0
    assert json.loads(result.stdout)["parameters"] == 124_439_808


def test_derive_params_prints_closed_form() -> None:
    result = run("derive", "params-per-layer", "--model", "gpt2")
    assert result.returncode == 0
    assert "12*h^2 + 13*h" in result.stdout  # a reader's notation (issue 14): ^, not **


@pytest.mark.parametrize(("strategy", "closed_form"), [
    # Korthikanti et al. 2022 Table 2 rows, in the printer's term order
    ("tp+sp", "(b*h*s)*(5*a*s/(h*t) + 34/t)"),
    ("tp+selective", "(b*h*s)*(10 + 24/t)"),
    ("full", "(b*h*s)*2"),
])
def test_derive_strategy_shorthand(strategy: str, closed_form: str) -> None:
    result = run("derive", "activations", "--strategy", strategy, "--attention", "eager")  # the paper's attention
    assert result.returncode == 0
    assert result.stdout.strip().endswith(closed_form)


def test_unknown_strategy_is_one_line() -> None:
    result = run("derive", "activations", "--strategy", "tp+bogus")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "bogus" in result.stderr


def test_output_piped_into_a_closed_pipe_is_not_an_error() -> None:
    proc = subprocess.run(f"{sys.executable} -m memderive.commands.cli estimate --model llama-2-7b | head -1", shell=True,
                          capture_output=True, text=True, timeout=120)
    assert proc.stderr == "" and proc.stdout.startswith("model: llama-2-7b")


GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 50, "n_positions": 32}
MPT = {"model_type": "mpt", "d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 50}
QWEN2 = {**GOOD, "model_type": "qwen2", "num_key_value_heads": 4, "use_sliding_window": True, "sliding_window": 8}
GEMMA3 = {**GOOD, "model_type": "gemma3_text", "num_key_value_heads": 4, "head_dim": 16}


@pytest.mark.parametrize(("config", "fragment"), [
    # each was a traceback and exit 1: a list or {} where a name or number belongs
    ({**GOOD, "model_type": ["llama"]}, "'model_type' = ['llama'] must be a string"),  # TypeError: unhashable
    ({**GOOD, "model_type": {}}, "'model_type' = {} must be a string"),
    ({**GOOD, "hidden_act": ["silu"]}, "'hidden_act' = ['silu'] must be an activation name"),  # TypeError
    ({**GOOD, "hidden_act": {}}, "'hidden_act' = {} must be an activation name"),
    ({**GPT2, "activation_function": ["gelu"]}, "'activation_function' = ['gelu'] must be an activation name"),
    ({**MPT, "attn_config": ["alibi"]}, "'attn_config' = ['alibi'] must be a JSON object"),  # AttributeError
    ({**MPT, "attn_config": "alibi"}, "'attn_config' = 'alibi' must be a JSON object"),
    ({**QWEN2, "max_window_layers": "1"}, "'max_window_layers' = '1' must be a whole number"),  # TypeError
    ({**QWEN2, "max_window_layers": -1}, "'max_window_layers' = -1 must be a whole number"),
    ({**GEMMA3, "sliding_window_pattern": 0}, "'sliding_window_pattern' = 0 must be a positive integer"),  # 1/0
    ({**GEMMA3, "sliding_window_pattern": "x"}, "'sliding_window_pattern' = 'x' must be a positive integer"),
    ({**GPT2, "tie_word_embeddings": "false"}, "'tie_word_embeddings' = 'false' must be true or false"),
])
def test_ill_typed_config_fields_are_one_line(tmp_path, config: dict, fragment: str) -> None:
    result = run("estimate", "--model", write(tmp_path, json.dumps(config)))
    assert result.returncode == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert fragment in lines[0], lines[0]


def test_qwen_max_window_layers_zero_is_read(tmp_path) -> None:
    """transformers' Qwen2 slides layers i >= max_window_layers: 0 makes both layers slide (window 8 for all)."""
    result = run("estimate", "--model", write(tmp_path, json.dumps({**QWEN2, "max_window_layers": 0})), "--json")
    assert result.returncode == 0, result.stderr
