"""torchtitan's op-level selective checkpointing (``--recompute selective-op``) against what PyTorch holds.

A torchtitan-style LLaMA block (separate wq, wk, wv, wo, w1, w3, w2; RMSNorm; rotary; SDPA; as
``torchtitan/models/llama/model.py``) is wrapped as torchtitan wraps it: ``checkpoint(use_reentrant=False,
context_fn=create_selective_checkpoint_contexts(policy))`` with its policy (``_save_list``: every mm but the
even-numbered, the fused attention kernels). After the forward, the storages still alive (made during the
forward, or the block's input, whose last outside reference is dropped) are what the layer holds until its
backward: counted exactly, through a ``TorchDispatchMode`` that keeps a weak reference to every storage an
op makes. That equals the graph's layer under ``OpSelectiveRecompute``.

Where CPU and CUDA differ: CPU runs SDPA as ``aten._scaled_dot_product_flash_attention_for_cpu`` (CUDA:
``_scaled_dot_product_flash_attention`` / ``_efficient_attention``, the ops torchtitan lists); the test's
policy adds the CPU op to the list, so the same outputs (attention output and fp32 logsumexp (b, a, s)) are
kept as on CUDA.
"""

from __future__ import annotations

import weakref
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from memderive.derivations.estimate import estimate
from memderive.derivations.options import OptionsError
from memderive.symbolic.derive import activations, evaluate

B, S, H, A, A_KV, F_FF = 2, 64, 128, 4, 2, 352
D = H // A
CONFIG = {"model_type": "llama", "hidden_size": H, "num_attention_heads": A, "num_key_value_heads": A_KV,
          "intermediate_size": F_FF, "num_hidden_layers": 2, "vocab_size": 256, "hidden_act": "silu"}

_SAVE = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_flash_attention.default,
         torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


def _policy(meta: dict):
    def policy(ctx, func, *args, **kwargs):  # torchtitan's _custom_policy
        mode = "recompute" if ctx.is_recompute else "forward"
        if func == torch.ops.aten.mm.default:
            meta[f"{mode}_mm_count"] += 1
        save = func in _SAVE and not (func == torch.ops.aten.mm.default and meta[f"{mode}_mm_count"] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE
    return policy


class Block(nn.Module):
    """torchtitan's TransformerBlock for LLaMA 3 (GQA, SwiGLU), with a real-valued rotary."""

    def __init__(self) -> None:
        super().__init__()
        self.attention_norm, self.ffn_norm = nn.RMSNorm(H), nn.RMSNorm(H)
        self.wq, self.wk = nn.Linear(H, A * D, bias=False), nn.Linear(H, A_KV * D, bias=False)
        self.wv, self.wo = nn.Linear(H, A_KV * D, bias=False), nn.Linear(A * D, H, bias=False)
        self.w1, self.w3 = nn.Linear(H, F_FF, bias=False), nn.Linear(H, F_FF, bias=False)
        self.w2 = nn.Linear(F_FF, H, bias=False)
        angle = torch.outer(torch.arange(S), 1.0 / 10000 ** (torch.arange(0, D, 2) / D))
        self.register_buffer("cos", torch.cat([angle.cos()] * 2, -1), persistent=False)
        self.register_buffer("sin", torch.cat([angle.sin()] * 2, -1), persistent=False)

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * self.cos + torch.cat((-x[..., half:], x[..., :half]), -1) * self.sin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = self.attention_norm(x)
        q = self.wq(n).view(B, S, A, D).transpose(1, 2)
        k = self.wk(n).view(B, S, A_KV, D).transpose(1, 2)
        v = self.wv(n).view(B, S, A_KV, D).transpose(1, 2)
        q, k = self._rotate(q), self._rotate(k)
        k, v = (t.repeat_interleave(A // A_KV, dim=1) for t in (k, v))  # torchtitan's repeat_kv
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, S, H)
        h = x + self.wo(out)
        n = self.ffn_norm(h)
        return h + self.w2(F.silu(self.w1(n)) * self.w3(n))


class _Alive(TorchDispatchMode):
    """Weak references to every storage an op makes (PyTorch keeps a storage's Python object alive with
    the storage); ``alive()`` sums those not freed."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[int, tuple[weakref.ref, int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                known = self.refs.get(st.data_ptr())
                if known is None or known[0]() is None:  # new, or a freed address used again
                    self.refs[st.data_ptr()] = (weakref.ref(st), st.nbytes())
        return out

    def alive(self, exclude: set[int]) -> int:
        return sum(n for ptr, (ref, n) in self.refs.items() if ptr not in exclude and ref() is not None)


def _held_by_the_layer() -> int:
    torch.manual_seed(0)
    block = Block().to(torch.bfloat16)
    x = torch.randn(B, S, H, dtype=torch.bfloat16, requires_grad=True)
    x_storage = weakref.ref(x.untyped_storage())
    x_bytes = x.untyped_storage().nbytes()
    meta: dict = defaultdict(int)
    with _Alive() as mode:
        y = checkpoint(block, x, use_reentrant=False, preserve_rng_state=False,
                       context_fn=lambda: create_selective_checkpoint_contexts(_policy(meta)))
    del x  # the checkpoint's own reference is what keeps the input now
    owned = {t.untyped_storage().data_ptr() for t in (*block.parameters(), *block.buffers(), y)}  # w.t() views
    held = mode.alive(owned) + (x_bytes if x_storage() is not None else 0)
    y.float().sum().backward()
    # torch 2.13 asks the policy in the forward only (the recompute replays its choices by index): 7 mms
    assert dict(meta) == {"forward_mm_count": 7}
    return held


def _derived() -> int:
    est = estimate(CONFIG, mode="train", batch=B, seq=S, recompute="selective-op", attention="flash",
                   profile="exact", dropout=False)
    layer = activations(est.graph, blocks=("layer",), per_repeat=True).total
    return int(evaluate(layer, est.values))


def test_the_layer_holds_what_the_graph_says() -> None:
    """By hand: input 2*64*128*2 = 32,768; wq 32,768; wv 2*64*64*2 = 16,384; w1 2*64*352*2 = 90,112; w2
    32,768; SDPA output 32,768 and logsumexp 2*4*64*4 = 2,048 B: 239,616 B."""
    assert _held_by_the_layer() == _derived() == 239_616


def test_the_preset_and_its_limits() -> None:
    """torchtitan's preset selects it (llama3_8b.toml: selective_ac_option 'op'); hf layers refuse it."""
    est = estimate("llama-3-8b", mode="train", batch=1, seq=128, framework="torchtitan")
    assert est.options.recompute == "selective-op"
    assert estimate("llama-3-8b", mode="train", batch=1, seq=128, framework="torchtitan", tp=2).options.sp
    with pytest.raises(OptionsError, match="implementation megatron"):
        estimate("llama-3-8b", mode="train", batch=1, seq=128, recompute="selective-op", implementation="hf")


def test_sequence_parallel_keeps_the_reduce_scatters_by_hand() -> None:
    """tp 2 with sequence parallelism (torchtitan's TP plan: SequenceParallel norms, wo and w2 RowwiseParallel
    with output Shard(1)), per rank: input (b, s/2, h) 16,384; wq's heads (b, a/2, s, d) 16,384; wv's 8,192;
    w1's (b, s, f/2) 45,056; w2's partial sum, whole (b, s, h), 32,768; the reduce-scatters after wo and w2,
    (b, s/2, h), 16,384 each; SDPA output 16,384 and logsumexp (b, a/2, s) fp32 1,024: 168,960 B. Not
    measured (a CPU run would need a distributed launch): read off the policy and the plan."""
    est = estimate(CONFIG, mode="train", batch=B, seq=S, recompute="selective-op", attention="flash",
                   profile="exact", dropout=False, tp=2, sp=True)
    layer = activations(est.graph, blocks=("layer",), per_repeat=True).total
    assert int(evaluate(layer, est.values)) == 168_960


def test_recomputed_matmuls_by_hand() -> None:
    """The mms run again in backward are the even-numbered: wk 2*b*s*h*(a_kv d) = 2,097,152, wo 2*b*s*(a d)*h =
    4,194,304, w3 2*b*s*h*f = 11,534,336 FLOPs; SDPA's recompute is FlashAttention's own q k^T in backward."""
    from memderive.symbolic.derive import flops

    est = estimate(CONFIG, mode="train", batch=B, seq=S, recompute="selective-op", attention="flash", dropout=False)
    terms = flops(est.graph, phases=("recompute",), blocks=("layer",), per_repeat=True).terms
    again = {t.path: int(evaluate(t.expr, est.values)) for t in terms if t.path != "layer/attn/core/recompute"}
    assert again == {"layer/attn/qkv/recompute": 2_097_152, "layer/attn/proj/recompute": 4_194_304,
                     "layer/mlp/up/recompute": 11_534_336}
