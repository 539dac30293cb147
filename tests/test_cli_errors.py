"""Bad input: one line on stderr, exit code 2, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "render.cli", *args], capture_output=True, text=True, timeout=120)


def write(tmp_path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


GOOD = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
        "intermediate_size": 100, "vocab_size": 50}


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda tmp: str(tmp / "missing.json"), "no such file"),
    (lambda tmp: write(tmp, "{not json"), "not valid JSON"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "model_type": "mamba"})), "model_type 'mamba' is not supported"),
    (lambda tmp: write(tmp, json.dumps({k: v for k, v in GOOD.items() if k != "model_type"})), "'model_type'"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "hidden_size": 0})), "positive integer"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "num_hidden_layers": -3})), "positive integer"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "hidden_size": 66})), "not divisible by 4 heads"),
    (lambda tmp: write(tmp, json.dumps({**GOOD, "num_key_value_heads": 3})), "not divisible by 3 key/value"),
    (lambda tmp: write(tmp, json.dumps({k: v for k, v in GOOD.items() if k != "vocab_size"})), "'vocab_size'"),
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
    assert "12*h**2 + 13*h" in result.stdout


@pytest.mark.parametrize(("strategy", "closed_form"), [
    # Korthikanti et al. 2022 Table 2 rows, in the printer's term order
    ("tp+sp", "(b*h*s)*(5*a*s/(h*t) + 34/t)"),
    ("tp+selective", "(b*h*s)*(10 + 24/t)"),
    ("full", "(b*h*s)*2"),
])
def test_derive_strategy_shorthand(strategy: str, closed_form: str) -> None:
    result = run("derive", "activations", "--strategy", strategy)
    assert result.returncode == 0
    assert result.stdout.strip().endswith(closed_form)


def test_unknown_strategy_is_one_line() -> None:
    result = run("derive", "activations", "--strategy", "tp+bogus")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "bogus" in result.stderr


def test_output_piped_into_a_closed_pipe_is_not_an_error() -> None:
    proc = subprocess.run(f"{sys.executable} -m render.cli estimate --model llama-2-7b | head -1", shell=True,
                          capture_output=True, text=True, timeout=120)
    assert proc.stderr == "" and proc.stdout.startswith("model: llama-2-7b")
