"""The step timeline against a measured training step on CPU, to the byte.

Each case (``tests/step_cases.py``) runs a whole steady-state step of a small transformers model
(LLaMA-style GQA and GPT-2, eager and SDPA attention, ``--precision`` master and pure, the update after
backward or in it, ``--optimizer-in-backward``; the output layer and loss whole or in chunks as torchtune's
``CEWithChunkedOutputLoss``, ``--loss-chunks``; every decoder layer checkpointed as transformers'
``activation_checkpointing_enable`` runs it, ``--recompute full``): forward with the loss, ``loss.backward()``, AdamW's
foreach update, ``zero_grad(set_to_none=True)``, counting
the bytes of every live tensor storage (``tests/hf_step.py``). memderive derives the same step from
its graph of the config under transformers' CPU layers (``symbolic.timeline``): the high-water mark
must be equal, and so must every allocation of forward and backward, in order, with the bytes
allocated after it. ``python benchmarks/cpu_step_peak.py`` prints the table.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.hf_saved import need_torchao
from tests.step_cases import CASES, FP8_CASES, SMALL, Case, derived, measured


@pytest.mark.parametrize("case", CASES, ids=str)
def test_peak_equals_the_measured_high_water_mark(case: Case) -> None:
    got, want = derived(case), measured(case)
    assert got.baseline == want.baseline  # weights, states and step counts, buffers, input_ids and labels
    assert want.end == want.baseline  # the measured step gives back all it took: the accounting closes
    assert got.peak_bytes == want.peak, (got.peak_at, want.peak_at)


def _allocations(moments: list[tuple[str, int, int]]) -> tuple[list[tuple[int, int]], Counter]:
    """(bytes allocated, allocated after) of every allocation outside the update, and the update's as a
    multiset (its order is the parameters' registration order, which the graph does not keep)."""
    steps = [(change, now) for phase, change, now in moments if change > 0 and phase != "optimizer"]
    update = Counter(change for phase, change, _ in moments if change > 0 and phase == "optimizer")
    return steps, update


@pytest.mark.parametrize("case", [c for c in CASES if (c.shape == SMALL or c.loss_chunks > 1 and c.shape.b == 1)
                                  and c.precision == "pure" and not c.recompute], ids=str)
def test_every_allocation_in_order(case: Case) -> None:
    """Forward (each op's ATen calls and how long Python holds their results) and backward (autograd's
    node order, each node's gradients and temporaries, accumulation) allocate exactly as measured. (Not the
    recompute cases: without a cache transformers' mask code first checks for packed sequences, a few
    transient int64 tensors of b x s the timeline leaves out; their peaks are equal above.)"""
    got = _allocations([(m.phase, m.change, m.bytes) for m in derived(case).moments[1:]])
    phases = {"forward": "forward", "optimizer": "optimizer"}
    want = _allocations([(phases.get(where, "backward" if where.startswith("backward") else where), change, now)
                         for where, _, change, now in measured(case).moments])
    assert got[0] == want[0]
    assert got[1] == want[1]


def test_peaks_fall_at_different_moments() -> None:
    """The cases reach their high-water mark in the update, in the loss's forward and backward and inside a
    layer's backward: the equality above checks each kind of moment."""
    where = {derived(c).peak_at.split(" of ")[0] for c in CASES}
    assert {"optimizer step", "loss (forward)", "loss (backward)", "backward"} <= where


@pytest.mark.parametrize("case", FP8_CASES, ids=str)
def test_float8_step_to_the_byte(case: Case) -> None:
    """``--fp8``: torchao 0.18's Float8Linear (real ``torch._scaled_mm`` on CPU, not emulated) in the measured
    step; memderive's Float8 linears (``symbolic.float8``: the casts, the scaled matmuls' copies, scales and
    reciprocals, the 16-bit input and weight saved) in the derived one. Same high-water mark, and every
    allocation of forward and backward in order with the bytes allocated after it."""
    need_torchao()
    got, want = derived(case), measured(case)
    assert got.baseline == want.baseline  # Float8 linears keep the weights and states as they are
    assert got.peak_bytes == want.peak, (got.peak_at, want.peak_at)
    phases = {"forward": "forward", "optimizer": "optimizer"}
    mine = _allocations([(m.phase, m.change, m.bytes) for m in got.moments[1:]])
    theirs = _allocations([(phases.get(where, "backward" if where.startswith("backward") else where), change, now)
                           for where, _, change, now in want.moments])
    assert mine == theirs
