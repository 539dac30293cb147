"""ZeRO-2's data-parallel time is what the frameworks' code runs: a gradient sharded 1/d cannot accumulate over
micro-batches, so every micro-batch's backward reduce-scatters its own (DeepSpeed stage_1_and_2.py
``reduce_ready_partitions_and_remove_grads``; Megatron-FSDP ``grad_reduce_every_bprop`` under 'optim_grads'; FSDP2's
post_backward, which also reshards, so each forward gathers again), while torch.distributed.pipelining holds an FSDP
stage's gradients whole and reduces once after the last backward (``backward_maybe_with_nosync``)."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.memory_bound import achievable_bandwidth, fp32_accumulation_bytes
from memderive.derivations.quantities.timing import data_parallel_s, deepspeed_data_parallel_s, step_time

H100 = gpu("h100-sxm")
#: 8 GPUs a node, 0.8 Gb/s between nodes: nothing hides. 1 B bf16 parameters (2e9 B) over 16 ranks 8 apart (one per
#: node): each collective sends 15/16 of the bytes at 1e8 B/s, 18.75 s, plus NCCL's ring latency under Simple,
#: 8.4 + 15 x 14.0 = 218.4 us (nccl_cost; tests/test_time_model.py reads the same numbers)
SLOW = Cluster(H100, 8, 10**8)
GRADS, D, ONE, L = 2 * 10**9, 16, 18.75, 218.4e-6


def test_zero2_reduces_every_micro_batch_by_hand() -> None:
    """A micro-batch of 3 s (backward 2, forward 1), one stage, m 4.
    ZeRO-1: one reduce-scatter past the last backward, 18.75 - 2 = 16.75, one all-gather past the next step's first
    forward, 18.75 - 1 = 17.75: 34.5 s and 2 latencies, whatever m.
    ZeRO-2: the same plus the 3 earlier micro-batches' reduce-scatters, each past its own backward: 3 x 16.75 =
    50.25; 84.75 s and 5 latencies (4 reduce-scatters, 1 all-gather).
    ZeRO-2 under FSDP2: also the 3 later forwards' all-gathers, 3 x 17.75 = 53.25: 138.0 s and 8 latencies.
    ZeRO-2 under FSDP2 with 4 pipeline stages: the pipelining schedule reduces once, after the last backward has
    returned (stage.py backward_maybe_with_nosync: post_backward after perform_backward), nothing left to hide it:
    18.75 s, and the all-gather as ZeRO-1's, 17.75: 36.5 s, 2 latencies; with 60 s micro-batches the gather hides
    (20 s of forward) and the reduce-scatter does not: 18.75 s, 1 latency."""
    micro = 3.0
    for m in (1, 4):
        assert data_parallel_s(SLOW, GRADS, D, 8, 1, m, micro) == pytest.approx(34.5 + 2 * L)
    assert data_parallel_s(SLOW, GRADS, D, 8, 2, 1, micro) == pytest.approx(34.5 + 2 * L)
    assert data_parallel_s(SLOW, GRADS, D, 8, 2, 4, micro) == pytest.approx(84.75 + 5 * L)
    assert data_parallel_s(SLOW, GRADS, D, 8, 2, 4, micro, fsdp2=True) == pytest.approx(138.0 + 8 * L)
    assert data_parallel_s(SLOW, GRADS, D, 8, 2, 4, micro, p=4, fsdp2=True) == pytest.approx(36.5 + 2 * L)
    assert data_parallel_s(SLOW, GRADS, D, 8, 2, 4, 60.0, p=4, fsdp2=True) == pytest.approx(ONE + L)
    # a micro-batch long enough (backward 2/3 x 60 = 40 s > 18.75, forward 20 s > 18.75): every collective hidden
    assert data_parallel_s(SLOW, GRADS, D, 8, 2, 4, 60.0, fsdp2=True) == 0.0


def test_zero2_step_time_grows_with_micro_batches() -> None:
    """Through ``step_time``: on the slow network ZeRO-2's data-parallel time grows with m (4 reduce-scatters of the
    GPU's gradients against 1) and ZeRO-1's does not; the note says how ZeRO-2 reduced."""
    step = dict(mode="train", batch=1, seq=1024, dp=16)
    z1, z2 = ({m: step_time(estimate("llama-2-7b", **step, zero=z, micro_batches=m), SLOW) for m in (1, 4)}
              for z in (1, 2))
    assert z1[4].dp_s == pytest.approx(z1[1].dp_s, rel=1e-9)
    assert z2[1].dp_s == pytest.approx(z1[1].dp_s, rel=1e-9)  # one micro-batch: the same collectives
    assert z2[4].dp_s > z1[4].dp_s + 3 * 10.0  # 3 more reduce-scatters of 2 x 6.7e9 B each past a backward
    assert z2[4].zero2 == "each" and "ZeRO-2 reduce-scatters each micro-batch's" in " ".join(z2[4].model())
    titan = step_time(estimate("llama-2-7b", **step, zero=2, micro_batches=4, framework="torchtitan"), SLOW)
    assert titan.zero2 == "regather" and titan.dp_s > z2[4].dp_s


def test_deepspeed_engine_zero2_reduces_every_micro_batch() -> None:
    """--grad-sync deepspeed (nothing hidden): stage 2 reduce-scatters in each of the m backwards, m x the one
    reduce-scatter of 4 P bytes (the fp32 gradients), then the all-gather of the 2 P bf16 shards once."""
    c = Cluster(H100, 8, 25 * 10**9)
    step = dict(mode="train", batch=1, seq=1024, dp=16, zero=2, grad_sync="deepspeed", dtype="bf16", micro_batches=4)
    est = estimate("gpt2-xl", **step)
    p = est.number("parameters_per_gpu")
    assert deepspeed_data_parallel_s(est, c) == pytest.approx(4 * c.reduce_scatter(4 * p, 16, 1)
                                                              + c.all_gather(2 * p, 16, 1))
    timed = step_time(est, c)
    assert timed.zero2 == "exposed" and "under ZeRO-2 a reduce-scatter in each micro-batch's" in " ".join(timed.model())


def test_torchtitan_pipeline_stages_reduce_once_and_say_so() -> None:
    """torchtitan with pipeline stages: torch.distributed.pipelining holds each stage's gradients whole and reduces
    once after the last backward, so at a given micro-batch time the collectives are the same whatever m (the step's
    micro-batch time itself moves with m: the fp32 accumulation below), and the note says the memory holds them
    whole (tests/test_pipelined_fsdp2_memory.py counts them)."""
    step = dict(mode="train", batch=1, seq=1024, dp=16, pp=2, framework="torchtitan")
    assert data_parallel_s(SLOW, GRADS, D, 8, 2, 2, 3.0, p=2, fsdp2=True) == \
        data_parallel_s(SLOW, GRADS, D, 8, 2, 4, 3.0, p=2, fsdp2=True)
    z2 = {m: step_time(estimate("llama-2-7b", **step, zero=2, micro_batches=m), SLOW) for m in (2, 4)}
    note = " ".join(z2[4].model())
    assert z2[4].zero2 == "once" and "the memory holds them whole, in fp32" in note


def test_deepspeed_zero2_note_names_overlap_comm() -> None:
    """DeepSpeed's ZeRO config turns overlap_comm on only for stage 3 (config.py overlap_comm_valid); the time hides
    stage 2's reduce-scatters behind each backward as overlap_comm true does, and the note says so."""
    est = estimate("llama-2-7b", mode="train", batch=1, seq=1024, dp=16, zero=2, micro_batches=4,
                   framework="deepspeed", dtype="bf16")
    assert "overlap_comm true" in " ".join(step_time(est, SLOW).model())


def test_pipelined_fsdp2_upcasts_and_adds_each_micro_batch_gradient_into_fp32() -> None:
    """FSDP2 under torch's pipeline schedules, gradient sync off until the last backward (torch/distributed/fsdp/
    _fully_shard/_fsdp_param.py): the first micro-batch's bf16 gradient upcast to the fp32 reduce dtype
    (to_accumulated_grad_if_needed, r 2 w 4: 6 B per parameter), each later one added into it
    (accumulate_unsharded_grad_if_needed, fp32 += bf16, r 4 + 2 w 4: 10 B). m 4: 6 + 3 x 10 = 36 B per parameter a
    step, 9 B per micro-batch; the step's seconds, 36 B x parameters_per_gpu at the H100's streaming bandwidth.
    Without pipeline stages (FSDP2 reduce-scatters each backward, nothing accumulated) none."""
    run = dict(mode="train", batch=1, seq=1024, dp=2, zero=2, micro_batches=4, framework="torchtitan")
    staged = estimate("llama-2-7b", pp=2, **run)
    n = staged.number("parameters_per_gpu")
    assert fp32_accumulation_bytes(staged) == pytest.approx(9 * n, rel=1e-12)
    timed = step_time(staged, "h100-sxm")
    assert timed.fp32_accumulation_s == pytest.approx(36 * n / achievable_bandwidth(H100), rel=1e-9)
    assert "upcast (the first, 6 bytes per parameter) or added (10)" in " ".join(timed.model())
    assert fp32_accumulation_bytes(estimate("llama-2-7b", **run)) == 0
