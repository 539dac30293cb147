"""The grid's sum of a quantity's terms stays exact past int64 (issue 37, item 11): a 10^12-layer llama's plan
found a 2-GPU layout "fitting" at -8,209,816,073,701,856,768 B, its total_bytes (10,236,928,000,007,694,848 B,
estimate's) wrapped by 2^64 where the whole terms' int64 sum met a rounded-up fractional term's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.options import Options
from memderive.derivations.search.plan import plan
from memderive.symbolic.dims import h, l, t
from memderive.symbolic.grid import WideArray, grid_plan


@pytest.mark.fast
def test_whole_and_rounded_terms_add_past_int64() -> None:
    """l h (whole) plus l h / t (rounded up on its own), l = 2^62 and 3, h = t = 1: each term fits int64, their
    sum 2^63 does not; by hand 2^62 + 2^62 = 2^63 and 3 + 3 = 6."""
    got = grid_plan([l * h, l * h / t]).run({"l": np.array([2**62, 3]), "h": np.array([1, 1]), "t": np.array([1, 1])})
    assert [int(x) for x in (got.tolist() if isinstance(got, WideArray) else np.asarray(got).tolist())] == [2**63, 6]


@pytest.mark.fast
def test_a_rounded_term_over_a_denominator_past_int64() -> None:
    """l h / t with t = 2^70 (one number, folded into the coefficient): int64 columns over a Python int past int64
    raised NumPy's OverflowError (a 10^11-layer, hidden-2,048 llama's plan). By hand: l h + ceil(l h / 2^70) with
    l = 2^62, 3 and h = 1: 2^62 + 1 and 3 + 1."""
    got = grid_plan([l * h, l * h / t]).run({"l": np.array([2**62, 3]), "h": np.array([1, 1]), "t": 2**70})
    assert [int(x) for x in (got.tolist() if isinstance(got, WideArray) else np.asarray(got).tolist())] == [
        2**62 + 1, 4]


@pytest.mark.slow  # seconds (a plan over a 10^11-layer model)
def test_the_fewest_gpus_row_past_int64_is_estimates_bytes() -> None:
    """plan with --gpus unset on a 10^11-layer llama of hidden 2,048 (an OverflowError before): its row re-runs
    through estimate (Python ints, the independent path) to the same bytes, under 80 GiB."""
    cfg = {"model_type": "llama", "hidden_size": 2048, "num_attention_heads": 4, "num_key_value_heads": 4,
           "intermediate_size": 4096, "vocab_size": 1000, "max_position_embeddings": 4096,
           "num_hidden_layers": 10**11}
    row = plan(cfg, 80 * 2**30, 8, 128, None, options=Options(mode="train", batch=1, seq=128, gpu="h100-sxm"),
               top=1)[0]
    assert 0 < row.total_bytes == estimate(cfg, **row.options).number("total_bytes") <= 80 * 2**30


@pytest.mark.fast
def test_a_zero_dimensional_wide_array_is_one_integer() -> None:
    """A quantity all of a plan's layouts share past int64 is a 0-d WideArray: int() of it (plan's
    ``_as_column``) raised TypeError, a traceback from ``memderive plan``; 2^70 + 5 by hand."""
    wide = WideArray.of(2**70 + 5)
    assert int(wide) == 2**70 + 5 and wide.tolist() == 2**70 + 5


@pytest.mark.slow  # seconds (a plan over a 10^12-layer model)
def test_plan_advice_on_a_trillion_layers_is_positive(capsys, tmp_path) -> None:
    """The plan of the module docstring: nothing fits 8 GPUs of 80 GiB; every 'would fit with' figure is a positive
    number of bytes under 80 GiB, and no 2-GPU layout is offered (10^12 layers cannot fit 2 GPUs)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                                "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000,
                                "max_position_embeddings": 4096, "num_hidden_layers": 10**12}))
    code = main(["plan", "--model", str(path), "--gpus", "8", "--gpu", "h100-sxm", "--seq", "128", "--global-batch",
                 "8", "--top", "1", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1 and data["fits"] is False and data["needed_bytes"] > 80 * 2**30
    assert data["would_fit"] and all(0 < x["total_bytes"] <= 80 * 2**30 for x in data["would_fit"])
    assert "--gpus 2" not in [x["change"] for x in data["would_fit"]]
