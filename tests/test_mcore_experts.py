"""Megatron-Core's MoE layer under ``--implementation megatron`` (the default): what its router, token dispatcher and
TEGroupedMLP save (``symbolic/mcore_experts.py``, each tensor cited to its line of Megatron-LM), by hand for a tiny
config. ``--implementation hf`` keeps transformers' own tensors: ``tests/test_hf_families.py`` holds them to real CPU
runs (the MoE families: ``-k "mixtral or qwen3_moe or deepseek"``); here, that its figure does not move.
"""

from __future__ import annotations

import pytest

from memderive.derivations import estimate
from memderive.symbolic.derive import evaluate

#: A tiny Qwen3-MoE: h = 64, E = 4 experts, k = 2 per token, f_e = 48; one layer.
TINY = {"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 1, "intermediate_size": 48, "moe_intermediate_size": 48, "vocab_size": 100,
        "num_experts": 4, "num_experts_per_tok": 2, "head_dim": 16}


def _moe_bytes(implementation: str = "megatron", **fields: object) -> dict[str, int]:
    """Bytes per saved tensor of the layer's ``moe/`` ops (b = 2, s = 16), by tensor name."""
    est = estimate({**TINY, **fields}, mode="train", batch=2, seq=16, implementation=implementation, dropout=False)
    return {x.name: int(evaluate(x.nbytes, est.values)) for blk in est.graph.blocks if blk.name == "layer"
            for op in blk.ops if op.path.startswith("moe/") for x in op.saved}


def test_megatron_core_moe_layer_by_hand() -> None:
    # b s = 32 tokens, T = b s k = 64 token-expert pairs, bf16 activations.
    # router: its input x (the layer's second norm's output, b s h: 32 x 64 x 2 = 4,096 B, RouterGatingLinearFunction), topk's int64 indices
    #   (T x 8 = 512), the fp32 softmax over the k (T x 4 = 256; norm_topk_prob: top-k first) = 4,864 B
    # experts: the permute's two int64 indices (flat_sorted, sorted_indices: 2 x 512 = 1,024), fc1's input
    #   (T h x 2 = 8,192), the weighted SwiGLU's input, fc1's output (T 2 f_e x 2 = 64 x 96 x 2 = 12,288) and the
    #   probs (T x 2 = 128), fc2's input (T f_e x 2 = 6,144) = 27,776 B
    # total 4,864 + 27,776 = 32,640 B
    got = _moe_bytes(norm_topk_prob=True)
    assert got == {"norm2.out": 4096, "moe/router.topk_indices": 512, "moe/router.probs": 256,
                   "moe/experts.permute_index": 512, "moe/experts.sorted_indices": 512, "moe/experts.gathered": 8192,
                   "moe/experts.fc1_out": 12288, "moe/experts.weights": 128, "moe/experts.hidden": 6144}
    assert sum(got.values()) == 32_640


def test_softmax_first_router_saves_the_scores_over_every_expert() -> None:
    # norm_topk_prob False: moe_router_pre_softmax, softmax over E then top-k: the fp32 scores (b s E x 4 =
    # 32 x 4 x 4 = 512 B) and topk's int64 indices (512); no softmax over the k. Router: 4,096 + 512 + 512 = 5,120 B
    got = _moe_bytes(norm_topk_prob=False)
    assert {name: v for name, v in got.items() if not name.startswith("moe/experts")} == \
        {"norm2.out": 4096, "moe/router.scores": 512, "moe/router.topk_indices": 512}  # 5,120 B


def test_megatron_keeps_less_than_the_eager_loop_by_hand() -> None:
    # What transformers' eager loop saves beyond Megatron-Core, per layer (same tiny config): silu(gate) (T f_e x 2 =
    # 6,144), the expert outputs and the scaled ones (2 x T h x 2 = 16,384), the router's fp32 scores over E (b s E x 4
    # = 512) and the fp32 sum of the renormalised weights (b s x 4 = 128): 6,144 + 16,384 + 512 + 128 = 23,168 B. The
    # rest pair up: its gate and up halves (2 x 6,144) are fc1's output, its int64 token and slot indices the permute's
    # two, its fp32 renormalised weights (256) the softmax over the k, its routing weights (128) the probs.
    # The eager loop (the graph before any implementation's rewrite): 32,640 + 23,168 = 55,808 B.
    from memderive.derivations.models.resolve import resolve_model
    from memderive.symbolic.dims import b, s

    model = resolve_model({**TINY, "norm_topk_prob": True})
    values = {**model.values(), b: 2, s: 16}
    eager = sum(int(evaluate(x.nbytes, values)) for op in model.graph(dropout=False).block("layer").ops
                if op.path.startswith("moe/") for x in op.saved)
    assert eager == 55_808
    assert eager - sum(_moe_bytes(norm_topk_prob=True).values()) == 23_168


@pytest.mark.parametrize("experts", ["eager", "grouped_mm"])
def test_hf_keeps_transformers_tensors(experts: str) -> None:
    # Under --implementation hf the experts keep what transformers' kernels save (eager: the loop's scaled outputs;
    # grouped_mm: its three int64 permutations and the int32 offsets), none of Megatron-Core's names
    est = estimate({**TINY, "norm_topk_prob": True}, mode="train", batch=2, seq=16, implementation="hf",
                   experts_implementation=experts, dropout=False)
    names = {x.name.rsplit(".", 1)[1] for blk in est.graph.blocks for op in blk.ops if op.kind == "experts"
             for x in op.saved}
    assert not names & {"permute_index", "sorted_indices", "fc1_out"}
    assert ("weighted" in names) == (experts == "eager") and ("inv_perm" in names) == (experts == "grouped_mm")
