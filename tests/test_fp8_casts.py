"""Transformer Engine's fp8 quantization timed at the memory bandwidth (``memory_bound.fp8_cast_bytes``): the HBM
bytes of each layer linear's casts, counted by hand from TransformerEngine d0067d0d's code (quantizer.cpp
``Float8CurrentScalingQuantizer::quantize_impl``: an amax pass, then the cast; normalization.cpp ``rmsnorm_fwd``:
the norm fused with delayed scaling's cast, with current scaling's amax, unfused for MXFP8; MXFP8: row-wise and
column-wise data with a 1-byte scale per 32 elements; Hopper: fp8 transposes, TN-only GEMMs).

Llama 2 7B: h 4,096, 32 heads (no GQA), f 11,008, 32 layers, bf16 (2 B). b 1, s 4,096, no TP: M = 4,096 tokens.
Modules per layer (input elements X, output-gradient elements G, weights W):
  qkv  (fused with norm1): X = 4,096 x 4,096 = 16,777,216; G = 4,096 x 12,288 = 50,331,648; W = 50,331,648
  proj:                    X = 16,777,216;                 G = 16,777,216;                 W = 16,777,216
  fc1  (gate and up, fused with norm2): X = 16,777,216;    G = 4,096 x 22,016 = 90,177,536; W = 90,177,536
  fc2:                     X = 4,096 x 11,008 = 45,088,768; G = 16,777,216;                W = 45,088,768
  sum X over the unfused (proj, fc2) 61,865,984, over the fused (qkv, fc1) 33,554,432; sum G 174,063,616;
  sum W 202,375,168.
Under current scaling and MXFP8 proj saves its 16-bit input (Megatron-Core's set_save_original_input,
attention.py L428-444): its forward casts row-wise only, its backward casts the saved input column-wise again
(TransformerEngine linear.py L428-436, L1175-1180): two casts of X_proj = 16,777,216, each with its own read.
"""

from __future__ import annotations

from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.memory_bound import _module_casts, fp8_cast_bytes
from memderive.derivations.quantities.timing import step_time

RUN = {"mode": "train", "batch": 1, "seq": 4096, "framework": "megatron"}
LAYERS = 32


def _bytes(fp8: str, gpu: str, transpose: bool, **kw: object) -> tuple[int, int]:
    return fp8_cast_bytes(estimate("llama-2-7b", fp8=fp8, gpu=gpu, **RUN, **kw), transpose)


def test_current_scaling_on_hopper_by_hand() -> None:
    """Current scaling, H100 (data + transpose, one byte each): an unfused input or any gradient: amax r 2, cast
    r 2 w 1 + 1 = 6 B per element; a norm-fused input: the norm takes the amax, the cast r 2 w 2 = 4 B.
    Per layer: 6 x 61,865,984 + 4 x 33,554,432 + 6 x 174,063,616 = 371,195,904 + 134,217,728 + 1,044,381,696
    = 1,549,795,328 B per micro-batch, but proj's input twice at r 2 + r 2 w 1 = 5 B (10 B, not 6):
    + 4 x 16,777,216 = 1,616,904,192; the weights once per step, 6 x 202,375,168 = 1,214,251,008 B."""
    micro, step = _bytes("te-current", "h100-sxm", True)
    assert (micro, step) == (LAYERS * 1_616_904_192, LAYERS * 1_214_251_008)


def test_mxfp8_by_hand() -> None:
    """MXFP8, B200: every cast one pass, r 2, w row-wise 1 + 1/32 and column-wise 1 + 1/32 = 4 + 1/16 B per element
    (the norm writes its 16-bit output as before: not fused). Per layer (95,420,416 inputs + 174,063,616 gradients)
    x 65/16 = 269,484,032 x 65 / 16 = 1,094,778,880 B, and proj's input read once more for its column-wise cast
    in the backward (r 2: + 2 x 16,777,216): 1,128,333,312 B; weights 202,375,168 x 65 / 16 = 822,149,120 B."""
    micro, step = _bytes("te-mxfp8", "b200", False)
    assert (micro, step) == (LAYERS * 1_128_333_312, LAYERS * 822_149_120)


def test_delayed_scaling_fuses_the_norms_cast_by_hand() -> None:
    """Delayed scaling, H100: one pass r 2 w 1 + 1 = 4 B; a norm-fused input: the norm writes 1 byte, not 2 (-1),
    the transpose its own kernel (r 1 w 1, +2): 1 B. Per layer 4 x 61,865,984 + 1 x 33,554,432 + 4 x 174,063,616
    = 247,463,936 + 33,554,432 + 696,254,464 = 977,272,832 B; weights 4 x 202,375,168 = 809,500,672 B."""
    micro, step = _bytes("te-delayed", "h100-sxm", True)
    assert (micro, step) == (LAYERS * 977_272_832, LAYERS * 809_500_672)


def test_sequence_parallel_casts_the_local_shard_and_transposes_after_the_gather() -> None:
    """TP 2 with SP, current scaling, H100, per layer and rank. qkv: norm1's local shard X/2 = 8,388,608 cast
    row-wise only (r 2 w 1 = 3 B, amax in the norm: 25,165,824), the gathered 16,777,216 transposed in the backward
    (r 1 w 1: 33,554,432); its gradient G = 4,096 x 6,144 = 25,165,824 at 6 B: 150,994,944. fc1 alike: 25,165,824
    + 33,554,432 + 6 x 4,096 x 11,008 (270,532,608). proj (row-parallel): input 4,096 x 2,048 = 8,388,608 at 10 B
    (83,886,080: row-wise forward, column-wise backward, 5 B each), its gradient's local shard 8,388,608 cast
    row-wise with an amax pass (r 4 w 1 = 5 B: 41,943,040)
    and the gathered 16,777,216 transposed (33,554,432). fc2 alike: 6 x 4,096 x 5,504 = 135,266,304, 41,943,040
    + 33,554,432. Per layer: qkv 209,715,200 + fc1 329,252,864 + proj 159,383,552 + fc2 210,763,776 =
    909,115,392 B."""
    micro, _ = _bytes("te-current", "h100-sxm", True, tp=2, sp=True)
    assert micro == LAYERS * 909_115_392


def test_the_step_time_shows_the_casts_and_none_has_none() -> None:
    """One GPU, one micro-batch: ``fp8_cast_time_s`` is the bytes above at the bandwidth the memory-bound line uses
    on an H100 SXM, BabelStream's Triad 2.97 TB/s (memory_bound.achievable_bandwidth's Azure figure); --fp8 none
    times no cast."""
    st = step_time(estimate("llama-2-7b", fp8="te-current", gpu="h100-sxm", **RUN), "h100-sxm")
    expected = LAYERS * (1_616_904_192 + 1_214_251_008) / 2.97e12
    assert abs(st.fp8_cast_s - expected) < 1e-12
    assert st.to_json()["fp8_cast_time_s"] == st.fp8_cast_s
    assert "amax pass" in " ".join(st.model())
    bf16 = step_time(estimate("llama-2-7b", gpu="h100-sxm", **RUN), "h100-sxm")
    assert bf16.fp8_cast_s == 0 and bf16.to_json()["fp8_cast_time_s"] == 0


def test_full_recompute_casts_the_inputs_again() -> None:
    """--recompute full reruns each forward: the inputs' casts once more (the weights stay cached), per layer
    6 x 45,088,768 (fc2) + 5 x 16,777,216 (proj, row-wise only) + 4 x 33,554,432 = 488,636,416 B on top of
    1,616,904,192."""
    micro, step = _bytes("te-current", "h100-sxm", True, recompute="full")
    assert (micro, step) == (LAYERS * (1_616_904_192 + 488_636_416), LAYERS * 1_214_251_008)


def test_the_experts_grouped_linears_by_hand() -> None:
    """Mixtral 8x7B (h 4,096, 8 KV heads of 128, f_e 14,336, 8 experts, top 2), MXFP8 on a B200, EP 8: one expert per
    GPU, its rows the 4,096 x 2 = 8,192 routed tokens. Per layer X + G: qkv 16,777,216 + 4,096 x 6,144, proj 2 x
    16,777,216, the experts' fc1 8,192 x 4,096 + 8,192 x 28,672, fc2 8,192 x 14,336 + 8,192 x 4,096: 494,927,872
    elements x 65/16 = 2,010,644,480 B, + 2 x 16,777,216 for proj's input read again in the backward (saved in 16
    bits): 2,044,198,912 B; weights 6,144 x 4,096 + 4,096^2 + 28,672 x 4,096 + 4,096 x 14,336 =
    218,103,808 x 65/16 = 886,046,720 B."""
    e = estimate("mixtral-8x7b", fp8="te-mxfp8", gpu="b200", ep=8, dp=8, **RUN)
    assert fp8_cast_bytes(e, False) == (LAYERS * 2_044_198_912, LAYERS * 886_046_720)


def test_a_saved_16_bit_input_is_cast_again_in_the_backward_by_hand() -> None:
    """A module that saves its 16-bit input (Megatron's set_save_original_input: proj, the shared experts' fc1),
    8,192 input elements, bf16, no gradient counted. Current scaling on Hopper, not gathered: forward row-wise
    (amax r 2, cast r 2 w 1: 5 B per element), backward column-wise (the transpose alone: 5 B): 81,920 B.
    All-gathered over 8 ranks (sequence parallelism): the 1,024-element local shard cast row-wise in the forward
    (5,120) and again in the backward (5,120, Float8 cannot gather column-wise data), the gathered 8,192 transposed
    (r 1 w 1: 16,384): 26,624 B. MXFP8 gathered: the local shard row-wise (r 2, w 1 + 1/32: 3,104 B) forward and
    column-wise (3,104) backward: 6,208 B."""
    def casts(recipe: str, transpose: bool, split: int) -> int:
        return _module_casts(recipe, transpose, 2, 8192, 0, False, split, 1, 1, original=True)
    assert casts("te-current", True, 1) == 81_920
    assert casts("te-current", True, 8) == 26_624
    assert casts("te-mxfp8", False, 8) == 6_208


def test_moe_act_recompute_casts_the_experts_fc2_input_again() -> None:
    """Mixtral 8x7B, MXFP8 on a B200, EP 8, as above, with --recompute selective --recompute-modules moe_act: Megatron
    sets save_original_input on the experts' fc2 (moe/experts.py L269-276), whose 8,192 x 14,336 = 117,440,512-
    element input is cast row-wise in the forward and, from the saved 16-bit copy, column-wise in the backward
    (grouped_linear.py L1030-1039): one more 2-byte read per element, + 234,881,024 B per layer; the weights as
    before. Selective recompute of core_attn alone changes no cast."""
    run = {"fp8": "te-mxfp8", "gpu": "b200", "ep": 8, "dp": 8, **RUN}
    micro, step = fp8_cast_bytes(estimate("mixtral-8x7b", recompute="selective", recompute_modules=("moe_act",),
                                          **run), False)
    assert (micro, step) == (LAYERS * (2_044_198_912 + 234_881_024), LAYERS * 886_046_720)
    assert fp8_cast_bytes(estimate("mixtral-8x7b", recompute="selective", **run), False) == (
        LAYERS * 2_044_198_912, LAYERS * 886_046_720)
