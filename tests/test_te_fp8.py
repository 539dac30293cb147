"""Transformer Engine's fp8 under Megatron-Core (--fp8 te-delayed / te-current / te-mxfp8) in memory: each layer
linear saves its input's 8-bit cast and scales instead of the 16-bit input (TransformerEngine module/linear.py
L604-621, layernorm_linear.py L475-487), and TE keeps each linear's 8-bit weight across micro-batches (with a
transpose on Hopper), plus delayed scaling's amax history (symbolic.te_float8). Expected numbers by hand below."""

from __future__ import annotations

import pytest
import sympy as sp

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.memory_bound import fp8_cast_bytes
from memderive.derivations.quantities.timing import step_time, tp_bytes
from memderive.symbolic.dims import b, f, f_s, h, l, l_d, p, s, t
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.graph import Graph
from memderive.symbolic.ops import BlockBuilder
from memderive.symbolic.te_float8 import SP_GATHERS, TEFloat8, sp_gathered, workspace_terms

#: Llama 2 7B (h 4,096, 32 heads of 128, no GQA, f 11,008, 32 layers), b 1, s 4,096, TP 2 with SP, Megatron-Core.
RUN = {"mode": "train", "batch": 1, "seq": 4096, "implementation": "megatron", "tp": 2, "sp": True}


def _numbers(fp8: str, gpu: str) -> tuple[int, int]:
    e = estimate("llama-2-7b", fp8=fp8, gpu=gpu, **RUN)
    return e.number("total_bytes"), e.number("activation_bytes")


def test_saved_inputs_are_the_8_bit_casts_by_hand() -> None:
    """Per layer and TP rank, against the 16-bit run (same GPU):
    qkv saves norm1's output, s/t x h = 2,048 x 4,096: 16,777,216 B in bf16, 8,388,608 + a 4-byte scale_inv in fp8
    (-8,388,604); mlp fc1 (gate and up, one input) the same for norm2's output (-8,388,604); fc2 saves s x f/t =
    4,096 x 5,504 = 22,544,384 elements: 45,088,768 B -> 22,544,388 (-22,544,380); proj's input is the attention's
    output, which the attention still saves in bf16, so proj adds its 8-bit copy, s x h/t = 8,388,608 + 4
    (+8,388,612). Per layer -30,932,976, x 32 layers = -989,855,232 B of activations.
    Workspaces (Hopper: data and its transpose, 2 B per local weight element, + 4 B scale_inv per module): local
    weights qkv 12,288 x 4,096 / 2 = 25,165,824, proj 8,388,608, fc1 2 x 11,008 x 4,096 / 2 = 45,088,768, fc2
    22,544,384: 101,187,584 elements -> 202,375,168 + 16 B; delayed scaling's amax history, per module
    4 B x 5 quantizers x (history 1 + 1) = 40 B, x 4 modules = 160 B. 202,375,344 B per layer, x 32 =
    6,476,011,008 B; the total moves by 6,476,011,008 - 989,855,232 = 5,486,155,776 B.
    Current scaling: no amax history, 160 x 32 = 5,120 B less, and proj saves the attention's 16-bit output itself
    (Megatron-Core's set_save_original_input, attention.py L428-444), the one the attention saves: not +8,388,612
    per layer, -268,435,584 over 32 layers (activations -1,258,290,816). On a B200 (non-TN fp8 GEMMs: no transpose):
    101,187,584 + 16 + 160 = 101,187,760 per layer, x 32 = 3,238,008,320 - 989,855,232 = 2,248,153,088 B."""
    total, acts = _numbers("none", "h100-sxm")
    d_total, d_acts = _numbers("te-delayed", "h100-sxm")
    assert (d_total - total, d_acts - acts) == (5_486_155_776, -989_855_232)
    c_total, c_acts = _numbers("te-current", "h100-sxm")
    assert (c_total - total, c_acts - acts) == (5_486_155_776 - 5_120 - 268_435_584, -1_258_290_816)
    b_total, b_acts = _numbers("te-delayed", "b200")
    assert (b_total - _numbers("none", "b200")[0], b_acts - acts) == (2_248_153_088, -989_855_232)


def test_mxfp8_saves_one_byte_scale_per_32_elements_by_hand() -> None:
    """MXFP8 (B200): each saved 8-bit input adds its column-wise scales, one byte per 32 elements (33/32 B per
    element): qkv and fc1 2,048 x 4,096 x 33/32 = 8,650,752 (-8,126,464 each against bf16's 16,777,216), fc2
    22,544,384 x 33/32 = 23,248,896 (-21,839,872), proj nothing (it saves the attention's own 16-bit output:
    set_save_original_input): -38,092,800 per layer, x 32 = -1,218,969,600. The weight workspace: row-wise and
    column-wise data and their scales, 2 + 2/32 B per element: 101,187,584 x 33/16 = 208,699,392 per layer, x 32 =
    6,678,380,544; the total moves by 6,678,380,544 - 1,218,969,600 = 5,459,410,944 B."""
    total, acts = _numbers("none", "b200")
    m_total, m_acts = _numbers("te-mxfp8", "b200")
    assert (m_total - total, m_acts - acts) == (5_459_410_944, -1_218_969_600)


def test_proj_saves_its_16_bit_input_under_current_scaling_with_selective_recompute() -> None:
    """--recompute selective (core_attn checkpoints the fused attention: its output is no longer saved by it).
    Megatron-Core sets save_original_input on linear_proj for fp8 recipes other than delayed (attention.py
    L428-444; TE linear.py L597-598 saves ``inp``), so proj holds the 16-bit output, s x h/t = 2,048 x 4,096 x 2 B =
    16,777,216 per layer, where delayed scaling holds its 8-bit copy, 8,388,608 + a 4-byte scale_inv: +8,388,604
    per layer, x 32 = +268,435,328 B of activations. The total: that less delayed scaling's amax history (5,120 B);
    the layer rebuilt in backward is the same under both (the rerun's 16-bit output and softmax stats)."""
    run = {**RUN, "gpu": "h100-sxm", "recompute": "selective"}
    delayed = estimate("llama-2-7b", fp8="te-delayed", **run)
    current = estimate("llama-2-7b", fp8="te-current", **run)
    assert current.number("activation_bytes") - delayed.number("activation_bytes") == 268_435_328
    assert current.number("total_bytes") - delayed.number("total_bytes") == 268_435_328 - 5_120
    saved = {op.path: [x.name for x in op.saved] for blk, op in current.graph.ops() if blk.name == "layer"}
    assert saved["attn/proj"] == ["attn/core.out"] and saved["mlp/fc2"] == ["mlp/act.out:fp8",
                                                                          "mlp/act.out:fp8.scale_inv"]


def test_shared_experts_fc1_saves_the_routers_16_bit_input_and_its_workspace_spans_the_moe_layers() -> None:
    """DeepSeek-V2 (a dense first layer, then MoE layers with shared experts), current scaling, TP 8 with SP, EP 8,
    PP 6. Megatron-Core sets save_original_input on the shared experts' fc1 (moe/shared_experts.py L147-161): it
    saves the pre-MLP norm's 16-bit output, which the router saves too, not an 8-bit copy; the dense layer's fc1
    still saves its cast; delayed scaling casts both. The weight workspaces, one module per input and share of the
    layers: the dense fc1 (gate and up, 2 f h / t elements) over the stage's l_d / p dense layers, the shared
    experts' fc1 (2 f_s h / t) over its (l - l_d) / p MoE layers; on Hopper data and transpose, 2 B per element,
    and a 4-byte scale_inv per module."""
    run = {"mode": "train", "batch": 1, "seq": 4096, "framework": "megatron", "tp": 8, "sp": True, "ep": 8, "pp": 6,
           "dp": 8, "gpu": "h100-sxm"}
    saved = {}
    for recipe in ("te-current", "te-delayed"):
        e = estimate("deepseek-v2", fp8=recipe, **run)
        saved[recipe] = {op.path: [x.name for x in op.saved] for blk, op in e.graph.ops() if blk.name == "layer"}
        if recipe == "te-current":
            terms = {t.path: t.expr for t in e.quantity("total_bytes").breakdown.terms}
    assert saved["te-current"]["moe/shared/gate"] == ["norm2.out"]
    assert saved["te-current"]["mlp/gate"] == ["norm2.out:fp8", "norm2.out:fp8.scale_inv"]
    assert saved["te-delayed"]["moe/shared/gate"] == ["norm2.out:fp8", "norm2.out:fp8.scale_inv"]
    dense, moe = l_d / p, (l - l_d) / p
    assert sp.expand(terms["weights/te_fp8/layer/mlp/gate/weight_workspace"] - dense * (2 * 2 * f * h / t + 4)) == 0
    assert sp.expand(terms["weights/te_fp8/layer/moe/shared/gate/weight_workspace"]
                     - moe * (2 * 2 * f_s * h / t + 4)) == 0


def test_each_term_is_an_op_of_the_graph() -> None:
    """The 8-bit casts are saved tensors of the linears that save them (provenance: the op), the workspaces are
    ``weights/te_fp8/<block>/<op>/...`` terms of the total; without --fp8 neither appears."""
    e = estimate("llama-2-7b", fp8="te-delayed", gpu="h100-sxm", **RUN)
    saved = {op.path: [x.name for x in op.saved] for blk, op in e.graph.ops() if blk.name == "layer"}
    assert saved["attn/proj"] == ["attn/core.out:fp8", "attn/core.out:fp8.scale_inv"]
    assert saved["mlp/fc2"] == ["mlp/act.out:fp8", "mlp/act.out:fp8.scale_inv"]
    paths = [t.path for t in e.quantity("total_bytes").breakdown.terms if t.path.startswith("weights/te_fp8/")]
    assert paths == [f"weights/te_fp8/layer/{op}/{what}" for op in ("attn/qkv", "attn/proj", "mlp/gate", "mlp/fc2")
                     for what in ("weight_workspace", "amax_history")]
    plain = estimate("llama-2-7b", gpu="h100-sxm", **RUN)
    assert not any(":fp8" in x.name for _, op in plain.graph.ops() for x in op.saved)
    assert not any("te_fp8" in t.path for t in plain.quantity("total_bytes").breakdown.terms)


def test_workspace_of_one_linear_by_hand() -> None:
    """One h x h linear over l layers: delayed scaling on Hopper 2 h^2 + 4 B per layer and 4 x 5 x 2 = 40 B of
    amax history; on Blackwell h^2 + 4; MXFP8 2 h^2 + 2 h^2/32 = 33 h^2/16. Its saved input: b s h bytes and a
    4-byte scale (delayed), or b s h + b s h / 32 (MXFP8)."""
    bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    bb.linear("fc", bb.input, h, bias=False)
    g = Graph("toy", (bb.build(repeat=l),))
    assert workspace_terms(g, "te-delayed", True) == [("layer/fc/weight_workspace", l * (2 * h * h + 4)),
                                                      ("layer/fc/amax_history", l * 40)]
    assert workspace_terms(g, "te-current", False) == [("layer/fc/weight_workspace", l * (h * h + 4))]
    assert workspace_terms(g, "te-mxfp8", False) == [("layer/fc/weight_workspace", l * 33 * h * h / 16)]
    mx = TEFloat8("te-mxfp8")(g).blocks[0].ops[0].saved
    assert [x.nbytes for x in mx] == [b * s * h, b * s * h / 32]


def test_zero_3_caches_the_8_bit_weights_as_the_time_casts_them_once_per_step() -> None:
    """--zero 3 under Megatron-Core is Megatron-FSDP, which Transformer Engine does not see as torch's FSDP2
    (module/linear.py L1958 ``cache_name = None if (is_first_microbatch is None or self.is_fsdp2) else "weight"``;
    Megatron passes is_first_microbatch through the FSDP wrapper, schedules.py L496-497): each linear's 8-bit
    weight (and transpose) is cached across the step, and the time casts the weights once per step. Llama 2 7B,
    b 1, s 4,096, no TP, d 8, delayed scaling, H100. Saved casts, per layer: qkv, fc1 save norm outputs 4,096 x
    4,096 B in fp8 + 4 instead of 2 B (-16,777,212 each), fc2 4,096 x 11,008 + 4 instead of 2 B (-45,088,764),
    proj adds 16,777,216 + 4: -61,865,968, x 32 = -1,979,710,976. Workspaces: the whole weights (TE quantizes the
    gathered one), 4,096 x 12,288 + 4,096^2 + 4,096 x 22,016 + 11,008 x 4,096 = 202,375,168 elements, data and
    transpose 2 B each + 4 modules x 4 B scale_inv = 404,750,352, amax history 160: x 32 = 12,952,016,384. The total
    moves by 12,952,016,384 - 1,979,710,976 = 10,972,305,408 B. The time's weight casts: once per step, r 2 w 1 + 1
    per element, 4 x 202,375,168 x 32 = 25,904,021,504 B, of which the writes, 2 x 202,375,168 x 32 =
    12,952,010,752, are the workspaces' data (12,952,011,264 less the 16-B scale_invs per layer);
    with 4 micro-batches the workspaces and the per-step casts stay as they are."""
    run = {"mode": "train", "batch": 1, "seq": 4096, "implementation": "megatron", "dp": 8, "zero": 3,
           "gpu": "h100-sxm"}
    plain = estimate("llama-2-7b", **run)
    for m in (1, 4):
        fp8 = estimate("llama-2-7b", fp8="te-delayed", micro_batches=m, **run)
        assert fp8.number("activation_bytes") - plain.number("activation_bytes") == -1_979_710_976
        assert fp8.number("total_bytes") - plain.number("total_bytes") == 10_972_305_408
        workspaces = [t for t in fp8.quantity("total_bytes").breakdown.terms if t.path.endswith("weight_workspace")]
        assert len(workspaces) == 4
        assert sum(int(t.expr.subs(fp8.values)) for t in workspaces) == 12_952_016_384 - 160 * 32
        assert fp8_cast_bytes(fp8, True)[1] == 25_904_021_504


def test_the_step_timeline_is_not_claimed(capsys: pytest.CaptureFixture[str]) -> None:
    """The step timeline replays PyTorch's allocations without TE's workspaces: with --fp8 te-* the sum decides."""
    e = estimate("llama-2-7b", fp8="te-current", gpu="h100-sxm", **RUN)
    assert e.timeline() is None and e.decides() == "total_bytes"
    assert main(["estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096",
                 "--implementation", "megatron", "--tp", "2", "--sp", "--fp8", "te-delayed"]) == 0
    out = capsys.readouterr().out
    assert "weight workspaces cached across micro-batches" in out or "weights/te_fp8" in out


def test_sequence_parallel_all_gathers_move_the_quantized_tensor_by_hand() -> None:
    """One MLP under TP 2 with SP, b 2, s 8, h 64: up (column-parallel) gathers its input x, b s h = 1,024 elements;
    down (row-parallel) reduce-scatters its output (1,024 elements) and, in backward, gathers that output's gradient.
    An all-gather or reduce-scatter of a B-byte tensor over t ranks moves (t - 1)/t x B per rank, one ring phase:
    tp_bytes counts it as an all-reduce of B/2 (two phases). 16 bits: B = 2,048 for each of the four collectives,
    forward 1,024 + 1,024, backward the same.
    Transformer Engine (v2.9 linear.py _Linear.forward L175-207, distributed.py _all_gather_fp8, _all_gather_mxfp8):
    delayed and current scaling gather the 8-bit _data, 1 B per element, no scale (every rank holds the same): x
    1,024 B, forward 1,024 (down's 16-bit reduce-scatter) + 512; backward: up's input gradient reduce-scattered in
    16 bits (1,024) + the output gradient gathered in 8 bits, row-wise only (Float8 cannot gather its transpose),
    512. MXFP8: each copy 1 B + one E8M0 byte per 32 elements, 1,024 x 33/32 = 1,056 B: forward 1,024 + 528 = 1,552;
    the gradient's row- and column-wise copies both (dgrad and wgrad): 2,112 B, backward 1,024 + 1,056 = 2,080."""
    bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    up = bb.linear("mlp/up", bb.input, 4 * h, bias=False, parallel="column")
    _ = bb.linear("mlp/down", up, h, bias=False, parallel="row")
    g = Graph("mlp", (bb.build(repeat=l),))
    values = {b: 2, s: 8, h: 64, l: 1}
    te = sp_gathered(g)
    assert te == {"layer/mlp/up.weight", "layer/mlp/down.weight"}
    assert tp_bytes(g, values, False) == (2_048, 2_048)
    assert tp_bytes(g, values, False, False, te, SP_GATHERS["te-delayed"]) == (1_536, 1_536)
    assert tp_bytes(g, values, False, False, te, SP_GATHERS["te-current"]) == (1_536, 1_536)
    assert tp_bytes(g, values, False, False, te, SP_GATHERS["te-mxfp8"]) == (1_552, 2_080)


def test_the_step_times_tensor_parallel_all_gathers_are_8_bit_under_sequence_parallelism_by_hand() -> None:
    """Llama 2 7B, b 1, s 4,096, TP 2 with SP (``RUN``), in all-reduce bytes (above), b s h x 2 B = 33,554,432.
    16 bits: per layer 4 x 33,554,432 (qkv's and fc1's input gathers and gradient reduce-scatters, proj's and fc2's
    output reduce-scatters and gradient gathers, half each), x 32 = 4,294,967,296, plus the embedding's partial sums
    and the output layer's input gradient (Megatron's, not TE's: 16-bit), 67,108,864: 4,362,076,160.
    Delayed scaling: the four all-gathers per layer at 1 B, 8,388,608 each: 4 x 16,777,216 + 4 x 8,388,608 =
    100,663,296, x 32 + 67,108,864 = 3,288,334,336. MXFP8: qkv's and fc1's input 8,388,608 x 33/32 = 8,650,752 each,
    proj's and fc2's gradient 8,388,608 x 33/16 = 17,301,504 each: 67,108,864 + 51,904,512 = 119,013,376, x 32 +
    67,108,864 = 3,875,536,896. Inside one node the TP time is linear in those bytes (the message size, one layer's
    activations, is the same), so the ratios to the 16-bit run's TP time on the same GPU are the bytes'. Without SP
    the all-reduces stay 16-bit."""
    def tp_s(fp8: str, gpu: str, sp: bool = True) -> float:
        return step_time(estimate("llama-2-7b", fp8=fp8, gpu=gpu, **{**RUN, "sp": sp}), gpu).tp_s

    assert tp_s("te-delayed", "h100-sxm") / tp_s("none", "h100-sxm") == pytest.approx(
        3_288_334_336 / 4_362_076_160, rel=1e-12)
    assert tp_s("te-mxfp8", "b200") / tp_s("none", "b200") == pytest.approx(3_875_536_896 / 4_362_076_160, rel=1e-12)
    assert tp_s("te-current", "h100-sxm", sp=False) == tp_s("none", "h100-sxm", sp=False)
    note = step_time(estimate("llama-2-7b", fp8="te-mxfp8", gpu="b200", **RUN), "b200").model()
    assert "all-gathers move the quantized tensor" in " ".join(note) and "(33/16 B, its row- and column-wise" in \
        " ".join(note)
