"""FSDP1 with a frozen base (issue 38, item 4): with use_orig_params=True a wrapped unit that mixes frozen and
trainable parameters gets one gradient for its whole FlatParameter (pytorch issue 91165), measured here on CPU
(gloo, one rank) for a tiny LLaMA with PEFT LoRA on q_proj and v_proj."""

from __future__ import annotations

import pytest

import peft
import torch
import torch.distributed as dist
import torch.distributed.fsdp as fsdp
import transformers

from memderive.derivations.estimate import estimate

CONFIG = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
              intermediate_size=160, vocab_size=128, head_dim=16)
LORA = dict(mode="train", batch=1, seq=8, dtype="fp32", lora_rank=4, lora_targets="q_proj,v_proj")


@pytest.fixture(scope="module")
def flat_gradients(tmp_path_factory) -> tuple[int, int]:
    """(bytes of the FlatParameters' gradients, bytes of the per-parameter gradients PEFT asks for)."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg')}/store", rank=0,
                            world_size=1)
    try:
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).float()
        model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
        layers = model.base_model.model.model.layers
        for i, layer in enumerate(layers):
            layers[i] = fsdp.FullyShardedDataParallel(layer, use_orig_params=True, device_id=torch.device("cpu"))
        root = fsdp.FullyShardedDataParallel(model, use_orig_params=True, device_id=torch.device("cpu"))
        ids = torch.randint(0, 128, (1, 8))
        root(input_ids=ids, labels=ids).loss.backward()
        handles = [m._handle for m in root.modules() if isinstance(m, fsdp.FullyShardedDataParallel) and m._handle]
        flat = sum(h.flat_param.grad.numel() * h.flat_param.grad.element_size() for h in handles
                   if h.flat_param.grad is not None)
        trainable = sum(p.numel() * 4 for p in model.parameters() if p.requires_grad)
        return flat, trainable
    finally:
        dist.destroy_process_group()


def test_flat_units_hold_gradients_for_their_frozen_parameters(flat_gradients) -> None:
    flat, trainable = flat_gradients
    # By hand: per layer q 4,096, k, v 2,048 each, o 4,096, gate, up, down 10,240 each, norms 128 = 43,136,
    # LoRA on q and v: 4 x (64 + 64) + 4 x (64 + 32) = 896: 44,032 x 4 B x 2 layers = 352,256 B. The root
    # (embeddings, norm, head) holds nothing trainable: no gradient.
    assert flat == 352_256 and trainable == 2 * 896 * 4
    kw = dict(LORA, zero=3, dp=2)  # measured on one rank; two ranks hold half each (44,032 is even: no padding)
    est = estimate(transformers.LlamaConfig(**CONFIG), fsdp_flat_params=True, **kw)
    terms = dict(est.quantity("model_state_bytes").term_ints(est.values))
    assert terms["model_states/gradients"] == flat // 2
    plain = estimate(transformers.LlamaConfig(**CONFIG), **kw)
    assert dict(plain.quantity("model_state_bytes").term_ints(plain.values))["model_states/gradients"] == trainable // 2
