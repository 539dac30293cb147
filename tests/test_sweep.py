"""Sweeps equal ``estimate`` at every point checked, to the byte; the CLI writes CSV and refuses bad input."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memderive.derivations.estimate import derivation, estimate
from memderive.derivations.memo import Keyed, clear
from memderive.derivations.options import OptionsError
from memderive.derivations.search.sweep import sweep
from memderive.symbolic.grid import WideArray


def _check_points(model: str, fixed: dict, axes: dict, count: int = 6, seed: int = 0) -> None:
    out = sweep(model, **fixed, **axes)
    rng = random.Random(seed)
    names = list(axes)
    for _ in range(count):
        index = tuple(rng.randrange(len(axes[k])) for k in names)
        point = {k: list(axes[k])[i] for k, i in zip(names, index)}
        est = estimate(model, **fixed, **point)
        for q in est.quantities:
            assert out[q.key][index] == est.number(q.key), (q.key, point)
        assert set(out) == {q.key for q in est.quantities}


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_llama_training_grid_equals_estimate() -> None:
    _check_points("llama-2-7b", {"mode": "train"}, {"batch": range(1, 1001), "seq": range(128, 131073, 128)})


def test_layouts_and_fractional_shards_equal_estimate() -> None:
    """ZeRO-3 over d = 3 leaves fractional shards: each node rounds up on its own, as totals do."""
    _check_points("gpt2", {"mode": "train", "zero": 3, "recompute": "selective"},
                  {"dp": [2, 3, 7], "seq": [1, 333, 1024], "batch": [1, 5]}, count=8)
    _check_points("llama-2-70b", {"mode": "train", "sp": True, "flash": True},
                  {"tp": [2, 8], "pp": [2, 4, 5], "micro_batches": [1, 3, 16], "batch": [1, 2], "seq": [4096]}, count=8)


def test_inference_window_and_int4_equal_estimate() -> None:
    """Gemma 2: min(s + n, w) in half the layers; int4 weights with ceil(in/g) group scales."""
    _check_points("gemma-2-9b", {"mode": "infer", "weight_dtype": "int4", "quant_group": 100},
                  {"seq": [1, 4000, 4096, 5000, 70000], "new_tokens": [0, 97, 5000], "batch": [1, 3]}, count=10)
    _check_points("llama-3-8b", {"mode": "infer", "batch": 4}, {"tp": [1, 2, 8, 16], "seq": [7, 8192]})


def test_axes_follow_keyword_order_and_values_beyond_int64_stay_exact() -> None:
    out = sweep("llama-2-7b", mode="train", seq=[128, 256, 384], batch=[1, 2])
    assert out["total_bytes"].shape == (3, 2)
    huge = sweep("llama-2-7b", mode="train", batch=[1, 2**40], seq=[2**20])
    value = huge["total_bytes"][1, 0]
    # two int64-sized limbs per cell, no Python object per cell
    assert isinstance(huge["total_bytes"], WideArray) and type(value) is int and value > 2**63
    assert value == estimate("llama-2-7b", mode="train", batch=2**40, seq=2**20).number("total_bytes")


def test_bad_sweeps_are_errors() -> None:
    with pytest.raises(OptionsError, match="cannot be swept"):
        sweep("gpt2", mode="train", batch=1, seq=128, zero=[0, 1])
    with pytest.raises(OptionsError, match="empty"):
        sweep("gpt2", mode="train", batch=[], seq=128)
    with pytest.raises(OptionsError, match="whole numbers"):
        sweep("gpt2", mode="train", batch=[1, 0], seq=128)


def _cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", "sweep", *args], capture_output=True, text=True,
                          cwd=cwd)


def test_cli_writes_csv_and_refuses_to_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"
    args = ("--model", "llama-2-7b", "--mode", "train", "--batch", "1:3", "--seq", "128:512:128", "-o", str(target))
    assert _cli(*args).returncode == 0
    lines = target.read_text().splitlines()
    assert lines[0].startswith("batch,seq,parameters,") and len(lines) == 1 + 3 * 4
    row = dict(zip(lines[0].split(","), lines[-1].split(",")))
    assert int(row["total_bytes"]) == estimate("llama-2-7b", mode="train", batch=3, seq=512).number("total_bytes")
    again = _cli(*args)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--force" in again.stderr
    assert _cli(*args, "--force").returncode == 0


@pytest.mark.parametrize("bad", ["5:1", "1:x", "1:2:0", "1:2:3:4", "0:3"])
def test_cli_bad_ranges_are_one_line(bad: str) -> None:
    result = _cli("--model", "gpt2", "--mode", "train", "--batch", bad, "--seq", "128")
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_derived_once_per_structure_and_the_same_as_fresh() -> None:
    """Values (b, s, t > 1, ...) share one derivation; a new switch (t = 1) derives anew; a derivation made
    afresh (the memo bypassed) gives the same bytes."""
    first = estimate("gpt2", mode="train", batch=1, seq=128, tp=2, zero=1, dp=2)
    second = estimate("gpt2", mode="train", batch=7, seq=1000, tp=4, zero=1, dp=8)
    assert first.graph is second.graph and first.quantities is second.quantities
    assert estimate("gpt2", mode="train", batch=1, seq=128, zero=1, dp=2).graph is not first.graph
    clear()  # the transformed graphs and their FLOPs memoized below the derivation, forgotten too
    graph, quantities = derivation.__wrapped__(Keyed(None, (second.model, second.options, "first")))
    assert graph is not second.graph and quantities is not second.quantities
    assert [(q.key, q.value(second.values)) for q in quantities] == [
        (q.key, second.number(q.key)) for q in second.quantities]


def test_every_output_past_int64_equals_estimate_at_random_points() -> None:
    """The 1,024,000-configuration LLaMA-2 7B grid with every output, FLOPs included: at 12 random points every
    quantity equals ``estimate``'s exact Python int (an independent path: the derivation's Expr evaluated with
    Python integers), to the byte; the FLOPs of long sequences pass 2^63 (6 * 6.7e9 parameters * 1000 * 131072
    tokens alone is 5.3e18, the attention's b s^2 terms add more) and are compared too; no output holds Python
    objects per cell."""
    axes = {"batch": range(1, 1001), "seq": range(128, 131073, 128)}
    out = sweep("llama-2-7b", mode="train", **axes)
    assert not [k for k, v in out.items() if isinstance(v, np.ndarray) and v.dtype == object]
    rng = random.Random(25)
    points = [(999, 1023), (0, 0)] + [(rng.randrange(1000), rng.randrange(1024)) for _ in range(10)]
    beyond = 0
    for i, j in points:
        est = estimate("llama-2-7b", mode="train", batch=i + 1, seq=128 * (j + 1))
        assert set(out) == {q.key for q in est.quantities}
        for q in est.quantities:
            value = out[q.key][i, j]
            assert isinstance(value, int | np.integer) and int(value) == est.number(q.key), (q.key, i, j)
            beyond += value > 2**63
    assert beyond >= 6  # the last point's FLOPs (and more): the wide path was checked, not only int64


def test_outputs_computes_only_what_is_asked() -> None:
    full = sweep("gpt2", mode="train", batch=[1, 3], seq=[128, 1000])
    some = sweep("gpt2", mode="train", batch=[1, 3], seq=[128, 1000], outputs=["model_flops", "total_bytes"])
    assert list(some) == ["model_flops", "total_bytes"]
    assert all(np.array_equal(np.asarray(some[k]), np.asarray(full[k])) for k in some)
    with pytest.raises(OptionsError, match="no quantity 'bogus'"):
        sweep("gpt2", mode="train", batch=[1, 3], seq=128, outputs=["bogus"])
