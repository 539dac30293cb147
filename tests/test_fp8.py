"""``--fp8``: Float8 linears as torchao 0.18 trains them, against torchao itself on CPU and by hand.

torchao's ``Float8Linear`` runs on CPU with torch 2.13: ``torch._scaled_mm`` has CPU kernels for tensorwise and
rowwise scales, so nothing is emulated or substituted here (``Float8LinearConfig.emulate`` stays False). What a
converted transformers model saves for backward is measured with ``saved_tensors_hooks``
(``tests/hf_saved.measure_config``); its whole training step's allocations in ``tests/test_step_timeline.py``
(``test_float8_step_to_the_byte``).
"""

from __future__ import annotations

import pytest
import torch

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.models.implementations import float8_layers, hf_layers
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.efficiency import fp8_rate_ratio, matmul_rate
from memderive.derivations.quantities.timing import float8_flops, step_time
from memderive.symbolic.derive import activations, evaluate
from memderive.symbolic.dims import b, s
from memderive.symbolic.float8 import RECIPES
from tests.hf_saved import Shape, config_for, measure_model, need_torchao
from tests.hf_step import _Tracker, to_float8

SHAPE = Shape(2, 24)


def _torchao() -> None:
    need_torchao()
CASES = [("llama-gqa", "eager"), ("qwen2", "sdpa"), ("gpt2", "eager")]


def _derived_saved(family: str, attention: str, fp8: str) -> int:
    model = resolve_model(config_for(family, attention))
    graph = hf_layers(model, attention, "cpu")(model.graph("bf16", dropout=True))
    if fp8 != "none":
        graph = float8_layers(model, fp8)(graph)
    values = {**model.values(), b: SHAPE.b, s: SHAPE.s}
    return sum(int(evaluate(t.expr, values)) for t in activations(graph).terms)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize(("family", "attention"), CASES)
def test_float8_linears_save_the_16_bit_input_and_weight(family: str, attention: str, recipe: str) -> None:
    """torchao's ``matmul_with_hp_or_float8_args`` saves ``input_hp`` and ``weight_hp_t``: the converted model
    saves exactly what the bf16 model saves, no 8-bit tensor among them, and memderive's graph with Float8
    linears says so to the byte."""
    _torchao()
    plain = measure_model(family, attention, SHAPE)
    got = measure_model(family, attention, SHAPE, fp8=recipe)
    assert got.nbytes == plain.nbytes
    assert not {dt for _, dt, _, _ in got.storages.values()} & {torch.float8_e4m3fn, torch.float8_e5m2}
    assert got.nbytes == _derived_saved(family, attention, recipe)


def test_which_linears_are_converted() -> None:
    """torchao swaps ``nn.Linear`` only: GPT-2's layers are transformers' ``Conv1D`` and stay 16-bit, its tied
    head (an ``nn.Linear`` over the embedding's weight) converts; every LLaMA linear converts (all dims are
    multiples of 16 in the small config: 64, 32, 160, 128). Counted in torchao's converted model: LLaMA 2 layers
    x 7 linears + lm_head = 15 Float8Linear, GPT-2 1."""
    _torchao()
    import transformers

    for family, want, modules in (
            ("gpt2", {"embed/tokens.weight"}, 1),
            ("llama-gqa", {"layer/attn/qkv.weight", "layer/attn/proj.weight", "layer/mlp/gate.weight",
                           "layer/mlp/up.weight", "layer/mlp/fc2.weight", "head/lm_head.weight"}, 2 * 7 + 1)):
        model = resolve_model(config_for(family, "eager"))
        graph = float8_layers(model, "tensorwise")(hf_layers(model, "eager", "cpu")(model.graph("bf16")))
        assert set(graph.float8) == want
        converted = to_float8(transformers.AutoModelForCausalLM.from_config(config_for(family, "eager")), "tensorwise")
        assert sum(type(m).__name__ == "Float8Linear" for m in converted.modules()) == modules


def test_one_float8_linear_by_hand_and_measured() -> None:
    """One bias-free Float8Linear(64 -> 32), tensorwise, bf16 input (2, 24, 64): 3,072 elements.

    By hand, the forward's worst moment is the input's cast: ``x.to(fp32) * scale`` (3,072 x 4 = 12,288 B), clamped
    (12,288 B) and ``.to(float8)`` (3,072 B) alive at once beside the fp32 scale (4 B): 27,652 B above the
    baseline (``abs(x)`` and the fp64 scalars are freed by then). The weight's cast later holds the input's 8-bit
    copy and scale (3,076 B), its own scale (4 B) and 8,192 + 8,192 + 2,048 B: 21,512 B, less.
    Measured with torchao (real ``_scaled_mm``), and derived by memderive's script of the same linear."""
    _torchao()
    torch.manual_seed(0)
    lin = to_float8(torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False)), "tensorwise").to(torch.bfloat16)
    x = torch.randn(2, 24, 64, dtype=torch.bfloat16, requires_grad=True)
    held = [*lin.parameters(), x]
    base = sum(t.untyped_storage().nbytes() for t in held)
    tracker = _Tracker(held, base)
    with tracker:
        lin(x)
    assert tracker.peak - base == 12_288 + 12_288 + 3_072 + 4  # 27,652 B

    from memderive.symbolic.dtypes import dtype
    from memderive.symbolic.kernels import KINDS, Kernel
    from memderive.symbolic.tensor import Tensor

    xt, wt = Tensor("x", (2, 24, 64), dtype("bf16")), Tensor("w", (32, 64), dtype("bf16"), role="weight")
    k = Kernel("float8_tensorwise", ("x", "w"), (Tensor("y", (2, 24, 32), dtype("bf16")),))
    now = high = 0
    sizes = {}
    for act, key, t in KINDS["float8_tensorwise"].script(k, {"x": xt, "w": wt}.__getitem__):
        if act == "alloc":
            sizes[key] = int(t.nbytes.evaluate({}))
            now += sizes[key]
        elif act == "free":
            now -= sizes.pop(key)
        else:  # the output (2, 24, 32) bf16
            now += 3_072
        high = max(high, now)
    assert high == 27_652


def test_fp8_matmul_flops_and_time_by_hand() -> None:
    """llama-2-7b, b = 1, s = 4,096, transformers' layers: every linear converts (4,096 and 11,008 and 32,000 are
    multiples of 16). Forward linear FLOPs per layer 2 s (4 h^2 + 3 h f) = 2 x 4,096 x (67,108,864 + 135,266,304)
    = 1,657,857,376,256; x 32 layers = 53,051,436,040,192; the head 2 s h V = 1,073,741,824,000; forward
    54,125,177,864,192, times 3 with both gradients: 162,375,533,592,576 scaled 8-bit FLOPs; rowwise_with_gw_hp
    keeps the weight gradient 16-bit: times 2, 108,250,355,728,384.

    On an H100 SXM (989.5 dense bf16 TFLOP/s, 1,979 fp8: NVIDIA's datasheet) at efficiency 0.5, compute is the rest
    at 494.75 TFLOP/s plus the 8-bit part at 989.5 TFLOP/s."""
    e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, implementation="hf", fp8="tensorwise")
    assert float8_flops(e) == 162_375_533_592_576
    gw = estimate("llama-2-7b", mode="train", batch=1, seq=4096, implementation="hf", fp8="rowwise_with_gw_hp")
    assert float8_flops(gw) == 108_250_355_728_384
    total = e.number("hardware_flops_per_gpu")
    want = (total - 162_375_533_592_576) / 494.75e12 + 162_375_533_592_576 / 989.5e12
    assert step_time(e, "h100-sxm", efficiency=0.5).compute_s == pytest.approx(want, rel=1e-12)
    plain = estimate("llama-2-7b", mode="train", batch=1, seq=4096, implementation="hf")
    assert step_time(plain, "h100-sxm", efficiency=0.5).compute_s == pytest.approx(total / 494.75e12, rel=1e-12)
    # an A100 has no FP8 tensor cores: the same time as 16-bit, and the output says so
    a100 = step_time(e, "a100-80gb", efficiency=0.5)
    assert a100.compute_s == pytest.approx(step_time(plain, "a100-80gb", efficiency=0.5).compute_s, rel=1e-12)
    assert any("no FP8 tensor cores" in line for line in a100.model())


def test_model_states_and_saved_activations_unchanged() -> None:
    """Weights stay 16-bit (torchao casts them per matmul), gradients and optimizer states as they were."""
    opts = dict(mode="train", batch=1, seq=4096, implementation="hf")
    plain, fp8 = estimate("llama-2-7b", **opts), estimate("llama-2-7b", **opts, fp8="rowwise")
    for key in ("model_state_bytes", "activation_bytes"):
        assert fp8.number(key) == plain.number(key)
    assert any("Float8Linear (rowwise)" in a for a in fp8.graph.assumptions)


@pytest.mark.parametrize(("given", "fragment"), [
    (dict(dtype="fp32"), "not --dtype fp32"),
    (dict(precision="autocast"), "--precision autocast"),
    (dict(implementation="megatron"), "Transformer Engine"),
    (dict(fp8="fp8"), "--fp8 must be none or one of tensorwise, rowwise, rowwise_with_gw_hp"),
    (dict(lora_rank=8, lora_targets=("q_proj",)), "not modelled with fine-tuning options"),
])
def test_refused_in_one_line(given: dict, fragment: str) -> None:
    opts = {"mode": "train", "batch": 1, "seq": 8, "implementation": "hf", "fp8": "tensorwise", **given}
    with pytest.raises(OptionsError, match=fragment) as err:
        Options.from_keywords(opts)
    assert "\n" not in str(err.value)


def test_refused_when_no_dim_divides_by_16() -> None:
    """h = 40, f = 100, V = 50: no linear's dims are multiples of 16, so nothing would run in 8 bits."""
    config = {"model_type": "llama", "hidden_size": 40, "num_attention_heads": 4, "num_hidden_layers": 2,
              "intermediate_size": 100, "vocab_size": 50}
    with pytest.raises(OptionsError, match="no linear .* divisible by 16") as err:
        estimate(config, mode="train", batch=1, seq=8, implementation="hf", fp8="tensorwise")
    assert "\n" not in str(err.value)


def test_cli_refuses_fp8_with_fp32_in_one_line() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "gpt2", "--mode", "train",
                          "--batch", "1", "--seq", "8", "--implementation", "hf", "--dtype", "fp32", "--fp8",
                          "tensorwise"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert "--fp8 is modelled for 16-bit weights" in out.stderr


def test_transformer_engine_fp8_times_each_linear_at_its_own_fp8_rate() -> None:
    """Under Transformer Engine's fp8 each layer linear's three GEMMs run at the fp8 rate of their own shape, the
    fused attention core at its 16-bit kernel's rate, unchanged: the compute time drops by exactly the linears' bf16
    time less their fp8 time (an average rate over the layer's products would also speed the attention up). Llama 3
    8B, b 1, s 4,096 (M = 4,096 tokens), 32 layers; per layer the linears (out, in): qkv (6,144, 4,096), proj
    (4,096, 4,096), fc1 (28,672, 4,096), fc2 (4,096, 14,336), each 2 M out in FLOPs per GEMM, as the forward
    (M, out, in), the input gradient (M, in, out) and the weight gradient (out, in, M)."""
    kw = dict(mode="train", batch=1, seq=4096, implementation="megatron", framework="megatron", attention="flash",
              gpu="h100-sxm")
    fp8 = step_time(estimate("llama-3-8b", fp8="te-current", **kw), "h100-sxm").compute_s
    bf16 = step_time(estimate("llama-3-8b", **kw), "h100-sxm").compute_s
    hw, m, saved = gpu("h100-sxm"), 4096, 0.0
    for out, inp in [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]:
        flops = 2 * m * out * inp * 32
        for shape in [(m, out, inp), (m, inp, out), (out, inp, m)]:
            saved += flops / matmul_rate(hw, "bf16", *shape) - flops / matmul_rate(hw, "fp8", *shape)
    assert bf16 - fp8 == pytest.approx(saved, rel=1e-9)


def test_transformer_engine_fp8_runs_every_layer_linear_in_8_bits() -> None:
    """--fp8 te-current under Megatron-Core (Transformer Engine's Float8CurrentScaling): the forward, input- and
    weight-gradient GEMMs of every layer linear run in fp8, the LM head in 16 bits. Llama 3 8B (h 4,096, 32 heads
    of 128, 8 KV heads, f 14,336), b 1, s 8: per layer the forward's linears 2 s (h (a d + 2 a_kv d) + h a d + 3 h f)
    = 16 x (25,165,824 + 16,777,216 + 176,160,768) = 3,489,660,928 FLOPs, x 3 GEMMs x 32 layers =
    335,007,449,088. On an H100 they run at the fp8 over bf16 sustained rate: the H200's MSMFs scaled by the H100's
    bursts over the H200's (Bekman's tables), fp8 1,288.7 x 1,402.6 / 1,453.4 = 1,243.66 over bf16 708.5 x 794.5 /
    794.5 = 708.5: 1.75534."""
    e = estimate("llama-3-8b", mode="train", batch=1, seq=8, implementation="megatron", fp8="te-current")
    assert float8_flops(e) == 335_007_449_088
    assert fp8_rate_ratio(gpu("h100-sxm")) == pytest.approx(1.75534, rel=1e-5)
    plain = step_time(estimate("llama-3-8b", mode="train", batch=1, seq=8, implementation="megatron"), "h100-sxm")
    assert step_time(e, "h100-sxm").compute_s < plain.compute_s
    with pytest.raises(OptionsError, match="--implementation megatron"):
        estimate("llama-3-8b", mode="train", batch=1, seq=8, implementation="hf", fp8="te-current")
    with pytest.raises(OptionsError, match="not Blackwell"):
        estimate("llama-3-8b", mode="train", batch=1, seq=8, implementation="megatron", fp8="te-mxfp8",
                 gpu="h100-sxm")
