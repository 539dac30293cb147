"""plan searches context parallelism (cp 1-16 with FlashAttention, seq divisible by 2 cp) and, with a GPU count,
pipeline degrees that split the layers unevenly (Llama 3 405B's 126 layers over 16 stages: 7 + 14 x 8 + 7); every
row re-runs through estimate to the same bytes."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import Options
from memderive.derivations.search.plan import PlanError, _candidates, plan, uneven_split


def test_uneven_splits_by_hand() -> None:
    """126 over 16: ceil(126/16) = 8 on 14 stages, 126 - 112 = 14 left, 7 and 7; 70 over 12: 6 on 10, 5 and 5
    (BLOOM); 10 over 4: 3 on 2, 2 and 2; an even split is none."""
    assert uneven_split(126, 16) == (7, 7) and uneven_split(70, 12) == (5, 5) and uneven_split(10, 4) == (2, 2)
    assert uneven_split(12, 4) is None


def test_a_gpu_count_brings_pipeline_degrees_the_layers_do_not_divide() -> None:
    """gpt2-xl (48 layers) on 20 GPUs: p = 5 and 10 do not divide 48; split as ceil(48/5) = 10 on 3 stages and
    9 + 9, and 5 on 8 stages with 4 + 4."""
    model = resolve_model("gpt2-xl")
    base = Options(mode="train", batch=1, seq=1024)
    rows = _candidates(model, base, 20, 20, True)
    split = {(r["pp"], r["first_stage_layers"], r["last_stage_layers"]) for r in rows if r["first_stage_layers"]}
    assert (5, 9, 9) in split and (10, 4, 4) in split


#: A small LLaMA (rotary positions: any length).
TINY = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 65536}


def test_a_long_sequence_that_fits_only_split_over_cp() -> None:
    """A small LLaMA at 16,384 tokens on 4 GPUs (one per node), global batch 4: a budget below every layout without context
    parallelism (the least of them, by plan on a budget that fits all) leaves rows with cp > 1 only, each equal to
    estimate's bytes for its options. (On the budget that fits all, cp > 1 rows no faster than cp 1 are not shown:
    cp only where it pays; cp 2 given lists them.)"""
    one = Options(gpus_per_node=1)  # no tensor parallelism (it would split the tokens too)
    every = plan(TINY, 10**12, 4, 16384, 4, top=10**6, options=one)
    without = min(r.total_bytes for r in every if r.options.get("cp", 1) == 1)
    split = plan(TINY, 10**12, 4, 16384, 4, top=10**6, options=Options(mode="train", batch=1, seq=16384, cp=2,
                                                                       flash=True, gpus_per_node=1))
    assert any(r.total_bytes < without for r in split)
    rows = plan(TINY, without - 1, 4, 16384, 4, top=50, options=one)
    assert rows and all(r.options.get("cp", 1) > 1 for r in rows)
    for r in rows[:5]:
        assert estimate(TINY, **r.options).number("total_bytes") == r.total_bytes < without
    # every row spans the 4 GPUs asked for: t x p x d x cp (the cp factor was left out: cp 4 read as 1 GPU)
    assert {r.gpus for r in rows} == {4}
    # without a count (cp as given, 2 here), the fewest GPUs and each row's count include cp's factor
    fewest = plan(TINY, without - 1, 4, 16384, None, top=50, options=Options(mode="train", batch=1, seq=16384, gpus_per_node=1, cp=2, flash=True))
    assert fewest and {r.options["cp"] for r in fewest} == {2}
    assert all(r.gpus == 2 * r.options.get("dp", 1) * r.options.get("pp", 1) for r in fewest)
    assert len({r.gpus for r in fewest}) == 1


def test_a_given_cp_is_every_rows_and_needs_flash() -> None:
    """``plan --cp 4`` (options cp 4) keeps cp 4 in every row, as ``--ep`` keeps its ep: the small LLaMA on 8 GPUs,
    one per node, at 16,384 tokens: dp = 8 / (pp x 4) with pp in 1, 2, so dp is 2 or 1; each row re-runs through
    estimate to its bytes. Without FlashAttention ring attention has no kernel: a PlanError, not a plan."""
    rows = plan(TINY, 10**12, 4, 16384, 8, top=10**6, options=Options(mode="train", batch=1, seq=16384, cp=4,
                                                                      flash=True, gpus_per_node=1))
    assert rows and {r.options["cp"] for r in rows} == {4}
    assert {r.options.get("dp", 1) * r.options.get("pp", 1) for r in rows} == {2}
    for r in rows[:3]:
        assert estimate(TINY, **r.options).number("total_bytes") == r.total_bytes
    with pytest.raises(PlanError, match="--cp 4 runs ring attention on a fused kernel"):
        plan(TINY, 10**12, 4, 16384, 8, options=Options(mode="train", batch=1, seq=16384, cp=4, flash=True),
             flash=False)
