"""Parameter counts against published numbers (independent sources named per case)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import sympy as sp

from memderive.derivations.models.architectures import GPT, GPT_RELATIONS, build_graph
from memderive.derivations.estimate import estimate
from memderive.derivations.models.model import Model
from memderive.symbolic.derive import parameters
from memderive.symbolic.dims import h


def test_nanogpt_gpt2_without_biases() -> None:
    # nanoGPT model.py (bias=False): "number of parameters: 124.34M" -> 124,337,664.
    # By hand: 124,439,808 - 12 layers * (9h linear biases + 2h LN biases) - h (ln_f bias)
    #        = 124,439,808 - 12 * 11 * 768 - 768 = 124,337,664.
    arch = replace(GPT, qkv_bias=False, out_bias=False, mlp_bias=False, norm_bias=False)
    model = Model("gpt2-nobias", arch, {"h": 768, "a": 12, "l": 12, "V": 50257, "n_ctx": 1024})
    assert estimate(model).number("parameters") == 124_337_664


def test_nanogpt_gpt2_with_biases() -> None:
    # nanoGPT README / HF gpt2: 124,439,808 (tied head).
    assert estimate("gpt2").number("parameters") == 124_439_808


@pytest.mark.parametrize(("name", "expected"), [
    # Checkpoint totals of the HF releases (safetensors metadata on the model pages) of the models of
    # radford-2019, touvron-2023-llama2, dubey-2024, jiang-2023-mistral and devlin-2019.
    ("gpt2-medium", 354_823_168), ("gpt2-large", 774_030_080), ("gpt2-xl", 1_557_611_200),
    ("llama-2-7b", 6_738_415_616), ("llama-2-13b", 13_015_864_320), ("llama-2-70b", 68_976_648_192),
    ("llama-3-8b", 8_030_261_248), ("llama-3-70b", 70_553_706_496), ("mistral-7b", 7_241_732_096),
    ("bert-base", 109_482_240),
    # Safetensors parameter totals shown on the models' Hugging Face pages.
    ("qwen2-7b", 7_615_616_512), ("phi-2", 2_779_683_840), ("falcon-7b", 6_921_720_704),
    ("gemma-7b", 8_537_680_896), ("gemma-2-9b", 9_241_705_984), ("bloom-560m", 559_214_592),
    ("opt-1.3b", 1_315_758_080), ("phi-3-mini", 3_821_079_552),
    # GPT-3 175B (no checkpoint): Narayanan Eq. 2 plus the final LayerNorm, by hand:
    # 96 * (12 * 12288^2 + 13 * 12288) + (50257 + 2048) * 12288 + 2 * 12288
    # = 173,961,510,912 + 642,723,840 + 24,576 = 174,604,259,328 ("174.6B", narayanan-2021 Table 2).
    ("gpt3-175b", 96 * (12 * 12288**2 + 13 * 12288) + (50257 + 2048) * 12288 + 2 * 12288),
])
def test_checkpoint_totals(name: str, expected: int) -> None:
    assert estimate(name).number("parameters") == expected


def test_gpt_layer_closed_form() -> None:
    # Narayanan et al. 2021 Eq. 2: 12h^2 + 13h per layer.
    g = build_graph(GPT, relations=GPT_RELATIONS)
    per_layer = sp.expand(parameters(g, ["layer"], per_repeat=True).total.xreplace(g.relations))
    assert per_layer == 12 * h**2 + 13 * h


@pytest.mark.parametrize(("heads", "h_", "layers", "published_billions"), [
    # Narayanan et al. 2021 Table 1 (V = 51,200, s = 2048): P = l(12h^2 + 13h) + (V + s)h,
    # published to 0.1B; we check |ours - published| <= 0.06B.
    (24, 2304, 24, 1.7), (32, 3072, 30, 3.6), (32, 4096, 36, 7.5), (48, 6144, 40, 18.4),
    (64, 8192, 48, 39.1), (80, 10240, 60, 76.1), (96, 12288, 80, 145.6), (128, 16384, 96, 310.1),
    (128, 20480, 105, 529.6), (160, 25600, 128, 1008.0),
])
def test_megatron_table1(heads: int, h_: int, layers: int, published_billions: float) -> None:
    arch = replace(GPT, tied_embeddings=True)
    model = Model("ptd", arch, {"h": h_, "a": heads, "l": layers, "V": 51200, "n_ctx": 2048})
    total = estimate(model).number("parameters") - 2 * h_  # Eq. 2 omits the final LayerNorm (2h)
    assert abs(total / 1e9 - published_billions) <= 0.06
