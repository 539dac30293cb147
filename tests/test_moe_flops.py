"""FLOPs of the MoE and latent-attention families equal what FlopCounterMode counts on transformers models
with eager experts (a loop of linears: k experts per token, router included), forward and forward + backward."""

from __future__ import annotations

import pytest

from memderive.derivations.models.config import from_config
from memderive.symbolic.derive import TRAINING_PHASES, evaluate, flops
from memderive.symbolic.dims import b, s
from tests.hf_flops import build, measure_training
from tests.test_moe_params import FAMILY_CONFIGS, _config

# Mixtral; Qwen2-MoE (shared expert and its gate, dense layers); DeepSeek-V3 (MLA, dense layers, shared
# expert); gpt-oss (biased experts and router, sinks). Qwen3-MoE, OLMoE and DeepSeek-V2 (measured equal too)
# add no other product.
CONFIGS = [FAMILY_CONFIGS[i] for i in (0, 2, 8, 12)]
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.mark.parametrize(("model_type", "fields"), CONFIGS, ids=[t for t, _ in CONFIGS])
def test_moe_flops_equal_flop_counter(model_type: str, fields: dict) -> None:
    config = _config(model_type, fields)
    config._experts_implementation = "eager"  # FlopCounterMode does not see a grouped-mm kernel
    torch_model = build(config)
    model = from_config(config.to_dict())
    graph = model.graph(activation_dtype="fp32", dropout=False)
    for batch, seq in ((2, 6),):  # shorter than gpt-oss's window of 8
        measured = measure_training(torch_model, batch, seq, config.vocab_size)
        values = {**model.values(), b: batch, s: seq}
        assert evaluate(flops(graph).total, values) == measured.forward
        assert evaluate(flops(graph, phases=TRAINING_PHASES).total, values) == measured.step


def test_mixtral_forward_flops_by_hand() -> None:
    """One token of Mixtral 8x7B, forward matmuls without attention scores: router 2 * 4096 * 8, two experts of
    2 * 3 * 4096 * 14336, q/k/v/o 2 * 4096 * (4096 + 2 * 1024 + 4096), per layer; LM head 2 * 4096 * 32000."""
    from memderive.derivations.models.resolve import resolve_model

    model = resolve_model("mixtral-8x7b")
    graph = model.graph(dropout=False)
    per_layer = 2 * 4096 * 8 + 2 * 2 * 3 * 4096 * 14336 + 2 * 4096 * (4096 + 2 * 1024 + 4096)
    values = {**model.values(), b: 1, s: 1}
    scores = 2 * 2 * 32 * 128  # q k^T and P v: 2 * 2 * a * d_h * s, s = 1
    assert evaluate(flops(graph).total, values) == 32 * (per_layer + scores) + 2 * 4096 * 32000
