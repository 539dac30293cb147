"""Regression tests of issue 16 (what a fuzzer found): no wrong number, no hang, no traceback.

One test (or a few) per item of the issue; expected numbers come from transformers on the meta
device or from arithmetic in the comments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import transformers

from derivations.estimate import UnknownQuantity, estimate, resolve_model
from derivations.models.config import ConfigError, from_config
from derivations.options import ArgumentError, Options
from tests.hf_meta import count_parameters, small_config


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args: str, cwd: str | None = None, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run([sys.executable, "-m", "render.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, input=stdin, timeout=timeout)


def one_line_exit_2(result: subprocess.CompletedProcess, fragment: str = "") -> None:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert fragment in lines[0]


# --- 2. JSON null is not "absent" -------------------------------------------------------------

@pytest.mark.parametrize("field", ["multi_query", "parallel_attn", "bias", "alibi", "new_decoder_architecture"])
def test_null_switch_is_refused_naming_it(field: str) -> None:
    """FalconConfig keeps None, which its modeling code reads as false (multi_query null: 8.2B, not 6.9B)."""
    config = {**small_config("falcon").to_dict(), field: None}
    with pytest.raises(ConfigError, match=f"'{field}' = None is not supported: null is not"):
        from_config(config)


@pytest.mark.parametrize(("model_type", "field"), [("gpt2", "n_inner"), ("llama", "num_key_value_heads"),
                                                   ("llama", "head_dim"), ("qwen2", "sliding_window"),
                                                   ("mistral", "sliding_window"), ("falcon", "ffn_hidden_size")])
def test_null_where_transformers_reads_it_as_derived(model_type: str, field: str) -> None:
    """Where the config class's own default is None (derived) a null is read as transformers reads it."""
    config = {**small_config(model_type).to_dict(), field: None}
    hf = transformers.CONFIG_MAPPING[model_type].from_dict(config)
    assert estimate(from_config(config)).number("parameters") == count_parameters(hf)


def test_null_size_is_refused() -> None:
    with pytest.raises(ConfigError, match="'vocab_size' = None"):
        from_config({**small_config("llama").to_dict(), "vocab_size": None})


# --- 3. a name that is both a preset and a local path -------------------------------------------

SMALL_GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_head": 4, "n_layer": 2, "vocab_size": 128, "n_positions": 64}


@pytest.mark.parametrize("name", ["gpt2", "LLAMA-2-7B"])
def test_a_local_path_wins_over_a_bundled_name(tmp_path, monkeypatch, name: str) -> None:
    (tmp_path / name).mkdir()
    (tmp_path / name / "config.json").write_text(json.dumps(SMALL_GPT2))
    monkeypatch.chdir(tmp_path)
    model = resolve_model(name)
    assert model.source == os.path.join(name, "config.json") and model.sizes["h"] == 64
    result = cli("estimate", "--model", name, "--json", cwd=str(tmp_path))
    # by hand: wte 128*64 + wpe 64*64 = 12,288; per layer 12*64^2 + 13*64 = 49,984; two 99,968; ln_f 128
    assert json.loads(result.stdout)["parameters"] == 12_288 + 99_968 + 128 == 112_384


def test_a_folder_without_config_shadowing_a_bundled_name_is_an_error(tmp_path, monkeypatch) -> None:
    (tmp_path / "gpt2").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArgumentError, match="bundled model and also a folder"):
        resolve_model("gpt2")
    assert resolve_model("llama-2-7b").source == "bundled preset"


# --- 4. the Python API validates types and names at the call ------------------------------------

@pytest.mark.parametrize("kwargs", [dict(offload="false"), dict(flash="no"), dict(zero=True), dict(sp="yes"),
                                    dict(tp=None), dict(dtype=16), dict(batch=1.5), dict(no_such_option=1),
                                    dict(recompute=True)])
def test_api_refuses_wrong_types_and_names(kwargs: dict) -> None:
    import render.api

    base = dict(mode="train", batch=1, seq=8, dp=2)
    with pytest.raises(ArgumentError) as caught:
        estimate("gpt2", **{**base, **kwargs})
    name, message = next(iter(kwargs)), str(caught.value)
    assert len(message.splitlines()) == 1 and (name in message or name.replace("_", "-") in message)
    with pytest.raises(ArgumentError):  # at the call, not when displayed
        render.api.estimate("gpt2", **{**base, **kwargs})


@pytest.mark.parametrize("call", [lambda: estimate("gpt2", "train"), lambda: estimate(["gpt2"]),
                                  lambda: estimate(12), lambda: estimate("gpt2", Options(), mode="train"),
                                  lambda: estimate("x" * 10_000_000)])
def test_api_misuse_is_one_value_error(call) -> None:
    with pytest.raises(ArgumentError) as caught:
        call()
    assert len(str(caught.value)) < 300


def test_unknown_quantity_is_a_value_error_and_a_key_error() -> None:
    est = estimate("gpt2")
    for key in (["parameters"], "no_such"):
        with pytest.raises(UnknownQuantity) as caught:
            est.number(key)  # type: ignore[arg-type]
        assert isinstance(caught.value, ValueError) and isinstance(caught.value, KeyError)


def test_check_refuses_unknown_options_for_every_quantity() -> None:
    from derivations.claims.check import check

    with pytest.raises(ArgumentError, match="unknown option 'zer0'"):
        check("params.total", "12lh^2", model="gpt2", zer0=1)
