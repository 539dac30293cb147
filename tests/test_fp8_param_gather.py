"""--fp8-param-gather: Megatron-Core's Transformer Engine fp8 primary weights (``symbolic.te_float8.
PARAM_GATHER_SOURCE``). The layers' linear weights are built under fp8_model_init as Float8Tensor (delayed, current
scaling) or MXFP8Tensor, with no 16-bit copy; the distributed optimizer keeps the fp32 main params; delayed and
current scaling all-gather the 8-bit _data (a uint8 parameter buffer), MXFP8 a 16-bit bucket through the gradient
buffer (reuse_grad_buf_for_mxfp8_param_ag), quantized after. Expected numbers by hand below."""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.memory_bound import fp8_cast_bytes
from memderive.derivations.quantities.timing import expert_group, reduced_bytes

#: Llama 2 7B (h 4,096, 32 heads, f 11,008, 32 layers, vocab 32,000), b 1, s 4,096, TP 2 with SP, d 2 under the
#: distributed optimizer, Megatron-Core.
RUN = {"mode": "train", "batch": 1, "seq": 4096, "implementation": "megatron", "tp": 2, "sp": True, "dp": 2,
       "zero": 1}
#: The layers' linear weights per GPU (TP 2): qkv 12,288 x 4,096 / 2 = 25,165,824, proj 4,096^2 / 2 = 8,388,608,
#: fc1 2 x 11,008 x 4,096 / 2 = 45,088,768, fc2 11,008 x 4,096 / 2 = 22,544,384: 101,187,584 per layer, x 32.
LINEAR = 3_238_002_688
#: What stays 16-bit per GPU: the embedding and the output layer, 32,000 x 4,096 / 2 = 65,536,000 each (vocab-
#: parallel), the norms 2 x 4,096 per layer x 32 = 262,144 and the final 4,096 (not split by TP): 131,338,240.
REST = 131_338_240


def _pair(fp8: str, gpu: str):
    return (estimate("llama-2-7b", fp8=fp8, gpu=gpu, **RUN),
            estimate("llama-2-7b", fp8=fp8, gpu=gpu, fp8_param_gather=True, **RUN))


def _weights(e) -> int:
    return sum(int(t.expr.subs(e.values)) for t in e.quantity("model_state_bytes").breakdown.terms
               if t.path == "model_states/weights")


def test_current_scaling_holds_the_linear_weights_in_8_bits_by_hand() -> None:
    """Current scaling on an H100: the 16-bit weights keep only REST, 2 x 131,338,240 = 262,676,480 B (was 2 x
    (LINEAR + REST) = 6,738,681,856); each linear weight is its Float8Tensor: the 1-byte _data (the uint8 parameter
    buffer), the transpose post_all_gather_processing makes (Hopper runs only TN fp8 GEMMs) and a 4-byte scale_inv
    per module (4 per layer): (2 x 101,187,584 + 16) x 32 = 6,476,005,888 B, the bytes the cached workspaces held
    before. The total moves by -2 x LINEAR = -6,476,005,376 B; the activations not at all."""
    plain, primary = _pair("te-current", "h100-sxm")
    assert _weights(plain) == 6_738_681_856 and _weights(primary) == 262_676_480
    held = [t for t in primary.quantity("total_bytes").breakdown.terms if t.path.endswith("/fp8_weight")]
    assert len(held) == 4 and sum(int(t.expr.subs(primary.values)) for t in held) == 6_476_005_888
    assert primary.number("total_bytes") - plain.number("total_bytes") == -6_476_005_376
    assert primary.number("activation_bytes") == plain.number("activation_bytes")


def test_mxfp8_holds_both_layouts_and_their_scales_by_hand() -> None:
    """MXFP8 on a B200: each linear weight an MXFP8Tensor, row- and column-wise data, 1 B each, and a 1-byte E8M0
    scale per 32 elements each: 101,187,584 x (2 + 2/32) = 208,699,392 B per layer, x 32 = 6,678,380,544; its 16-bit
    parameter buffer a view of the gradient buffer (nothing beside it); the 16-bit weights 262,676,480 B as above.
    The total moves by -2 x LINEAR = -6,476,005,376 B."""
    plain, primary = _pair("te-mxfp8", "b200")
    assert _weights(primary) == 262_676_480
    held = [t for t in primary.quantity("total_bytes").breakdown.terms if t.path.endswith("/fp8_weight")]
    assert sum(int(t.expr.subs(primary.values)) for t in held) == 6_678_380_544
    assert primary.number("total_bytes") - plain.number("total_bytes") == -6_476_005_376


def test_the_parameter_all_gather_moves_one_byte_per_fp8_weight_by_hand() -> None:
    """The weight bytes one GPU gathers over the data-parallel ranks each step: 2 B per parameter, 2 x (LINEAR +
    REST) = 6,738,681,856; with current (or delayed) scaling's fp8 params the linears' _data, 1 B: 2 x REST + LINEAR
    = 3,500,679,168. MXFP8's bucket is gathered in 16 bits (param_data a bf16 view of the gradient buffer): as
    before. The gradients reduced (2 B each: --grad-buffer param, the default) do not change."""
    for fp8, gpu, gathered in (("te-current", "h100-sxm", 3_500_679_168), ("te-delayed", "h100-sxm", 3_500_679_168),
                               ("te-mxfp8", "b200", 6_738_681_856)):
        plain, primary = (estimate("llama-2-7b", fp8=fp8, gpu=gpu, fp8_param_gather=on, **RUN) for on in (False, True))
        assert reduced_bytes(plain) == (2 * (LINEAR + REST), 6_738_681_856)
        assert reduced_bytes(primary) == (2 * (LINEAR + REST), gathered)


def test_the_experts_gather_their_own_8_bit_weights_by_hand() -> None:
    """Mixtral 8x7B (h 4,096, f 14,336, 8 experts, 32 layers, vocab 32,000), d 2, ep 2, current scaling: each GPU
    holds 4 experts of 3 x 4,096 x 14,336 elements per layer, 22,548,578,304 in all, gathered over their own group
    (Megatron-Core's expert data-parallel buffers) at 1 B each, 45,097,156,608 B in 16 bits. The rest: attention
    qkv 4,096 x 6,144 + proj 4,096^2 = 41,943,040 per layer, 1,342,177,280 in 8 bits; the embedding and output layer
    2 x 131,072,000, the norms 2 x 4,096 x 32 + 4,096 and the routers 8 x 4,096 x 32: 263,458,816 in 16 bits. The
    GPU gathers 2 x 263,458,816 + 1,342,177,280 + 22,548,578,304 = 24,417,673,216 B (48,308,428,800 without); the
    experts' part is theirs, not the GPU's 8-bit share spread by parameter count."""
    run = {"mode": "train", "batch": 1, "seq": 8, "implementation": "megatron", "dp": 2, "ep": 2, "zero": 1,
           "fp8": "te-current", "gpu": "h100-sxm"}
    for on, gathered, experts in ((False, 48_308_428_800, 45_097_156_608), (True, 24_417_673_216, 22_548_578_304)):
        e = estimate("mixtral-8x7b", fp8_param_gather=on, **run)
        grads, weights = reduced_bytes(e)
        assert weights == gathered and expert_group(e, grads, weights, 1).weights == experts


def test_the_step_casts_the_fp32_shard_not_the_16_bit_weight_by_hand() -> None:
    """Without fp8 params TE quantizes each 16-bit weight once per step (the first micro-batch's workspace): current
    scaling an amax read and a cast read, 2 + 2 B, and writes data and transpose on Hopper, 1 + 1: 6 x LINEAR =
    19,428,016,128 B. With them: TE's quantize_master_weights casts the rank's fp32 shard (LINEAR / d = 1,619,001,344
    elements) to 16 bits (the copy optimizer_bytes already counts), then amax r 2 and cast r 2 w 1: 5 x 1,619,001,344
    = 8,095,006,720, and after the all-gather the whole weight's transpose, r 1 w 1: 2 x LINEAR = 6,476,005,376;
    14,571,012,096 B. On a B200 no transpose: 8,095,006,720. The per-micro-batch casts (activations) do not move."""
    plain, primary = _pair("te-current", "h100-sxm")
    assert fp8_cast_bytes(plain, True)[1] == 19_428_016_128
    assert fp8_cast_bytes(primary, True) == (fp8_cast_bytes(plain, True)[0], 14_571_012_096)
    assert fp8_cast_bytes(_pair("te-current", "b200")[1], False)[1] == 8_095_006_720


@pytest.mark.parametrize("words, says", [
    (["--fp8-param-gather"], "give --fp8 te-delayed, te-current or te-mxfp8"),
    (["--fp8", "te-current", "--fp8-param-gather", "--zero", "3"], "give --framework megatron"),
    (["--fp8", "te-current", "--fp8-param-gather", "--zero", "0"], "not --zero 0"),
    (["--fp8", "te-current", "--fp8-param-gather", "--zero", "2"], "not --zero 2"),
    (["--fp8", "te-mxfp8", "--gpu", "b200", "--fp8-param-gather", "--zero", "3", "--framework", "megatron"],
     "give --fp8 te-delayed or te-current, or --zero 1"),
])
def test_refusals_are_one_line(words: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096",
            "--implementation", "megatron", "--dp", "2"]
    assert main(base + words) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err and "Traceback" not in err


def test_cli_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    """The flag on the command line reaches the estimate (the inputs line echoes it) and the bytes above."""
    words = ["estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096",
             "--implementation", "megatron", "--tp", "2", "--sp", "--dp", "2", "--zero", "1", "--fp8", "te-current",
             "--gpu", "h100-sxm", "--fp8-param-gather"]
    assert main(words) == 0
    out = capsys.readouterr().out
    assert "fp8 param gather on" in out and "fp8_weight" not in out.split("inputs:")[0]
    primary = estimate("llama-2-7b", fp8="te-current", gpu="h100-sxm", fp8_param_gather=True, **RUN)
    assert primary.options.fp8_param_gather


#: ``RUN`` under Megatron-FSDP (ZeRO-3 over the d = 2 ranks, ``te_float8.FSDP_PARAM_GATHER_SOURCE``).
FSDP = {**RUN, "zero": 3, "framework": "megatron"}


def _terms(e, key: str) -> dict[str, int]:
    return {path: value for path, value in e.quantity(key).term_ints(e.values)}


@pytest.mark.parametrize("gpu, transpose", [("h100-sxm", True), ("b200", False)])
def test_megatron_fsdp_shards_the_8_bit_weights_by_hand(gpu: str, transpose: bool) -> None:
    """Megatron-FSDP with fp8 primary weights: the uint8 model-weight buffer sharded over d = 2, so each rank holds
    LINEAR / 2 = 1,619,001,344 bytes of 8-bit data and a 4-byte scale_inv per tensor (qkv, proj, fc1, fc2 of 32
    layers: 128 x 4 = 512 B): 1,619,001,856 B, where the plain run caches every whole 8-bit weight (LINEAR, and on
    the H100 its transpose: 2 x LINEAR) across micro-batches; the 16-bit weights keep REST / 2 x 2 B = 131,338,240
    (plain: (LINEAR + REST) / 2 x 2 B = 3,369,340,928). The layer being computed is gathered: its 101,187,584 linear
    weights in 1 byte, on the H100 with the transpose the backward makes beside each (2 bytes, as 16-bit), its two
    norms' 8,192 in 2: 2 x 101,187,584 + 16,384 = 202,391,552 B on the H100 (as 16-bit), 101,187,584 + 16,384 =
    101,203,968 on the B200."""
    plain = estimate("llama-2-7b", fp8="te-current", gpu=gpu, **FSDP)
    primary = estimate("llama-2-7b", fp8="te-current", gpu=gpu, fp8_param_gather=True, **FSDP)
    states = _terms(primary, "model_state_bytes")
    assert states["model_states/weights"] == 131_338_240
    assert _terms(plain, "model_state_bytes")["model_states/weights"] == 3_369_340_928
    total = _terms(primary, "total_bytes")
    shard = sum(v for k, v in total.items() if k.startswith("weights/te_fp8/") and k.endswith("/fp8_weight_shard"))
    assert shard == 1_619_001_856 and not any(k.endswith("weight_workspace") for k in total)
    cached = sum(v for k, v in _terms(plain, "total_bytes").items() if k.endswith("weight_workspace"))
    assert cached == (2 if transpose else 1) * LINEAR + 512
    assert total["zero3/gathered_weights/layer"] == (202_391_552 if transpose else 101_203_968)
    assert _terms(plain, "total_bytes")["zero3/gathered_weights/layer"] == 202_391_552


def test_megatron_fsdp_gathers_8_bits_and_transposes_each_micro_batch_by_hand() -> None:
    """The time side: the all-gather moves the linear weights in 1 byte, 2 x (LINEAR + REST) - LINEAR =
    3,500,679,168 B (plain: 6,738,681,856); the step's cast is the rank's shard's (LINEAR / 2 elements: the 16-bit
    copy, then amax r 2 and cast r 2 w 1: 5 x 1,619,001,344 = 8,095,006,720), and, the transposes dropped with each
    bucket, on the H100 each micro-batch makes them again from the gathered weights: r 1 w 1, 2 x LINEAR =
    6,476,005,376 B more per micro-batch than the plain run's activation casts."""
    plain = estimate("llama-2-7b", fp8="te-current", gpu="h100-sxm", **FSDP)
    primary = estimate("llama-2-7b", fp8="te-current", gpu="h100-sxm", fp8_param_gather=True, **FSDP)
    assert reduced_bytes(plain)[1] == 6_738_681_856 and reduced_bytes(primary)[1] == 3_500_679_168
    assert fp8_cast_bytes(primary, True) == (fp8_cast_bytes(plain, True)[0] + 6_476_005_376, 8_095_006_720)


@pytest.mark.parametrize("gpu, layer", [("h100-sxm", 1_493_254_144), ("b200", 746_668_032)])
def test_megatron_fsdp_gathers_an_moe_layer_in_8_bits_by_hand(gpu: str, layer: int) -> None:
    """Mixtral 8x7B (h 4,096, 32 heads of 128, 8 KV heads, 8 experts of f 14,336) under Megatron-FSDP, d 4, EP 2:
    the layer being computed holds its TE linears' weights, q and o 4,096 x 4,096 and k, v 1,024 x 4,096 (41,943,040)
    and its 4 local experts' fc1 and fc2, 4 x 3 x 14,336 x 4,096 (704,643,072): 746,586,112 elements, in 8 bits and,
    on the H100, a transpose beside each (2 B); the router 8 x 4,096 and the two norms 2 x 4,096 stay 16-bit (40,960
    elements). H100: 2 x 746,627,072 = 1,493,254,144 B; B200: 746,586,112 + 2 x 40,960 = 746,668,032 B."""
    e = estimate("mixtral-8x7b", mode="train", batch=1, seq=4096, dp=4, ep=2, zero=3, framework="megatron",
                 fp8="te-current", gpu=gpu, fp8_param_gather=True)
    assert _terms(e, "total_bytes")["zero3/gathered_weights/layer"] == layer
