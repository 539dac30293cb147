"""A ZeRO-3 step time sharded past the ranks the time model is checked on says so: the largest ZeRO-3 run among
the held-out published runs it meets (torchtitan's FSDP, 128 GPUs) bounds it, and Narayanan et al. 2021 Table 2's
ZeRO-3 runs (384-2,240 A100s) that it misses lie past it."""

from __future__ import annotations

from types import SimpleNamespace

from memderive.commands.plan import _zero3_cautions
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.timing import ZERO3_CHECKED_RANKS, time_of
from tests.published_runs import HELD_OUT, ZERO3_2021


def _ranks(run) -> int:
    return run.layout.get("dp", 1) * run.layout.get("cp", 1)


def test_the_bound_is_the_largest_checked_zero3_run() -> None:
    checked = [_ranks(r) for r in HELD_OUT if r.layout.get("zero") == 3]
    assert max(checked) == ZERO3_CHECKED_RANKS == 128
    assert min(_ranks(r) for r in ZERO3_2021) == 384 > ZERO3_CHECKED_RANKS


def _model_lines(**layout) -> tuple[str, ...]:
    est = estimate("llama-2-70b", mode="train", batch=1, seq=4096, recompute="full", flash=True, gpu="h100-sxm",
                   **layout)
    return time_of(est).model()


def test_estimate_cautions_past_the_checked_ranks_only() -> None:
    """dp 256 under ZeRO-3: the line, naming 256 ranks and Table 2; dp 128 (the bound) and ZeRO-2 over 512: none."""
    past = [x for x in _model_lines(dp=256, zero=3) if x.startswith("ZeRO-3 over")]
    assert len(past) == 1 and "256 ranks" in past[0] and "Table 2" in past[0]
    assert not any(x.startswith("ZeRO-3 over") for x in _model_lines(dp=128, zero=3))
    assert not any(x.startswith("ZeRO-3 over") for x in _model_lines(dp=512, zero=2))


def test_plan_cautions_the_rows_below_the_first() -> None:
    """Row 1's caution is among the NOTE lines (its estimate); rows 2 and 3 are ZeRO-3 over 64 x 4 = 256 and 512
    ranks, row 4 ZeRO-2: one line naming rows 2 and 3 and the larger count."""
    rows = [SimpleNamespace(options=o) for o in ({"dp": 1024, "zero": 3}, {"dp": 64, "cp": 4, "zero": 3},
                                                 {"dp": 512, "zero": 3}, {"dp": 1024, "zero": 2})]
    lines = _zero3_cautions(rows)
    assert lines[1].startswith("caution (rows 2, 3): ZeRO-3 over 512 ranks")
    assert _zero3_cautions(rows[:1] + rows[3:]) == []
