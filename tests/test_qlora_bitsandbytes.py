"""bitsandbytes' QLoRA as it runs (issue 38, item 4): the input every frozen 4-bit linear keeps for backward
(``MatMul4Bit.forward``: ``ctx.tensors = (A, B)`` whenever A requires grad), which torchao's ``LinearNF4``
(torchtune) does not keep; NF4 with and without double quantization. Expected numbers by hand."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.models.config import from_config

TINY = from_config(dict(model_type="llama", hidden_size=192, num_attention_heads=6, num_key_value_heads=2,
                        num_hidden_layers=2, intermediate_size=320, vocab_size=100, head_dim=32))
QV = dict(mode="train", batch=1, seq=8, lora_rank=4, lora_targets="q_proj,v_proj")


def test_frozen_4bit_linears_keep_their_inputs() -> None:
    # LoRA on q and v: their input (norm1's output) is saved for the adapters anyway, and k reads the same
    # tensor. bitsandbytes also keeps the inputs of o_proj (b s a d_h = 8 x 192), of gate and up (norm2's
    # output, one tensor, b s h = 8 x 192) and of down_proj (b s f = 8 x 320), in bf16:
    # 2 x 8 x (192 + 192 + 320) = 11,264 B per layer, which a frozen bf16 nn.Linear does not save (eager attention:
    # its softmax @ V saves the probabilities and V, not o_proj's input).
    plain = estimate(TINY, base_dtype="bf16", attention="eager", **QV)
    bnb = estimate(TINY, base_dtype="nf4", attention="eager", **QV)
    assert bnb.number("activation_bytes_per_layer") - plain.number("activation_bytes_per_layer") == 11_264
    assert bnb.number("activation_bytes") - plain.number("activation_bytes") == 2 * 11_264
    # FlashAttention (the default) saves its output, o_proj's input, for its own backward already: 2 x 8 x 192 B
    # fewer kept for bitsandbytes, 11,264 - 3,072 = 8,192 B per layer.
    plain, bnb = (estimate(TINY, base_dtype=x, **QV) for x in ("bf16", "nf4"))
    assert bnb.number("activation_bytes_per_layer") - plain.number("activation_bytes_per_layer") == 8_192


def test_torchao_nf4_keeps_none() -> None:
    # torchtune's NF4 linear (torchao LinearNF4) saves only the weight: the same activations as a bf16 base.
    kw = dict(QV, framework="torchtune")
    assert (estimate(TINY, base_dtype="nf4", **kw).number("activation_bytes")
            == estimate(TINY, base_dtype="bf16", **kw).number("activation_bytes"))


@pytest.mark.parametrize("double, constants", [
    # llama-2-7b's layer linears: 32 x (4 x 4096^2 + 3 x 4096 x 11008) = 6,476,005,376 weights, 101,187,584
    # blocks of 64. Double quantization: uint8 absmax per block + fp32 per 256 blocks, per matrix:
    # q, k, v, o 262,144 blocks (1,024 of 256), gate, up, down 704,512 (2,752): 32 x (4 x (262,144 + 4,096) +
    # 3 x (704,512 + 11,008)) = 32 x 3,211,520 = 102,768,640.
    (True, 102_768_640),
    # Without it (bnb_4bit_use_double_quant=False): one fp32 absmax per block, 4 x 101,187,584.
    (False, 404_750_336),
])
def test_nf4_absmax_with_and_without_double_quant(double: bool, constants: int) -> None:
    est = estimate("llama-2-7b", mode="train", batch=1, seq=8, lora_rank=8, lora_targets="q_proj",
                   base_dtype="nf4", no_double_quant=not double)
    terms = dict(est.quantity("model_state_bytes").term_ints(est.values))
    assert terms["model_states/weights/nf4_constants"] == constants
    assert terms["model_states/weights/nf4"] == 6_476_005_376 // 2


def test_no_double_quant_needs_nf4() -> None:
    run = subprocess.run([sys.executable, "-m", "memderive", "estimate", "--model", "llama-2-7b", "--mode", "train",
                          "--batch", "1", "--seq", "8", "--lora-rank", "8", "--lora-targets", "q_proj",
                          "--no-double-quant"], capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "--base-dtype nf4" in run.stderr


@pytest.mark.parametrize("double", [True, False])
def test_bitsandbytes_checkpoint_is_its_own_base(double: bool) -> None:
    # A config.json saved by transformers with BitsAndBytesConfig(load_in_4bit, nf4): fine-tuning it with LoRA
    # holds the NF4 base with no --base-dtype, double-quantized as the config says.
    config = dict(model_type="llama", hidden_size=192, num_attention_heads=6, num_key_value_heads=2,
                  num_hidden_layers=2, intermediate_size=320, vocab_size=100, head_dim=32,
                  quantization_config={"quant_method": "bitsandbytes", "_load_in_4bit": True,
                                       "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": double})
    implicit = estimate(from_config(config), **QV)
    explicit = estimate(TINY, base_dtype="nf4", no_double_quant=not double, **QV)
    assert implicit.number("total_bytes") == explicit.number("total_bytes")
    assert implicit.options.base_dtype == "nf4" and implicit.options.no_double_quant is not double
