"""Implementations a training run may use, as graph variants: which code computes each op.

``megatron`` (the default) is the graph as built: Megatron-LM's fused kernels, the ops of
Korthikanti et al. 2022 (fused RMSNorm/LayerNorm, a 16-bit softmax, grouped K/V never copied).
``hf`` is transformers' own modeling code (``symbolic.huggingface.HuggingFace``), with its
attention kernel: ``hf-eager`` and ``hf-sdpa`` are shorthands that also set the kernel.

>>> from memderive.derivations.models.presets import preset
>>> hf_layers(preset("llama-2-7b"), "eager").code.softmax_fp32, hf_layers(preset("gpt2"), "sdpa").code.softmax_fp32
(True, False)
>>> parse_implementation("hf-eager")
('hf', 'eager')
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from memderive.derivations.choices import IMPLEMENTATIONS, SHORTHANDS, describe, parse_implementation
from memderive.derivations.models.model import Model
from memderive.symbolic.float8 import Float8Training
from memderive.symbolic.hf_code import HfCode
from memderive.symbolic.huggingface import HuggingFace

__all__ = ["IMPLEMENTATIONS", "float8_layers", "SHORTHANDS", "PYTHON_GELUS", "family_code", "UNSUPPORTED_KERNELS", "parse_implementation",
           "hf_layers", "hf_code", "hf_kernel", "describe"]

#: Activations transformers implements as Python formulas (every intermediate saved).
PYTHON_GELUS = frozenset({"gelu_new", "gelu_fast", "gelu_python_tanh"})


_M = "transformers/models/{0}/modeling_{0}.py (v5.24)"
#: Where each family's modeling code departs from LLaMA's (``HfCode``'s defaults), read in its file
#: (``_M``); families absent follow LLaMA's code (RMSNorm ``w * x.to(dt)``, fp32 eager softmax,
#: cos/sin shared, ``sdpa_attention_forward``).
@cache
def family_code() -> dict[str, HfCode]:
    """The table, built on first use (``symbolic.hf_code`` is imported only under ``--implementation hf``)."""
    return {
        # GPT2Attention: softmax(attn_weights) in the activation dtype; query_states = c_attn(...).split(...)[0]
        # .view(...).transpose(1, 2) reaches torch.matmul as it is (key and value: the DynamicCache's cat copies)
        "gpt": HfCode(softmax_fp32=False, strided_views=("q",)),
        # BloomAttention: query_layer from _reshape of the fused query_key_value, reshaped for baddbmm
        "bloom": HfCode(strided_views=("q",)),
        # GPTBigCodeAttention: query, key_value = c_attn(...).split((h, 2 d_h)); query.view(...).transpose(1, 2)
        "gpt_bigcode": HfCode(strided_views=("q",)),
        "bert": HfCode(softmax_fp32=False, position_buffer=True),  # softmax without dtype; self.position_ids[:, :s]
        "gemma": HfCode(rms_norm="offset"),  # GemmaRMSNorm: output * (1.0 + self.weight.float())
        "gemma2": HfCode(rms_norm="offset"),
        "gemma3_text": HfCode(rms_norm="offset"),
        "olmo2": HfCode(rms_norm="fp32-product", rotary_tables="shared-fp32"),  # (self.weight * x).to(dt); cos, sin
        # GptOssRMSNorm: (self.weight * hidden_states).to(input_dtype); eager_attention_forward: torch.cat([attn_weights,
        # sinks]), combined_logits.max, F.softmax(..., dtype=combined_logits.dtype); GptOssTopKRouter: torch.topk(router_logits)
        # then softmax of the top-k values; GptOssExperts._apply_gate; GptOssRotaryEmbedding: emb = freqs
        "gpt_oss": HfCode(rms_norm="fp32-product", sinks=True, router_topk_first=True, clamped_glu=True, rotary_half=True),
        "cohere": HfCode(layer_norm="python-fp32"),  # CohereLayerNorm: mean-centred, in fp32
        # NemotronLayerNorm1P: F.layer_norm(input, shape, self.weight + 1.0, self.bias); apply_rotary_pos_emb:
        # torch.cat((q_embed, q_pass), dim=-1) on (b, a, s, d)
        "nemotron": HfCode(layer_norm="one-plus", q_head_major=True),
        "phi3": HfCode(q_head_major=True),  # apply_rotary_pos_emb: torch.cat([rotated, pass]) on (b, a, s, d)
        "gpt_neox": HfCode(q_head_major=True),
        "stablelm": HfCode(q_head_major=True),  # StableLmAttention: torch.cat((query_rot, query_pass))
        "phi": HfCode(q_head_major=True),  # PhiAttention: torch.cat((query_rot, query_pass))
        "gptj": HfCode(scores_fp32=True, rotary_tables="per-call"),  # matmul(query.to(float32), key.to(float32))
        "codegen": HfCode(scores_fp32=True, rotary_tables="per-call"),
        "gpt_neo": HfCode(scores_fp32=True),  # GPTNeoSelfAttention._attn: query.to(torch.float32)
        # v5.25: eager_attention_forward (fp32 softmax); create_causal_mask(..., allow_is_causal_skip=False)
        "falcon": HfCode(sdpa_mask=True),
        "mpt": HfCode(bool_mask=True),  # MptAttention: attention_scores.masked_fill(attention_mask, min)
        "phimoe": HfCode(sparsemixer=True),  # PhimoeTopKRouter: sparsemixer(router_logits, ...), PhimoeMultiplier
        # GraniteMoeTopKRouter: F.linear(hidden_states, self.weight).float().topk(k), softmax, .type_as(hidden_states)
        "granitemoe": HfCode(router_topk_first=True, router_logits_fp32=True),
        "mixtral": HfCode(routing_fp32=True),  # MixtralTopKRouter: softmax(router_logits.float()), no cast back
        # DeepseekV2/V3TopkRouter: F.linear(hidden_states.type(torch.float32), self.weight.type(torch.float32))
        # expand_kv: k_nope, value_states = torch.split(kv_b_proj(kv_nope).view(...).transpose(1, 2), ...)
        "deepseek_v2": HfCode(routing_fp32=True, router_fp32=True, strided_views=("v",)),
        "deepseek_v3": HfCode(routing_fp32=True, router_fp32=True, strided_views=("v",)),
    }


#: Attention kernels a family's model class refuses (``_supports_sdpa = False``,
#: ``_supports_flash_attn = False`` in its modeling file, transformers v5.24; ``tests/test_hf_families.py``
#: compares this table with the installed classes). Asked explicitly, transformers raises; asked nothing,
#: ``get_correct_attn_implementation`` falls back from sdpa to eager.
UNSUPPORTED_KERNELS: dict[str, tuple[str, ...]] = {
    "gemma2": ("sdpa",), "gpt_neo": ("sdpa",), "gpt_oss": ("sdpa",), "bloom": ("sdpa", "flash"),
    "mpt": ("sdpa", "flash"),
}


def hf_kernel(model: Model, attention: str, explicit: bool) -> str:
    """The attention kernel transformers runs ``model`` with: ``attention`` where its class supports it;
    eager where sdpa was only the default and the class does not support it.

    Raises:
        ValueError: one line, for a kernel asked explicitly that the family's class refuses.
    """
    refused = UNSUPPORTED_KERNELS.get(model.arch.family, ())
    if attention not in refused:
        return attention
    if explicit:
        name = {"sdpa": "sdpa", "flash": "flash_attention_2"}[attention]
        raise ValueError(f"transformers refuses attn_implementation={name!r} for {model.arch.family} (its model class "
                         f"does not support it); use --attention eager")
    return "eager"


def hf_code(model: Model) -> HfCode:
    """The rules ``model``'s family code follows, with what its config switches on (Gemma 2's
    softcapping, GeLU written in Python, Gemma 3's two rotary tables)."""
    arch, z = model.arch, model.sizes

    code = family_code().get(arch.family, HfCode())
    python_gelu = arch.mlp == "gelu" and arch.act_fn in PYTHON_GELUS
    mixed = arch.family == "gemma3_text" and 0 < model.windowed_layers < z["l"]  # rotary_emb_local beside rotary_emb
    masked = arch.moe is not None and arch.moe.group_masked  # scores.masked_fill(~score_mask.bool(), 0.0)
    jitter = arch.moe is not None and arch.moe.input_jitter  # hidden_states *= torch.empty_like(...).uniform_(...)
    return replace(code, python_gelu=python_gelu, attn_softcap=arch.attn_softcap, logit_softcap=arch.logit_softcap,
                   rotary_sets=2 if mixed else 1, router_group_mask=masked,
                   input_jitter=jitter)


def hf_layers(model: Model, attention: str, device: str = "cuda", experts: str = "grouped_mm",
              loss_chunks: int = 1) -> HuggingFace:
    """The transform of ``model`` in transformers: its family's code (``hf_code``), the attention and
    experts kernels, the device, and the sizes that choose SDPA's kernel (fewer K/V heads; MLA's value
    head size)."""
    z = model.sizes
    value_differs = model.arch.attention == "mla" and z["d_h"] + z["d_hR"] != z["d_v"]
    return HuggingFace(attention, device, hf_code(model), fewer_kv=z["a_kv"] < z["a"], value_differs=value_differs,
                       single_kv=z["a_kv"] == 1,
                       fused_qkv=model.arch.family == "gpt", experts=experts, loss_chunks=loss_chunks,
                       window=(model.window, model.windowed_layers, z["l"]) if model.windowed_layers else None)


def float8_layers(model: Model, recipe: str, keep_output: bool = False) -> Float8Training:
    """torchao's ``convert_to_float8_training`` of ``model`` as transformers builds it: its ``nn.Linear``
    modules whose dims divide by 16 (torchtitan's filter); GPT-2's layers are ``Conv1D``, which torchao does
    not swap (``swap_linear_layers`` converts ``nn.Linear`` instances only); ``keep_output``: the output layer
    filtered out (``--fp8-keep-output``)."""
    return Float8Training(recipe, model.values(), conv1d=model.arch.family == "gpt", keep_output=keep_output)
