"""Uneven pipeline stages (``--first-stage-layers``, ``--last-stage-layers``: Megatron-LM's
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``): the rest of the layers evenly
over the other stages (megatron-arguments); the largest stage bounds each GPU's memory, the slowest sets the
pipeline's pace.
Expected values by hand in each test's comment."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.timing import step_time
from memderive.symbolic.errors import InvalidLayoutError

#: Llama 3 405B (Dubey et al. 2024, Table 3): h 16,384, 128 heads, 8 KV heads, 126 layers, FFN 53,248, V 128,256.
LLAMA_405B = {"model_type": "llama", "hidden_size": 16384, "num_attention_heads": 128, "num_key_value_heads": 8,
              "num_hidden_layers": 126, "intermediate_size": 53248, "vocab_size": 128256,
              "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu"}
META = dict(mode="train", batch=1, seq=8192, tp=8, sp=True, pp=16, dp=64, zero=1, recompute="selective",
            flash=True, micro_batches=32)


def test_llama_3_405b_runs_on_16_stages_with_one_layer_less_on_the_first_and_last() -> None:
    """126 layers over 16 stages: 7 on the first and the last (Dubey et al. 2024 §3.3.2), (126 - 14)/14 = 8 on each
    other. The largest stage is the second (8 layers, 15 micro-batches in flight: 120 layer-copies against the
    first's 7 x 16 = 112 and its embedding). Its parameters per GPU, by hand, t = 8: per layer q and o 2 h^2, k and v
    2 h 1,024, gate/up/down 3 h f, split over 8, and two norms of h whole: (2*16384^2 + 2*16384*1024 +
    3*16384*53248)/8 + 2*16384 = 398,491,648; eight layers 3,187,933,184."""
    est = estimate(LLAMA_405B, **META, first_stage_layers=7, last_stage_layers=7)
    assert est.number("parameters_per_gpu") == 3_187_933_184
    assert "middle stage" in est.graph.strategies[-1]
    with pytest.raises(InvalidLayoutError, match="126 layers are not divisible by pipeline-parallel degree 16"):
        estimate(LLAMA_405B, **META)


def test_the_first_stage_holds_its_own_layers_and_p_micro_batches() -> None:
    """gpt2 (12 layers) on 3 stages, 2 on the first: (12 - 2)/2 = 5 on the others. The first stage (its embedding,
    38.6M parameters, outweighs 3 layers) is the largest: 2 layers x 3 micro-batches in flight of Korthikanti et
    al.'s s b h (34 + 5 a s / h) = 8 * 768 * (34 + 5 * 12 * 8 / 768) = 212,736 bytes each: 1,276,416."""
    est = estimate("gpt2", mode="train", batch=1, seq=8, pp=3, first_stage_layers=2, attention="eager")  # Eq. 1
    assert est.number("activation_bytes_per_layer") == 212_736
    layers = sum(v for k, v in est.quantity("activation_bytes").term_ints(est.values) if k.startswith("layer/"))
    assert layers == 6 * 212_736
    assert "first stage" in est.graph.strategies[-1]


def test_the_slowest_stage_sets_the_pace() -> None:
    """gpt2's 12 layers on 3 stages with 2 on the first leave 5 and the LM head on the last: the same last stage as
    a 15-layer gpt2 split evenly (15/3 = 5), so the same compute and bubble per step at a given efficiency."""
    uneven = step_time(estimate("gpt2", mode="train", batch=1, seq=64, pp=3, micro_batches=4, first_stage_layers=2),
                       "a100-80gb", efficiency=0.5)
    deeper = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 15, "vocab_size": 50257,
              "n_positions": 1024}
    even = step_time(estimate(deeper, mode="train", batch=1, seq=64, pp=3, micro_batches=4), "a100-80gb",
                     efficiency=0.5)
    assert uneven.compute_s == pytest.approx(even.compute_s, rel=1e-12)
    assert uneven.bubble_s == pytest.approx(even.bubble_s, rel=1e-12)


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"pp": 16, "first_stage_layers": 7}, "leave 119, not divisible over the other 15"),
    ({"pp": 1, "first_stage_layers": 7}, "give --pp greater than 1"),
    # 7 and 8 layers: 7 % 3, (7 + 1) % 3 and 8 % 3 are all non-zero
    ({"pp": 16, "first_stage_layers": 7, "last_stage_layers": 7, "virtual_stages": 3},
     "first 7, middle 8, last 7 layers do not split into 3 model chunks"),
])
def test_uneven_stages_that_do_not_divide_are_refused(extra: dict, fragment: str) -> None:
    with pytest.raises(OptionsError, match=fragment):
        estimate(LLAMA_405B, **{**META, **extra})


def test_llama_3_405b_interleaved_with_one_layer_per_model_chunk() -> None:
    """Dubey et al. 2024 §3.3.2: 'the first model chunk on the first stage has only the embedding' once a layer is
    taken from the first and the last stage, so a chunk holds one layer and V = (126 + 2)/16 = 8; the first and last
    stage's 7 layers plus the embedding/loss slot make 8 = V chunks. The second stage (the largest) holds Megatron-LM's
    interleaved warm-up on rank 1, 2(p - 2) + (v - 1) p chunk micro-batches and the one in flight, each 1/v of its 8
    layers: (2 * 14 + 7 * 16 + 1)/8 = 141/8 = 17.625 micro-batches (p + (p - 3)/v = 16 + 13/8), so 8 * 17.625 = 141
    layer-copies of activations (against 8 x 15 = 120 without interleaving); the bubble shrinks to
    (p - 1)/(m v) = 15/(32 * 8) of the micro-batches' time."""
    interleaved = estimate(LLAMA_405B, **META, first_stage_layers=7, last_stage_layers=7, virtual_stages=8)
    plain = estimate(LLAMA_405B, **META, first_stage_layers=7, last_stage_layers=7)
    for est, copies in ((interleaved, 141), (plain, 120)):
        layers = sum(v for k, v in est.quantity("activation_bytes").term_ints(est.values) if k.startswith("layer/"))
        assert layers == copies * est.number("activation_bytes_per_layer")
    st = step_time(interleaved, "h100-sxm", efficiency=0.5)
    assert st.bubble_s == pytest.approx(15 / (32 * 8) * (st.compute_s + st.tp_s + st.pp_s + st.cp_s), rel=1e-12)


@pytest.mark.parametrize("given", [{"first_stage_layers": 8}, {"last_stage_layers": 8},
                                   {"first_stage_layers": 8, "last_stage_layers": 8}])
def test_one_stage_given_keeps_the_other_stages_in_the_largest_stage_check(given: dict) -> None:
    """Issue 37 item 6's command (``--pp 4 --first-stage-layers 8`` on llama-3-8b's 32 layers): 8 is the even split,
    32/4, so the layout is the plain one and its largest stage (the last under full recompute: its fp32 logits
    outweigh the first's extra micro-batches) is the same whatever names the 8. The first flag alone dropped the
    last stage from the check: 2.7 GB less."""
    run = dict(mode="train", batch=1, seq=8192, pp=4, micro_batches=8, recompute="full", flash=True)
    even = estimate("llama-3-8b", **run).number("total_bytes")
    assert estimate("llama-3-8b", **run, **given).number("total_bytes") == even
