"""Compute: published FLOP formulas and MFU reproduced, and the properties of FLOPs read off the graph.

The measured side (FLOPs equal FlopCounterMode for every family) is tests/test_flops_transformers.py.
"""

from __future__ import annotations

import json

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import GPUS, gpu
from memderive.derivations.references import REFERENCES
from memderive.derivations.models.architectures import GPT, LLAMA
from memderive.derivations.models.model import Model
from memderive.derivations.models.presets import preset
from memderive.derivations.quantities.timing import implied_mfu, inference_time, step_time
from memderive.commands.cli import main
from memderive.symbolic.derive import TRAINING_PHASES, flops
from memderive.symbolic.dims import V, a, a_kv, b, d_h, h, l, s


def test_narayanan_eq3_full_recompute_is_derived_for_gpt() -> None:
    """Narayanan et al. 2021 Eq. 3: F = 96 B s l h^2 (1 + s/6h + V/16lh) with full recompute
    (forward, backward twice the forward, forward again; the LM head not recomputed)."""
    est = estimate("gpt3-175b", mode="train", batch=1, seq=2048, recompute="full", attention="eager")  # 2021: scores saved
    eq3 = 96 * b * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert sp.expand(est.quantity("hardware_flops").closed_form() - eq3) == 0
    without = estimate("gpt3-175b", mode="train", batch=1, seq=2048, attention="eager")  # 3/4 of it, less the head's share
    assert sp.expand(without.quantity("hardware_flops").closed_form() - (eq3 - 24 * b * s * l * h**2
                                                                         - 4 * b * s**2 * l * h)) == 0


def test_kaplan_six_n_per_token_at_leading_order() -> None:
    """Kaplan et al. 2020 §2.1: C ~ 6N per training token; the attention (12 l s h) and the
    head's share are lower order in h."""
    est = estimate("gpt3-175b", mode="train", batch=1, seq=2048)
    per_token, n = est.quantity("model_flops_per_token").closed_form(), est.quantity("parameters").closed_form()
    assert sp.limit(per_token / (6 * n), h, sp.oo) == 1
    assert sp.limit(per_token / (6 * n), s, sp.oo) != 1  # not for contexts long against h


def test_mfu_is_palms_model_flops_definition() -> None:
    """PaLM (Chowdhery et al. 2022, App. B): MFU = tokens/s x (6N + 12 L H Q T) / (GPUs x peak), N the
    weights of the matrix multiplies (LLaMA-2 7B, by hand: 32 (4 h^2 + 3 h f) + V h), L layers,
    H heads, Q head dim, T tokens of context."""
    est = estimate("llama-2-7b", mode="train", batch=2, seq=4096, tp=2, dp=4, micro_batches=4)
    timing = step_time(est, "a100-80gb")
    n_matmul = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096
    per_token = 6 * n_matmul + 12 * 32 * 32 * 128 * 4096
    assert timing.gpus == 8 and timing.tokens_per_step == 2 * 4096 * 4 * 4
    assert timing.mfu == pytest.approx(timing.tokens_per_s * per_token / (8 * 312e12), rel=1e-12)


def test_llama2_7b_published_run_implies_mfu() -> None:
    """Touvron et al. 2023 (LLaMA 2), Table 2 and §2.2: 7B trained on 2.0T tokens at s = 4096 in
    184,320 A100-80GB GPU-hours. By hand (PaLM's model FLOPs):
      N = 32 (4 * 4096^2 + 3 * 4096 * 11008) + 32000 * 4096 = 6,607,077,376 matmul weights
      6N = 39,642,464,256; 12 l h s = 12 * 32 * 4096 * 4096 = 6,442,450,944
      per token 46,084,915,200 FLOPs; x 2.0e12 tokens = 9.2170e22 FLOPs
      over 184,320 * 3,600 = 663,552,000 GPU-seconds: 1.3890e14 FLOP/s per GPU
      / 312e12 (A100 dense BF16) = 0.4452."""
    est = estimate("llama-2-7b", mode="train", batch=1, seq=4096)
    assert est.number("model_flops_per_token") == 46_084_915_200
    assert implied_mfu(est.number("model_flops_per_token"), 2 * 10**12, 184_320, "a100-80gb") == \
        pytest.approx(0.4452, abs=5e-5)


def _divisible(t: int):
    """Sizes a t-way Megatron layout divides exactly (heads, FFN width and vocabulary)."""
    return st.tuples(st.sampled_from([GPT, LLAMA]), st.integers(1, 4), st.integers(1, 3), st.integers(1, 4),
                     st.integers(1, 64), st.integers(1, 3))


@settings(max_examples=15, deadline=None)
@given(t=st.sampled_from([2, 4, 8]), sizes=st.data(), sequence_parallel=st.booleans(),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_per_gpu_flops_times_t_is_the_whole(t: int, sizes, sequence_parallel: bool, recompute: str) -> None:
    """Tensor parallelism splits every product over the t ranks (sequence parallelism gathers a
    linear's input first, so it changes no product)."""
    arch, heads, layers, groups, vocab, width = sizes.draw(_divisible(t))
    z = {"h": 16 * t * heads, "a": t * heads, "l": layers, "V": 8 * t * vocab, "f": 24 * t * width, "n_ctx": 256}
    model = Model("toy", arch, z)
    est = estimate(model, mode="train", batch=2, seq=64, tp=t, sp=sequence_parallel, recompute=recompute)
    for key in ("forward_flops", "model_flops", "hardware_flops"):
        assert est.number(f"{key}_per_gpu") * t == est.number(key)


@pytest.mark.parametrize("name", ["gpt2", "llama-2-7b"])
def test_recompute_adds_exactly_the_recomputed_forward(name: str) -> None:
    plain = estimate(name, mode="train", batch=2, seq=512, attention="eager")  # the core recomputed whole
    forward = dict(plain.quantity("forward_flops").term_ints(plain.values))
    core = sum(v for path, v in forward.items() if path.startswith("layer/attn/core/"))
    layers = sum(v for path, v in forward.items() if path.startswith("layer/"))
    assert core and layers > core
    for recompute, redone in (("none", 0), ("selective", core), ("full", layers)):
        est = estimate(name, mode="train", batch=2, seq=512, recompute=recompute, attention="eager")
        assert est.number("model_flops") == plain.number("model_flops")
        assert est.number("hardware_flops") - est.number("model_flops") == redone
    flash = estimate(name, mode="train", batch=2, seq=512, flash=True)  # backward recomputes q k^T
    assert flash.number("hardware_flops") - flash.number("model_flops") == core // 2


def test_frozen_weight_removes_exactly_its_weight_gradient() -> None:
    graph = preset("llama-2-7b").graph()
    step = flops(graph, phases=TRAINING_PHASES).total
    frozen = flops(graph, phases=TRAINING_PHASES, frozen=["attn/qkv.weight"]).total
    # its gradient: (b s rows) x (h inputs) x ((a + 2 a_kv) d_h outputs), 2 FLOPs each, in each of l layers
    assert sp.expand(step - frozen - 2 * b * s * h * (a + 2 * a_kv) * d_h * l) == 0
    layer = graph.block("layer")
    ops = tuple(op.frozen() if op.path == "attn/qkv" else op for op in layer.ops)
    refrozen = type(graph)(graph.name, tuple(type(layer)(layer.name, ops, layer.input, layer.repeat)
                                              if blk.name == "layer" else blk for blk in graph.blocks))
    assert sp.expand(flops(refrozen, phases=TRAINING_PHASES).total - frozen) == 0
    assert sp.expand(flops(graph).total - flops(graph, frozen=["attn/qkv.weight"]).total) == 0  # forward kept


def test_single_gpu_step_is_compute_at_efficiency_and_bubble_follows_p() -> None:
    # eager attention: no recompute, so hardware FLOPs are model FLOPs and the MFU is the efficiency
    one = estimate("llama-2-7b", mode="train", batch=1, seq=4096, micro_batches=8, attention="eager")
    timing = step_time(one, "h100-sxm", efficiency=0.4)
    assert timing.step_s == pytest.approx(8 * one.number("hardware_flops") / (0.4 * 989.5e12), rel=1e-12)
    assert timing.mfu == pytest.approx(0.4, rel=1e-12)
    piped = step_time(estimate("llama-2-7b", mode="train", batch=1, seq=4096, pp=4, micro_batches=8), "h100-sxm")
    # the bubble idles p - 1 micro-batch slots of v: each slot a micro-batch's compute and its communication
    per_slot = piped.compute_s + piped.elementwise_s + piped.tp_s + piped.pp_s
    assert piped.bubble_s == pytest.approx(per_slot * 3 / 8, rel=1e-12) and piped.pp_s > 0


def test_decode_is_memory_bound_and_reads_weights_and_cache() -> None:
    est = estimate("llama-2-7b", mode="infer", batch=1, seq=1024, new_tokens=128)
    timing = inference_time(est, "a100-80gb")
    assert timing.decode_bound == "memory" and timing.prefill_bound == "compute"
    assert timing.decode_step_s == (est.number("weight_bytes") + est.number("kv_cache_bytes")) / 2039e9
    assert timing.prefill_s == est.number("prefill_flops_per_gpu") / (timing.efficiency * 312e12)
    # the matmul efficiency on an A100 (efficiency.py), forward only: every linear (QKV 12,288 x 4,096, 4,096 x 4,096,
    # gate and up 11,008 x 4,096, down 4,096 x 11,008) multiplies 1,024 tokens: OpenXLA's H100 fraction at m 1,024 and
    # n, k >= 4,096 is 0.964, times the A100's MAMF over its peak 271.2 / 312: 0.83794; SDPA's flash core at
    # FlashAttention-2's 73% forward (Dao 2023), its FLOPs 2s/(4h + 3f) = 2,048/49,408 = 0.041451 of the linears':
    # 1.041451 / (1 / 0.83794 + 0.041451 / 0.73) = 0.83304
    assert timing.efficiency == pytest.approx(0.83304, abs=5e-5)
    given = inference_time(est, "a100-80gb", efficiency=0.5)
    assert given.prefill_s == est.number("prefill_flops_per_gpu") / (0.5 * 312e12)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_estimate_json_carries_flops_and_times(capsys: pytest.CaptureFixture[str]) -> None:
    train = ("estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096", "--json")
    keys = {"forward_flops", "model_flops", "hardware_flops", "model_flops_per_token", "forward_flops_per_gpu",
            "model_flops_per_gpu", "hardware_flops_per_gpu"}
    code, out, _ = _cli(capsys, *train)
    data = json.loads(out)
    assert code == 0 and keys <= set(data) and "step_time_s" not in data  # no GPU, no times
    data = json.loads(_cli(capsys, *train, "--gpu", "a100-80gb", "--tp", "2")[1])
    assert {"step_time_s", "tokens_per_s", "mfu"} <= set(data) and 0 < data["mfu"] < data["efficiency"]
    infer = ("estimate", "--model", "llama-2-7b", "--mode", "infer", "--batch", "4", "--seq", "2048", "--json",
             "--new-tokens", "64", "--gpu", "h100-sxm")
    data = json.loads(_cli(capsys, *infer)[1])
    assert {"prefill_flops", "decode_flops_per_token", "prefill_time_s", "decode_time_per_token_s",
            "tokens_per_s"} <= set(data)


def test_gpu_table_is_cited_and_names_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert {"a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "b200", "l40s", "rtx-4090", "mi300x"} <= set(GPUS)
    assert all(x.source.key in REFERENCES and x.bf16_flops > 0 and x.memory_bandwidth > 0 for x in GPUS.values())
    code, out, _ = _cli(capsys, "gpus")
    assert code == 0 and all(name in out for name in GPUS)
    code, out, err = _cli(capsys, "estimate", "--model", "gpt2", "--gpu", "a100")
    assert code == 2 and err.count("\n") == 1 and "choose one of a100-40gb" in err
    code, out, _ = _cli(capsys, "fit", "--model", "llama-2-7b", "--seq", "4096", "--gpu", "h100-sxm", "--json")
    data = json.loads(out)
    assert code == 0 and data["capacity_bytes"] == gpu("h100-sxm").memory_bytes == 80 * 2**30


def test_derive_flops_prints_forward_model_and_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _cli(capsys, "derive", "flops", "--strategy", "full", "--attention", "eager")  # Eq. 3: eager
    assert code == 0 and out.splitlines()[2].endswith("6*V*b*h*s + 96*b*h^2*l*s + 16*b*h*l*s^2")


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_writeups_and_plots_show_compute_as_they_show_memory() -> None:
    from memderive.figures.plots import plot_data
    from memderive.documents.writeup import estimate_document

    est = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, sp=True, gpu="h100-sxm", micro_batches=4)
    md = estimate_document(est, "md")
    assert "## Model FLOPs per micro-batch (forward + backward) (`model_flops`, FLOPs)" in md
    assert "## Time on NVIDIA H100 SXM5 80GB, matmuls at " in md and "pipeline bubble: (p - 1)/(m v)" in md
    assert "Time on" not in estimate_document(estimate("llama-2-7b", mode="train", batch=1, seq=4096), "md")
    data = plot_data(est, "breakdown", key="hardware_flops_per_gpu")
    assert data.unit == "FLOPs" and data.totals[data.labels.index("TP 8 + SP")] == est.number("hardware_flops_per_gpu")
