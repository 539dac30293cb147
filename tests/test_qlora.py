"""QLoRA and quantized bases: weight bytes from the papers' accounting, the QLoRA headline for
LLaMA-65B, and the order QLoRA < LoRA < full fine-tuning. Expected numbers are arithmetic done here."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.search.fit import fit

# LLaMA-65B (touvron-2023-llama, Table 2): h 8192, 64 heads, 80 layers, FFN 22016, vocabulary 32000.
LLAMA_65B = {"model_type": "llama", "hidden_size": 8192, "num_attention_heads": 64, "num_hidden_layers": 80,
             "intermediate_size": 22016, "vocab_size": 32000, "max_position_embeddings": 2048,
             "tie_word_embeddings": False}
# 80 x (4 x 8192^2 + 3 x 8192 x 22016) = 64,760,053,760 linear weights; embeddings and LM head
# 2 x 32000 x 8192 = 524,288,000; norms (2 x 80 + 1) x 8192 = 1,318,912.
LINEAR_65B, EMBED_65B, NORMS_65B = 64_760_053_760, 524_288_000, 1_318_912
PARAMS_65B = LINEAR_65B + EMBED_65B + NORMS_65B  # 65,285,660,672
# The QLoRA paper's Guanaco-65B run (artidoro/qlora scripts/finetune_guanaco_65b.sh): NF4 with double
# quantization, bf16, LoRA r = 64 on every linear layer (--lora_modules all), dropout 0.05, gradient
# checkpointing, paged AdamW (qlora.py's default optim paged_adamw_32bit), per-device batch 4,
# source 16 + target 512 = 528 tokens at most.
QLORA_SETTINGS = dict(mode="train", batch=4, seq=528, recompute="full", lora_rank=64, lora_targets="all-linear",
                      lora_dropout=0.05, base_dtype="nf4", optimizer="paged-adamw")


def test_nf4_base_is_4_127_bits_per_quantized_weight() -> None:
    """QLoRA §3: NF4 in blocks of 64, each block's absmax in 8 bits, one fp32 constant per 256 blocks:
    4 + 8/64 + 32/(64 x 256) = 4.126953125 bits per weight (the paper's 4.127). For LLaMA-65B's linear
    weights, 64,760,053,760 x 4.126953125 / 8 = 33,407,713,280 bytes (every matrix is a multiple of
    64 x 256 weights, so no block is partial); the embeddings, LM head and norms stay bf16:
    2 x (524,288,000 + 1,318,912) = 1,051,213,824 bytes; the r = 64 adapters (bf16) add 2 x 799,539,200."""
    est = estimate(LLAMA_65B, **QLORA_SETTINGS)
    by_path = dict(est.quantity("weight_bytes").term_ints(est.values))
    assert by_path["model_states/weights/nf4"] + by_path["model_states/weights/nf4_constants"] == 33_407_713_280
    assert by_path["model_states/weights/frozen"] == 1_051_213_824
    # adapters: 80 x 64 x (4 x (8192 + 8192) + 3 x (8192 + 22016)) = 799,539,200 parameters
    assert est.number("trainable_parameters") == 799_539_200
    assert est.number("weight_bytes") == 33_407_713_280 + 1_051_213_824 + 2 * 799_539_200


def test_int8_base_is_one_byte_and_a_row_scale() -> None:
    """LLM.int8() (bitsandbytes Int8Params): int8 weights plus one fp32 scale per output row. llama-2-7b:
    32 x (4 x 4096^2 + 3 x 4096 x 11008) = 6,476,005,376 weights and 32 x (4 x 4096 + 2 x 11008 + 4096)
    = 32 x 42,496 = 1,359,872 rows, 4 bytes each."""
    est = estimate("llama-2-7b", mode="train", batch=1, seq=512, lora_rank=8, lora_targets="q_proj,v_proj",
                   base_dtype="int8")
    by_path = dict(est.quantity("weight_bytes").term_ints(est.values))
    assert (by_path["model_states/weights/int8"], by_path["model_states/weights/int8_scales"]) == (
        6_476_005_376, 4 * 1_359_872)


def test_qlora_headline_65b() -> None:
    """Dettmers et al. 2023, abstract: fine-tuning a 65B model drops "from >780GB of GPU memory to <48GB".

    Full 16-bit fine-tuning, same shape and checkpointing, bf16 mixed precision with AdamW: 16 bytes per
    parameter of model states (ZeRO's 2 + 2 + 12), 16 x 65,285,660,672 = 1,044,570,570,752 bytes (the
    paper's >780 GB is 12 bytes per parameter, 783,427,928,064, without the fp32 master copy).
    QLoRA with the paper's settings (QLORA_SETTINGS): NF4 base, bf16 adapters and their gradients on
    the GPU (the paged optimizer's states counted off it), checkpointed layer inputs, one layer rebuilt,
    one weight dequantized at a time."""
    full = estimate(LLAMA_65B, mode="train", batch=4, seq=528, recompute="full")
    assert full.number("model_state_bytes") == 16 * PARAMS_65B
    assert full.number("total_bytes") > 780 * 10**9
    qlora = estimate(LLAMA_65B, **QLORA_SETTINGS)
    assert qlora.number("total_bytes") < 48 * 10**9
    # 80 checkpointed inputs, 2 x 4 x 528 x 8192 bytes each
    # (the first layer is its own block: before its first adapter nothing needs an input gradient)
    terms = dict(qlora.quantity("total_bytes").term_ints(qlora.values))
    assert terms["first_layer/checkpoint"] + terms["layer/checkpoint"] == 80 * 2 * 4 * 528 * 8192
    # the paged AdamW states (fp32 master, momentum, variance: 12 bytes per adapter parameter) are off the GPU
    assert qlora.number("offloaded_bytes") == 12 * 799_539_200


@pytest.mark.parametrize("model", ["llama-2-7b", "gpt2", "llama-3-8b"])
def test_qlora_below_lora_below_full(model: str) -> None:
    shape = dict(mode="train", batch=2, seq=1024, recompute="full")
    lora = dict(lora_rank=16, lora_targets="all-linear")
    totals = [estimate(model, **shape).number("total_bytes"),
              estimate(model, **shape, **lora).number("total_bytes"),
              estimate(model, **shape, **lora, base_dtype="nf4").number("total_bytes")]
    assert totals[2] < totals[1] < totals[0]


def test_frozen_everything_but_the_head_trains_only_the_head() -> None:
    """--train-only lm_head: gradients and optimizer states for the 32000 x 4096 LM head only."""
    est = estimate("llama-2-7b", mode="train", batch=1, seq=512, train_only="lm_head")
    assert est.number("trainable_parameters") == 32000 * 4096
    by_path = dict(est.quantity("model_state_bytes").term_ints(est.values))
    assert by_path["model_states/gradients"] == 2 * 32000 * 4096
    assert by_path["model_states/optimizer"] == 12 * 32000 * 4096


def test_largest_qlora_batch_for_llama_3_8b_on_24_gb() -> None:
    """fit answers with a batch that fits and a next one that does not (checked by estimate)."""
    opts = Options(mode="train", batch=1, seq=2048, recompute="full", flash=True, lora_rank=16,
                   lora_targets="all-linear", base_dtype="nf4", optimizer="paged-adamw")
    answer = fit("llama-3-8b", opts, 24 * 10**9, "batch")
    assert answer.value >= 1 and answer.bytes_at <= 24 * 10**9 < answer.bytes_next


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(base_dtype="nf4"), "cannot be trained"),
    (dict(lora_rank=8, lora_targets="q_proj", base_dtype="int4"), "--base-dtype must be one of"),
    (dict(lora_rank=8, lora_targets="q_proj", lora_dropout=1.5), "probability"),
    (dict(dora=True), "need --lora-rank"),
])
def test_bad_fine_tuning_options(kwargs: dict, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        Options(mode="train", batch=1, seq=8, **kwargs)


def test_fit_cli_prints_the_qlora_answer(capsys: pytest.CaptureFixture[str]) -> None:
    from memderive.commands.cli import main

    argv = ["fit", "--model", "llama-3-8b", "--gpu-memory", "24GB", "--mode", "train", "--seq", "2048", "--recompute",
            "full", "--flash", "--lora-rank", "16", "--lora-targets", "all-linear", "--base-dtype", "nf4",
            "--optimizer", "paged-adamw"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    answer = fit("llama-3-8b", Options(mode="train", batch=1, seq=2048, recompute="full", flash=True, lora_rank=16,
                                       lora_targets="all-linear", base_dtype="nf4", optimizer="paged-adamw"),
                 24 * 10**9, "batch")
    assert f"largest batch: {answer.value:,}" in out and f"+ {answer.per_unit:,} * batch bytes" in out
