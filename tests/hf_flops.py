"""Count what ``torch.utils.flop_counter.FlopCounterMode`` measures on real transformers models.

Models are built from small configs (fp32, CPU, eager attention, random weights, no downloads); the
whole model runs: embeddings, layers, final norm, LM head and the loss. FlopCounterMode counts
matrix multiplies only (``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``_scaled_mm``, convolutions and the
SDPA/flash kernels; torch/utils/flop_counter.py ``flop_registry``), 2mnk per product.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["Measured", "build", "measure_training", "measure_prefill", "measure_decode"]


@dataclass(frozen=True, slots=True)
class Measured:
    forward: int
    step: int  # forward + backward


def build(config: transformers.PretrainedConfig, auto=transformers.AutoModelForCausalLM) -> torch.nn.Module:
    """The model in fp32 with eager attention and dropout off (so repeated runs agree)."""
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    # Eager experts (a loop of linears): the default grouped_mm kernel is not in FlopCounterMode's registry.
    extra = {"experts_implementation": "eager"} if hasattr(config, "_experts_implementation") else {}
    model = auto.from_config(config, attn_implementation="eager", torch_dtype=torch.float32, **extra)
    return model.eval()


def _count(fn) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def _loss(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    out = model(input_ids=ids, labels=ids) if hasattr(model, "lm_head") or "LM" in type(model).__name__ \
        else model(input_ids=ids)
    if getattr(out, "loss", None) is not None:
        return out.loss
    # An encoder without a head (BertModel): both outputs feed a scalar, so every layer gets gradients.
    return out.last_hidden_state.sum() + out.pooler_output.sum()


def measure_training(model: torch.nn.Module, batch: int, seq: int, vocab: int) -> Measured:
    """FLOPs of one forward pass, and of forward + backward, on ``batch`` sequences of ``seq`` tokens."""
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        forward = _count(lambda: _loss(model, ids))
    step = _count(lambda: _loss(model, ids).backward())
    return Measured(forward, step)


def measure_prefill(model: torch.nn.Module, batch: int, seq: int, vocab: int) -> int:
    """FLOPs of a prefill as generate runs it: ``seq`` prompt tokens, logits of the last position."""
    ids = torch.randint(0, vocab, (batch, seq), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        return _count(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1))


def measure_decode(model: torch.nn.Module, batch: int, cached: int, vocab: int) -> int:
    """FLOPs of one decode step: one new token per sequence over a KV cache of ``cached`` tokens."""
    ids = torch.randint(0, vocab, (batch, cached + 1), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        prefill = model(input_ids=ids[:, :cached], use_cache=True)
        cache = prefill.past_key_values
        return _count(lambda: model(input_ids=ids[:, cached:], past_key_values=cache, use_cache=True))
