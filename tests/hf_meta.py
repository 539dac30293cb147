"""Count what transformers instantiates, on the meta device (no weights, no downloads)."""

from __future__ import annotations

import torch
import transformers


def count_parameters(config: transformers.PretrainedConfig, auto=transformers.AutoModelForCausalLM) -> int:
    with torch.device("meta"):
        model = auto.from_config(config)
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once
