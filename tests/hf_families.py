"""Every family memderive supports, as a tiny transformers config, measured whole and derived.

``TINY`` holds one small config per ``model_type`` of memderive's own family table
(``derivations.models.families.ADAPTERS``); ``tests/test_hf_families.py`` fails when a family is
added to the table without one here. ``measure`` runs the bf16 model (``tests/hf_saved.py``:
``saved_tensors_hooks`` over a whole forward in training mode on CPU, storages counted once,
parameters and buffers excluded); ``derive`` sums the same step's graph under transformers'
layers (``hf_layers``) with the CPU kernels, exact profile.

``python -m tests.hf_families`` prints, per family, attention kernel and shape, the measured bytes,
memderive's and their ratio.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import torch
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.models.implementations import hf_layers
from memderive.derivations.quantities.traced import HAND_WRITTEN_FOR_MEGATRON
from memderive.symbolic.derive import activations, evaluate
from memderive.symbolic.dims import b, s
from tests.hf_saved import SavedModel, Shape, measure_config

__all__ = ["TINY", "HF_GRAPH", "SHAPES", "MOE", "config", "attentions", "experts_kernels", "measure", "derive", "Case", "cases"]

#: Three shapes per family: b > 1 (K/V broadcasts are copies), s not a multiple of the others, and b = 1 (where
#: matmul views what it copies at b > 1, and the shifted labels are the padded ones: issue 37 item 14).
SHAPES = (Shape(2, 24), Shape(3, 40), Shape(1, 17))
_L = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2, intermediate_size=96,
          vocab_size=128, max_position_embeddings=128)
_MLA = dict(kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=12, v_head_dim=10)
_MOE = dict(_L, num_hidden_layers=3)

#: model_type -> config fields (small sizes; each family's own switches where they change what is saved).
TINY: dict[str, dict] = {
    "gpt2": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=128, n_positions=128),
    "llama": dict(_L),
    "mistral": dict(_L, head_dim=32),
    "qwen2": dict(_L),
    "qwen3": dict(_L, head_dim=24),
    "gemma": dict(_L, num_key_value_heads=1, head_dim=24),
    "gemma2": dict(_L, head_dim=24, sliding_window=64),
    "gemma3_text": dict(_L, head_dim=24, sliding_window=64, sliding_window_pattern=2),
    "phi3": dict(_L),
    "olmo2": dict(_L),
    "granite": dict(_L),
    "cohere": dict(_L),
    "nemotron": dict(_L),
    "stablelm": dict(_L),
    "starcoder2": dict(_L, residual_dropout=0.1, embedding_dropout=0.1),
    "phi": dict(_L, num_key_value_heads=4, resid_pdrop=0.1),
    "gptj": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=128, n_positions=128, rotary_dim=8),
    "codegen": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=128, n_positions=128, rotary_dim=8),
    "opt": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, ffn_dim=96, vocab_size=128,
                max_position_embeddings=128),
    "falcon": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=128),
    "bloom": dict(hidden_size=64, n_head=4, n_layer=2, vocab_size=128),
    "mpt": dict(d_model=64, n_heads=4, n_layers=2, vocab_size=128, max_seq_len=128),
    "gpt_neo": dict(hidden_size=64, num_heads=4, num_layers=2, vocab_size=128, max_position_embeddings=128,
                    attention_types=[[["global", "local"], 1]], window_size=16),
    "gpt_bigcode": dict(n_embd=64, n_head=4, n_layer=2, vocab_size=128, n_positions=128),
    "gpt_neox": dict(_L, num_key_value_heads=4),
    "bert": dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96, vocab_size=128,
                 max_position_embeddings=128),
    "mixtral": dict(_MOE, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": dict(_MOE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48, decoder_sparse_step=2),
    "qwen3_moe": dict(_MOE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, head_dim=24),
    "olmoe": dict(_MOE, num_experts=4, num_experts_per_tok=2),
    "deepseek_v2": dict(_MOE, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, first_k_dense_replace=1, **_MLA),
    "deepseek_v3": dict(_MOE, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, first_k_dense_replace=1, n_group=2, topk_group=1, **_MLA),
    "gpt_oss": dict(_MOE, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=64),
    "phimoe": dict(_MOE, num_local_experts=4, num_experts_per_tok=2),
    "granitemoe": dict(_MOE, num_local_experts=4, num_experts_per_tok=2),
    # a layer of each kind: Mamba-2 (8 heads of 16 in 2 groups), attention, a relu2 MLP, MoE with a shared expert
    "nemotron_h": dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128,
                       layers_block_type=["linear_attention", "full_attention", "mlp", "moe"], intermediate_size=96,
                       mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, chunk_size=16,
                       n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                       moe_shared_expert_intermediate_size=48, max_position_embeddings=128),
}
#: The families whose hand-written graph, under ``--implementation hf``, is transformers' code: every one but the
#: hybrids, whose graph is Megatron-Core's and whose transformers code is traced (``HAND_WRITTEN_FOR_MEGATRON``).
HF_GRAPH = tuple(t for t in TINY if t not in HAND_WRITTEN_FOR_MEGATRON)
#: Families with routed experts (transformers' ``experts_implementation`` applies).
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "gpt_oss", "phimoe", "granitemoe")


def config(model_type: str, attention: str = "eager", experts: str | None = None,
           fields: tuple[tuple[str, object], ...] = ()) -> transformers.PretrainedConfig:
    """The tiny config of ``model_type`` with the attention (and experts) implementation set, and
    ``fields`` (name, value) pairs over ``TINY``'s."""
    transformers.logging.set_verbosity_error()
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # inside the small vocabularies
    cfg = transformers.AutoConfig.for_model(model_type, **{**ids, **TINY[model_type], **dict(fields)})
    cfg._attn_implementation = attention
    if experts is not None:
        cfg._experts_implementation = experts
    return cfg


def _model_class(model_type: str) -> type:
    name = "BertModel" if model_type == "bert" else MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    return getattr(transformers, name)


def attentions(model_type: str) -> tuple[str, ...]:
    """The attention kernels transformers accepts for the family: eager always, sdpa where the model
    class declares ``_supports_sdpa`` (transformers raises for an explicit request otherwise)."""
    return ("eager", "sdpa") if _model_class(model_type)._supports_sdpa else ("eager",)


def experts_kernels(model_type: str) -> tuple[str | None, ...]:
    """``eager`` and ``grouped_mm`` for MoE families (transformers' default is ``grouped_mm``), else None."""
    return ("eager", "grouped_mm") if model_type in MOE else (None,)


@functools.cache
def measure(model_type: str, attention: str, shape: Shape, experts: str | None = None,
            fields: tuple[tuple[str, object], ...] = ()) -> SavedModel:
    return measure_config(config(model_type, attention, experts, fields), shape)


def derive(model_type: str, attention: str, shape: Shape, experts: str | None = None, blocks=None,
           per_repeat: bool = False, fields: tuple[tuple[str, object], ...] = ()) -> dict[str, int]:
    """memderive's bytes per op path for the same step (transformers' CPU kernels, exact profile)."""
    model = resolve_model(config(model_type, attention, experts, fields).to_dict())
    graph = hf_layers(model, attention, "cpu", experts or "grouped_mm")(model.graph("bf16", dropout=True))
    values = {**model.values(), b: shape.b, s: shape.s}
    terms = activations(graph, blocks=blocks, per_repeat=per_repeat).terms
    return {t.path: int(evaluate(t.expr, values)) for t in terms}


@dataclass(frozen=True)
class Case:
    model_type: str
    attention: str
    shape: Shape
    experts: str | None

    @property
    def id(self) -> str:
        kernel = "" if self.experts is None else f"-{self.experts}"
        return f"{self.model_type}-{self.attention}{kernel}-b{self.shape.b}s{self.shape.s}"


def cases(model_types=None) -> list[Case]:
    return [Case(t, attn, shape, kernel) for t in (model_types or HF_GRAPH) for attn in attentions(t)
            for kernel in experts_kernels(t) for shape in SHAPES]


def main(argv: list[str]) -> None:
    """Print each case's measured bytes, memderive's, and their ratio."""
    torch.set_num_threads(1)
    print(f"{'case':44} {'measured':>10} {'memderive':>10} {'ratio':>8}")
    for case in cases(argv or None):
        got = measure(case.model_type, case.attention, case.shape, case.experts).nbytes
        want = sum(derive(case.model_type, case.attention, case.shape, case.experts).values())
        print(f"{case.id:44} {got:>10} {want:>10} {want / got:>8.4f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
