"""Megatron-Core's MoE layer under ``--implementation megatron`` (the default): what its router, token dispatcher and
TEGroupedMLP save (``symbolic/mcore_experts.py``, each tensor cited to its line of Megatron-LM), by hand for a tiny
config. ``--implementation hf`` keeps transformers' own tensors: ``tests/test_hf_families.py`` holds them to real CPU
runs (the MoE families: ``-k "mixtral or qwen3_moe or deepseek"``); here, that its figure does not move.
"""

from __future__ import annotations

import pytest
import torch

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
    # experts: the permute's int64 flat_sorted, a view of the argsort of the (E, b s) routing map (E b s x 8 =
    #   4 x 32 x 8 = 1,024) and sorted_indices (T x 8 = 512), fc1's input
    #   (T h x 2 = 8,192), the weighted SwiGLU's input, fc1's output (T 2 f_e x 2 = 64 x 96 x 2 = 12,288) and the
    #   probs (T x 2 = 128), fc2's input (T f_e x 2 = 6,144) = 28,288 B
    # total 4,864 + 28,288 = 33,152 B
    got = _moe_bytes(norm_topk_prob=True)
    assert got == {"norm2.out": 4096, "moe/router.topk_indices": 512, "moe/router.probs": 256,
                   "moe/experts.permute_index": 1024, "moe/experts.sorted_indices": 512, "moe/experts.gathered": 8192,
                   "moe/experts.fc1_out": 12288, "moe/experts.weights": 128, "moe/experts.hidden": 6144}
    assert sum(got.values()) == 33_152


def test_softmax_first_router_saves_the_scores_over_every_expert() -> None:
    # norm_topk_prob False: moe_router_pre_softmax, softmax over E then top-k: the fp32 scores (b s E x 4 =
    # 32 x 4 x 4 = 512 B) and topk's int64 indices (512); no softmax over the k. Router: 4,096 + 512 + 512 = 5,120 B
    got = _moe_bytes(norm_topk_prob=False)
    assert {name: v for name, v in got.items() if not name.startswith("moe/experts")} == \
        {"norm2.out": 4096, "moe/router.scores": 512, "moe/router.topk_indices": 512}  # 5,120 B


def test_megatron_keeps_less_than_the_eager_loop_by_hand() -> None:
    # What transformers' eager loop saves beyond Megatron-Core, per layer (same tiny config): silu(gate) (T f_e x 2 =
    # 6,144), the expert outputs and the scaled ones (2 x T h x 2 = 16,384), the router's fp32 scores over E (b s E x 4
    # = 512) and the fp32 sum of the renormalised weights (b s x 4 = 128): 6,144 + 16,384 + 512 + 128 = 23,168 B;
    # Megatron-Core's flat_sorted keeps E b s int64 (1,024) where the eager loop's token indices are T (512): 512 B
    # more, 23,168 - 512 = 22,656 B. The rest pair up: its gate and up halves (2 x 6,144) are fc1's output, its slot
    # indices sorted_indices, its fp32 renormalised weights (256) the softmax over the k, its routing weights (128)
    # the probs. The eager loop (the graph before any implementation's rewrite): 33,152 + 22,656 = 55,808 B.
    from memderive.derivations.models.resolve import resolve_model
    from memderive.symbolic.dims import b, s

    model = resolve_model({**TINY, "norm_topk_prob": True})
    values = {**model.values(), b: 2, s: 16}
    eager = sum(int(evaluate(x.nbytes, values)) for op in model.graph(dropout=False).block("layer").ops
                if op.path.startswith("moe/") for x in op.saved)
    assert eager == 55_808
    assert eager - sum(_moe_bytes(norm_topk_prob=True).values()) == 22_656


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


# --- measured: Megatron-Core's MoE layer rebuilt from its torch calls, its two fused functions as they save ------
class _SavesInputs(torch.autograd.Function):
    """A function that saves its inputs (``ctx.save_for_backward``) and computes ``forward_fn``: Megatron-Core's
    RouterGatingLinearFunction (moe_utils.py:1382: inp, weight), TE's GroupedLinear (grouped_linear.py:556-564: its
    input and weights), WeightedSwiGLUFunction (fused_bias_swiglu.py:270: input, weights). Backward recomputes."""

    @staticmethod
    def forward(ctx, forward_fn, *inputs):  # type: ignore[override]
        ctx.forward_fn = forward_fn
        ctx.save_for_backward(*inputs)
        return forward_fn(*inputs)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        inputs = [x.detach().requires_grad_(x.dtype.is_floating_point) for x in ctx.saved_tensors]
        with torch.enable_grad():
            out = ctx.forward_fn(*inputs)
        wanted = [x for x in inputs if x.requires_grad]
        got = iter(torch.autograd.grad(out, wanted, grad, allow_unused=True))
        return (None, *(next(got) if x.requires_grad else None for x in inputs))


class McoreMoe(torch.nn.Module):
    """Megatron-Core's TopKRouter (top-k first), MoEAlltoAllTokenDispatcher's unfused permute/unpermute (one rank)
    and TEGroupedMLP with the weighted SwiGLU, each torch call as moe_utils.py and experts.py make it."""

    def __init__(self, h: int, experts: int, top_k: int, width: int, pre_softmax: bool = False) -> None:
        super().__init__()
        dt = torch.bfloat16
        self.k, self.pre_softmax = top_k, pre_softmax
        self.router = torch.nn.Parameter(torch.randn(experts, h, dtype=dt) / h**0.5)
        self.fc1 = torch.nn.Parameter(torch.randn(experts, 2 * width, h, dtype=dt) / h**0.5)
        self.fc2 = torch.nn.Parameter(torch.randn(experts, h, width, dtype=dt) / width**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.view(-1, x.shape[-1])
        num_tokens, hidden = tokens.shape
        logits = _SavesInputs.apply(lambda i, w: i @ w.t(), tokens, self.router)
        if self.pre_softmax:  # moe_utils.py:902-910
            probs, top_indices = torch.topk(torch.softmax(logits, dim=-1, dtype=torch.float32), k=self.k, dim=1)
        else:  # moe_utils.py:911-914
            scores, top_indices = torch.topk(logits, k=self.k, dim=1)  # moe_utils.py:879
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        probs = probs.type_as(logits)  # moe_utils.py:936
        routing_probs = torch.zeros_like(logits).scatter(1, top_indices, probs)  # :954
        routing_map = torch.zeros_like(logits).int().scatter(1, top_indices, 1).bool()
        # permute (moe_utils.py:466-486)
        flat_sorted = routing_map.bool().T.contiguous().reshape(-1).argsort(descending=True, stable=True)
        flat_sorted = flat_sorted[:num_tokens * self.k]
        sorted_indices = flat_sorted % num_tokens
        permuted_probs = routing_probs.T.contiguous().reshape(-1)[flat_sorted]
        permuted = tokens.index_select(0, sorted_indices)
        splits = routing_map.sum(0).tolist()

        def grouped(inp: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return torch.cat([part @ w[e].t() for e, part in enumerate(torch.split(inp, splits))])

        def weighted_swiglu(y: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
            gate, up = torch.chunk(y.float(), 2, -1)
            return (torch.nn.functional.silu(gate) * up * p).to(y.dtype)

        fc1 = _SavesInputs.apply(grouped, permuted, self.fc1)
        act = _SavesInputs.apply(weighted_swiglu, fc1, permuted_probs.unsqueeze(-1))
        out = _SavesInputs.apply(grouped, act, self.fc2)
        # unpermute (moe_utils.py:603-616), no probs (token_dispatcher.py:891)
        restored = torch.zeros((num_tokens, hidden), dtype=out.dtype)
        restored = restored.scatter_add(0, sorted_indices.unsqueeze(1).expand(-1, hidden), out)
        return restored.view(x.shape)


@pytest.mark.parametrize("renormalize", [True, False], ids=["topk-first", "softmax-first"])
def test_the_graph_saves_what_megatron_cores_calls_save(renormalize: bool) -> None:
    from collections import Counter

    from tests.test_saved_tensors import measured_bytes

    torch.manual_seed(0)
    layer = McoreMoe(64, 4, 2, 48, pre_softmax=not renormalize)
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16, requires_grad=True)
    got, seen = measured_bytes(lambda: layer(x), layer)
    est = estimate({**TINY, "norm_topk_prob": renormalize}, mode="train", batch=2, seq=16, dropout=False)
    want: Counter = Counter()
    for blk in est.graph.blocks:
        for op in blk.ops:
            for t in op.saved if blk.name == "layer" and op.path.startswith("moe/") else ():
                want[t.dtype.name] += int(evaluate(t.nbytes, est.values))
    assert got == want, seen


# --- gpt-oss's clamped quick-GeGLU: the clamp's input and the fused function's input are two tensors ------------
#: A tiny gpt-oss (its experts' activation clamped at 7, as gpt-oss's ``swiglu_limit``; Megatron-Bridge v0.2.0
#: gpt_oss_provider.py L84 ``activation_func_clamp_value`` 7.0): h = 64, E = 4, k = 2, f_e = 48.
TINY_OSS = {"model_type": "gpt_oss", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
            "num_hidden_layers": 2, "intermediate_size": 48, "vocab_size": 100, "num_local_experts": 4,
            "num_experts_per_tok": 2, "head_dim": 16, "sliding_window": 8}


def _oss_experts_bytes(**options: object) -> dict[str, int]:
    est = estimate(TINY_OSS, mode="train", batch=2, seq=16, dropout=False, **{"framework": "megatron", **options})
    return {x.name.rsplit(".", 1)[1]: int(evaluate(x.nbytes, est.values)) for blk in est.graph.blocks
            if blk.name == "layer" for op in blk.ops if op.kind == "experts" for x in op.saved}


def test_clamped_quick_geglu_keeps_fc1s_output_twice_by_hand() -> None:
    # b s = 32 tokens, T = b s k = 64 token-expert pairs, bf16. weighted_bias_quick_geglu_impl (Megatron-LM
    # fused_bias_geglu.py L424-432) clamps fc1's output's halves eagerly, each clamp saving its input, a view of fc1's
    # output (T 2 f_e x 2 = 64 x 96 x 2 = 12,288 B); WeightedBiasQuickGeGLUFunction saves the cat of the clamped
    # halves (L379), another 12,288 B. With the rest of the experts (permute_index 4 x 32 x 8 = 1,024, sorted_indices
    # 64 x 8 = 512, fc1's input 64 x 64 x 2 = 8,192, the probs 64 x 2 = 128, fc2's input 64 x 48 x 2 = 6,144):
    # 1,024 + 512 + 8,192 + 2 x 12,288 + 128 + 6,144 = 40,576 B
    got = _oss_experts_bytes()
    assert got == {"permute_index": 1024, "sorted_indices": 512, "gathered": 8192, "fc1_out": 12288,
                   "fc1_clamped": 12288, "weights": 128, "hidden": 6144}
    assert sum(got.values()) == 40_576
    # moe_act: the activation (clamp included) in CheckpointWithoutOutput's no-grad forward: fc1's output (its
    # input) and the probs stay; the clamped copy and fc2's input go: 40,576 - 12,288 - 6,144 = 22,144 B
    assert sum(_oss_experts_bytes(recompute="selective", recompute_modules=("moe_act",)).values()) == 22_144
    # without --framework megatron (the graph standing in for another framework's code, e.g. NeMo AutoModel's
    # torch.compile'd quick_geglu_deepep): no copy, 40,576 - 12,288 = 28,288 B
    assert sum(_oss_experts_bytes(framework=None).values()) == 28_288


def test_clamped_quick_geglu_saves_what_its_torch_calls_save() -> None:
    # fc1 (TE GroupedLinear: saves its input), then weighted_bias_quick_geglu_impl as Megatron-LM writes it (chunk,
    # clamp(max=7), clamp(-7, 7), cat, then the fused function saving its input and the probs), then fc2 (saves
    # its input), measured on CPU against the graph's MLP tensors of the same T = 64 rows
    from tests.test_saved_tensors import measured_bytes

    torch.manual_seed(0)
    dt, rows, h, f = torch.bfloat16, 64, 64, 48
    fc1_w = torch.nn.Parameter(torch.randn(2 * f, h, dtype=dt) / h**0.5)
    fc2_w = torch.nn.Parameter(torch.randn(h, f, dtype=dt) / f**0.5)
    x = torch.randn(rows, h, dtype=dt, requires_grad=True)
    probs = torch.rand(rows, 1, dtype=dt, requires_grad=True)

    def quick_geglu(y: torch.Tensor, p: torch.Tensor) -> torch.Tensor:  # fused_bias_geglu.py weighted_quick_geglu
        gate, up = torch.chunk(y, 2, -1)
        return (gate * torch.sigmoid(1.702 * gate) * (up + 1) * p).to(y.dtype)

    def run() -> torch.Tensor:
        y = _SavesInputs.apply(lambda i, w: i @ w.t(), x, fc1_w)
        x_glu, x_linear = y.chunk(2, -1)
        clamped = torch.cat((x_glu.clamp(min=None, max=7.0), x_linear.clamp(min=-7.0, max=7.0)), -1)
        act = _SavesInputs.apply(quick_geglu, clamped, probs)
        return _SavesInputs.apply(lambda i, w: i @ w.t(), act, fc2_w)

    got, seen = measured_bytes(run, torch.nn.ParameterList([fc1_w, fc2_w]))
    want = _oss_experts_bytes()
    assert got == {"bf16": sum(want[n] for n in ("gathered", "fc1_out", "fc1_clamped", "weights", "hidden"))}, seen
