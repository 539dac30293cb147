"""PEFT's module names per family: which graph ops each ``target_modules`` name wraps. A plain table, apart from
``adapters`` (which imports LoRA's transforms), so that a quantized checkpoint's per-module bytes can read it on the
cold path."""

from __future__ import annotations

__all__ = ["PEFT_NAMES"]

_QKV = "layer/attn/qkv"
_LLAMA = {"q_proj": ("layer/attn/q",), "k_proj": ("layer/attn/k",), "v_proj": ("layer/attn/v",),
          "o_proj": ("layer/attn/proj",), "gate_proj": ("layer/mlp/gate",), "up_proj": ("layer/mlp/up",),
          "down_proj": ("layer/mlp/fc2",)}
_NEOX = {"query_key_value": (_QKV,), "dense": ("layer/attn/proj",), "dense_h_to_4h": ("layer/mlp/fc1",),
         "dense_4h_to_h": ("layer/mlp/fc2",)}
_QKV_SEPARATE = {"q_proj": ("layer/attn/q",), "k_proj": ("layer/attn/k",), "v_proj": ("layer/attn/v",)}

#: Per family: PEFT module name -> the graph's linear ops it names, as ``block/op``; a name that
#: several modules share (GPT-2's ``c_proj``) lists groups separated by ``|``; a fused module
#: (Phi-3's ``gate_up_proj``) lists several ops in one group.
PEFT_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    **{fam: _LLAMA for fam in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2",
                               "granite", "cohere", "stablelm")},
    "phi3": {"qkv_proj": (_QKV,), "o_proj": ("layer/attn/proj",), "gate_up_proj": ("layer/mlp/gate+layer/mlp/up",),
             "down_proj": ("layer/mlp/fc2",)},
    "gpt": {"c_attn": (_QKV,), "c_proj": ("layer/attn/proj", "layer/mlp/fc2"), "c_fc": ("layer/mlp/fc1",)},
    "gpt_bigcode": {"c_attn": (_QKV,), "c_proj": ("layer/attn/proj", "layer/mlp/fc2"), "c_fc": ("layer/mlp/fc1",)},
    "gpt_neox": _NEOX, "falcon": _NEOX, "bloom": _NEOX,
    "gptj": {**_QKV_SEPARATE, "out_proj": ("layer/attn/proj",), "fc_in": ("layer/mlp/fc1",),
             "fc_out": ("layer/mlp/fc2",)},
    "codegen": {"qkv_proj": (_QKV,), "out_proj": ("layer/attn/proj",), "fc_in": ("layer/mlp/fc1",),
                "fc_out": ("layer/mlp/fc2",)},
    "opt": {**_QKV_SEPARATE, "out_proj": ("layer/attn/proj",), "fc1": ("layer/mlp/fc1",), "fc2": ("layer/mlp/fc2",)},
    "phi": {**_QKV_SEPARATE, "dense": ("layer/attn/proj",), "fc1": ("layer/mlp/fc1",), "fc2": ("layer/mlp/fc2",)},
    "nemotron": {**_QKV_SEPARATE, "o_proj": ("layer/attn/proj",), "up_proj": ("layer/mlp/fc1",),
                 "down_proj": ("layer/mlp/fc2",)},
    "starcoder2": {**_QKV_SEPARATE, "o_proj": ("layer/attn/proj",), "c_fc": ("layer/mlp/fc1",),
                   "c_proj": ("layer/mlp/fc2",)},
    "gpt_neo": {**_QKV_SEPARATE, "out_proj": ("layer/attn/proj",), "c_fc": ("layer/mlp/fc1",),
                "c_proj": ("layer/mlp/fc2",)},
    "mpt": {"Wqkv": (_QKV,), "out_proj": ("layer/attn/proj",), "up_proj": ("layer/mlp/fc1",),
            "down_proj": ("layer/mlp/fc2",)},
    "bert": {"query": ("layer/attn/q",), "key": ("layer/attn/k",), "value": ("layer/attn/v",),
             "dense": ("layer/attn/proj", "layer/mlp/fc1", "layer/mlp/fc2", "head/pooler")},
}
