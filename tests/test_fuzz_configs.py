"""A fuzzer of our own (issue 16): mutated configs of every supported family, probed in-process and through
the command line. Each outcome is a number or one line saying what is wrong (a ``ValueError``; exit code 2
on the command line): never a traceback, never a hang. Where transformers builds the mutated config on the
meta device, our number equals its count, or we refuse; a different number is the failure this hunts.

Issue 20 adds the surfaces a second fuzzer found wanting: second names of MoE and MLA fields (an alias and its
field at different values, a look-alike name the config class ignores), compared with transformers' meta count;
``plan``, ``sweep`` and ``check --file`` at and past their bounds (an answer, or one line at once); and the
Python API called with the wrong things (a ``ValueError`` of one line, nothing else).

Seeded (``random.Random``), so every run replays the same cases; families are read at run time, so a family
added later joins the fuzzer. About a minute on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from typing import Any

import pytest
import transformers

from memderive.derivations.estimate import estimate
from memderive.derivations.models.config import SUPPORTED_MODEL_TYPES, from_config
from memderive.derivations.models.defaults import FAMILY_DEFAULTS
from tests.hf_meta import count_parameters, model_class, small_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED = 16
CASES_PER_FAMILY = 24
COMPARED_PER_FAMILY = 8  # of them, built by transformers too
#: What a mutation writes in place of a field's value (or deletes it).
MUTATIONS: dict[str, Any] = {"delete": ..., "null": None, "zero": 0, "negate": "negate", "huge": 10**30,
                             "string": "x", "list": [1], "float": 1.5, "true": True, "false": False,
                             "object": {"a": 1}, "deep": "deep"}


def _base(model_type: str) -> dict[str, Any]:
    config = small_config(model_type).to_dict()
    if model_type == "deepseek_v2":
        config["num_experts_per_tok"] = 2  # DeepseekV2Config's default is None; our adapter needs k
    return config


def _mutate(config: dict[str, Any], key: str, how: str) -> dict[str, Any]:
    out = dict(config)
    value = MUTATIONS[how]
    if how == "delete":
        out.pop(key, None)
    elif how == "negate":
        old = out.get(key)
        out[key] = -old if isinstance(old, (int, float)) and not isinstance(old, bool) else -1
    elif how == "deep":
        deep: list = []
        for _ in range(50):
            deep = [deep]
        out[key] = deep
    else:
        out[key] = value
    return out


def _cases(model_type: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Mutations of the fields our adapter reads (mostly) and of any other field (sometimes)."""
    rng = random.Random(f"{SEED}-{model_type}")
    base = _base(model_type)
    read = sorted(set(FAMILY_DEFAULTS.get(model_type, {})) & set(base) - {"model_type"})
    other = sorted(set(base) - set(read) - {"model_type"})
    cases = []
    for _ in range(CASES_PER_FAMILY):
        key = rng.choice(read if read and rng.random() < 0.8 else other or read)
        how = rng.choice(sorted(MUTATIONS))
        cases.append((key, how, _mutate(base, key, how)))
    return cases


def _ours(config: dict[str, Any]) -> int | str:
    """Our parameter count, or the one-line message of the ``ValueError`` that refuses the config."""
    start = time.perf_counter()
    try:
        return estimate(from_config(config)).number("parameters")
    except ValueError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 1000, message
        return message
    finally:
        assert time.perf_counter() - start < 20, "a hang"  # seconds, on a loaded machine


def _theirs(model_type: str, config: dict[str, Any]) -> int | None:
    """transformers' count on the meta device, or None when it does not build the config."""
    try:
        built = transformers.CONFIG_MAPPING[model_type].from_dict(config)
        return count_parameters(built, model_class(model_type))
    except Exception:  # noqa: BLE001 -- any refusal of transformers': there is nothing to compare with
        return None


@pytest.mark.parametrize("model_type", SUPPORTED_MODEL_TYPES)
def test_mutated_configs_give_a_number_or_one_line(model_type: str) -> None:
    transformers.logging.set_verbosity_error()
    cases = _cases(model_type)
    rng = random.Random(f"{SEED}-compare-{model_type}")
    compared = set(rng.sample(range(len(cases)), COMPARED_PER_FAMILY))
    for i, (key, how, config) in enumerate(cases):
        ours = _ours(config)
        if i not in compared or not isinstance(ours, int):
            continue
        theirs = _theirs(model_type, config)
        assert theirs is None or ours == theirs, f"{model_type}: {key} {how}: ours {ours:,}, transformers {theirs:,}"


#: Through the command line: a few mutated files per run, and hostile files.
HOSTILE = {"deep.json": "[" * 100_000, "binary.json": b"\xff\xfe\x00{", "empty.json": "", "list.json": "[1, 2]",
           "null.json": "null", "huge.json": json.dumps({"model_type": "llama", "num_hidden_layers": 10**400})}


def _cli_sample() -> list[tuple[str, Any]]:
    rng = random.Random(f"{SEED}-cli")
    families = rng.sample(SUPPORTED_MODEL_TYPES, min(6, len(SUPPORTED_MODEL_TYPES)))
    mutated = [(f"{t}-{key}-{how}.json", json.dumps(config)) for t in families
               for key, how, config in [rng.choice(_cases(t))]]
    return mutated + sorted(HOSTILE.items())


def test_the_command_line_gives_a_number_or_one_line(tmp_path) -> None:
    paths = []
    for name, text in _cli_sample():
        path = tmp_path / name
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        paths.append(path)
    for path in paths:
        run = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", str(path), "--json"],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
        if run.returncode == 0:
            config = json.loads(path.read_text())
            assert json.loads(run.stdout)["parameters"] == _ours(config), path.name
        else:
            lines = run.stderr.strip().splitlines()
            assert run.returncode == 2 and len(lines) == 1 and run.stdout == "", (path.name, run.stderr[-2000:])


# --- issue 20: second names of MoE and MLA fields, plan/sweep/check --file bounds, API misuse -------------------

#: Names configs use for an expert count, a size or an MLA width, and values a mutation gives them (None:
#: the field left out). Written out here, not read from memderive's alias table, so that the table is tested.
ALIAS_NAMES = ("num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "hidden_size",
               "n_embd", "num_attention_heads", "n_head", "num_hidden_layers", "n_layer", "head_dim",
               "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
               "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace")
ALIAS_VALUES = (None, 1, 2, 3, 4, 6, 8, 16)
MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "gpt_oss", "phimoe",
                "granitemoe")
ALIAS_CASES = 5  # per family, each built by transformers too


def _aliased(model_type: str, rng: random.Random) -> dict[str, Any]:
    config = _base(model_type)
    if model_type == "deepseek_v3":
        config["first_k_dense_replace"] = 1  # of the 2 layers: one MoE layer to count
    for _ in range(rng.randint(1, 3)):
        config[rng.choice(ALIAS_NAMES)] = rng.choice(ALIAS_VALUES)
    return {k: v for k, v in config.items() if v is not None}


@pytest.mark.parametrize("model_type", MOE_FAMILIES)
def test_moe_and_mla_second_names_count_what_transformers_builds(model_type: str) -> None:
    transformers.logging.set_verbosity_error()
    rng = random.Random(f"{SEED}-alias-{model_type}")
    for _ in range(ALIAS_CASES):
        config = _aliased(model_type, rng)
        ours = _ours(config)
        theirs = _theirs(model_type, config) if isinstance(ours, int) else None
        assert theirs is None or ours == theirs, f"{model_type}: {config}: ours {ours:,}, transformers {theirs:,}"


SLACK = 2.0  # seconds a loaded 2-core machine adds


def _bound_cases(rng: random.Random) -> list[tuple[str, ...]]:
    """Command lines at and past the bounds of plan, sweep and check --file (files written by the caller)."""
    huge = lambda: str(rng.choice([10**15, 10**16, 2**40 + 1, 963761198400, 10**30]))  # noqa: E731
    span = lambda: rng.choice(["1:10000000000", "1:1000000:1", "1:2000", "5:1", "1:8:0", "1,2,x"])  # noqa: E731
    train = ("--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "128")
    cases: list[tuple[str, ...]] = []
    for _ in range(8):
        cases.append(("plan", "--model", "gpt2", "--seq", "128", "--gpu-memory", "80GB", "--global-batch", huge(),
                      *rng.choice([(), ("--gpus", "8"), ("--gpus", huge())])))
        cases.append(("sweep", *train, rng.choice(["--batch", "--tp", "--pp", "--dp", "--micro-batches"]), span(),
                      *rng.choice([(), ("--seq", "64,128,256"), ("--micro-batches", "1")])))
    cases += [("check", "--file", name) for name in ("copies.md", "ticks.md", "dollars.md", "displays.md")]
    return cases


def test_plan_sweep_and_check_bounds_answer_or_refuse_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    from memderive.commands.cli import main

    claim = "<!-- memderive: quantity=params.total model=gpt2 -->\n$N = 12lh^2$\n\n"
    marker = "<!-- memderive: quantity=params.total model=gpt2 -->\n"
    files = {"copies.md": claim * 40_000, "ticks.md": marker + "`" * 3_000_000,
             "dollars.md": marker + "$x\n" * 500_000, "displays.md": marker + "\\]" + "\\[ x " * 300_000}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    for args in _bound_cases(random.Random(f"{SEED}-bounds")):
        start = time.perf_counter()
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's own refusals exit
            code = exc.code
        elapsed = time.perf_counter() - start
        out, err = capsys.readouterr()
        assert "Traceback" not in err, (args, err[-2000:])
        if code == 2 and out == "":  # a refusal: one line, at once
            assert len(err.strip().splitlines()) == 1 and elapsed < 1 + SLACK, (args, err[-500:], elapsed)
        else:  # an answer (a plan, a CSV, a check report with its verdicts), in seconds
            assert code in (0, 1, 2) and out and elapsed < 10 + SLACK, (args, code, err[-500:], elapsed)


#: What a hurried caller passes where a model, options, a size or a name belongs.
MISUSE = ("train", 1.5, None, -1, 0, 10**30, True, [1], {"a": 1}, b"x", (1, 2), float("nan"))


def _api_calls() -> dict[str, Any]:
    import memderive
    from memderive.derivations.options import Options

    train = Options(mode="train", batch=1, seq=128)
    return {"estimate": lambda x, y: memderive.estimate(x, y),
            "estimate keywords": lambda x, y: memderive.estimate("gpt2", mode="train", batch=x, seq=y),
            "sweep": lambda x, y: memderive.sweep(x, y),
            "sweep keywords": lambda x, y: memderive.sweep("gpt2", mode="train", batch=x, seq=y),
            "plan": lambda x, y: memderive.plan("gpt2", x, y, 128, 8),
            "plan options": lambda x, y: memderive.plan("gpt2", 80 * 10**9, 64, 128, 8, options=x, top=y),
            "plan_infer": lambda x, y: memderive.plan_infer("gpt2", x, y),
            "fit": lambda x, y: memderive.fit("gpt2", x, 80 * 10**9, y),
            "fit capacity": lambda x, y: memderive.fit(x, train, y, "batch"),
            "check": lambda x, y: memderive.check(x, y),
            "check keywords": lambda x, y: memderive.check("params.total", "12lh^2", model=x, symbols=y)}


def test_api_misuse_is_a_value_error_of_one_line() -> None:
    rng = random.Random(f"{SEED}-api")
    for name, call in _api_calls().items():
        for x, y in rng.sample([(x, y) for x in MISUSE for y in MISUSE], 12):
            try:
                call(x, y)
            except ValueError as exc:  # DerivationError, ArgumentError, OptionsError: the CLI's message
                message = str(exc)
                assert message and "\n" not in message and len(message) < 1000, (name, x, y, message)
            except Exception as exc:  # noqa: BLE001 -- any other type is the failure this hunts
                raise AssertionError(f"{name}({x!r}, {y!r}): {type(exc).__name__}: {exc}") from None
