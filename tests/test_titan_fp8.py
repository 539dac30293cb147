"""torchtitan's Float8 (torchao's Float8Linear, --framework torchtitan --fp8 rowwise | rowwise_with_gw_hp) with its
tensor, sequence, pipeline and context parallelism and op-level selective checkpointing: torchtitan's own Llama
(the megatron graph) with every nn.Linear whose dims divide by 16 converted (filter_fqns empty: the output layer
too). Each Float8Linear saves its 16-bit input (torchao matmul_with_hp_or_float8_args), so without checkpointing
memory is the 16-bit run's; under op-level checkpointing the policy saves every aten._scaled_mm output
(torchtitan b5bcd76 distributed/activation_checkpoint.py: PyTorch's compute_intensive_ops include _scaled_mm; only
aten.mm / aten.linear count for "every second mm"). Expected numbers by hand below."""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.efficiency import fp8_rate_ratio, matmul_rate
from memderive.derivations.quantities.timing import float8_flops, step_time

#: Llama 3 8B (h 4,096, 32 heads of 128, 8 KV heads, f 14,336, 32 layers, V 128,256), b 1, s 4,096, torchtitan.
RUN = {"model": "llama-3-8b", "mode": "train", "batch": 1, "seq": 4096, "framework": "torchtitan",
       "gpu": "h100-sxm"}


def _acts(**extra: object) -> int:
    return estimate(**RUN, **extra).number("activation_bytes")


def test_op_checkpointing_keeps_every_scaled_mm_output_by_hand() -> None:
    """16-bit op-level checkpointing keeps mms 1, 3, 5, 7 of q, k, v, o, gate, up, down (q, v, gate, down); with
    Float8 linears none is an aten.mm and every _scaled_mm output is kept: k (s x a_kv d = 4,096 x 1,024 x 2 B =
    8,388,608), o (4,096 x 4,096 x 2 = 33,554,432), up (4,096 x 14,336 x 2 = 117,440,512) join: 159,383,552 per
    layer, x 32 = 5,100,273,664 B. With TP 2 (and SP): k 4,194,304, o's whole partial sum before the reduce-scatter
    33,554,432, up 58,720,256: 96,468,992 x 32 = 3,087,007,744 B."""
    assert _acts(fp8="rowwise") - _acts() == 5_100_273_664
    assert _acts(fp8="rowwise", tp=2) - _acts(tp=2) == 3_087_007_744
    assert _acts(fp8="rowwise", recompute="none") == _acts(recompute="none")  # the 16-bit input saved


def test_scaled_matmul_flops_by_hand() -> None:
    """Kept outputs are not recomputed, so the 8-bit FLOPs are forward, input and weight gradient of every
    converted linear: per token 2 (h (a d + 2 a_kv d) + h a d + 3 h f) = 2 (25,165,824 + 16,777,216 + 176,160,768)
    = 436,207,616 per layer, x 32 layers, plus the output layer's 2 h V = 1,050,673,152; x 3 x 4,096 tokens =
    171,523,813,933,056 + 12,910,671,691,776 = 184,434,485,624,832. rowwise_with_gw_hp keeps the weight gradients
    16-bit: two thirds of it, 122,956,323,749,888. TP 2: half, 92,217,242,812,416."""
    assert float8_flops(estimate(**RUN, fp8="rowwise")) == 184_434_485_624_832
    assert float8_flops(estimate(**RUN, fp8="rowwise_with_gw_hp")) == 122_956_323_749_888
    assert float8_flops(estimate(**RUN, fp8="rowwise", tp=2)) == 92_217_242_812_416
    assert step_time(estimate(**RUN, fp8="rowwise"), "h100-sxm").compute_s < step_time(
        estimate(**RUN), "h100-sxm").compute_s


@pytest.mark.parametrize("layout", [{"tp": 2}, {"pp": 2}, {"cp": 2}, {"tp": 2, "pp": 2, "cp": 2, "dp": 2}])
def test_composes_with_torchtitans_parallelisms(layout: dict) -> None:
    """TP/SP, PP and CP do not touch the Float8 conversion: each layout is expressible, its linears in 8 bits."""
    e = estimate(**RUN, fp8="rowwise", **layout)
    assert e.number("total_bytes") > 0 and float8_flops(e) > 0 and e.graph.float8


@pytest.mark.parametrize(("model", "fp8", "tp", "fragment"), [
    ("mixtral-8x7b", "tensorwise", 2, "layer/moe/experts is not one"),  # the Float8 TP plan is the dense Llama's
    ("llama-3-8b", "te-delayed", 1, "torchtitan trains torchao's Float8Linear"),
])
def test_refused_in_one_line(model: str, fp8: str, tp: int, fragment: str, capsys: pytest.CaptureFixture[str]
                             ) -> None:
    with pytest.raises(OptionsError, match=fragment):
        estimate(**{**RUN, "model": model}, fp8=fp8, tp=tp)
    assert main(["estimate", "--model", model, "--mode", "train", "--batch", "1", "--seq", "4096",
                 "--framework", "torchtitan", "--fp8", fp8, "--tp", str(tp)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and fragment in err


def test_rowwise_with_gw_hp_times_the_weight_gradients_at_the_16_bit_rate_of_their_shapes() -> None:
    """torchao's ``rowwise_with_gw_hp`` keeps each Float8 linear's weight gradient a 16-bit ``mm``: against
    ``rowwise`` the step gains, for each layer linear, its weight gradient's bf16 time less its fp8 time at the
    gradient's own shape (out, in, M), and for the converted head (outside the layers' products) its weight
    gradient at the layer's 16-bit rate less that rate times the fp8 over bf16 ratio. Llama 3 8B under torchtitan
    (separate gate and up), b 1, s 4,096 (M = 4,096), 32 layers; per layer (out, in): qkv (6,144, 4,096), proj
    (4,096, 4,096), gate and up (14,336, 4,096), down (4,096, 14,336), each 2 M out in FLOPs; the head 2 M V h
    with V 128,256, h 4,096."""
    kw = dict(mode="train", batch=1, seq=4096, framework="torchtitan", gpu="h100-sxm", recompute="none")
    rowwise = step_time(estimate("llama-3-8b", fp8="rowwise", **kw), "h100-sxm")
    kept = step_time(estimate("llama-3-8b", fp8="rowwise_with_gw_hp", **kw), "h100-sxm")
    hw, m, expected = gpu("h100-sxm"), 4096, 0.0
    for out, inp in [(6144, 4096), (4096, 4096), (14336, 4096), (14336, 4096), (4096, 14336)]:
        flops = 2 * m * out * inp * 32
        expected += flops / matmul_rate(hw, "bf16", out, inp, m) - flops / matmul_rate(hw, "fp8", out, inp, m)
    head, layer_rate = 2 * m * 128256 * 4096, hw.bf16_flops * rowwise.efficiency
    expected += head / layer_rate - head / (layer_rate * fp8_rate_ratio(hw))
    assert kept.compute_s - rowwise.compute_s == pytest.approx(expected, rel=1e-9)


def test_tensorwise_tensor_parallel_plan_saves_the_8_bit_casts_by_hand() -> None:
    """torchtitan's default Float8 (tensorwise) with TP runs torchao's Float8 TP plan: PrepareFloat8ModuleInput casts
    the attention's and the feed-forward's input on its sequence shard and all-gathers the 8-bit tensor, which q, k,
    v (gate, up) save as it is (matmul_with_hp_or_float8_args keeps an input already in 8 bits); Float8RowwiseParallel
    casts o's and down's sharded inputs, which they save. rowwise (regular TP) saves the 16-bit inputs, q/k/v's and
    gate/up's gathered as DTensor leaves them (2 b s h, whatever t).
    Llama 3 8B, b 1, s 4,096 (b s h = 16,777,216, b s f = 58,720,256), no recompute, per layer, TP 2:
    q/k/v's input 33,554,432 (2 B, gathered) -> 16,777,216 (1 B, gathered) + a 4 B scale: -16,777,212; gate/up's
    the same; o: its 16-bit input is the attention's saved output (kept), plus the 8-bit cast b s h / 2 = 8,388,608
    + 4; down: b s f / 2 x 2 B = 58,720,256 -> 29,360,128 + 4: -29,360,124. Sum -54,525,936, x 32 = -1,744,829,952.
    TP 4: q/k/v and gate/up as at TP 2, o +4,194,308, down 29,360,128 -> 14,680,068 (-14,680,060): -44,040,176 per
    layer, x 32 = -1,409,285,632."""
    kw = dict(recompute="none")
    assert _acts(fp8="tensorwise", tp=2, **kw) - _acts(fp8="rowwise", tp=2, **kw) == -1_744_829_952
    assert _acts(fp8="tensorwise", tp=4, **kw) - _acts(fp8="rowwise", tp=4, **kw) == -1_409_285_632
    assert _acts(fp8="tensorwise", **kw) == _acts(fp8="rowwise", **kw)  # TP 1: no plan, the 16-bit inputs saved
    with pytest.raises(OptionsError, match="give --sp"):  # the plan's layouts are sequence-parallel
        estimate(**RUN, fp8="tensorwise", tp=2, sp=False)


#: The Llama block benchmarks/titan_tp_saved.py measures: h 128, 4 heads, FFN 320, one layer.
TINY = {"model_type": "llama", "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
        "num_hidden_layers": 1, "intermediate_size": 320, "vocab_size": 256, "max_position_embeddings": 64,
        "tie_word_embeddings": False, "hidden_act": "silu"}


def test_tensor_parallel_saves_what_torchtitans_plans_save_measured_on_cpu() -> None:
    """Measured with PyTorch 2.13 and torchao 0.18 on CPU (benchmarks/titan_tp_saved.py: torchtitan's layer plan on
    2 gloo ranks, every tensor autograd saves recorded once, b 2, s 64): the 16-bit plan saves the attention's and
    the feed-forward's gathered input, 2 x 64 x 128 x 2 B = 32,768 B each (the sequence shard is 16,384); the Float8
    plan saves 571,392 B against 616,448, -45,056 B of 8-bit data (its four 0-d fp32 scales, 4 B each, not
    counted): memderive's layer, -45,056 + 16 = -45,040."""
    def layer(**kw: object) -> object:
        return estimate(TINY, mode="train", batch=2, seq=64, framework="torchtitan", tp=2, recompute="none", **kw)

    bf16 = layer()
    gathered = [x for blk, op in bf16.graph.ops() for x in op.saved if blk.name == "layer" and op.path == "attn/qkv"]
    assert [x.nbytes.evaluate(bf16.values) for x in gathered] == [32_768]
    assert (layer(fp8="tensorwise").number("activation_bytes_per_layer")
            - bf16.number("activation_bytes_per_layer")) == -45_040


def test_tensorwise_tensor_parallel_plan_all_gathers_in_8_bits_by_hand() -> None:
    """The plan's all-gathers move 8-bit tensors (the layer inputs of q/k/v and gate/up in forward, o's and down's
    output gradients, cast first by NoopFwToFloat8BwDynamic, in backward; benchmarks/titan_tp_saved.py, on 2 CPU
    ranks, sees those four per layer: INPUT, INPUT, GRAD_OUTPUT, GRAD_OUTPUT); its reduce-scatters stay 16-bit. In
    all-reduce bytes (a reduce-scatter or all-gather of B bytes is one ring phase, an all-reduce of B/2), Llama 3 8B,
    b 1, s 4,096, TP 2 (b s h x 2 B = 33,554,432): regular TP, per layer 2 all-reduces forward and 2 backward,
    4 x 33,554,432 = 134,217,728, x 32 = 4,294,967,296, plus the embedding's forward partial sums and the output
    layer's input gradient (16-bit in both), 2 x 33,554,432: 4,362,076,160. Float8 TP: per layer 2 reduce-scatters
    (2 x 16,777,216) and 2 all-gathers (2 x 8,388,608) each way, 100,663,296, x 32 + 67,108,864 = 3,288,334,336.
    Full recompute repeats the layers' forward collectives: 6,509,559,808 against 4,898,947,072. Inside one node
    the time is linear in those bytes."""
    def tp_s(fp8: str, recompute: str) -> float:
        return step_time(estimate(**RUN, fp8=fp8, tp=2, recompute=recompute), "h100-sxm").tp_s

    assert tp_s("tensorwise", "none") / tp_s("rowwise", "none") == pytest.approx(3_288_334_336 / 4_362_076_160,
                                                                                  rel=1e-12)
    assert tp_s("tensorwise", "full") / tp_s("rowwise", "full") == pytest.approx(4_898_947_072 / 6_509_559_808,
                                                                                  rel=1e-12)
