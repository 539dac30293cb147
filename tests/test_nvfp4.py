"""Transformer Engine's NVFP4 recipe (``--fp8 te-nvfp4``, NVFP4BlockScaling) as Megatron-Core runs it: what its linears
save and cache (TransformerEngine d0067d0d tensor/nvfp4_tensor.py: 4-bit data two a byte, a 1-byte E4M3 scale per 16
elements, an fp32 amax per usage), what its casts move, what its sequence-parallel all-gathers send, its GEMMs at the
GPU's dense FP4 peak, and what it refuses. Expected numbers by hand, in each docstring.

Llama 2 7B as in tests/test_fp8_casts.py: h 4,096, f 11,008, 32 layers, b 1, s 4,096 (M = 4,096 tokens), no TP.
Per layer: inputs qkv 16,777,216, proj 16,777,216, fc1 16,777,216, fc2 45,088,768; output gradients 174,063,616;
weights 202,375,168 over four TE modules (qkv, proj, fc1 of gate and up, fc2).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.efficiency import matmul_rate
from memderive.derivations.quantities.memory_bound import fp8_cast_bytes
from memderive.derivations.quantities.timing import step_time
from memderive.symbolic.dims import b, h, l, s
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.graph import Graph
from memderive.symbolic.ops import BlockBuilder
from memderive.symbolic.te_float8 import SP_GATHERS, TEFloat8
from tests.published_runs import BRIDGE_NVFP4

RUN = {"mode": "train", "batch": 1, "seq": 4096, "framework": "megatron", "gpu": "b200"}
LAYERS = 32


def test_one_linears_saved_input_by_hand() -> None:
    """A linear's input of b s h elements, saved for the weight gradient as its column-wise NVFP4 usage: the data
    half a byte per element (b s h / 2), one E4M3 byte per 16 elements (b s h / 16), one fp32 amax (4 B). At b 1,
    s 2,048, h 4,096 (8,388,608 elements): 4,194,304 + 524,288 + 4 = 4,718,596 B, against 16,777,216 in bf16."""
    bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    _ = bb.linear("fc", bb.input, h, bias=False)
    g = TEFloat8("te-nvfp4")(Graph("toy", (bb.build(repeat=l),)))
    saved = [(x.name, x.nbytes) for x in g.blocks[0].ops[0].saved]
    assert saved == [("in:fp4", b * h * s / 2), ("in:fp4.scale_inv", b * h * s / 16), ("in:fp4.amax", 4)]
    assert sum(n for _, n in saved).subs({b: 1, s: 2048, h: 4096}) == 4_718_596


def test_llama_saved_activations_and_weight_caches_against_mxfp8_by_hand() -> None:
    """The same run under MXFP8 and NVFP4 on a B200. Saved: qkv's, fc1's and fc2's inputs are cast (proj saves its
    16-bit input under both, Megatron's set_save_original_input): MXFP8 1 + 1/32 B per element, NVFP4 1/2 + 1/16
    and 4 B of amax each; (16,777,216 + 16,777,216 + 45,088,768) x 15/32 - 3 x 4 = 36,864,000 - 12 = 36,863,988 B
    less per layer, 1,179,647,616 over 32. Weight caches, both usages: MXFP8 2 W + W / 16, NVFP4 2 (W / 2 + W / 16)
    + 2 x 4 per module: 202,375,168 x 15 / 16 - 4 x 8 = 189,726,688 B less per layer, 6,071,254,016 over 32; the
    total falls by both, 7,250,901,632 B."""
    mx, nv = estimate("llama-2-7b", fp8="te-mxfp8", **RUN), estimate("llama-2-7b", fp8="te-nvfp4", **RUN)
    assert mx.number("activation_bytes_per_layer") - nv.number("activation_bytes_per_layer") == 36_863_988
    assert mx.number("activation_bytes") - nv.number("activation_bytes") == LAYERS * 36_863_988
    assert mx.number("total_bytes") - nv.number("total_bytes") == LAYERS * (36_863_988 + 189_726_688)


def test_casts_by_hand() -> None:
    """Every NVFP4 cast reads the 16-bit tensor twice (the amax, post-RHT for the column-wise usage, then the
    fused RHT cast: r 2 + 2) and writes both usages, 1/2 + 1/16 B per element each: 4 + 9/8 = 41/8 B per element.
    Per layer (95,420,416 inputs + 174,063,616 gradients) x 41/8 = 1,381,105,664 B, and proj's saved 16-bit input
    cast again column-wise in the backward, its amax and cast reads once more (+ 4 x 16,777,216 = 67,108,864):
    1,448,214,528 B per micro-batch; the weights once per step, 202,375,168 x 41/8 = 1,037,172,736 B."""
    micro, step = fp8_cast_bytes(estimate("llama-2-7b", fp8="te-nvfp4", **RUN), False)
    assert (micro, step) == (LAYERS * 1_448_214_528, LAYERS * 1_037_172_736)


def test_sequence_parallel_gathers_send_four_bit_data_and_scales() -> None:
    """TE's _all_gather_nvfp4 sends each usage's 4-bit data and its 1-byte scales per 16: the forward's input one
    usage, 1/2 + 1/16 = 9/16 B per element; the backward's output gradient both, 9/8 B (MXFP8: 33/32, 33/16)."""
    g = SP_GATHERS["te-nvfp4"]
    assert (g.width(g.input), g.width(g.grad)) == (Fraction(9, 16), Fraction(9, 8))


def test_a_gemm_runs_at_the_measured_fp4_fraction_of_the_fp4_peak() -> None:
    """Dense FP4 peaks from the datasheets, sparse figures halved: B200 144 / 8 / 2 = 9, GB200 1,440 / 72 / 2 = 10,
    B300 108 / 8 = 13.5, GB300 1,080 / 72 = 15 PFLOP/s. cuBLAS's MXFP4 8192^3 on a B200 (DeepGEMM#348): 5,239 TFLOP/s,
    that fraction of each FP4 peak the 4-bit burst rate: B200 5,239, GB200 5,239 x 10 / 9 = 5,821.1, B300 5,239 x 1.5
    = 7,858.5. A product's rate is its fp8 rate times the 4-bit over fp8 burst: B200 5,239 / 3,432.5 (Bekman's fp8
    MAMF) = 1.5263, GB200 5,821.1 / 3,615.6 = 1.6100, B300 7,858.5 / 3,353.3 (Bekman's B300 fp8 MAMF) = 2.3435."""
    peaks = {name: gpu(name).peak_flops("fp4") for name in ("b200", "gb200", "b300", "gb300")}
    assert peaks == {"b200": 9 * 10**15, "gb200": 10 * 10**15, "b300": 135 * 10**14, "gb300": 15 * 10**15}
    for name, ratio in (("b200", 1.5263), ("gb200", 1.6100), ("b300", 2.3435)):
        hw = gpu(name)
        for shape in ((8192, 8192, 8192), (16384, 1024, 8192)):
            assert matmul_rate(hw, "fp4", *shape) / matmul_rate(hw, "fp8", *shape) == pytest.approx(ratio, abs=1e-4)


def test_the_step_names_its_stand_in() -> None:
    """The time model says the FP4 rate is a stand-in (no published NVFP4 GEMM benchmark) and cites its source."""
    st = step_time(estimate("llama-2-7b", fp8="te-nvfp4", **RUN), "b200")
    assert any("a stand-in, no NVFP4 GEMM benchmark being published" in line and "DeepGEMM" in line
               and "9,000.0 TFLOP/s" in line for line in st.model())


@pytest.mark.parametrize("args, says", [
    (["--gpu", "h100-sxm"], "h100-sxm has none"),
    (["--gpu", "a100-80gb"], "a100-80gb has none: give a Blackwell --gpu (b200, gb200, b300, gb300)"),
    (["--gpu", "b200", "--implementation", "hf"], "--implementation megatron"),
    (["--gpu", "b200", "--framework", "torchtitan"], "torchtitan trains torchao's Float8Linear"),
    (["--gpu", "b200", "--tp", "2", "--sp", "--tp-comm-overlap"], "drop --tp-comm-overlap"),
    (["--gpu", "b200", "--fp8-param-gather", "--zero", "1", "--dp", "2"], "drop --fp8-param-gather"),
])
def test_refusals_in_one_line(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Where NVFP4 does not run or is not modelled: one line on stderr, exit 2."""
    base = ["estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096", "--fp8",
            "te-nvfp4"]
    framework = [] if "--implementation" in args or "--framework" in args else ["--framework", "megatron"]
    assert main(base + framework + args) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def test_bridges_nvfp4_rows_are_expressible_and_fit() -> None:
    """Megatron-Bridge's 26.02 NVFP4 rows (docs/performance-summary.md at v0.3.0, read by hand): GB300 70B on 64 GPUs
    at GBS 256, 405B on 256 at 1,536; GB200 the same; 26.02.01 (docs/performance-summary-archive.md): GB200 405B
    at VP 4 on 256, GBS 1,536. Each is held out, runs te-nvfp4 without userbuffers overlap (the recipe turns it off
    for nvfp4), and fits its GPU (they ran: GB300 288 GB, GB200 186 GB)."""
    assert [(r.gpu, r.gpus, r.global_batch) for r in BRIDGE_NVFP4] == [
        ("gb300", 64, 256), ("gb300", 256, 1536), ("gb200", 64, 256), ("gb200", 256, 1536), ("gb200", 256, 1536)]
    for run in BRIDGE_NVFP4:
        e = run.estimate()
        assert run.held_out and e.options.fp8 == "te-nvfp4" and not e.options.tp_comm_overlap
        assert not e.options.fp8_param_gather
        assert e.number("total_bytes") <= gpu(run.gpu).memory_bytes
