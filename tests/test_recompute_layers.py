"""Megatron's full recompute of some layers: ``--recompute-method block|uniform --recompute-layers N``
(megatron/core/recompute.py ``checkpointed_forward``: uniform checkpoints groups of N of a chunk's layers at their
input, the last group shorter; block checkpoints the first N of each model chunk's and runs the rest without),
held to hand arithmetic on GPT-2; and its refusals."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.memory_bound import fp8_cast_bytes, fused_elementwise_bytes
from tests.in_process import estimate_cli

# GPT-2 small under Megatron: 12 layers, h 768, a 12, b 1, s 1024, bf16, FlashAttention, dropout on.
# One layer saves, without recompute (Korthikanti et al. 2022 Table 2's 34 s b h, the 5 a s^2 b scores replaced by
# the flash kernel's fp32 logsumexp, 4 a s b bytes):
#   s b h = 1024 * 768 = 786,432;  P = 34 * 786,432 + 4 * 12 * 1024 = 26,738,688 + 49,152 = 26,787,840 B
# and, checkpointed, its input only: C = 2 s b h = 1,572,864 B.  P - C = 25,214,976 B.
P, C = 26_787_840, 1_572_864
# One layer's forward matmuls (the recompute's FLOPs): 24 b s h^2 + 4 b s^2 h
#   = 24 * 1024 * 589,824 + 4 * 1,048,576 * 768 = 14,495,514,624 + 3,221,225,472 = 17,716,740,096
LAYER_FORWARD = 17_716_740_096
STEP = {"mode": "train", "batch": 1, "seq": 1024, "framework": "megatron", "attention": "flash"}


def _acts(**more) -> tuple[int, int, int]:
    e = estimate("gpt2", **STEP, **more)
    return e.number("activation_bytes"), e.number("total_bytes"), e.number("hardware_flops")


def test_block_checkpoints_n_layers_of_the_stage() -> None:
    # block 3 of 12: 3 layers keep C, 9 keep P. Beside every layer checkpointed: 9 (P - C) = 226,934,784 B more;
    # beside none: 3 (P - C) = 75,644,928 B less. The recompute reruns 3 layers' forward: 3 * 17,716,740,096
    # = 53,150,220,288 FLOPs over none's; the peak's rebuilt layer (P - C) is full recompute's.
    none, full, block = _acts(recompute="none"), _acts(recompute="full"), _acts(
        recompute="full", recompute_method="block", recompute_layers=3)
    assert block[0] - full[0] == 226_934_784 and none[0] - block[0] == 75_644_928
    assert block[1] - block[0] == full[1] - full[0]  # the same working layer at the peak
    assert block[2] - none[2] == 53_150_220_288 == 3 * LAYER_FORWARD
    assert full[2] - none[2] == 12 * LAYER_FORWARD


def test_uniform_groups_keep_one_input_each() -> None:
    # uniform 2: 6 groups of 2 layers, each keeps its input: 6 C kept where full recompute keeps 12 C, so
    # 6 * 1,572,864 = 9,437,184 B fewer; backward rebuilds a group, 2 layers (2 P - C at the peak, full's P - C):
    # total less activations 26,787,840 more. The same FLOPs as full (every layer recomputed).
    full, two = _acts(recompute="full"), _acts(recompute="full", recompute_layers=2)
    assert full[0] - two[0] == 9_437_184
    assert (two[1] - two[0]) - (full[1] - full[0]) == P
    assert two[2] == full[2]
    # uniform 5 of 12 (Megatron's last group shorter): groups of 5, 5, 2, three inputs kept, 9 C = 14,155,776 B
    # fewer than full; a group of 5 rebuilt: 4 P = 107,151,360 more at the peak
    five = _acts(recompute="full", recompute_layers=5)
    assert full[0] - five[0] == 14_155_776 and (five[1] - five[0]) - (full[1] - full[0]) == 4 * P
    # 1 is today's full recompute, and a group past the chunk's 12 layers is one group of 12
    assert _acts(recompute="full", recompute_layers=1) == full
    assert _acts(recompute="full", recompute_layers=40) == _acts(recompute="full", recompute_layers=12)


def test_block_counts_per_model_chunk_under_virtual_stages() -> None:
    # pp 2, 16 micro-batches: each stage 6 layers; the first stage holds p = 2 micro-batches in flight (1F1B).
    # block 2: 4 layers keep P instead of C: 2 * 4 * 25,214,976 = 201,719,808 B over full recompute.
    # v 2: two chunks of 3 layers, block 2 checkpoints 2 of each, so 2 of the stage's 6 keep P; in flight
    # p + (p - 1)/v = 2.5 micro-batches of the stage's layers: 2.5 * 2 * 25,214,976 = 126,074,880 B.
    pp = {"pp": 2, "micro_batches": 16}
    full, block = _acts(recompute="full", **pp), _acts(recompute="full", recompute_method="block", recompute_layers=2,
                                                     **pp)
    assert block[0] - full[0] == 201_719_808
    vp = {**pp, "virtual_stages": 2}
    full, block = _acts(recompute="full", **vp), _acts(recompute="full", recompute_method="block", recompute_layers=2,
                                                     **vp)
    assert block[0] - full[0] == 126_074_880
    # the whole model's recompute: 2 layers of each of the p v = 4 chunks, 8 layers' forward
    assert block[2] - _acts(recompute="none", **vp)[2] == 8 * LAYER_FORWARD
    # block past a chunk's layers checkpoints them all (Megatron asserts nothing): full recompute's figures
    assert _acts(recompute="full", recompute_method="block", recompute_layers=7, **vp) == full


def test_cli_echoes_and_times() -> None:
    result = estimate_cli("--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "1024", "--framework",
                          "megatron", "--recompute", "full", "--recompute-method", "block", "--recompute-layers", "3",
                          "--gpu", "h100-sxm")
    assert result.returncode == 0, result.stderr
    assert "recompute method block, recompute layers 3" in result.stdout
    assert "full recompute of some layers" in result.stdout


@pytest.mark.parametrize("args, fragment", [
    (("--recompute", "full", "--recompute-layers", "0"), "--recompute-layers must be a positive integer, got 0"),
    # Options' shared bound on step sizes and degrees (MAX_OPTION, 10^15), as every other count
    (("--recompute", "full", "--recompute-layers", str(10**16)), "--recompute-layers = 1.000e+16 is past the bound"),
    (("--recompute", "selective", "--recompute-method", "block"), "add --recompute full"),
    (("--recompute-layers", "2"), "add --recompute full"),
    (("--recompute", "full", "--recompute-method", "block", "--framework", "torchtitan"), "Megatron-Core's"),
    (("--recompute", "full", "--recompute-layers", "2", "--pp", "4", "--first-stage-layers", "2"), "not modelled"),
])
def test_refusals(args: tuple[str, ...], fragment: str) -> None:
    result = estimate_cli("--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "64", *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr


def test_memory_bound_work_and_casts_only_for_the_checkpointed_layers() -> None:
    # The recompute's elementwise kernels and Transformer Engine's input casts are the forward's, run again in the
    # checkpointed layers only: under block 3 of 12, a quarter of what full recompute adds over none (GPT-2's
    # linears are 768 and 3072 wide, multiples of 16: te-current casts every one).
    fp8 = {"fp8": "te-current", "gpu": "h100-sxm"}
    none, full, block = (estimate("gpt2", **STEP, **fp8, **more) for more in (
        {"recompute": "none"}, {"recompute": "full"},
        {"recompute": "full", "recompute_method": "block", "recompute_layers": 3}))
    for read in (fused_elementwise_bytes, lambda e: fp8_cast_bytes(e, True)[0]):
        assert 4 * (read(block) - read(none)) == read(full) - read(none) > 0
