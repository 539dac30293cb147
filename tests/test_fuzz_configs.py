"""A fuzzer of our own (issue 16): mutated configs of every supported family, probed in-process and through
the command line. Each outcome is a number or one line saying what is wrong (a ``ValueError``; exit code 2
on the command line): never a traceback, never a hang. Where transformers builds the mutated config on the
meta device, our number equals its count, or we refuse; a different number is the failure this hunts.

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
        run = subprocess.run([sys.executable, "-m", "memderive.cli", "estimate", "--model", str(path), "--json"],
                             capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
        assert "Traceback" not in run.stderr, run.stderr[-3000:]
        if run.returncode == 0:
            config = json.loads(path.read_text())
            assert json.loads(run.stdout)["parameters"] == _ours(config), path.name
        else:
            lines = run.stderr.strip().splitlines()
            assert run.returncode == 2 and len(lines) == 1 and run.stdout == "", (path.name, run.stderr[-2000:])
