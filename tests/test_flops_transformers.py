"""FLOPs derived from the graph equal, exactly, what FlopCounterMode counts on transformers models.

Every supported family (the configs of the parameter tests), built from small configs in fp32 on
CPU with eager attention, whole (embeddings, layers, final norm, LM head, loss): a forward pass and
a forward + backward pass at two shapes, and one decode step over a KV cache of s tokens. The
expected numbers are measured (tests/hf_flops.py), never computed by the code under test.
"""

from __future__ import annotations

import pytest
import transformers

from memderive.derivations.models.config import from_config
from memderive.derivations.options import Options
from memderive.derivations.quantities.compute import decode_step
from memderive.derivations.quantities.inference import inference_graph, inference_values, layer_groups
from memderive.derivations.quantities.traced import HAND_WRITTEN_FOR_MEGATRON
from memderive.symbolic.derive import TRAINING_PHASES, evaluate, flops
from memderive.symbolic.dims import b, s
from memderive.derivations.estimate import estimate
from tests.hf_flops import build, measure_decode, measure_prefill, measure_training
from tests.test_params_families import FAMILY_CONFIGS as MORE_FAMILIES
from tests.test_params_families import _config
from tests.test_moe_params import FAMILY_CONFIGS as MOE_FAMILIES
from tests.test_params_transformers import FAMILY_CONFIGS as FAMILIES



def _one_per_family() -> list[tuple[str, dict]]:
    """The first config of each family (mixture-of-experts and MLA families included), and the variants
    that change the products (head_dim != h/a, grouped and multi-query keys, sequential Falcon,
    multi-head BigCode)."""
    seen: set[str] = set()
    picked = []
    for model_type, fields in FAMILIES + MORE_FAMILIES + MOE_FAMILIES:
        if model_type in HAND_WRITTEN_FOR_MEGATRON:  # their graph is Megatron-Core's: tests/test_hybrid.py
            continue
        variant = "head_dim" in fields and model_type == "llama" or fields.get("multi_query") is False \
            or fields.get("parallel_attn") is False
        if model_type not in seen or variant:
            picked.append((model_type, fields))
        seen.add(model_type)
    return picked


CONFIGS = _one_per_family()
IDS = [f"{t}-{i}" for i, (t, _) in enumerate(CONFIGS)]
SHAPES = ((2, 12), (1, 20))  # (b, s); every sliding window of these configs is longer
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")


@pytest.mark.parametrize(("model_type", "fields"), CONFIGS, ids=IDS)
def test_flops_equal_flop_counter(model_type: str, fields: dict) -> None:
    """Forward and forward + backward at two shapes; a prefill as generate runs it (last-position logits);
    one decode step over a cache of s tokens, which attends to s + 1 keys (n = 1 new token)."""
    config = _config(model_type, fields)
    auto = transformers.AutoModel if model_type == "bert" else transformers.AutoModelForCausalLM
    torch_model = build(config, auto)
    model = from_config(config.to_dict())
    graph = model.graph(activation_dtype="fp32", dropout=False)
    for batch, seq in SHAPES:
        measured = measure_training(torch_model, batch, seq, config.vocab_size)
        values = {**model.values(), b: batch, s: seq}
        assert evaluate(flops(graph).total, values) == measured.forward
        assert evaluate(flops(graph, phases=TRAINING_PHASES).total, values) == measured.step
        if model_type == "bert":  # an encoder: no cache, no decoding
            continue
        options = Options(mode="infer", batch=batch, seq=seq, new_tokens=1)
        step = decode_step(inference_graph(model, options), s + 1, layer_groups(model))
        values.update(inference_values(model, options))
        assert evaluate(flops(step).total, values) == measure_decode(torch_model, batch, seq, config.vocab_size)
        prefill = estimate(model, mode="infer", batch=batch, seq=seq).number("prefill_flops")
        assert prefill == measure_prefill(torch_model, batch, seq, config.vocab_size)


@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ("all-linear",), ("gate_proj", "down_proj")])
def test_lora_flops_equal_flop_counter(targets: tuple[str, ...]) -> None:
    """PEFT LoRA (r = 4) on a frozen LLaMA: the adapters' products, no weight gradient for a frozen
    weight, and no input gradient below the first trainable op (the first layer's k projection, for one,
    needs none, and neither does the attention's dk there)."""
    import peft

    fields = dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, num_hidden_layers=2,
                  intermediate_size=344, vocab_size=1000)
    config = _config("llama", fields)
    lora = peft.LoraConfig(r=4, target_modules=targets[0] if targets == ("all-linear",) else list(targets))
    measured = measure_training(peft.get_peft_model(build(config), lora), 2, 12, config.vocab_size)
    # the measured model runs eager attention (hf_flops.build): its backward computes only the gradients it needs
    est = estimate(from_config(config.to_dict()), Options(mode="train", batch=2, seq=12, dtype="fp32", lora_rank=4,
                                                          lora_targets=targets, dropout=False, attention="eager"))
    assert (est.number("forward_flops"), est.number("model_flops")) == (measured.forward, measured.step)
