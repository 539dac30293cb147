"""Count what transformers instantiates, on the meta device (no weights, no downloads)."""

from __future__ import annotations

import torch
import transformers


def count_parameters(config: transformers.PretrainedConfig, auto=transformers.AutoModelForCausalLM) -> int:
    with torch.device("meta"):
        model = auto.from_config(config)
    return sum(p.numel() for p in model.parameters())  # parameters() yields a tied weight once


#: Small sizes for any family's config class: each is set only where the class has that field.
SMALL = {"hidden_size": 64, "n_embd": 64, "d_model": 64, "num_attention_heads": 4, "n_head": 4, "n_heads": 4,
         "num_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "n_layer": 2,
         "n_layers": 2, "num_layers": 2, "intermediate_size": 96, "ffn_dim": 96, "vocab_size": 128, "head_dim": 16,
         "max_position_embeddings": 64, "n_positions": 64, "max_seq_len": 64, "pad_token_id": 0, "bos_token_id": 1,
         "eos_token_id": 2, "attention_types": [[["global", "local"], 1]]}


def model_class(model_type: str):
    """The transformers class our count is of: a causal LM, or BertModel (with pooler) for BERT."""
    return transformers.AutoModel if model_type == "bert" else transformers.AutoModelForCausalLM


def small_config(model_type: str) -> transformers.PretrainedConfig:
    """``model_type``'s config class with the ``SMALL`` sizes it has fields for, the rest at its defaults."""
    import dataclasses

    transformers.logging.set_verbosity_error()
    cls = transformers.CONFIG_MAPPING[model_type]
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in SMALL.items() if k in names})
