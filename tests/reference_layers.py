"""Reference PyTorch layers that implement exactly what ``derivations.models.architectures`` describes.

Each module is the plain eager implementation the graph's op docstrings name
(``symbolic/ops.py``), so that ``torch.autograd.graph.saved_tensors_hooks`` can measure what
autograd really keeps for backward and ``tests/test_saved_tensors.py`` can compare it, byte for
byte, with ``symbolic.derive.activations``. Shapes use the letters of ``symbolic.dims``.
One tensor-parallel rank is the same module at ``Sizes.rank(t)`` (a/t heads, f/t FFN width);
with ``sp=t`` its input is a (b, s/t, h) shard, column-parallel linears save that shard as
Megatron's ``LinearWithGradAccumulationAndAsyncCommunication`` does, and a slice stands in for
the reduce-scatter after row-parallel linears.

Two CPU details make the CPU run take the path a CUDA run takes (see ``cuda_like_norms``):

* ``F.layer_norm`` on CPU returns mean/rstd in the *parameter* dtype, on CUDA in fp32 (the
  accumulation type). The norms here keep fp32 weights, which makes CPU return fp32 statistics
  and a 16-bit output, as CUDA does with 16-bit weights.
* ``F.rms_norm`` on CPU has no ``_fused_rms_norm`` kernel, so autograd records its decomposition
  (fp32 copies of the input). ``cuda_like_norms`` registers a CPU kernel built from torch's own
  decompositions; the dispatcher then uses torch's generated ``FusedRmsNormBackward0`` node,
  which is the node a CUDA run records.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from memderive.symbolic import dims

__all__ = ["Sizes", "Measurement", "measure", "cuda_like_norms", "LayerNorm", "RMSNorm", "GPTLayer", "LlamaLayer",
           "GPTEmbedding", "LlamaEmbedding", "Head", "MoeLayer"]

DROPOUT_P = 0.1


@dataclass(frozen=True)
class Sizes:
    """Small sizes for a CPU run; ``values()`` binds them to the graph's symbols."""

    b: int = 2
    s: int = 16
    h: int = 64
    a: int = 4
    a_kv: int = 4
    f: int = 256
    V: int = 96
    n_ctx: int = 32
    head_dim: int | None = None  # None: h / a

    @property
    def d_h(self) -> int:
        return self.head_dim or self.h // self.a

    def rank(self, t: int) -> Sizes:
        """What one of t tensor-parallel ranks computes: a/t and a_kv/t heads, f/t FFN width."""
        return replace(self, a=self.a // t, a_kv=self.a_kv // t, f=self.f // t, head_dim=self.d_h)

    def values(self, **degrees: int) -> dict:
        names = ("b", "s", "h", "a", "a_kv", "f", "V", "n_ctx")
        out = {dims.sym(name): getattr(self, name) for name in names}
        out[dims.d_h] = self.d_h
        out.update({dims.sym(k): v for k, v in degrees.items()})
        return out


# --- measuring ------------------------------------------------------------------------------
@dataclass
class Measurement:
    """Saved tensors by storage: ``storages`` maps data_ptr -> (bytes, dtype, shapes seen)."""

    storages: dict[int, tuple[int, torch.dtype, list[tuple[int, ...]]]] = field(default_factory=dict)
    output: object = None

    @property
    def nbytes(self) -> int:
        return sum(size for size, _, _ in self.storages.values())

    def describe(self) -> str:
        return "\n".join(f"  {size:>8} B {dtype} {shapes}" for size, dtype, shapes in self.storages.values())


def measure(fn: Callable[[], object], *modules: nn.Module) -> Measurement:
    """Run ``fn`` and collect what autograd saves, each storage once.

    Parameters and registered buffers of ``modules`` are excluded (by storage). A saved view
    keeps its whole storage alive, so a storage counts with its full size, once.
    """
    owned = {t.untyped_storage().data_ptr() for mod in modules for t in (*mod.parameters(), *mod.buffers())}
    result = Measurement()

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in owned:
            entry = result.storages.setdefault(ptr, (storage.nbytes(), tensor.dtype, []))
            entry[2].append(tuple(tensor.shape))
        return tensor  # keeping a reference keeps the storage (and its address) alive

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result.output = fn()
    return result


@contextlib.contextmanager
def cuda_like_norms() -> Iterator[None]:
    """Give CPU the ``_fused_rms_norm`` kernels CUDA has, so F.rms_norm records the fused node."""
    from torch._decomp.decompositions import _fused_rms_norm, _fused_rms_norm_backward

    def forward(x, shape, weight, eps):
        with torch._C._AutoDispatchBelowAutograd():
            return _fused_rms_norm(x, shape, weight, eps)

    def backward(grad, x, shape, rstd, weight, mask):
        with torch._C._AutoDispatchBelowAutograd():
            return tuple(_fused_rms_norm_backward(grad, x, shape, rstd, weight, mask))

    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("_fused_rms_norm", forward, "CPU")
        lib.impl("_fused_rms_norm_backward", backward, "CPU")
        yield
    finally:
        lib._destroy()


# --- building blocks --------------------------------------------------------------------------
def dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """``torch.native_dropout``: saves a 1-byte bool mask (``F.dropout`` on CPU saves a 16-bit one)."""
    return torch.native_dropout(x, p, True)[0] if p else x


class _GatherLinear(torch.autograd.Function):
    """Megatron's column-parallel linear under sequence parallelism: all-gather the (b, s/t, h)
    shard, multiply, and save the *shard* (backward gathers it again). ``repeat`` stands in for
    the all-gather over t ranks; values do not matter here, what is saved does."""

    @staticmethod
    def forward(ctx, shard, weight, bias, t):
        ctx.save_for_backward(shard, weight)
        ctx.t, ctx.has_bias = t, bias is not None
        return F.linear(shard.repeat(1, t, 1), weight, bias)

    @staticmethod
    def backward(ctx, grad):
        shard, weight = ctx.saved_tensors
        full = shard.repeat(1, ctx.t, 1)
        grad_shard = (grad @ weight).unflatten(1, (ctx.t, -1)).sum(1)  # reduce-scatter stand-in
        grad_weight = grad.flatten(0, 1).T @ full.flatten(0, 1)
        return grad_shard, grad_weight, grad.sum((0, 1)) if ctx.has_bias else None, None


def column(linear: nn.Linear, x: torch.Tensor, sp: int) -> torch.Tensor:
    """Column-parallel linear; with sequence parallelism (sp > 1) its input is an s/sp shard."""
    return _GatherLinear.apply(x, linear.weight, linear.bias, sp) if sp > 1 else linear(x)


def row(linear: nn.Linear, x: torch.Tensor, sp: int) -> torch.Tensor:
    """Row-parallel linear; with sequence parallelism the sum over ranks is reduce-scattered
    (the slice stands in for it and saves nothing); Megatron adds the bias after the reduction."""
    if sp == 1:
        return linear(x)
    out = F.linear(x, linear.weight)
    out = out[:, : out.shape[1] // sp]
    return out + linear.bias if linear.bias is not None else out


class LayerNorm(nn.Module):
    """LayerNorm with fp32 weight and bias: fp32 mean/rstd and a 16-bit output, as on CUDA."""

    def __init__(self, h: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h))
        self.bias = nn.Parameter(torch.zeros(h)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias)


class RMSNorm(nn.Module):
    """``F.rms_norm`` with a weight in the activation dtype (the fused kernel needs matching dtypes)."""

    def __init__(self, h: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(h, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, 1e-6)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """Megatron-style attention; q (b, a, s, d_h), k and v (b, a_kv, s, d_h) -> (b, s, a*d_h).

    Grouped queries are viewed as (b, a_kv, g*s, d_h) so k and v are never repeated. Saved:
    q and k (matmul), P (softmax), a bool mask and P' (dropout), P' and v (matmul).
    """
    bsz, heads, seq, d_head = q.shape
    kv_heads = k.shape[1]
    q = q.reshape(bsz, kv_heads, heads // kv_heads * seq, d_head)  # (b, a_kv, g*s, d_h)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1 / math.sqrt(d_head)) + mask  # (b, a_kv, g*s, s)
    probs = dropout(torch.softmax(scores, dim=-1), p)
    ctx = torch.matmul(probs, v).view(bsz, heads, seq, d_head)  # (b, a, s, d_h)
    return ctx.transpose(1, 2).reshape(bsz, seq, heads * d_head)  # contiguous copy, saves nothing


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` (CPU flash kernel): saves q, k, v, O and fp32 logsumexp."""
    bsz, heads, seq, d_head = q.shape
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != heads)
    return out.transpose(1, 2).reshape(bsz, seq, heads * d_head)  # O is (b, s, a, d_h) in memory: a view


def causal_mask(seq: int, groups: int, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask (g*s, s): row r is query position r % s."""
    mask = torch.full((seq, seq), float("-inf")).triu(1)
    return mask.repeat(groups, 1).to(dtype)


class Attention(nn.Module):
    """Self-attention; ``core`` is ``eager`` | ``flash``; ``recompute`` checkpoints the core
    (Megatron's selective recompute: the checkpoint saves only q, k and v); ``sp`` > 1 makes
    the input and output (b, s/sp, h) shards (sequence parallelism)."""

    def __init__(self, z: Sizes, dtype: torch.dtype, *, bias: bool, p: float, core: str = "eager",
                 rotary: bool = False, fused_qkv: bool = True, recompute: bool = False, sp: int = 1) -> None:
        super().__init__()
        self.z, self.p, self.core, self.recompute, self.sp = z, p, core, recompute, sp
        widths = (z.a * z.d_h, z.a_kv * z.d_h, z.a_kv * z.d_h)
        if fused_qkv:
            self.qkv = nn.Linear(z.h, sum(widths), bias=bias, dtype=dtype)
        else:  # Hugging Face style: q_proj, k_proj, v_proj
            self.q, self.k, self.v = (nn.Linear(z.h, w, bias=bias, dtype=dtype) for w in widths)
        self.widths, self.fused = widths, fused_qkv
        self.proj = nn.Linear(z.a * z.d_h, z.h, bias=bias, dtype=dtype)
        self.register_buffer("mask", causal_mask(z.s, z.a // z.a_kv, dtype), persistent=False)
        if rotary:
            angle = torch.outer(torch.arange(z.s), 10000.0 ** (-torch.arange(0, z.d_h, 2) / z.d_h))
            angle = torch.cat((angle, angle), dim=-1)  # (s, d_h)
            self.register_buffer("cos", angle.cos().to(dtype), persistent=False)
            self.register_buffer("sin", angle.sin().to(dtype), persistent=False)
        self.rotary = rotary

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        """RoPE: x*cos + rotate_half(x)*sin; the muls save only the cos/sin buffers."""
        half = x.shape[-1] // 2
        return x * self.cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * self.sin

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.core == "flash":
            return flash_attention(q, k, v)
        return eager_attention(q, k, v, self.mask, self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, seq = x.shape[0], x.shape[1] * self.sp
        linears = (self.qkv,) if self.fused else (self.q, self.k, self.v)
        parts = [column(linear, x, self.sp) for linear in linears]
        parts = parts[0].split(self.widths, -1) if self.fused else parts
        q, k, v = (t.view(bsz, seq, -1, self.z.d_h).transpose(1, 2) for t in parts)  # (b, heads, s, d_h)
        if self.rotary:
            q, k = self._rotate(q), self._rotate(k)
        if self.recompute:
            ctx = checkpoint(self._core, q, k, v, use_reentrant=True)
        else:
            ctx = self._core(q, k, v)
        return dropout(row(self.proj, ctx, self.sp), self.p)


class GPTLayer(nn.Module):
    """Pre-LN GPT layer: x + drop(attn(LN(x))), then + drop(fc2(gelu(fc1(LN(.)))))."""

    def __init__(self, z: Sizes, dtype: torch.dtype = torch.bfloat16, *, dropout: bool = True,
                 core: str = "eager", recompute: str = "none", sp: int = 1) -> None:
        super().__init__()
        p = DROPOUT_P if dropout else 0.0
        self.p, self.full, self.sp = p, recompute == "full", sp
        self.norm1, self.norm2 = LayerNorm(z.h), LayerNorm(z.h)
        self.attn = Attention(z, dtype, bias=True, p=p, core=core, recompute=recompute == "selective", sp=sp)
        self.fc1 = nn.Linear(z.h, z.f, dtype=dtype)
        self.fc2 = nn.Linear(z.f, z.h, dtype=dtype)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        hidden = F.gelu(column(self.fc1, self.norm2(x), self.sp))
        return x + dropout(row(self.fc2, hidden, self.sp), self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self._forward, x, use_reentrant=True) if self.full else self._forward(x)


class SwiGLUFunction(torch.autograd.Function):
    """Megatron-LM's fused SwiGLU (megatron/core/fusions/fused_bias_swiglu.py, ``SwiGLUFunction``): forward
    ``ctx.save_for_backward(input)`` and ``silu(y_1) * y_2``; backward ``swiglu_back`` recomputes silu from the
    input. Megatron's input is fc1's one (.., 2f) output; here its two halves come from two linears."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        gate, up = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        return grad * sig * (1 + gate * (1 - sig)) * up, grad * F.silu(gate)


class LlamaLayer(nn.Module):
    """LLaMA layer: RMSNorm, rotary GQA attention without biases, SwiGLU silu(gate) * up."""

    def __init__(self, z: Sizes, dtype: torch.dtype = torch.bfloat16, *, dropout: bool = False,
                 core: str = "eager", recompute: str = "none", fused_qkv: bool = True, sp: int = 1,
                 fused_swiglu: bool = False) -> None:
        super().__init__()
        p = DROPOUT_P if dropout else 0.0
        self.p, self.full, self.sp, self.fused_swiglu = p, recompute == "full", sp, fused_swiglu
        self.norm1, self.norm2 = RMSNorm(z.h, dtype), RMSNorm(z.h, dtype)
        self.attn = Attention(z, dtype, bias=False, p=p, core=core, rotary=True, fused_qkv=fused_qkv,
                              recompute=recompute == "selective", sp=sp)
        self.gate, self.up = (nn.Linear(z.h, z.f, bias=False, dtype=dtype) for _ in range(2))
        self.down = nn.Linear(z.f, z.h, bias=False, dtype=dtype)

    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        y = self.norm2(x)
        gate, up = column(self.gate, y, self.sp), column(self.up, y, self.sp)
        hidden = SwiGLUFunction.apply(gate, up) if self.fused_swiglu else F.silu(gate) * up
        return x + dropout(row(self.down, hidden, self.sp), self.p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self._forward, x, use_reentrant=True) if self.full else self._forward(x)


class GPTEmbedding(nn.Module):
    """Token + learned position embeddings (positions made in forward, as in HF GPT-2), dropout."""

    def __init__(self, z: Sizes, dtype: torch.dtype = torch.bfloat16, *, dropout: bool = True) -> None:
        super().__init__()
        self.tokens = nn.Embedding(z.V, z.h, dtype=dtype)
        self.positions = nn.Embedding(z.n_ctx, z.h, dtype=dtype)
        self.p = DROPOUT_P if dropout else 0.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1])  # (s,) int64, saved by the embedding's backward
        return dropout(self.tokens(ids) + self.positions(positions), self.p)


class LlamaEmbedding(nn.Module):
    def __init__(self, z: Sizes, dtype: torch.dtype = torch.bfloat16, *, dropout: bool = False) -> None:
        super().__init__()
        self.tokens = nn.Embedding(z.V, z.h, dtype=dtype)
        self.p = DROPOUT_P if dropout else 0.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return dropout(self.tokens(ids), self.p)


class Head(nn.Module):
    """Final norm, LM head (``tied`` shares the embedding weight) and ``cross_entropy(logits.float())``."""

    def __init__(self, z: Sizes, norm: nn.Module, dtype: torch.dtype = torch.bfloat16,
                 tied: nn.Parameter | None = None) -> None:
        super().__init__()
        self.norm = norm
        self.weight = tied if tied is not None else nn.Parameter(torch.randn(z.V, z.h, dtype=dtype))

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = F.linear(self.norm(x), self.weight)  # (b, s, V) 16-bit
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


# --- mixture of experts -------------------------------------------------------------------------
class MoeLayer(nn.Module):
    """LLaMA layer whose MLP is a mixture of experts, as ``derivations.models.moe_mla.moe_mlp`` describes:
    router linear h -> E, fp32 softmax, top-k, renormalised weights; each expert a SwiGLU of ``f_e``
    run as a loop of linears over the tokens routed to it (transformers' eager experts); ``shared``
    adds a SwiGLU of width ``shared`` that sees every token. ``capacity`` (GShard): each expert takes
    a padded buffer of ``capacity`` token slots (dropped tokens are not modelled: the sizes here route
    at most ``capacity`` tokens to an expert)."""

    def __init__(self, z: Sizes, experts: int, top_k: int, f_e: int, dtype: torch.dtype = torch.bfloat16, *,
                 shared: int = 0, capacity: int | None = None) -> None:
        super().__init__()
        self.k, self.capacity = top_k, capacity
        self.norm1, self.norm2 = RMSNorm(z.h, dtype), RMSNorm(z.h, dtype)
        self.attn = Attention(z, dtype, bias=False, p=0.0, rotary=True, fused_qkv=False)
        self.router = nn.Linear(z.h, experts, bias=False, dtype=dtype)
        self.experts = nn.ModuleList(nn.ModuleList(nn.Linear(*io, bias=False, dtype=dtype)
                                                   for io in ((z.h, f_e), (z.h, f_e), (f_e, z.h)))
                                     for _ in range(experts))
        self.shared = nn.ModuleList(nn.Linear(*io, bias=False, dtype=dtype)
                                    for io in ((z.h, shared), (z.h, shared), (shared, z.h))) if shared else None

    def route(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Top-k experts of each token (b*s, k) and their weights, renormalised to sum to 1."""
        scores = torch.softmax(self.router(y).float(), dim=-1)  # saves the fp32 scores (b, s, E)
        top, index = torch.topk(scores, self.k, dim=-1)  # saves the int64 indices (b, s, k)
        top = top / top.sum(-1, keepdim=True)  # saves top (b, s, k) and its sum (b, s, 1), fp32
        return index.flatten(0, 1), top.to(y.dtype).flatten(0, 1)

    def moe(self, y: torch.Tensor) -> torch.Tensor:
        index, weights = self.route(y)
        flat = y.flatten(0, 1)  # (b*s, h)
        out = torch.zeros_like(flat)
        for e, (gate, up, down) in enumerate(self.experts):
            token, slot = torch.where(index == e)  # which tokens, and which of their k choices
            if not len(token):
                continue
            x = flat[token]  # saves the indices
            if self.capacity is not None:  # a padded (capacity, h) buffer per expert
                x = F.pad(x, (0, 0, 0, self.capacity - len(token)))
            hidden = down(F.silu(gate(x)) * up(x))[: len(token)]
            out = out.index_add(0, token, hidden * weights[token, slot, None])
        out = out.view_as(y)
        if self.shared is not None:
            gate, up, down = self.shared
            out = out + down(F.silu(gate(y)) * up(y))
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.moe(self.norm2(x))
