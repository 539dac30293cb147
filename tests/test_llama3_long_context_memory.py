"""Llama 3 405B at 131,072 tokens on 16,384 H100s (Dubey et al. 2024, arXiv:2407.21783, Table 4: TP 8, CP 16, PP 16,
DP 8; ``tests/published_runs.LLAMA3[2]``), its per-GPU bytes taken apart, and the two corrections they led to:

- ZeRO shards over the data- and context-parallel ranks together, d x cp (Megatron-LM's distributed optimizer over
  ``intra_dp_cp_group``, references ``megatron-optimizer-init``), as the time model already reduced the gradients;
- the interleaved schedule holds at most the step's m micro-batches (Megatron-LM's warm-up is capped at the m v
  chunk micro-batches; references ``megatron-schedules``);
- and the last stage, interleaved, holds the warm-up's (v - 1) p chunk micro-batches and one more, not one micro-batch
  (its output layer still one).
"""

from __future__ import annotations

import pytest

from memderive.symbolic.strategies import PipelineParallel
from tests.published_runs import LLAMA3

T, CP, D = 8, 16, 8  # Table 4: h 16,384, f 53,248, 128 heads, 8 KV heads of 128 (Table 3)


def _run():
    run = LLAMA3[2]
    assert (run.seq, run.layout["tp"], run.layout["cp"], run.layout["pp"], run.layout["dp"]) == (131072, T, CP, 16, D)
    return run.estimate()


@pytest.mark.parametrize("stage,m,expected", [
    # Megatron-LM's interleaved warm-up on rank r: 2(p - r - 1) + (v - 1) p chunk micro-batches, the steady state one
    # more, each chunk 1/v of the stage; never past the m v chunk micro-batches of the step. p 4, v 2:
    ("first", 8, "11/2"),   # rank 0: 2*3 + 1*4 = 10, + 1 = 11 chunks = 5.5 stages' worth (of m v = 16: not capped)
    ("middle", 8, "9/2"),  # rank 1: 2*2 + 4 = 8, + 1 = 9 chunks = 4.5
    ("first", 4, "4"),     # m = p: every forward first, all m v = 8 chunks = 4 (was 4 * (1 + 3/8) = 5.5)
    ("middle", 4, "4"),    # the same 8 chunks on rank 1 (was 4.5)
    ("first", 5, "5"),     # rank 0 would run 10 of the 10 chunks: capped at m v, 5
])
def test_interleaved_in_flight_is_capped_at_the_steps_micro_batches(stage, m, expected) -> None:  # noqa: ANN001
    assert str(PipelineParallel(4, virtual=2, micro_batches=m, stage=stage).in_flight()) == expected


@pytest.mark.parametrize("m,expected", [
    # Megatron-LM main (get_pp_rank_microbatches), last rank r = p - 1 = 3 of p 4, v 2: warm-up 2(4 - 3 - 1) + (2 - 1) 4
    # = 4 chunk micro-batches (chunk 0's micro-batches 0-3), the steady state's forward of chunk 1 one more: 5 chunks of
    # l/(p v) layers = 2.5 stages' worth, p - (p - 1)/v = 4 - 3/2.
    (8, "5/2"),  # 4 < m v = 16: not capped
    (4, "5/2"),  # m = p: 4 < m v = 8, still 5 chunks (before Megatron-LM 4295be1a6c every forward ran first: 4)
    (2, "2"),    # m 2 (below p, as memderive allows): 4 >= m v = 4, all 4 chunks = 2
])
def test_interleaved_last_stage_holds_the_warm_up(m, expected) -> None:  # noqa: ANN001
    assert str(PipelineParallel(4, virtual=2, micro_batches=m, stage="last").in_flight()) == expected


def test_interleaved_last_stage_symbolic_and_without_interleaving() -> None:
    """((v - 1) p + 1)/v = p - (p - 1)/v in general; 1F1B's last rank warms up 0 and holds 1, whatever m."""
    from memderive.symbolic.dims import p, v

    assert str(PipelineParallel(p, virtual=v, stage="last").in_flight()) == "p - p/v + 1/v"
    assert [str(PipelineParallel(4, micro_batches=m, stage="last").in_flight()) for m in (1, 8)] == ["1", "1"]


def test_the_published_layouts_last_stage() -> None:
    """The last stage's 7 layers (v 8, m = p = 16): rank 15 warms up 2 x 0 + 7 x 16 = 112 chunk micro-batches of the
    m v = 128, and holds 113 chunks = 113/8 = 14.125 stages' worth: 7 x 14.125 = 98.875 layer-micro-batches x 533,200,896
    = 52,720,238,592 B. The output layer, in the last chunk, runs each backward straight after its forward: one
    micro-batch of the final norm's and the LM head's inputs (2 B x 8,192 x 16,384/8 = 33,554,432 each) and the fp32
    logits (4 B x 8,192 x 128,256/8 = 525,336,576), 592,445,440 B. 53,312,684,032 B in all; the first stage's 7 layers
    hold 112 layer-micro-batches, 112 x 533,200,896 = 59,718,500,352; both below the middle stage's 68,249,714,688,
    which stays the peak."""
    from memderive.derivations.estimate import stage_derivations

    est = _run()
    acts = {g.strategies[-1].rsplit(", ", 1)[1]: next(q for q in qs if q.key == "activation_bytes").value(est.values)
            for g, qs in stage_derivations(est.model, est.options)}
    assert acts == {"first stage)": 59_718_500_352, "middle stage)": 68_249_714_688, "last stage)": 53_312_684_032}
    assert est.number("activation_bytes") == 68_249_714_688


def test_one_f_one_b_in_flight_is_unchanged() -> None:
    """1F1B without interleaving: p on the first stage, p - 1 on the second, at most m (as before)."""
    counts = [str(PipelineParallel(4, micro_batches=m, stage=s).in_flight()) for s in ("first", "middle") for m in (2, 8)]
    assert counts == ["2", "4", "2", "3"]


def test_the_published_layouts_activations() -> None:
    """One layer, one micro-batch, on one GPU: s/cp = 8,192 tokens, t = 8 with sequence parallelism, so every
    h-wide tensor holds 8,192 x 2,048 elements. Saved in bf16: the two norms' inputs, their outputs (the QKV and
    gate/up inputs), q and the attention output O: 6 x 2 B x 8,192 x 2,048 = 201,326,592; k and v: 2 x 2 B x 8,192 x
    (8 x 128 / 8) = 4,194,304; FlashAttention's fp32 logsumexp: 4 B x 8,192 x 128/8 = 524,288; Megatron-LM's fused
    SwiGLU keeps only its input, gate and up, and fc2 the product it reads: 3 x 2 B x 8,192 x 53,248/8 = 327,155,712
    (unfused, silu(gate) too: 436,207,616). Sum 533,200,896 B per layer.
    The middle stages hold 112/14 = 8 layers, one per chunk (v 8); with m = p = 16 Megatron-LM's interleaved
    schedule runs all 16 x 8 chunk forwards first, so 128 layer-micro-batches are held: 128 x 533,200,896 =
    68,249,714,688 B."""
    est = _run()
    assert est.number("activation_bytes_per_layer") == 533_200_896
    assert est.number("activation_bytes") == 128 * 533_200_896 == 68_249_714_688


def test_zero_shards_over_data_and_context_parallel_ranks() -> None:
    """The middle stage's 8 layers over t = 8: per layer 3 f h + 2 h^2 + 2 a_kv h^2/a = 2,617,245,696 +
    536,870,912 + 33,554,432 = 3,187,671,040 matrix parameters, 1/8 each, and the two norms' 2 h = 32,768 whole:
    8 x (398,458,880 + 32,768) = 3,187,933,184 parameters. ZeRO-2 (bf16 weights, gradients, 12 B of Adam and master
    per parameter) over d x cp = 8 x 16 = 128 ranks: weights 2 x 3,187,933,184 = 6,375,866,368, gradients
    6,375,866,368/128 = 49,811,456, optimizer 12 x 3,187,933,184/128 = 298,868,736; 6,724,546,560 B in all (over d = 8
    alone it was 6,375,866,368 + 796,983,296 + 4,781,899,776 = 11,954,749,440)."""
    est = _run()
    assert est.number("parameters_per_gpu") == 3_187_933_184
    terms = {t.path: t for t in est.quantity("model_state_bytes").breakdown.terms}
    assert est.number("model_state_bytes") == 6_724_546_560
    assert str(terms["model_states/optimizer"].expr).count("cp*d") >= 1
    # cp 16 x d 8 shards as d 128 without context parallelism (the 8K run of Table 4 on 16,384 GPUs)
    assert LLAMA3[1].estimate().number("model_state_bytes") == 6_724_546_560
    # and without context parallelism nothing changes: the formula has no cp
    assert "cp" not in str(LLAMA3[1].estimate().quantity("model_state_bytes").breakdown.total)


def test_the_published_layout_fits_80_gib() -> None:
    """Activations 68,249,714,688 + model states 6,724,546,560 + ring attention's cp - 1 = 15 received K/V chunks of
    one layer (2 x 2 B x 8,192 x 128 each: 15 x 4,194,304 = 62,914,560) = 75,037,175,808 B, 69.88 GiB: under the
    H100's 80 GiB (85,899,345,920) by 10,862,170,112 B, as Meta ran it. With SwiGLU unfused (silu(gate) saved too,
    2 B x 8,192 x 53,248/8 = 109,051,904 B more per held layer-micro-batch, 128 of them) it was 88,995,819,520 B,
    3,096,473,600 B over."""
    est = _run()
    assert est.number("total_bytes") == 68_249_714_688 + 6_724_546_560 + 62_914_560 == 75_037_175_808
    assert 80 * 2**30 - est.number("total_bytes") == 10_862_170_112


@pytest.mark.parametrize("stage", ["first", "middle", "last"])
def test_the_capped_interleaved_count_sweeps_on_the_layout_grid(stage: str) -> None:
    """The plan evaluates each structure's layouts as int64 columns (``symbolic.grid``); a term it cannot sweep sends
    every row through the per-row evaluator (34fc43c's min(p + (p-1)/v, m) did: cold plans 2.5-4x slower). The
    capped count must sweep, and give Megatron's numbers row by row: p 4, v 2 on the first rank, m 8 and m 3:
    min(4 + 3/2, 8) = 11/2 and min(11/2, 3) = 3; on the last rank min(4 - 3/2, 3) = 5/2."""
    import numpy as np

    from memderive.symbolic.dims import m, p, v
    from memderive.symbolic.grid import grid_plan

    count = PipelineParallel(p, virtual=v, micro_batches=m, stage=stage).in_flight()
    env = {"p": np.array([4, 4, 8]), "v": np.array([2, 2, 4]), "m": np.array([8, 3, 16])}
    got = grid_plan([count * 2]).run(env)  # twice the count: whole numbers here, ceiled as a quantity is
    # by hand, each row 2 min((p v + p - 2r - 1)/v, m): p 8, v 4, m 16: first 8 + 7/4 = 39/4, middle 8 + 5/4 = 37/4,
    # last 8 - 7/4 = 25/4, each under 16, doubled and rounded up: 20, 19, 13
    expected = {"first": [11, 6, 20], "middle": [9, 6, 19], "last": [5, 5, 13]}[stage]
    assert [int(x) for x in np.asarray(got).ravel()] == expected
