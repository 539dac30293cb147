"""``--pipeline-layout``: Megatron-Core's ``--pipeline-model-parallel-layout`` string (references
``megatron-pp-layout``): chunks split by '|', chunk i on pipeline rank i % p as virtual stage i // p; each rank's
model states from the layers it holds, its saved activations per chunk at the micro-batches Megatron-LM's schedule
keeps in flight there, the slowest rank's FLOPs the pipeline's pace. Expected values by hand in each comment."""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate, stage_derivations
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.timing import step_time
from memderive.symbolic.pipeline_layout import chunks_in_flight, expand_layout, parse_layout, rank_chunks

#: gpt2 with 7 layers (h 768, 12 heads, V 50,257, 1,024 positions, tied output layer).
GPT2_7 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 7, "vocab_size": 50257, "n_positions": 1024}
STEP = dict(mode="train", batch=1, seq=8, attention="eager")


def test_the_string_unrolls_as_megatron_core_reads_it() -> None:
    """Megatron-LM docs/api-guide/pipeline_parallel_layout.md: DeepSeek-V3's 'Et*3|(tt|)*29,m|L' on PP 16, VPP 2 is
    PP rank 0: embedding + 3 decoders, then 2; ranks 1-13: 2 and 2; rank 14: 2 and the MTP layer; rank 15: 2 and the
    loss (its table). Nesting and a bare group repeat as written: '((t)*2|)*2' is 'tt|tt|'."""
    chunks = parse_layout("Et*3|(tt|)*29,m|L", 16)
    assert len(chunks) == 32
    table = {(c.rank, c.stage): c.text for c in chunks}
    assert table[0, 0] == "Ettt" and table[0, 1] == "tt"
    assert all(table[r, 0] == table[r, 1] == "tt" for r in range(1, 14))
    assert (table[14, 0], table[14, 1], table[15, 0], table[15, 1]) == ("tt", "m", "tt", "L")
    assert sum(c.layers for c in chunks) == 61
    assert expand_layout("E((t)*2|)*2L") == "Ett|tt|L"


def test_a_small_layout_lands_layers_and_bytes_on_each_rank() -> None:
    """7 layers, p 2, v 2, 'Ett|tt|tt|tL': rank 0 runs chunks 0 and 2 (E+2 layers, 2 layers), rank 1 chunks 1 and 3
    (2 layers, 1 layer + loss). m = 4, by hand through Megatron-LM's interleaved schedule (forward k on chunk
    (k // 2) % 2, backward k on the other; warm-up 2(p - r - 1) + (v - 1) p):
    rank 0: warm-up 4 forwards fill (2, 2); forward 4 (chunk 0) makes (3, 2) = 3*2 + 2*2 = 10 layer-micro-batches,
    the most (later (4, 1), (4, 1), (3, 2)), = 4 layers x (p + (p - 1)/v) = 4 x 2.5, the stage average;
    rank 1: warm-up 2 forwards (2, 0); then forward/backward pairs on chunk 1 (2, 1) -> (2, 0) twice; forward 4 on
    chunk 0 before backward 2 frees chunk 0: (3, 0) = 3*2 = 6 layer-micro-batches (the stage average would be
    3 layers x (p - (p - 1)/v) = 4.5).
    gpt2's layer: 12 h^2 + 13 h = 7,087,872 parameters; saved s b h (34 + 5 a s / h) = 8*768*(34 + 5*12*8/768) =
    212,736 B (Korthikanti et al., eager attention). Rank 0: 4 layers + wte 50,257*768 + wpe 1,024*768 = 28,351,488 +
    39,383,808 = 67,735,296 parameters; saved: 10 x 212,736 + the embedding's dropout mask (s b h = 6,144 B) for the 3
    micro-batches of its chunk = 2,127,360 + 18,432 = 2,145,792 B. Rank 1: its 3 layers' 21,263,616 parameters and
    6 x 212,736 = 1,276,416 B saved by them."""
    layout = parse_layout("Ett|tt|tt|tL", 2)
    assert chunks_in_flight(rank_chunks(layout, 0), 2, 4) == (3, 2)
    assert chunks_in_flight(rank_chunks(layout, 1), 2, 4) == (3, 0)
    est = estimate(GPT2_7, **STEP, pp=2, virtual_stages=2, micro_batches=4, pipeline_layout="Ett|tt|tt|tL")
    assert est.number("activation_bytes_per_layer") == 212_736
    ranks = {g.strategies[-1].rsplit(", ", 1)[-1]: (g, qs) for g, qs in stage_derivations(est.model, est.options)}
    assert set(ranks) == {"rank 0)", "rank 1)"}

    def number(rank: str, key: str, prefix: str = "") -> int:
        graph, quantities = ranks[rank + ")"]
        q = next(x for x in quantities if x.key == key)
        return sum(v for k, v in q.term_ints(est.values) if k.startswith(prefix)) if prefix else q.value(est.values)

    assert number("rank 0", "parameters_per_gpu") == 67_735_296
    assert number("rank 0", "activation_bytes") == 2_145_792
    assert number("rank 1", "activation_bytes", "layer/") == 1_276_416
    assert number("rank 1", "parameters_per_gpu", "layer/") == 3 * 7_087_872
    assert "rank 0" in est.graph.strategies[-1]  # the larger: its embedding's 39.4M parameters


#: A small Llama with a large untied vocabulary: under full recompute at s 1,024 the last stage's fp32 logits
#: (s V 4 B = 525 MB) outweigh the others.
LLAMA_WIDE_V = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 4,
                "num_hidden_layers": 12, "intermediate_size": 512, "vocab_size": 128256,
                "max_position_embeddings": 4096, "tie_word_embeddings": False, "hidden_act": "silu"}


@pytest.mark.parametrize(("model", "extra", "largest"), [
    ("gpt2", dict(seq=8, attention="eager"), "rank 0"),  # the embedding's 39.4M parameters
    ({**GPT2_7, "n_layer": 12, "vocab_size": 256}, dict(seq=8, attention="eager"), "rank 1"),  # 4 layers x 3
    (LLAMA_WIDE_V, dict(seq=1024, recompute="full"), "rank 3"),  # the logits
])
def test_first_and_last_stage_layers_are_the_layout_they_imply(model: object, extra: dict, largest: str) -> None:
    """12 layers on 4 stages, 2 on the first and the last: Megatron-LM's --decoder-first/last-pipeline-num-layers 2
    split the rest 4 and 4, the layout 'Ett|tttt|tttt|ttL'. Without virtual stages 1F1B holds p - r micro-batches
    on rank r (at most m) whichever way the layers were given, so every quantity and every part of the step time is
    the same number, whichever stage is the largest (the first, a middle one, the last)."""
    common = dict(mode="train", batch=1, pp=4, dp=2, micro_batches=8, **extra)
    uneven = estimate(model, **common, first_stage_layers=2, last_stage_layers=2)
    layout = estimate(model, **common, pipeline_layout="Ett|tttt|tttt|ttL")
    assert layout.graph.strategies[-1].endswith(largest + ")")
    keys = [q.key for q in uneven.quantities]
    assert keys == [q.key for q in layout.quantities]
    assert [uneven.number(k) for k in keys] == [layout.number(k) for k in keys]
    a, b = step_time(uneven, "h100-sxm"), step_time(layout, "h100-sxm")
    assert (a.step_s, a.compute_s, a.bubble_s, a.pp_s, a.dp_s) == (b.step_s, b.compute_s, b.bubble_s, b.pp_s, b.dp_s)


def test_the_slowest_rank_sets_the_pace() -> None:
    """gpt2 (12 layers) on 2 ranks as 'Et*4|t*8L': rank 1 holds 8 layers and the LM head, the last stage of a
    16-layer gpt2 split evenly (16/2 = 8); as 'Et*8|t*4L' rank 1's 4 layers and the head (4 x 24 s h^2 + 2 s h V per
    sequence, the head alone 2 V / (24 h) = 5.5 layers' matmuls, so more than rank 0's 8 layers) are the last stage
    of an 8-layer gpt2 split evenly: the same compute and bubble per step at a given efficiency."""
    common = dict(mode="train", batch=1, seq=64, pp=2, micro_batches=4)

    def timed(model: object, **extra: object) -> object:
        return step_time(estimate(model, **common, **extra), "a100-80gb", efficiency=0.5)

    def gpt2(layers: int) -> dict:
        return {**GPT2_7, "n_layer": layers}

    for layout, layers in (("Et*4|t*8L", 16), ("Et*8|t*4L", 8)):
        got, even = timed("gpt2", pipeline_layout=layout), timed(gpt2(layers))
        assert got.compute_s == pytest.approx(even.compute_s, rel=1e-12)
        assert got.bubble_s == pytest.approx(even.bubble_s, rel=1e-12)


@pytest.mark.parametrize(("extra", "fragment"), [
    ({"pipeline_layout": "Ett|tttt|tttt|tt"}, "the loss (L) must appear once, as the last symbol"),
    ({"pipeline_layout": "tEt|tttt|tttt|ttL"}, "the embedding (E) must appear once, as the first symbol"),
    ({"pipeline_layout": "Ett|tttt|ttL"}, "has 3 chunks, not a multiple of --pp 4"),
    ({"pipeline_layout": "Ett|tttt|tttt|tL"}, "places 11 decoder layers (t); the model has 12"),
    ({"pipeline_layout": "Et|t|t|t|(tt|)*3,ttL"}, "8 chunks = --pp 4 x 2 virtual stages; give --virtual-stages 2"),
    ({"pipeline_layout": "Ett|tttt|tttt|ttL", "first_stage_layers": 2}, "drop --first-stage-layers"),
    ({"pipeline_layout": "Ett|tttt|tttt|ttL)"}, "a ')' without its '('"),
    ({"pipeline_layout": "Ett|tttt|tttt|ttX"}, "'X' is not a layout symbol"),
    ({"pipeline_layout": "Et*|tttt|tttt|ttL"}, "'\\*' at character 3 needs a count"),
])
def test_a_layout_that_does_not_fit_is_refused(extra: dict, fragment: str) -> None:
    with pytest.raises(OptionsError, match=fragment.replace("(", r"\(").replace(")", r"\)").replace("|", r"\|")):
        estimate("gpt2", mode="train", batch=1, seq=8, pp=4, micro_batches=8, **extra)


def test_the_command_line_refuses_in_one_line(capsys) -> None:
    code = main(["estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "8", "--pp", "2",
                 "--pipeline-layout", "Ett|ttttL"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "places 6 decoder layers (t); the model has 12" in err


def test_a_long_step_is_read_off_a_few_groups() -> None:
    """The steady state repeats every group of p micro-batches (get_schedule_table), so a step of 10^12
    micro-batches holds what one of 6p does, simulated whole (DeepSeek-V3's layout, every rank), at once."""
    chunks = parse_layout("Et*3|(tt|)*29,m|L", 16)
    for r in range(16):
        held = rank_chunks(chunks, r)
        assert chunks_in_flight(held, 16, 16 * 10**12) == chunks_in_flight(held, 16, 6 * 16)


def test_the_micro_batches_of_a_step_bound_what_a_chunk_holds() -> None:
    """The same layout with m = 2: all m v = 4 chunk micro-batches of rank 0 are its warm-up (at most m v), (2, 2)
    in flight: 2*2 + 2*2 = 8 layer-micro-batches, 8 x 212,736 = 1,701,888 B (not m = 4's 10 x: the derivation is
    not shared across m)."""
    common = dict(**STEP, pp=2, virtual_stages=2, pipeline_layout="Ett|tt|tt|tL")
    four, two = estimate(GPT2_7, **common, micro_batches=4), estimate(GPT2_7, **common, micro_batches=2)
    layers = [sum(v for k, v in e.quantity("activation_bytes").term_ints(e.values) if k.startswith("layer/"))
              for e in (four, two)]
    assert layers == [10 * 212_736, 8 * 212_736]


def test_deepseek_v3_rank_0_holds_the_dense_layers_where_they_sit() -> None:
    """Megatron-LM's layout for DeepSeek-V3 (docs/api-guide/pipeline_parallel_layout.md), --ep 8: rank 0 holds the
    embedding, the 3 dense layers and MoE layers 32-33. By hand from the config (h 7,168, 128 heads, q_lora 1,536,
    kv_lora 512, qk 128 + rope 64, v 128, f 18,432, 256 experts of 2,048, one shared): attention and norms q_a
    7,168*1,536 + 1,536 + q_b 1,536*128*192 + kv_a 7,168*576 + 512 + kv_b 512*128*256 + o 128*128*7,168 + 2*7,168 =
    187,121,664; a dense layer + 3*7,168*18,432 = 583,483,392; a MoE layer on one GPU + router 256*7,168 + shared
    3*7,168*2,048 + 256/8 experts x 3*7,168*2,048 = 187,121,664 + 1,835,008 + 44,040,192 + 1,409,286,144 =
    1,642,283,008; embedding 129,280*7,168 = 926,679,040. Rank 0: 3*583,483,392 + 2*1,642,283,008 + 926,679,040 =
    5,961,695,232 (at the 61 layers' mean per GPU, 97,002,864,640/61 = 1,590,210,895.7, 5 layers and the embedding
    would make 8.88 billion)."""
    est = estimate("deepseek-v3", mode="train", batch=1, seq=4096, pp=16, virtual_stages=2, ep=8, dp=8,
                   micro_batches=32, framework="megatron", pipeline_layout="Et*3|(tt|)*29,m|L", mtp_layers=1)
    assert any(x.startswith("pipeline") and x.endswith("rank 0)") for x in est.graph.strategies)
    assert est.number("parameters_per_gpu") == 5_961_695_232


def test_an_even_interleaved_layout_holds_what_the_interleaved_formula_says() -> None:
    """gpt2's 12 layers on p 4, v 3, one layer per chunk ('E(t|)*11tL'): rank 0 holds 3 layers with p + (p - 1)/v
    = 4 + 1 = 5 micro-batches each on average (Korthikanti et al. 2022 §4.2.3; warm-up 2(p - 1) + (v - 1) p = 14 and
    one more: 15 chunk micro-batches), 15 layer-micro-batches, as --virtual-stages 3 alone derives; the same FLOPs."""
    common = dict(**STEP, pp=4, virtual_stages=3, micro_batches=8)
    plain, layout = estimate("gpt2", **common), estimate("gpt2", **common, pipeline_layout="E(t|)*11tL")
    layers = [sum(v for k, v in e.quantity("activation_bytes").term_ints(e.values) if k.startswith("layer/"))
              for e in (plain, layout)]
    assert layers == [15 * 212_736] * 2
    assert plain.number("parameters_per_gpu") == layout.number("parameters_per_gpu")
    assert plain.number("hardware_flops_per_gpu") == layout.number("hardware_flops_per_gpu")


def test_the_help_prints_the_option(capsys) -> None:
    """argparse formats each help with '%': the option's words must not hold a bare one (a regression)."""
    try:
        code = main(["estimate", "--help"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0 and "--pipeline-layout" in capsys.readouterr().out
