"""Offload, the recompute working set, and the inputs training refuses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate


def test_zero_offload_keeps_only_16_bit_weights_on_the_gpu() -> None:
    # Ren et al. 2021 (ZeRO-Offload) §4.1: of mixed-precision Adam's 16 bytes per parameter the GPU
    # keeps the 2 of the fp16 weights; the CPU holds 12 (fp32 master, m, v) and the gradients, which DeepSpeed's
    # stage_1_and_2.py keeps there in fp32 (single_partition_of_fp32_groups[i].grad, the fp32 partition's dtype): 4.
    e = estimate("gpt2", mode="train", batch=1, seq=1024, offload=True)
    psi = 124_439_808  # nanoGPT's GPT-2 (124M) count
    assert e.number("model_state_bytes") == 2 * psi
    assert e.number("offloaded_bytes") == 18 * psi  # 2,239,916,544: and the pinned 16-bit copy the step casts into


#: llama-2-7b: 6,738,415,616 parameters (its preset's count, tests/derivations).
P7B = 6_738_415_616


@pytest.mark.parametrize("zero,gradients,partitions,total", [
    # ZeRO-1 and ZeRO-2 alike: the rank's fp32 partition (P/8) gets an fp32 .grad on the CPU:
    # 6,738,415,616 x 4 / 8 = 3,369,207,808; master + m + v 12 x P / 8 = 10,107,623,424; and (DeepSpeed 0.17.0 on)
    # param_buffer_of_bit16_for_cpu_offload_groups, a pinned bf16 partition 2 x P / 8 = 1,684,603,904:
    # 18 x P / 8 = 15,161,435,136
    (1, 3_369_207_808, 0, 15_161_435_136),
    (2, 3_369_207_808, 0, 15_161_435_136),
    # ZeRO-3 (stage3.py): the fp32 partition's .grad (4 x P / 8) and the bf16 grad_partitions_flat_buffer on the CPU
    # (gradient_accumulation_dtype = the model's bf16 under ZeRO): 2 x P / 8 = 1,684,603,904; 18 x P / 8 = 15,161,435,136
    (3, 3_369_207_808, 1_684_603_904, 15_161_435_136),
])
def test_zero_offload_host_gradients_are_deepspeeds_fp32_partition(zero: int, gradients: int, partitions: int,
                                                                    total: int) -> None:
    e = estimate("llama-2-7b", mode="train", batch=1, seq=2048, zero=zero, dp=8, offload=True)
    terms = {t.path: int(t.expr.evaluate(e.values)) for t in e.quantity("offloaded_bytes").breakdown.terms}
    assert terms["offload/gradients"] == gradients
    assert terms.get("offload/gradient_partitions", 0) == partitions
    assert terms.get("offload/parameter_buffer", 0) == (1_684_603_904 if zero < 3 else 0)
    assert terms["offload/optimizer"] == 10_107_623_424
    assert e.number("offloaded_bytes") == total
    assert any("fp32, 4 B per element" in note for note in e.quantity("offloaded_bytes").assumptions)


def test_zero_offload_summary_prints_the_fp32_gradients() -> None:
    r = subprocess.run([sys.executable, "-m", "memderive", "estimate", "--model", "llama-2-7b", "--mode", "train",
                        "--batch", "1", "--seq", "2048", "--zero", "2", "--dp", "8", "--offload", "--summary"],
                       capture_output=True, text=True, check=True)
    row = next(line for line in r.stdout.splitlines() if "offloaded to CPU memory" in line)
    assert "Gradients (fp32)" in row and "15,161,435,136 B" in row  # 18 x 6,738,415,616 / 8


def test_full_recompute_peak_adds_the_rebuilt_layer() -> None:
    # GPT-3 layer (Korthikanti Eq. 1): sbh(34 + 5as/h) stored without recompute; full recompute
    # stores 2sbh per layer and rebuilds one layer in backward: 34sbh + 5as^2b - 2sbh on top.
    s, b, h, a = 2048, 1, 12288, 96
    sbh = s * b * h
    e = estimate("gpt3-175b", mode="train", batch=b, seq=s, recompute="full", attention="eager")
    rows = dict((path, value) for path, _, value in e.quantity("total_bytes").term_values(e.values))
    assert rows["recompute/working_layer"] == 34 * sbh + 5 * a * s * s * b - 2 * sbh
    assert e.number("activation_bytes_per_layer") == 2 * sbh
    assert e.number("total_bytes") == (e.number("model_state_bytes") + e.number("activation_bytes")
                                       + 32 * sbh + 5 * a * s * s * b)


def test_selective_recompute_peak_adds_one_layers_scores() -> None:
    # Selective recompute drops the 5as^2b attention tensors (Korthikanti Table 2); backward rebuilds
    # them one layer at a time: 5 * 96 * 2048^2 * 1 = 2,013,265,920 bytes.
    e = estimate("gpt3-175b", mode="train", batch=1, seq=2048, recompute="selective", attention="eager")
    rows = dict((path, value) for path, _, value in e.quantity("total_bytes").term_values(e.values))
    assert rows["recompute/working_layer"] == 2_013_265_920


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "fragment"), [
    (("--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "64", "--dtype", "int4"), "not a training precision"),
    (("--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "2048"), "1,024 learned positions"),
    (("--model", "gpt2", "--mode", "infer", "--batch", "1", "--seq", "1000", "--new-tokens", "100"),
     "1,024 learned positions"),
    (("--model", "bert-base", "--mode", "infer", "--batch", "1", "--seq", "128"), "encoder"),
])
def test_refused_in_one_line(args: tuple[str, ...], fragment: str) -> None:
    result = run("estimate", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and fragment in result.stderr and "Traceback" not in result.stderr


def test_llama_2_7b_training_by_hand() -> None:
    # LLaMA-2 7B (h = 4096, f = 11008, l = 32, V = 32000, a = 32), bf16, t = 8 with sequence
    # parallelism and selective recompute, b = 1, s = 4096, Korthikanti profile.
    # Parameters on one GPU: the split matrices / 8 plus the replicated RMSNorm weights:
    #   (32 * (4 * 4096^2 + 3 * 11008 * 4096) + 2 * 32000 * 4096) / 8 = 842,268,672
    #   + 32 * 2 * 4096 + 4096 = 266,240  ->  842,534,912
    # Activations per layer (no dropout; Megatron-LM's fused SwiGLU saves gate and up, 4 f bytes per token, fc2
    # its input, 2 f; FlashAttention, the default, run under selective recompute's core_attn checkpoint: q, k, v
    # kept, its output saved by linear_proj, its fp32 logsumexp 4 a s b / t not kept, Megatron-Core attention.py):
    #   sbh (16 + 6 f / h) / t = 16,777,216 * 32.125 / 8 = 67,371,008
    #   (eager attention and the unfused SwiGLU were sbh (16 + 8 f / h) / t = 78,643,200)
    # Whole GPU: 32 layers + final-norm and lm_head inputs 4 sbh / t + fp32 logits 4 s b V / t
    #   = 2,155,872,256 + 8,388,608 + 65,536,000 = 2,229,796,864
    e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, sp=True, recompute="selective")
    assert e.number("parameters_per_gpu") == 842_534_912
    assert e.number("activation_bytes_per_layer") == 67_371_008
    assert e.number("activation_bytes") == 2_229_796_864
    assert e.number("model_state_bytes") == 16 * 842_534_912
